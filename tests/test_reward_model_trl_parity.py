"""Parity with TRL's RewardTrainer (TRL 1.16): on one fixed batch of preference pairs, the Bradley–Terry
loss and the parameter gradients of our reward-model training path equal those TRL's own code computes,
to 1e-5, without and with TRL's reward-centring term. Also, without TRL: our packed training forward
(:meth:`~advantage.algos.llm.reward_model.RewardModel.forward_packed`, a shared prompt per comparison,
several comparisons per row) gives the rewards, loss and gradients of the padded layout.

Nothing here re-derives TRL: a real ``RewardTrainer`` is built offline around a
``Qwen2ForSequenceClassification`` holding our backbone's weights and our head's weight as its ``score``,
tokenizes the text pairs itself (its token ids are checked equal to ours), collates the batch with its own
collator and computes the loss with ``compute_loss(model, inputs)``.

The mapping, TRL → ours (``algorithm``), and the legitimate differences:

* Loss: TRL's mean of :math:`-\\log\\sigma(r_w - r_l)` over the batch = ours with ``loss=pairwise`` (the
  micro-batch's sum over the step's pair count, one micro-batch).
* Centring: TRL's ``center_rewards_coefficient`` c adds :math:`c\\,\\mathrm{mean}((r_w + r_l)^2)`; ours,
  ``center_rewards_coef``, adds c' times the squared mean reward of each comparison,
  :math:`c'((r_w + r_l)/2)^2`, so TRL's c is ours with c' = 4c. TRL's default (``None``) is ours 0.
* The head: TRL's ``score`` is ``Linear(hidden, 1, bias=False)``; ours has a bias (zero at the start). A
  bias cancels in :math:`r_w - r_l`, so the pairwise loss is the same function of the other weights; its
  gradient is 0 without centring, and only the shared weights are compared.
* The layout: TRL right-pads ``prompt + response + EOS`` rows and reads the last non-pad token; ours packs
  *prompt, chosen, rejected* with each response at the positions it has after the prompt and reads each
  response's last token. Every token sees the same context at the same position.
"""

from __future__ import annotations

import copy

import pytest
import torch

from advantage.algos.llm import reward_model as rm
from advantage.algos.llm import reward_models
from advantage.envs.text.preference import PreferenceExample, make_preference_task
from advantage.lm import packing
from advantage.lm.model import build_char_tokenizer, build_scratch_model

TOL = {"rtol": 1e-5, "atol": 1e-5}
EXTRA = [("ab=", ("a", "hgfedcba")), ("abcdefg=", ("gg", "h")), ("c=", ("ccc", "d"))]


@pytest.fixture(scope="module")
def setup():
    task = make_preference_task("synthetic")
    tok = build_char_tokenizer(task.alphabet, extra_tokens=task.special_tokens)
    backbone = build_scratch_model("qwen2", tok, hidden_size=32, layers=2, heads=4, seed=0)
    model = reward_models.RewardModel(backbone, tok, seed=0)
    examples = task.examples("train", 7, 0) + [PreferenceExample(p, r) for p, r in EXTRA]
    tokens = [
        (model.encode(e.prompt, e.chosen)[0], [model.encode(e.prompt, r)[1] for r in e.responses])
        for e in examples
    ]
    return tok, model, examples, tokens


def _ours(setup, center_coef: float, packed: bool = True):
    """Our training path on the fixed batch: loss and gradients of a fresh copy of the reward model."""
    tok, model, examples, tokens = setup
    model = copy.deepcopy(model).train()
    items = rm.build_items(examples, "pairwise")
    if packed:
        groups, index = rm.micro_groups(items, tokens)
        rewards = model.forward_packed(packing.pack_prompts(groups, tok.pad_token_id))
    else:
        seqs, index = rm.micro_batch(items, tokens)
        rewards = model(*reward_models.collate_sequences(seqs, tok.pad_token_id))
    loss, _ = rm.rank_loss(rewards, index, float(len(items)), loss="pairwise", center_coef=center_coef)
    loss.backward()
    return loss.detach(), rewards.detach(), {n: p.grad for n, p in model.named_parameters()}


