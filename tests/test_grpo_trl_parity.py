"""Parity with TRL's GRPOTrainer (TRL 1.16): on one fixed batch, our ``grpo_loss`` and its gradients equal
the loss TRL's own code computes, for TRL ``loss_type`` grpo, dapo and dr_grpo, with β = 0 and β > 0 (k3),
on-policy and off-policy, to 1e-5.

Nothing here re-derives TRL: a real ``GRPOTrainer`` is built offline (scratch Qwen2, our char tokenizer, a
tiny ``datasets.Dataset``), the fixed completions are fed through its ``rollout_func`` hook, and its
``_generate_and_score_completions`` computes the rewards (our verifier, through a TRL reward function), the
advantages, the completion mask, the token count and, with β > 0, the reference log-probs from a
reference model it loads itself from a local folder. ``_compute_loss(model, inputs)`` then gives the loss.

The mapping, TRL → ours (``worker.actor`` / ``algorithm``):

==============================  ===========================================================================
TRL                             ours
==============================  ===========================================================================
``loss_type="grpo"``            ``loss_agg=seq_mean_token_mean``, normaliser = rows with a valid token
``loss_type="dapo"``            ``loss_agg=token_mean``, normaliser = valid tokens of the step
                                (TRL: ``num_items_in_batch``)
``loss_type="dr_grpo"``         ``loss_agg=seq_mean_token_sum_norm``, ``max_len`` = TRL's
                                ``max_completion_length``, normaliser = rows
``epsilon`` / ``epsilon_high``  ``clip_low`` / ``clip_high`` (``loss=ppo_clip``)
``beta``, k3 per token          ``kl_coef`` with ``kl_estimator=k3`` (TRL with
                                ``use_bias_correction_kl=False``; its default is below)
``scale_rewards="group"``       ``algorithm.advantage=grpo`` with ``std_eps=1e-4``: TRL's ``nanstd`` is
                                Bessel-corrected like ``torch.std``, and its ε is a hard-coded 1e-4
                                (ours defaults to 1e-6, so set it to match)
``scale_rewards="none"``        ``algorithm.advantage=dr_grpo`` (no std)
==============================  ===========================================================================

Legitimate differences, shown exactly below rather than hidden:

* Left-padded prompts: TRL's training forward passes no ``position_ids`` (a padded row's tokens sit at
  positions shifted by its padding), ours computes them from the attention mask. With rotary embeddings
  (Qwen2, Llama) attention depends only on position differences, so the two agree to float precision
  (:func:`test_left_padding_positions`); the parity batch has prompts of different lengths.
* The KL term: TRL 1.16 defaults to ``use_bias_correction_kl=True`` (DeepSeek-V3.2): it multiplies each
  token's k3 by the ratio ρ = π/π_old, which changes the gradient even on-policy (ρ = 1 in value, but
  ∇ρ = ρ∇log π), giving the score-function term of ∇KL(π‖ref). Ours is the GRPO paper's plain k3 in the
  loss, whose expected gradient is that of the forward KL (documented in :mod:`advantage.math.kl` and the
  GRPO page). Parity holds with ``use_bias_correction_kl=False``;
  :func:`test_trl_default_kl_is_k3_times_ratio` shows that TRL's default equals our loss plus
  β·k3·(ρ − 1) under the same aggregation.
* TRL's grpo mean runs over every row, ours over rows with a valid token; the same here (a sampled
  completion has at least one token).
"""

from __future__ import annotations

import copy

import pytest
import torch

trl = pytest.importorskip("trl", minversion="1.16")  # private API: _compute_loss & co.

from advantage.algos.llm.grpo import grpo_loss  # noqa: E402
from advantage.configs.grpo import ActorConfig  # noqa: E402
from advantage.envs.text import Example, make_task  # noqa: E402
from advantage.lm.model import (  # noqa: E402
    build_char_tokenizer,
    build_scratch_model,
    position_ids_from_mask,
    response_mask,
    sequence_logprobs,
)
from advantage.math import aggregate  # noqa: E402
from advantage.math.advantages import GROUP_ADVANTAGES  # noqa: E402
from advantage.math.kl import kl_k3  # noqa: E402
from advantage.math.masked import step_normalizer  # noqa: E402

