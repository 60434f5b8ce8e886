"""The language-model trainers on a CUDA device: a few steps of each, with the options that move tensors
between the generation (on the device) and the rewards and advantages (on the CPU).

Skipped where no CUDA device is present (CI has none); run them on a GPU machine with
``pytest -m gpu tests/test_gpu.py``. Each run must finish with finite losses and write a checkpoint.
"""

from __future__ import annotations

import math

import pytest
import torch

import advantage
from test_grpo import TINY  # tests/ is on sys.path (pytest rootdir-relative imports)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

DEVICE = "cuda"
# A few steps on the device, no evaluation until the end, a metrics row every step.
TRAINER = {
    "trainer.total_steps": 3,
    "trainer.eval_every": 0,
    "trainer.log_every": 1,
    "trainer.tensorboard": False,
    "trainer.device": DEVICE,
}
SMALL_MODEL = {"model.hidden_size": 32, "model.layers": 1, "model.heads": 2}
GRPO = {**TINY, **TRAINER}  # test_grpo's tiny 2-digit addition run
SFT = {
    "data.task": "addition",
    "data.digits": 2,
    "data.train_size": 64,
    "data.validation_size": 16,
    "data.test_size": 16,
    "trainer.eval_episodes": 8,
    **SMALL_MODEL,
    **TRAINER,
}
PREFERENCE = {"data.task": "synthetic", **SMALL_MODEL, **TRAINER}


def _losses(run: advantage.Run, key: str) -> list[float]:
    values = [r[key] for r in run.metrics if key in r]
    assert values, f"no {key} logged"
    return values


@pytest.mark.parametrize(
    "over",
    [
        {},
        {"preset": "dapo"},  # overlong punishment, clip-higher, dynamic sampling
        {"preset": "gspo"},
        {"worker.actor.kl_coef": 0.05},  # a reference model on the device
        {"algorithm.kl_reward_coef": 0.05},  # KL in the reward: device log-probs into CPU rewards
        {"algorithm.supervision": "process"},
        {"algorithm.adaptive_difficulty": True},
        {"worker.actor.model.dtype": "bfloat16"},
    ],
    ids=["grpo", "dapo", "gspo", "kl_loss", "kl_reward", "process", "adaptive", "bf16"],
)
def test_grpo_runs_on_cuda(tmp_path, over):
    run = advantage.train("grpo", quiet=True, **{**GRPO, "trainer.run_dir": str(tmp_path / "run"), **over})
    assert all(math.isfinite(x) for x in _losses(run, "train/loss"))
    assert (tmp_path / "run" / "checkpoints").is_dir()


def test_sft_runs_on_cuda(tmp_path):
    run = advantage.train("sft", quiet=True, **{**SFT, "trainer.run_dir": str(tmp_path / "run")})
    assert all(math.isfinite(x) for x in _losses(run, "train/loss"))


@pytest.mark.parametrize("algo", ["reward_model", "dpo"])
def test_preference_trainers_run_on_cuda(tmp_path, algo):
    run = advantage.train(algo, quiet=True, **{**PREFERENCE, "trainer.run_dir": str(tmp_path / "run")})
    assert all(math.isfinite(x) for x in _losses(run, "train/loss"))
