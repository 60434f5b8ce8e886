"""Parity with TRL's DPOTrainer (TRL 1.16): on one fixed batch of preference pairs, the loss and parameter
gradients of our DPO training path equal those TRL's own code computes, to 1e-5 — the sigmoid loss with a
reference model that differs from the policy (log-ratios far from 0), and TRL's precomputed reference
log-probs equal ours. Also, without TRL: our packed training forward (:func:`advantage.algos.llm.dpo.
train_logps`, shared prompts, several pairs per row) equals the padded layout (:func:`~advantage.algos.llm.
dpo.sequence_logps`) in values and gradients.

Nothing here re-derives TRL: a real ``DPOTrainer`` is built offline (scratch Qwen2, our char tokenizer, a
tiny ``datasets.Dataset`` of text pairs), tokenizes the pairs itself (its token ids are checked equal to
ours), collates the batch with its own collator and computes the loss with ``compute_loss(model, inputs)``.

The mapping, TRL → ours (``algorithm``):

==================================  ======================================================================
TRL                                 ours
==================================  ======================================================================
``loss_type=["sigmoid"]``, ``beta``  ``loss_type=sigmoid``, ``beta`` (``label_smoothing=0``)
``precompute_ref_log_probs``        ``precompute_ref`` (both: one pass over the training set)
loss = mean over the batch's pairs  the micro-batch's pair sum / the step's pair count (one micro-batch)
EOS appended to each response       ``tokenize_pairs`` appends EOS (same ids, checked)
==================================  ======================================================================

Layouts differ and agree: TRL right-pads ``prompt + response`` rows with no position ids (positions
0..L-1, the right padding after the real tokens); ours packs *prompt, chosen, rejected* segments with the
positions each response has after its prompt and a mask that keeps the two responses apart. Every
response token sees the same context at the same position, so the log-probs agree to float rounding.
"""

from __future__ import annotations

import copy
import math
from functools import partial

import pytest
import torch

from advantage.algos.llm import dpo
from advantage.configs.llm import DataConfig
from advantage.envs.text.preference import make_preference_task
from advantage.lm import packing
from advantage.lm.model import build_char_tokenizer, build_scratch_model

BETA = 0.5  # large enough that the sigmoid is far from linear on these log-ratios
TOL = {"rtol": 1e-5, "atol": 1e-5}
# Pairs of the synthetic task plus hand-made ones with other prompt lengths (a packed row then holds
# segments of different shapes) and a one-letter response (EOS only after it).
EXTRA = [("ab=", "a", "hgfedcba"), ("abcdefg=", "gg", "h"), ("c=", "ccc", "d")]


@pytest.fixture(scope="module")
def setup():
    task = make_preference_task("synthetic")
    tok = build_char_tokenizer(task.alphabet, extra_tokens=task.special_tokens)
    sizes = {"hidden_size": 32, "layers": 2, "heads": 4, "max_position_embeddings": 64}
    policy = build_scratch_model("qwen2", tok, seed=0, **sizes)
    reference = build_scratch_model("qwen2", tok, seed=1, **sizes)  # differs from the policy
    pairs = dpo.pairs_of(task.examples("train", 7, 0)) + EXTRA
    items = dpo.tokenize_pairs(tok, pairs, DataConfig(max_prompt_length=16, max_response_length=16))
    return tok, policy, reference, pairs, items


def _ours(setup, reference):
    """Our training path on the fixed batch: loss and gradients of a fresh copy of the policy."""
    tok, policy, _, _, items = setup
    model = copy.deepcopy(policy).train()
    with torch.no_grad():
        ref_c, ref_r = dpo.train_logps(reference, items, tok.pad_token_id)
    pc, pr = dpo.train_logps(model, items, tok.pad_token_id)
    loss_fn = dpo.dpo_loss_fn(dpo.DPOAlgorithm(beta=BETA, loss_type="sigmoid"))
    loss = loss_fn(pc, pr, ref_c, ref_r).sum() / len(items)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


def _trl(setup, tmp_path, reference, precompute: bool):
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    tok, policy, _, pairs, _ = setup
    args = DPOConfig(
        output_dir=str(tmp_path / "trl"),
        report_to=[],
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=len(pairs),
        beta=BETA,
        loss_type=["sigmoid"],
        precompute_ref_log_probs=precompute,
        max_length=None,
        save_strategy="no",
    )
    model = copy.deepcopy(policy)
    rows = [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in pairs]
    trainer = DPOTrainer(
        model=model,
        ref_model=None if precompute else copy.deepcopy(reference),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
    )
    trainer.model.train()
    return trainer, model


def test_tokens_loss_and_gradients_match_trl(setup, tmp_path):
    pytest.importorskip("trl", minversion="1.16")
    tok, _, reference, pairs, items = setup
    trainer, trl_model = _trl(setup, tmp_path, reference, precompute=False)
    rows = [trainer.train_dataset[i] for i in range(len(pairs))]
    # TRL's tokenization (prompt alone, prompt + response + EOS, split where they diverge) is ours
    assert [(r["prompt_ids"], r["chosen_ids"], r["rejected_ids"]) for r in rows] == [tuple(i) for i in items]
    batch = trainer.data_collator(rows)
    trl_loss = trainer.compute_loss(trl_model, batch)
    trl_loss.backward()
    trl_grads = {n: p.grad for n, p in trl_model.named_parameters()}

    loss, grads = _ours(setup, reference)
    assert abs(float(loss) - math.log(2)) > 0.02  # the reference differs: log-ratios far from 0
    torch.testing.assert_close(trl_loss.detach(), loss, **TOL)
    assert trl_grads.keys() == grads.keys()
    for name, g in grads.items():
        torch.testing.assert_close(trl_grads[name], g, **TOL, msg=lambda m, n=name: f"{n}: {m}")
    assert max(float(g.abs().max()) for g in grads.values()) > 1e-3  # not a vacuous zero gradient
    # TRL's logged implicit-reward accuracy is ours
    with torch.no_grad():
        pc, pr = dpo.train_logps(trl_model, items, tok.pad_token_id)
        rc, rr = dpo.train_logps(reference, items, tok.pad_token_id)
    got = dpo.dpo_metrics(pc, pr, rc, rr, BETA)
    assert float(got["reward_accuracy"]) == pytest.approx(trainer._metrics["train"]["rewards/accuracies"][-1])
    assert float(got["reward_margin"]) == pytest.approx(
        trainer._metrics["train"]["rewards/margins"][-1], abs=1e-5
    )