G = 4
MAX_COMPLETION_LENGTH = 9  # > the longest completion (8 tokens): T = 8 < max_len, so dr_grpo's scale shows
EOS = "<eos>"
# Three groups of G completions for prompts of different lengths (left padding).
# Rewards (our verifier, format_reward 0.5): 1 correct, 0.5 a bare wrong integer, 0 anything else.
PROMPTS = ["12+3=", "56+78=", "9+1="]
COMPLETIONS = [
    ["15" + EOS, "16" + EOS, "1+5=" + EOS, "15151515"],  # 1, 0.5, 0, 0.5 (truncated: no EOS)
    ["134" + EOS, "134" + EOS, "1=3" + EOS, EOS],  # 1, 1, 0, 0 (empty answer)
    ["3" + EOS, "7" + EOS, "55" + EOS, "0" + EOS],  # all 0.5: a zero-std group, advantage exactly 0
]
# TRL loss_type -> (TRL scale_rewards, our advantage, our loss_agg, TRL epsilon_high)
MAPPING = {
    "grpo": ("group", "grpo", "seq_mean_token_mean", None),
    "dapo": ("group", "grpo", "token_mean", 0.28),
    "dr_grpo": ("none", "dr_grpo", "seq_mean_token_sum_norm", None),
}
TOL = {"rtol": 1e-5, "atol": 1e-5}


def _encode(tok, text: str) -> list[int]:
    ids = []
    while text:
        if text.startswith(EOS):
            ids.append(tok.eos_token_id)
            text = text[len(EOS) :]
        else:
            ids.append(tok.convert_tokens_to_ids(text[0]))
            text = text[1:]
    return ids


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    task = make_task("addition", digits=2, answer_format="plain", format_reward=0.5)
    tok = build_char_tokenizer(task.alphabet, extra_tokens=task.special_tokens)
    sizes = {"hidden_size": 32, "layers": 2, "heads": 4, "max_position_embeddings": 64}
    policy = build_scratch_model("qwen2", tok, seed=0, **sizes)
    reference = build_scratch_model("qwen2", tok, seed=1, **sizes)  # differs from the policy: KL ≠ 0
    ref_dir = tmp_path_factory.mktemp("ref")
    reference.save_pretrained(ref_dir)  # TRL builds its reference model from a folder, offline
    examples = {}
    for p in PROMPTS:  # the verifier needs only the prompt's answer
        a, b = (int(x) for x in p[:-1].split("+"))
        examples[p] = Example(p, str(a + b), str(a + b), {"a": a, "b": b, "op": "+"})
    return task, tok, policy, reference, ref_dir, examples


def _trl_trainer(setup, tmp_path, monkeypatch, loss_type: str, beta: float, bias_correction: bool = False):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    task, tok, policy, _, ref_dir, examples = setup
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental
    model = copy.deepcopy(policy)
    model.config._name_or_path = str(ref_dir)  # where TRL loads the reference model from (β > 0)
    scale, _, _, eps_high = MAPPING[loss_type]

    def rollout(prompts: list[str], trainer) -> dict:
        flat = {p: iter(c) for p, c in zip(PROMPTS, COMPLETIONS, strict=True)}
        return {
            "prompt_ids": [_encode(tok, p) for p in prompts],
            "completion_ids": [_encode(tok, next(flat[p])) for p in prompts],
            "logprobs": None,
        }

    def verifier(prompts: list[str], completions: list[str], **_) -> list[float]:
        return [float(task.verify(c, examples[p]).score) for p, c in zip(prompts, completions, strict=True)]

    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        report_to=[],
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=G * len(PROMPTS),
        num_generations=G,
        max_completion_length=MAX_COMPLETION_LENGTH,
        temperature=1.0,
        num_iterations=1,
        loss_type=loss_type,
        scale_rewards=scale,
        epsilon=0.2,
        epsilon_high=eps_high,
        beta=beta,
        use_bias_correction_kl=bias_correction,
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=verifier,
        args=args,
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS]),
        processing_class=tok,
        rollout_func=rollout,
    )
    assert (trainer.beta != 0) == (trainer.ref_model is not None)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop; one micro-batch per step
    return trainer, model


