"""Secrets never reach a run folder or the console; the same seed gives the same run.

Secrets: a canary value lives in the process environment and reaches an environment constructor three
ways (not at all, through ``${oc.env:...}`` config interpolation, read by the env itself); after a short
run through the CLI it must appear nowhere: stdout, stderr, metrics.jsonl, TensorBoard events,
checkpoint files, config.yaml, plots.

Determinism: two runs with the same seed on the same machine (CPU) log identical metrics rows, wall-clock
values aside, and end in bit-identical checkpoints, for tabular Q-learning, DQN, PPO and GRPO.
"""

from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym
import pytest
import torch

import advantage
from advantage.cli import main

CANARY = "canary-5f1e9c2b-advantage-secret-7d41"
SECRET_VAR = "ADVANTAGE_TEST_SECRET"


class _ApiClientEnv(gym.Wrapper):
    """FrozenLake behind a (pretend) authenticated API: the way a real remote env holds a token."""

    def __init__(self, env: gym.Env, headers: dict, api_key: str | None):
        super().__init__(env)
        self._headers = headers  # a dict: not plain state, so checkpoints skip it
        if api_key is not None:
            self.api_key = api_key  # a plain string attribute


def _make_api_env(token: str = "", read_env: bool = False, render_mode=None):
    env = gym.make("FrozenLake-v1", is_slippery=False, render_mode=render_mode)
    api_key = os.environ.get(SECRET_VAR) if read_env else None
    return _ApiClientEnv(env, {"Authorization": f"Bearer {token}"}, api_key)


gym.register("AdvantageApiLake-v0", entry_point=_make_api_env, max_episode_steps=100)


def _leaks(run_dir: Path, out: str, err: str) -> list[str]:
    """Every place the canary shows up: the console, or any file of the run folder (raw bytes)."""
    found = [name for name, text in (("stdout", out), ("stderr", err)) if CANARY in text]
    found += [
        str(p.relative_to(run_dir))
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and CANARY.encode() in p.read_bytes()
    ]
    return found


def _train_with_secret(monkeypatch, capfd, env_section: str) -> list[str]:
    monkeypatch.setenv(SECRET_VAR, CANARY)
    Path("c.yaml").write_text(
        "algo: q_learning\n"
        f"env:\n  id: AdvantageApiLake-v0\n{env_section}"
        "trainer:\n  total_steps: 2000\n  eval_every: 1000\n  checkpoint_every: 1000\n  eval_episodes: 5\n"
        "  run_dir: run\n  progress: lines\n"
    )
    assert main(["train", "--config", "c.yaml"]) == 0
    assert main(["eval", "run", "--episodes", "2"]) == 0
    out, err = capfd.readouterr()
    run = Path("run")
    assert list(run.glob("events.out.tfevents.*")) and (run / "metrics.jsonl").is_file()
    assert len(list((run / "checkpoints").glob("step_*"))) == 2
    return _leaks(run, out, err)


def test_a_secret_in_the_environment_stays_there(monkeypatch, capfd):
    assert _train_with_secret(monkeypatch, capfd, "") == []


def test_a_secret_passed_by_config_interpolation_is_not_saved(monkeypatch, capfd):
    assert _train_with_secret(monkeypatch, capfd, "  token: ${oc.env:" + SECRET_VAR + "}\n") == []


def test_a_secret_held_by_the_env_is_not_checkpointed(monkeypatch, capfd):
    assert _train_with_secret(monkeypatch, capfd, "  read_env: true\n") == []


# ---- determinism -------------------------------------------------------------------------------------

FAST = {"trainer.tensorboard": False, "trainer.progress": "none"}
GRPO_TINY = {  # as tests/test_grpo.py
    "data.task": "addition",
    "data.digits": 2,
    "data.train_size": 64,
    "data.validation_size": 16,
    "data.test_size": 16,
    "data.rollout_batch_size": 4,
    "data.max_response_length": 6,
    "worker.rollout.n": 4,
    "worker.actor.model.hidden_size": 32,
    "worker.actor.model.layers": 1,
    "worker.actor.model.heads": 2,
    "worker.actor.learning_rate": 1e-3,
    "trainer.eval_episodes": 8,
    "trainer.eval_every": 0,
    "trainer.total_steps": 3,
}
RUNS = {
    # slippery FrozenLake: the environment's own randomness matters too
    "q_learning": {"trainer.total_steps": 5000, "trainer.eval_every": 2500, "trainer.eval_episodes": 20},
    "dqn": {"trainer.total_steps": 3000, "trainer.eval_every": 1500, "trainer.eval_episodes": 3},
    "ppo": {"trainer.total_steps": 4096, "trainer.eval_every": 2048, "trainer.eval_episodes": 3},
    "grpo": GRPO_TINY,
}


def _without_clock(rows: list[dict]) -> list[dict]:
    """Drop wall-clock values: ``time``, ``train/time/*``, ``*_per_second``, ``*seconds``."""
    return [
        {
            k: v
            for k, v in r.items()
            if k != "time" and "/time/" not in k and not k.endswith(("per_second", "seconds"))
        }
        for r in rows
    ]


@pytest.mark.parametrize("algo", list(RUNS))
def test_same_seed_same_metrics_and_checkpoint(tmp_path, algo):
    a, b = (
        advantage.train(algo, quiet=True, **FAST, **RUNS[algo], **{"trainer.run_dir": str(tmp_path / n)})
        for n in ("a", "b")
    )
    rows_a, rows_b = _without_clock(a.metrics), _without_clock(b.metrics)
    assert len(rows_a) >= 3 and any(len(r) > 2 for r in rows_a)
    assert rows_a == rows_b
    ca, cb = a.checkpoint, b.checkpoint
    assert ca.step == cb.step and ca.tensors.keys() == cb.tensors.keys()
    for k in ca.tensors:
        assert torch.equal(ca.tensors[k], cb.tensors[k]), k
    assert ca.state["algo"] == cb.state["algo"]
    for name in ca.files:  # a language model's save_pretrained files
        assert (ca.path / name).read_bytes() == (cb.path / name).read_bytes(), name


def test_another_seed_gives_another_run(tmp_path):
    """The check above can fail: a different seed changes the logged values."""
    runs = [
        advantage.train(
            "ppo",
            quiet=True,
            **FAST,
            **RUNS["ppo"],
            **{"trainer.seed": s, "trainer.run_dir": str(tmp_path / str(s))},
        )
        for s in (0, 1)
    ]
    assert _without_clock(runs[0].metrics) != _without_clock(runs[1].metrics)