def test_precomputed_reference_matches_trl(setup, tmp_path):
    """TRL's ``precompute_ref_log_probs`` (the policy before training as the reference) gives the numbers
    our ``precompute_ref_logps`` gives, and its first-step loss is log 2, as ours."""
    pytest.importorskip("trl", minversion="1.16")
    tok, policy, _, pairs, items = setup
    trainer, trl_model = _trl(setup, tmp_path, None, precompute=True)
    ds = trainer.train_dataset
    theirs = torch.tensor(
        [[ds[i]["ref_chosen_logps"], ds[i]["ref_rejected_logps"]] for i in range(len(pairs))]
    )
    ours = dpo.precompute_ref_logps(policy, items, tok.pad_token_id, micro=4)
    torch.testing.assert_close(theirs, ours, **TOL)
    batch = trainer.data_collator([ds[i] for i in range(len(pairs))])
    trl_loss = trainer.compute_loss(trl_model, batch)
    loss, _ = _ours(setup, policy)
    assert float(loss) == pytest.approx(math.log(2), abs=1e-6)
    torch.testing.assert_close(trl_loss.detach(), loss, **TOL)


@pytest.mark.parametrize("row_length", [1, 24, 512], ids=["longest_segment", "a_few", "all_in_one"])
def test_packed_training_forward_equals_the_padded_one(setup, row_length):
    """train_logps (packed) == sequence_logps (padded), values and gradients, however many segments
    share a row."""
    tok, policy, _, _, items = setup
    packed = packing.pack_prompts([(p, (c, r)) for p, c, r in items], tok.pad_token_id, row_length=row_length)
    assert (packed.input_ids.shape[0] == 1) == (row_length == 512)  # 1: rows as long as the longest segment
    out = []
    for fn in (partial(dpo.train_logps, row_length=row_length), dpo.sequence_logps):
        model = copy.deepcopy(policy).train()
        c, r = fn(model, items, tok.pad_token_id)
        (c.sum() - 2 * r.sum()).backward()
        out.append((c.detach(), r.detach(), {n: p.grad for n, p in model.named_parameters()}))
    a, b = out
    torch.testing.assert_close(a[0], b[0], **TOL)
    torch.testing.assert_close(a[1], b[1], **TOL)
    for name in a[2]:
        torch.testing.assert_close(a[2][name], b[2][name], **TOL, msg=lambda m, n=name: f"{n}: {m}")


def test_a_pair_longer_than_a_row_is_split_into_one_segment_per_response(setup, monkeypatch):
    """Attention costs a segment's length squared: a pair that does not fit a row becomes (prompt, chosen)
    and (prompt, rejected); pairs that fit stay one segment."""
    tok, policy, _, _, items = setup
    seen = []
    real = dpo.pack_prompts
    monkeypatch.setattr(
        dpo, "pack_prompts", lambda groups, *a, **k: seen.append(groups) or real(groups, *a, **k)
    )
    with torch.no_grad():
        dpo.train_logps(policy, items, tok.pad_token_id, row_length=16)
    fits = [len(p) + len(c) + len(r) <= 16 for p, c, r in items]
    assert 0 < sum(fits) < len(items)  # both kinds occur
    (groups,) = seen
    assert len(groups) == sum(1 if f else 2 for f in fits)
    assert all(len(p) + sum(map(len, rs)) <= 16 or len(rs) == 1 for p, rs in groups)


def test_packing_layout():
    """Two prompts, two responses each, one row: positions restart after each prompt, every response sees
    its prompt and itself only, and each response token is predicted from the slot before it (the first
    from the prompt's last token)."""
    packed = packing.pack_prompts([([5, 6], ([7, 8], [9])), ([4], ([3], [2, 2]))], pad_id=0)
    assert packed.input_ids.tolist() == [[5, 6, 7, 8, 9, 4, 3, 2, 2]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 2, 0, 1, 1, 2]]
    seen = (packed.attention_mask[0, 0] == 0).int().tolist()
    assert seen == [
        [1, 0, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 1, 0, 0, 0, 0],  # the second response skips the first
        [0, 0, 0, 0, 0, 1, 0, 0, 0],
        [0, 0, 0, 0, 0, 1, 1, 0, 0],
        [0, 0, 0, 0, 0, 1, 0, 1, 0],
        [0, 0, 0, 0, 0, 1, 0, 1, 1],
    ]
    assert packed.predictors.tolist() == [1, 2, 1, 5, 5, 7]
    assert packed.targets.tolist() == [7, 8, 9, 3, 2, 2]
    assert packed.owner.tolist() == [0, 0, 1, 2, 3, 3]
    assert packed.last.tolist() == [3, 4, 6, 8]
