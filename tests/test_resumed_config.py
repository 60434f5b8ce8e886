"""A resumed run's config.yaml reproduces the run: ``advantage resume RUN trainer.total_steps=N`` records the
total the steps before the resume scheduled against (``trainer.schedule_steps``), so training from the
run folder's config.yaml gives the resumed run's weights bit for bit (the learning rate, ε, the clip range
and prioritized replay's β decay as they did in each part)."""

from __future__ import annotations

import pytest
import torch
import yaml

import advantage
from advantage.errors import ConfigError
from advantage.resolve import resolve_config
from advantage.schedules import schedule_total

QUIET = {
    "trainer.tensorboard": False,
    "trainer.plot": False,
    "trainer.eval_every": 0,
    "trainer.eval_episodes": 1,
}
CASES = {
    "ppo": {"algorithm.lr_schedule": "linear", "algorithm.clip_schedule": "linear"},
    "dqn": {
        "algorithm.lr_schedule": "linear",
        "algorithm.prioritized": True,
        "algorithm.learning_starts": 100,
    },
    "q_learning": {"env.id": "FrozenLake-v1", "algorithm.alpha_end": 0.01},
    "mc_control": {"env.id": "FrozenLake-v1"},
    # a language model: the learning rate's warm-up and cosine decay, in optimizer steps
    "sft": {
        "data.digits": 2,
        "data.train_size": 64,
        "data.validation_size": 8,
        "data.test_size": 8,
        "model.hidden_size": 32,
        "model.layers": 1,
        "model.heads": 2,
        "algorithm.batch_size": 8,
        "algorithm.warmup_steps": 1,
    },
}
TOTALS = {"sft": (3, 6)}  # the first part's total and the resumed one (others: 1000 and 2000)


def _tensors(run_dir):
    return advantage.Run.load(run_dir).checkpoint.tensors


@pytest.mark.parametrize("algo", sorted(CASES))
def test_training_from_a_resumed_runs_config_gives_its_weights(tmp_path, algo):
    first, again = tmp_path / "first", tmp_path / "again"
    advantage.train(
        algo,
        quiet=True,
        **QUIET,
        **CASES[algo],
        **{"trainer.total_steps": 1000, "trainer.run_dir": str(first)},
    )
    at = advantage.Run.load(first).step  # where the first part ended (a whole rollout past 1000 for PPO)
    advantage.resume(first, quiet=True, **{"trainer.total_steps": 2000})
    saved = yaml.safe_load((first / "config.yaml").read_text())
    assert saved["trainer"]["total_steps"] == 2000 and saved["trainer"]["schedule_steps"] == [[at, 1000]]
    advantage.train(config=first / "config.yaml", quiet=True, **{"trainer.run_dir": str(again)})
    resumed, fresh = _tensors(first), _tensors(again)
    assert resumed.keys() == fresh.keys()
    for key in resumed:
        assert torch.equal(resumed[key], fresh[key]), key
    # Without the record the same file trains another run: what the test guards against.
    saved["trainer"]["schedule_steps"] = []
    (tmp_path / "bare.yaml").write_text(yaml.safe_dump(saved))
    advantage.train(config=tmp_path / "bare.yaml", quiet=True, **{"trainer.run_dir": str(tmp_path / "bare")})
    bare = _tensors(tmp_path / "bare")
    assert any(not torch.equal(resumed[k], bare[k]) for k in resumed if resumed[k].is_floating_point())


def test_schedule_total_and_the_records_checks():
    _, cfg = resolve_config(
        "ppo", overrides={"trainer.total_steps": 3000, "trainer.schedule_steps": [[1024, 1000], [2048, 2000]]}
    )
    t = cfg.trainer
    assert [schedule_total(t, s) for s in (0, 1023, 1024, 2047, 2048, 2999)] == [
        1000,
        1000,
        2000,
        2000,
        3000,
        3000,
    ]
    for bad in ([[2048, 2000], [1024, 1000]], [[0, 1000]], [[1024]], [[1024, 1000, 5]]):
        with pytest.raises(ConfigError, match="trainer.schedule_steps must be \\[until_step, total\\] pairs"):
            resolve_config("ppo", overrides={"trainer.schedule_steps": bad})