def _trl(setup, tmp_path, center: float | None):
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification
    from trl import RewardConfig, RewardTrainer

    tok, model, examples, _ = setup
    config = copy.deepcopy(model.backbone.config)
    config.num_labels = 1
    seqcls = AutoModelForSequenceClassification.from_config(config, attn_implementation="eager")
    seqcls.model.load_state_dict(model.backbone.model.state_dict())
    with torch.no_grad():
        seqcls.score.weight.copy_(model.head.weight)
    args = RewardConfig(
        output_dir=str(tmp_path / "trl"),
        report_to=[],
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=len(examples),
        center_rewards_coefficient=center,
        max_length=None,
        save_strategy="no",
    )
    rows = [{"prompt": e.prompt, "chosen": e.chosen, "rejected": e.rejected} for e in examples]
    trainer = RewardTrainer(
        model=seqcls, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok
    )
    trainer.model.train()
    return trainer, seqcls


@pytest.mark.parametrize("center", [None, 0.01], ids=["bradley_terry", "centered"])
def test_tokens_loss_and_gradients_match_trl(setup, tmp_path, center):
    pytest.importorskip("trl", minversion="1.16")
    _, _, examples, tokens = setup
    trainer, seqcls = _trl(setup, tmp_path, center)
    rows = [trainer.train_dataset[i] for i in range(len(examples))]
    # TRL's tokenization (prompt + response + EOS as one text) is ours
    assert [(r["chosen_ids"], r["rejected_ids"]) for r in rows] == [
        (p + rs[0], p + rs[1]) for p, rs in tokens
    ]
    batch = trainer.data_collator(rows)
    trl_loss = trainer.compute_loss(seqcls, batch)
    trl_loss.backward()
    with torch.no_grad():
        trl_rewards = seqcls(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
        ).logits.squeeze(-1)

    loss, rewards, grads = _ours(setup, 4 * (center or 0.0))  # TRL's c is ours 4c (module docstring)
    torch.testing.assert_close(
        trl_rewards, torch.cat([rewards[0::2], rewards[1::2]]), **TOL
    )  # ours interleave
    torch.testing.assert_close(trl_loss.detach(), loss, **TOL)
    theirs = {"backbone." + n: p.grad for n, p in seqcls.named_parameters() if n != "score.weight"}
    theirs["head.weight"] = seqcls.score.weight.grad
    assert set(grads) == set(theirs) | {"head.bias"}
    for name, g in theirs.items():
        torch.testing.assert_close(grads[name], g, **TOL, msg=lambda m, n=name: f"{n}: {m}")
    if center is None:
        assert abs(float(grads["head.bias"])) < 1e-6  # the bias cancels in r_w - r_l
    assert max(float(g.abs().max()) for g in grads.values()) > 1e-3  # not a vacuous zero gradient
    # TRL's logged accuracy and margin are ours
    diff = rewards[0::2] - rewards[1::2]
    assert float((diff > 0).float().mean()) == pytest.approx(trainer._metrics["train"]["accuracy"][-1])
    assert float(diff.mean()) == pytest.approx(trainer._metrics["train"]["margin"][-1], abs=1e-5)


@pytest.mark.parametrize("center_coef", [0.0, 0.3])
def test_packed_training_forward_equals_the_padded_one(setup, center_coef):
    packed = _ours(setup, center_coef, packed=True)
    padded = _ours(setup, center_coef, packed=False)
    torch.testing.assert_close(packed[0], padded[0], **TOL)
    torch.testing.assert_close(packed[1], padded[1], **TOL)
    for name, g in padded[2].items():
        torch.testing.assert_close(packed[2][name], g, **TOL, msg=lambda m, n=name: f"{n}: {m}")


def test_packed_kwise_rankings_equal_the_padded_ones(setup):
    """K-wise items (3 and 2 responses in one micro-batch) packed: the same rewards as scored alone."""
    tok, model, _, _ = setup
    exs = [PreferenceExample("abc=", ("abc", "ab", "xh")), PreferenceExample("def=", ("d", "a"))]
    tokens = [
        (model.encode(e.prompt, e.chosen)[0], [model.encode(e.prompt, r)[1] for r in e.responses])
        for e in exs
    ]
    items = rm.build_items(exs, "kwise")
    groups, index = rm.micro_groups(items, tokens)
    assert rm.micro_batch(items, tokens)[1].tolist() == index.tolist() == [[0, 1, 2], [3, 4, -1]]
    with torch.no_grad():
        got = model.forward_packed(packing.pack_prompts(groups, tok.pad_token_id))
        want = model.score(
            [e.prompt for e in exs for _ in e.responses], [r for e in exs for r in e.responses]
        )
    torch.testing.assert_close(got, want, **TOL)
