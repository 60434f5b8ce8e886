"""DAPO (SPEC L8): which groups dynamic sampling drops (one exact "all equal" test, max == min per group,
from :func:`advantage.math.constant_groups`; by default correctness before reward shaping), and overlong
filtering (a truncated response contributes exactly zero gradient)."""

from __future__ import annotations

import pytest
import torch

import advantage
from advantage.algos.llm import grpo, grpo_rollout
from advantage.envs.text import Reward, make_task
from advantage.errors import ConfigError
from test_grpo import TINY, coin_task  # noqa: F401  (a fixture)


class ConstantTask:
    """Addition prompts with a verifier that gives every completion the same verdict and score."""

    def __init__(self, score: float, correct: bool):
        self.inner = make_task("addition", digits=2)
        self.name, self.alphabet, self.special_tokens = "constant", self.inner.alphabet, ()
        self.options: dict = {}
        self.score, self.correct = score, correct

    def examples(self, split, n, seed):
        return self.inner.examples(split, n, seed)

    def verify(self, completion, example):
        return Reward(self.score, self.correct, True, completion, "constant")


def _run(tmp_path, monkeypatch, score, correct, name="run", **over):
    from advantage.envs.text import registry

    monkeypatch.setitem(registry.TASKS, "constant", lambda: ConstantTask(score, correct))
    shaped = []
    original = grpo_rollout.shape_rewards

    def spy(rewards, gen, cfg, kl_seq, group=None):
        out = original(rewards, gen, cfg, kl_seq, group)
        shaped.append(out[0].clone())
        return out

    monkeypatch.setattr(grpo_rollout, "shape_rewards", spy)
    cfg = {
        **TINY,
        "data.task": "constant",
        "trainer.run_dir": str(tmp_path / name),
        "algorithm.dynamic_sampling": True,
        "algorithm.max_sampling_rounds": 2,
        **over,
    }
    run = advantage.train("grpo", quiet=True, **{k: v for k, v in cfg.items() if k != "data.digits"})
    rows = [r for r in run.metrics if "train/rollout/rounds" in r or "train/skipped" in r]
    return rows, shaped


@pytest.mark.parametrize("rule", [None, "reward"])
def test_groups_of_equal_inexact_rewards_are_dropped(tmp_path, monkeypatch, rule):
    """Every answer wrong but well formatted (format_reward = 0.1), G = 8: one group per round, whose
    float32 std is ~1e-8, not 0. Either rule drops it, so every step is skipped (the other values of the
    issue, G = 6 at 0.3 and G = 16 at 0.05, are in tests/test_math_grpo.py)."""
    over = {"worker.rollout.n": 8, "data.rollout_batch_size": 1, "trainer.total_steps": 2}
    if rule is not None:
        over["algorithm.dynamic_sampling_on"] = rule
    rows, shaped = _run(tmp_path, monkeypatch, 0.1, False, **over)
    assert shaped and all(s.dtype == torch.float32 and float(s.std(unbiased=False)) > 0 for s in shaped)
    assert len(rows) == 2 and all(r.get("train/skipped") == 1.0 for r in rows)


def test_all_correct_group_with_an_overlong_punishment_is_dropped_by_default(tmp_path, monkeypatch):
    """Every answer correct (reward 1); the soft overlong punishment makes the shaped rewards of a group
    differ, e.g. (1, 1, 1, 0.25). By correctness (the default) the group is dropped; by the shaped reward
    it is kept."""
    over = {
        "worker.reward.overlong_buffer": 4,
        "data.max_response_length": 6,
        "trainer.total_steps": 2,
    }
    rows, shaped = _run(tmp_path, monkeypatch, 1.0, True, "correctness", **over)
    # Every step skipped: no group is kept, whatever its shaped rewards.
    G = TINY["worker.rollout.n"]
    differing = [g for s in shaped for g in s.view(-1, G) if float(g.max()) > float(g.min())]
    assert differing  # the shaped rewards of those groups differ, e.g. (1, 0, 0, 0.75)
    assert len(rows) == 2 and all(r.get("train/skipped") == 1.0 for r in rows)

    rows, _ = _run(
        tmp_path, monkeypatch, 1.0, True, "reward", **over, **{"algorithm.dynamic_sampling_on": "reward"}
    )
    assert len(rows) == 2 and all("train/skipped" not in r for r in rows)
    assert all(r["train/rollout/dropped_frac"] < 1.0 for r in rows)


def test_dynamic_sampling_on_is_validated():
    from advantage.resolve import resolve_config

    with pytest.raises(ConfigError, match=r"algorithm.dynamic_sampling_on.*correctness.*reward"):
        resolve_config("grpo", overrides={**TINY, "algorithm.dynamic_sampling_on": "accuracy"})
    over = {"data.task": "synthetic", "algorithm.dynamic_sampling": True, "worker.reward.model": "x"}
    with pytest.raises(
        ConfigError, match="dynamic_sampling_on=correctness: data.task=synthetic has no verifier"
    ):
        advantage.train(
            "grpo", quiet=True, **{**{k: v for k, v in TINY.items() if k != "data.digits"}, **over}
        )


@pytest.mark.parametrize(
    "over",
    [
        {"preset": "grpo"},  # seq_mean_token_mean, k3 KL to the reference in the loss
        {"preset": "gspo"},  # the sequence-level ratio: a mean over each response's tokens
        {"preset": "dr_grpo"},  # seq_mean_token_sum_norm: sums over a fixed length
        {"preset": "dapo", "algorithm.dynamic_sampling": False, "worker.actor.micro_batch_size": 3},
    ],
    ids=["grpo", "gspo", "dr_grpo", "dapo_micro"],
)
@pytest.mark.usefixtures("coin_task")
def test_overlong_filter_gives_truncated_responses_exactly_zero_gradient(tmp_path, monkeypatch, over):
    """With algorithm.overlong_filter, d loss / d log π of every token of a truncated response is exactly
    0 in every micro-batch (so nothing of it reaches the weights), while the other responses do move
    (the parity reward of the coin task gives them non-zero advantages)."""
    seen_rows = []
    rows_logprobs, loss_fn = grpo.rows_logprobs, grpo.grpo_loss

    def spy_rows(model, gen, rows, temperature):
        seen_rows.append((gen.truncated[rows].clone(), rows.clone()))
        return rows_logprobs(model, gen, rows, temperature)

    grads = []

    def spy_loss(logp, *args, **kwargs):
        loss, metrics = loss_fn(logp, *args, **kwargs)
        (g,) = torch.autograd.grad(loss, logp, retain_graph=True)
        grads.append((g, seen_rows[-1][0]))
        return loss, metrics

    monkeypatch.setattr(grpo, "rows_logprobs", spy_rows)
    monkeypatch.setattr(grpo, "grpo_loss", spy_loss)
    cfg = {
        **{k: v for k, v in TINY.items() if k != "data.digits"},
        "data.task": "coin",
        "trainer.run_dir": str(tmp_path / "run"),
        "data.max_response_length": 4,
        "algorithm.overlong_filter": True,
        "trainer.total_steps": 2,
        **over,
    }
    advantage.train("grpo", quiet=True, **cfg)
    assert grads
    truncated = torch.cat([t for _, t in grads])
    assert truncated.any() and not truncated.all()  # both kinds were in the loss
    for g, t in grads:
        assert (g[t] == 0).all()  # exactly zero, not small
    assert any(bool((g[~t] != 0).any()) for g, t in grads)