def _ours(setup, batch, loss_type, beta, old_logp, max_len, kl_times_ratio=False):
    """Our loss and gradients on TRL's batch (a fresh copy of the same initial policy). With
    ``kl_times_ratio``, plus β·k3·(ρ − 1) aggregated like the loss (TRL's bias-corrected KL)."""
    _, tok, policy, reference, _, _ = setup
    _, adv_mode, agg, eps_high = MAPPING[loss_type]
    model = copy.deepcopy(policy).train()
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    P = batch["prompt_ids"].shape[1]
    mask = batch["completion_mask"].float()
    rewards = torch.tensor([float(r) for r in _rewards(setup, batch, tok)])  # rows p0 × G, p1 × G, ...
    adv, _ = GROUP_ADVANTAGES[adv_mode](rewards, G, 1e-4)
    ref_logp = None
    if beta > 0:
        with torch.no_grad():
            ref_logp = sequence_logprobs(reference, ids, attn, response_start=P)
    actor = ActorConfig(
        loss="ppo_clip",
        clip_low=0.2,
        clip_high=eps_high,
        loss_agg=agg,
        kl_coef=beta,
        kl_estimator="k3",
    )
    logp = sequence_logprobs(model, ids, attn, response_start=P)
    Z = step_normalizer(mask, actor.loss_agg)
    loss, _ = grpo_loss(logp, old_logp, ref_logp, adv, mask, actor, max(Z, 1.0), max_len)
    if kl_times_ratio:
        ratio = torch.exp(logp - (logp.detach() if old_logp is None else old_logp))
        extra = beta * kl_k3(logp, ref_logp) * (ratio - 1.0)
        loss = loss + aggregate(extra, mask, agg, normalizer=max(Z, 1.0), max_len=max_len)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}, adv, logp.detach(), ref_logp


def _rewards(setup, batch, tok):
    task, _, _, _, _, examples = setup
    texts = tok.batch_decode(
        [
            c[m.bool()].tolist()
            for c, m in zip(batch["completion_ids"], batch["completion_mask"], strict=True)
        ],
        skip_special_tokens=True,
    )
    prompts = [p for p in PROMPTS for _ in range(G)]
    return [task.verify(t, examples[p]).score for p, t in zip(prompts, texts, strict=True)]


def _compare(setup, tmp_path, monkeypatch, loss_type, beta, on_policy, bias_correction=False):
    """TRL's batch, loss and gradients vs ours on that batch, asserted equal; returns TRL's batch, the old
    log-probs used (None on-policy), TRL's loss and our gradients."""
    trainer, trl_model = _trl_trainer(setup, tmp_path, monkeypatch, loss_type, beta, bias_correction)
    tok = setup[1]
    inputs = [{"prompt": p} for p in PROMPTS for _ in range(G)]  # TRL's RepeatSampler order
    batch = trainer._generate_and_score_completions(inputs)

    # The batch TRL built is the one our trainer would build: prompts left-padded, the mask up to and
    # including the first EOS (a truncated row is all ones).
    cm = batch["completion_mask"]
    T = cm.shape[1]
    assert T == 8 < MAX_COMPLETION_LENGTH
    assert not bool(batch["prompt_mask"].all())
    assert torch.equal(response_mask(batch["completion_ids"], tok.eos_token_id, valid=cm.bool()), cm.float())
    assert "old_per_token_logps" not in batch  # on-policy: TRL uses sg(logp), as we do with old_logp=None

    old_logp = None
    if not on_policy:  # a policy that moved: ratios far from 1, so both clip bounds are active somewhere
        with torch.no_grad():
            ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
            attn = torch.cat([batch["prompt_mask"], cm], dim=1)
            lp = sequence_logprobs(setup[2], ids, attn, response_start=batch["prompt_ids"].shape[1])
        old_logp = lp + 0.3 * torch.randn(lp.shape, generator=torch.Generator().manual_seed(0))
        batch["old_per_token_logps"] = old_logp * cm  # TRL's convention: 0 on masked positions

    trl_loss = trainer._compute_loss(trl_model, batch)
    trl_loss.backward()
    trl_grads = {n: p.grad for n, p in trl_model.named_parameters()}
    if not on_policy:  # TRL's own clip metrics: both bounds were hit
        assert trainer._metrics["train"]["clip_ratio/low_mean"][-1] > 0
        assert trainer._metrics["train"]["clip_ratio/high_mean"][-1] > 0

    loss, grads, adv, logp, ref_logp = _ours(
        setup, batch, loss_type, beta, old_logp, MAX_COMPLETION_LENGTH, kl_times_ratio=bias_correction
    )

    # advantages: TRL's (r - mean) / (std + 1e-4) with Bessel's std == ours with std_eps = 1e-4
    torch.testing.assert_close(batch["advantages"], adv, rtol=0, atol=1e-6)
    assert bool((adv[2 * G :] == 0).all())  # the zero-std group: exactly 0 in both
    assert batch["advantages"].abs().max() >= 0.5
    # TRL's per-token log-probs (fused LM head) and reference log-probs equal ours on valid tokens
    trl_logp, _, _ = trainer._get_per_token_logps_and_entropies(
        trl_model,
        torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1),
        torch.cat([batch["prompt_mask"], cm], dim=1),
        T,
    )
    torch.testing.assert_close(trl_logp.detach() * cm, logp * cm, **TOL)
    if beta > 0:
        torch.testing.assert_close(batch["ref_per_token_logps"] * cm, ref_logp * cm, **TOL)
        assert (batch["ref_per_token_logps"] - trl_logp.detach()).abs().max() > 0.1  # a real KL term
    else:
        assert "ref_per_token_logps" not in batch

    torch.testing.assert_close(trl_loss.detach(), loss, **TOL)
    assert trl_grads.keys() == grads.keys()
    for name, g in grads.items():
        torch.testing.assert_close(trl_grads[name], g, **TOL, msg=lambda m, n=name: f"{n}: {m}")
    assert max(float(g.abs().max()) for g in grads.values()) > 1e-3  # not a vacuous zero gradient
    return batch, old_logp, trl_loss.detach(), grads


