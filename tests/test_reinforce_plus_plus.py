"""REINFORCE++ (Hu 2025): per-token rewards -> discounted returns -> whitened over the batch's tokens.

Its math against hand computations and identities, its registry entry (per-token, no groups), and the
``reinforce_pp`` preset training on the addition task and learning a task a tiny model can learn.
"""

from __future__ import annotations

import math

import pytest
import torch

import advantage
from advantage.envs.text import Reward
from advantage.math.advantages import GROUP_ADVANTAGES, reinforce_plus_plus
from advantage.math.rewards import token_rewards
from test_grpo import TINY, CoinTask  # tests/ is on sys.path (pytest rootdir-relative imports)

F64 = torch.float64


def test_hand_computed_advantages():
    # Two responses of 3 and 2 tokens; score 1 on the first's last token, 0.5 on the second's first token.
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.5, 0.0, float("nan")]], dtype=F64)  # padding: anything
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=F64)
    adv, m = reinforce_plus_plus(rewards, mask, group_size=1, eps=0.0)
    # γ = 1: returns 1, 1, 1 and 0.5, 0. Valid returns (1, 1, 1, 0.5, 0): mean 0.7, unbiased variance
    # (3·0.09 + 0.04 + 0.49) / 4 = 0.2.
    sd = math.sqrt(0.2)
    expected = torch.tensor([[0.3 / sd, 0.3 / sd, 0.3 / sd], [-0.2 / sd, -0.7 / sd, 0.0]], dtype=F64)
    torch.testing.assert_close(adv, expected)
    assert float(m["return_mean"]) == pytest.approx(0.7) and float(m["return_std"]) == pytest.approx(sd)
    assert float(m["reward_mean"]) == pytest.approx(0.75)
    # γ = 0.5: returns 0.25, 0.5, 1 and 0.5, 0.
    adv, _ = reinforce_plus_plus(rewards, mask, group_size=1, eps=0.0, gamma=0.5)
    g = torch.tensor([0.25, 0.5, 1.0, 0.5, 0.0], dtype=F64)
    z = (g - g.mean()) / g.std()
    torch.testing.assert_close(adv[mask != 0], z)
    assert float(adv[1, 2]) == 0.0


def test_without_kl_and_discount_every_token_gets_its_whitened_score():
    """β = 0, γ = 1: each valid token's advantage is its response's score, standardised over the tokens of
    the batch (a response weighs as many times as it has tokens)."""
    g = torch.Generator().manual_seed(0)
    B, T = 6, 7
    lengths = torch.tensor([1, 7, 3, 5, 2, 7])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(F64)
    scores = torch.randn(B, generator=g, dtype=F64)
    tok = token_rewards(scores, torch.randn(B, T, generator=g, dtype=F64), mask, beta=0.0)
    adv, _ = reinforce_plus_plus(tok, mask, group_size=1, eps=0.0)
    per_token = scores.repeat_interleave(lengths)
    z = (per_token - per_token.mean()) / per_token.std()
    torch.testing.assert_close(adv[mask != 0], z)
    assert bool((adv[mask == 0] == 0).all())


def test_a_kl_reward_discounts_each_token_by_the_kl_still_ahead():
    """G_t = s − β Σ_{s' ≥ t} k1_{s'}: the return of token t carries the KL of t and of every later token."""
    g = torch.Generator().manual_seed(1)
    B, T, beta = 4, 5, 0.3
    mask = torch.ones(B, T, dtype=F64)
    mask[1, 3:] = 0
    scores, kl = torch.randn(B, generator=g, dtype=F64), torch.randn(B, T, generator=g, dtype=F64)
    tok = token_rewards(scores, kl, mask, beta)
    kl_ahead = (kl * mask).flip(-1).cumsum(-1).flip(-1)
    returns = torch.where(mask != 0, scores[:, None] - beta * kl_ahead, torch.zeros_like(kl))
    adv, m = reinforce_plus_plus(tok, mask, group_size=1, eps=0.0)
    valid = returns[mask != 0]
    torch.testing.assert_close(adv[mask != 0], (valid - valid.mean()) / valid.std())
    assert float(m["return_mean"]) == pytest.approx(float(valid.mean()))


