"""GRPO with process supervision: the tasks' step rewards, their token alignment, and the trainer path."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import advantage
from advantage.algos.llm import grpo, grpo_rewards
from advantage.envs.text import Reward, make_task
from advantage.envs.text.core import Example, prefix_steps
from advantage.errors import ConfigError, NonFiniteError
from advantage.lm.model import build_char_tokenizer
from test_grpo import TINY, CoinTask  # tests/ is on sys.path (pytest rootdir-relative imports)


@pytest.mark.parametrize(
    ("completion", "steps"),
    [
        ("168", [(1, 1.0), (2, 1.0), (3, 1.0)]),  # right: every prefix right, the outcome 1 last
        ("178", [(1, 1.0), (2, 0.0), (3, 0.0)]),  # wrong from the second digit on
        ("16", [(1, 1.0), (2, 0.0)]),  # a right prefix that stops early: the last step is the outcome
        ("1680", [(1, 1.0), (2, 1.0), (3, 1.0), (4, 0.0)]),  # runs on
        (" 168", [(2, 1.0), (3, 1.0), (4, 1.0)]),  # leading space (stripped by verify) joins step 1
        ("", [(0, 0.0)]),  # nothing written: one step, the outcome
    ],
)
def test_prefix_steps(completion, steps):
    outcome = float(completion.strip() == "168")
    assert prefix_steps(completion, "168", outcome, "plain") == steps


def test_task_step_rewards_end_with_the_verifier_score():
    add = make_task("addition", digits=3)
    ex = Example("100+68=", "168", "168")
    assert add.step_rewards("168", ex) == [(1, 1.0), (2, 1.0), (3, 1.0)]
    assert add.step_rewards("0168", ex)[-1] == (4, 0.0)  # leading zeros: verify says wrong
    tagged = make_task("addition", digits=3, answer_format="tagged")
    text = "<answer>168</answer>"
    assert tagged.step_rewards(text, Example("100+68=", "168", text)) == [(len(text), 1.0)]
    rev = make_task("reverse", length=3, symbols="letters")
    assert rev.step_rewards("cbx", Example("reverse abc=", "cba", "cba")) == [(1, 1.0), (2, 1.0), (3, 0.0)]


def test_token_char_ends():
    tok = build_char_tokenizer("0123456789+=")
    ids = tok("168", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert grpo_rewards.token_char_ends(tok, ids, "168") == [1, 2, 3, 3]  # EOS adds no text

    class Pairs:  # pieces that do not add up to the text: every prefix is decoded instead
        def batch_decode(self, rows, skip_special_tokens=True):
            return ["??" for _ in rows]

        def decode(self, ids, skip_special_tokens=True):
            return "ab"[: len(ids)]

    assert grpo_rewards.token_char_ends(Pairs(), [5, 6], "ab") == [1, 2]


def test_step_tensors_align_steps_with_tokens():
    tok = build_char_tokenizer("0123456789+=")
    add = make_task("addition", digits=3)
    ex = Example("100+68=", "168", "168")
    texts = ["168", "17", "1680"]  # the second has EOS at token 2, the third is truncated (no EOS)
    rows = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    rows = [rows[0] + [tok.eos_token_id], rows[1] + [tok.eos_token_id], rows[2]]
    T = max(map(len, rows))
    ids = torch.full((3, T), tok.pad_token_id)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
    gen = SimpleNamespace(response_ids=ids, lengths=torch.tensor([len(r) for r in rows]))
    delta = torch.tensor([0.0, -0.5, 0.25])
    reward, mask, end = grpo_rewards.step_tensors(add, [ex], texts, gen, tok, 3, delta)
    assert mask.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    # The last step ends at the response's last token (EOS included) and carries the shaping delta.
    assert (
        end[0, :3].tolist() == [0, 1, 3] and end[1, :2].tolist() == [0, 2] and end[2].tolist() == [0, 1, 2, 3]
    )
    assert reward[0, :3].tolist() == [1.0, 1.0, 1.0]
    assert reward[1, :2].tolist() == [1.0, -0.5]
    assert reward[2].tolist() == [1.0, 1.0, 1.0, 0.25]


def test_a_nan_step_reward_names_the_sample():
    tok = build_char_tokenizer("0123456789+=")
    task = SimpleNamespace(step_rewards=lambda text, ex: [(1, float("nan"))])
    gen = SimpleNamespace(response_ids=torch.zeros(2, 2, dtype=torch.long), lengths=torch.tensor([1, 1]))
    ex = Example("1+1=", "2", "2")
    with pytest.raises(NonFiniteError, match=r"a step reward of completion '3' for prompt '1\+1=' is nan"):
        grpo_rewards.step_tensors(task, [ex], ["3", "2"], gen, tok, 2, torch.zeros(2))


class OneStepCoin(CoinTask):
    """CoinTask whose step rewards are one step holding the outcome: process = outcome supervision."""

    def step_rewards(self, completion, example):
        return [(len(completion), self.verify(completion, example).score)]


class DigitCoin(CoinTask):
    """Rewards each even digit: groups differ step by step even when the outcomes are equal."""

    def verify(self, completion, example):
        return Reward(0.0, False, True, completion, "never right")

    def step_rewards(self, completion, example):
        return [(k + 1, float(c in "02468")) for k, c in enumerate(completion)] or [(0, 0.0)]


@pytest.fixture
def coins(monkeypatch):
    from advantage.envs.text import registry

    monkeypatch.setitem(registry.TASKS, "one_step_coin", OneStepCoin)
    monkeypatch.setitem(registry.TASKS, "digit_coin", DigitCoin)


def _train(tmp_path, name, **over):
    cfg = {**TINY, "data.digits": None, "trainer.run_dir": str(tmp_path / name), **over}
    return advantage.train("grpo", quiet=True, **{k: v for k, v in cfg.items() if v is not None})


@pytest.mark.parametrize("advantage_name", ["grpo", "dr_grpo", "batch_std"])
def test_one_step_process_supervision_trains_as_outcome_supervision(tmp_path, coins, advantage_name):
    over = {"data.task": "one_step_coin", "algorithm.advantage": advantage_name}
    outcome = _train(tmp_path, "outcome", **over)
    process = _train(tmp_path, "process", **over, **{"algorithm.supervision": "process"})
    a = dict(outcome.policy.model.named_parameters())
    b = dict(process.policy.model.named_parameters())
    moved = dict(
        advantage.train(
            "grpo",
            quiet=True,
            **{**TINY, "trainer.total_steps": 0, "trainer.run_dir": str(tmp_path / "start")},
        ).policy.model.named_parameters()
    )
    assert any(not torch.equal(a[k], moved[k]) for k in a)  # it trained
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)  # Adam magnifies rounding


def test_process_supervision_learns_from_equal_outcomes(tmp_path, coins, monkeypatch):
    seen = []
    loss = grpo.grpo_loss

    def spy(logp, old, ref, adv, mask, *args, **kwargs):
        seen.append((adv.detach().clone(), mask.clone()))
        return loss(logp, old, ref, adv, mask, *args, **kwargs)

    monkeypatch.setattr(grpo, "grpo_loss", spy)
    over = {
        "data.task": "digit_coin",
        "algorithm.supervision": "process",
        "algorithm.dynamic_sampling": True,
        "algorithm.dynamic_sampling_on": "reward",  # by correctness an all-wrong group is dropped
    }
    run = _train(tmp_path, "run", **over)
    rows = [r for r in run.metrics if "train/rollout/prompts" in r]
    assert rows and all("train/skipped" not in r for r in rows)  # outcomes all 0, steps still differ
    adv, mask = seen[0]
    assert adv.dim() == 2 and adv.shape == mask.shape and bool((adv[mask == 0] == 0).all())
    assert float(adv.abs().max()) > 0


def test_process_supervision_config_errors(coins):
    from advantage.resolve import resolve_config

    with pytest.raises(ConfigError, match="worker.rollout.n=1 with algorithm.supervision=process"):
        resolve_config(
            "grpo",
            overrides={
                **TINY,
                "worker.rollout.n": 1,
                "algorithm.advantage": "dr_grpo",
                "algorithm.supervision": "process",
            },
        )
    with pytest.raises(ConfigError, match="algorithm.advantage=rloo with algorithm.supervision=process"):
        resolve_config(
            "grpo", overrides={**TINY, "algorithm.advantage": "rloo", "algorithm.supervision": "process"}
        )
    with pytest.raises(ConfigError, match="data.task=countdown gives no step rewards"):
        over = {**TINY, "data.task": "countdown", "algorithm.supervision": "process"}
        advantage.train("grpo", quiet=True, **{k: v for k, v in over.items() if k != "data.digits"})