@pytest.mark.parametrize("on_policy", [True, False], ids=["on_policy", "off_policy"])
@pytest.mark.parametrize("beta", [0.0, 0.04], ids=["beta0", "beta_k3"])
@pytest.mark.parametrize("loss_type", list(MAPPING))
def test_loss_and_gradients_match_trl(setup, tmp_path, monkeypatch, loss_type, beta, on_policy):
    batch, old_logp, trl_loss, _ = _compare(setup, tmp_path, monkeypatch, loss_type, beta, on_policy)
    if loss_type == "dr_grpo":
        # Dr.GRPO divides by a fixed length (TRL's max_completion_length, our data.max_response_length),
        # not by the batch's decoded width T: every row here ends early (T < max_len), so the parity above
        # tells the two apart.
        T = batch["completion_ids"].shape[1]
        loss_T, *_ = _ours(setup, batch, loss_type, beta, old_logp, T)
        assert not torch.allclose(loss_T, trl_loss, **TOL)


@pytest.mark.parametrize("on_policy", [True, False], ids=["on_policy", "off_policy"])
@pytest.mark.parametrize("loss_type", list(MAPPING))
def test_trl_default_kl_is_k3_times_ratio(setup, tmp_path, monkeypatch, loss_type, on_policy):
    """TRL's default ``use_bias_correction_kl=True`` = our loss + β·k3·(ρ − 1), same aggregation: the KL
    per token is k3·ρ. Its gradient differs from ours even on-policy (ρ = 1 but ∇ρ = ∇log π)."""
    beta = 0.5  # large enough for the KL part of the gradient to stand well above the tolerance
    batch, old_logp, _, grads = _compare(
        setup, tmp_path, monkeypatch, loss_type, beta, on_policy, bias_correction=True
    )
    # ... and not our plain-k3 gradient (by 10× the parity tolerance), on-policy too
    _, plain, *_ = _ours(setup, batch, loss_type, beta, old_logp, MAX_COMPLETION_LENGTH)
    assert not all(torch.allclose(grads[n], plain[n], rtol=1e-4, atol=1e-4) for n in grads)


def test_left_padding_positions(setup, tmp_path, monkeypatch):
    """A left-padded row: ours scores it as the same row alone (positions from the mask); TRL's training
    forward passes no position ids (positions 0..L-1, pads included). With rotary embeddings only position
    differences matter, so both give the unpadded row's log-probs."""
    trainer, trl_model = _trl_trainer(setup, tmp_path, monkeypatch, "grpo", 0.0)
    tok, policy = setup[1], setup[2]
    short, long = _encode(tok, "1+2="), _encode(tok, "12+34=")
    completion = _encode(tok, "35" + EOS)
    pad = len(long) - len(short)
    ids = torch.tensor([[tok.pad_token_id] * pad + short + completion, long + completion])
    attn = torch.tensor(
        [[0] * pad + [1] * (len(short) + len(completion)), [1] * (len(long) + len(completion))]
    )
    T, P = len(completion), len(long)
    trl_logp, _, _ = trainer._get_per_token_logps_and_entropies(trl_model, ids, attn, T)
    with torch.no_grad():
        ours = sequence_logprobs(policy, ids, attn, response_start=P)
        alone = sequence_logprobs(
            policy,
            torch.tensor([short + completion]),
            torch.ones(1, len(short) + T, dtype=torch.long),
            response_start=len(short),
        )
    assert torch.equal(position_ids_from_mask(attn)[0, pad:], torch.arange(ids.shape[1] - pad))
    torch.testing.assert_close(ours[0], alone[0], **TOL)
    torch.testing.assert_close(trl_logp.detach(), ours, **TOL)