def test_bad_shapes_and_gamma_are_refused():
    with pytest.raises(ValueError, match="rewards and mask must be"):
        reinforce_plus_plus(torch.zeros(3), torch.ones(3), 1)
    with pytest.raises(ValueError, match="gamma must be in"):
        reinforce_plus_plus(torch.zeros(2, 3), torch.ones(2, 3), 1, gamma=1.5)


def test_its_registry_entry():
    spec = GROUP_ADVANTAGES.spec("reinforce_plus_plus")
    assert spec.get("per_token") and spec.get("batch") and not spec.get("groups")
    assert spec.get("process") is None  # not offered with process supervision
    assert spec.params == ("eps", "gamma")


def _run(tmp_path, name, **over):
    cfg = {**TINY, "trainer.run_dir": str(tmp_path / name), "preset": "reinforce_pp", **over}
    return advantage.train("grpo", quiet=True, **{k: v for k, v in cfg.items() if v is not None})


def test_the_preset_runs_on_addition_with_one_sample_per_prompt(tmp_path, monkeypatch):
    from advantage.algos.llm import grpo

    seen = []
    loss = grpo.grpo_loss

    def spy(logp, old, ref, adv, mask, *args, **kwargs):
        seen.append((adv.detach().clone(), mask.clone()))
        return loss(logp, old, ref, adv, mask, *args, **kwargs)

    monkeypatch.setattr(grpo, "grpo_loss", spy)
    start = _run(tmp_path, "start", **{"trainer.total_steps": 0})
    run = _run(tmp_path, "run", **{"worker.rollout.n": 1})
    rows = [r for r in run.metrics if "train/loss" in r]
    assert len(rows) == 3 and all(math.isfinite(r["train/loss"]) for r in rows)
    assert all("train/reward/kl_reward" in r for r in rows)  # the preset's per-token KL reward
    adv, mask = seen[0]
    assert adv.dim() == 2 and adv.shape == mask.shape and bool((adv[mask == 0] == 0).all())
    # A scratch model never adds right and starts at the reference (KL 0): every return is 0, every
    # advantage exactly 0 (not 0/0), and the weights stay where they were.
    assert all(r["train/reward/mean"] == 0 for r in rows) and bool((adv == 0).all())
    a, b = dict(start.policy.model.named_parameters()), dict(run.policy.model.named_parameters())
    assert all(torch.equal(a[k], b[k]) for k in a)


class FirstDigitOne(CoinTask):
    """Addition prompts, reward 1 when the completion starts with "1": learnable by a tiny model in a few
    dozen steps, so the preset's learning is measured in seconds."""

    def verify(self, completion, example):
        ok = completion.startswith("1")
        return Reward(float(ok), ok, True, completion, "first digit")


@pytest.mark.parametrize("seed", [0, 1])
def test_the_preset_learns(tmp_path, monkeypatch, seed):
    from advantage.envs.text import registry

    monkeypatch.setitem(registry.TASKS, "first_one", FirstDigitOne)
    over = {
        "data.task": "first_one",
        "data.digits": None,
        "data.rollout_batch_size": 16,
        "worker.rollout.n": 1,
        "worker.actor.learning_rate": 1e-2,
        "trainer.total_steps": 30,
        "trainer.seed": seed,
    }
    run = _run(tmp_path, f"learn{seed}", **over)
    r = [row["train/reward/mean"] for row in run.metrics if "train/reward/mean" in row]
    assert len(r) == 30
    first, last = sum(r[:5]) / 5, sum(r[-5:]) / 5
    assert first < 0.35 and last > 0.7, r  # measured: about 0.1 -> 0.95 on seeds 0-2
    adv_rows = [row for row in run.metrics if "train/loss" in row]
    assert all(math.isfinite(row["train/loss"]) for row in adv_rows)
