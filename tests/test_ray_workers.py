"""Scale-out on Ray: PPO with rollout workers learns CartPole, survives a worker killed with SIGKILL, stops
with a clear error when fault tolerance is off; ``num_workers=0`` never imports Ray."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys

import pytest

import advantage
from advantage.errors import ConfigError

LEARN = {
    "trainer.eval_every": 5000,
    "trainer.eval_episodes": 10,
    "trainer.stop_at_return": 475,
    "trainer.tensorboard": False,
    "trainer.progress": "none",
}


def test_no_workers_never_imports_ray(tmp_path):
    over = {
        "trainer.total_steps": 512,
        "trainer.eval_every": 0,
        "trainer.eval_episodes": 1,
        "trainer.tensorboard": False,
        "trainer.run_dir": str(tmp_path / "r"),
    }
    code = (
        "import sys, advantage\n"
        f"advantage.train('ppo', quiet=True, **{over!r})\n"
        "bad = sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.'))\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def test_worker_settings_are_checked_before_anything_runs():
    with pytest.raises(
        ConfigError,
        match=r"trainer.num_workers=2: dqn runs in one process; Ray workers are available for a2c, grpo, ppo",
    ):
        advantage.train("dqn", quiet=True, **{"trainer.num_workers": 2})
    with pytest.raises(ConfigError, match=r"env.num_envs=8 must be divisible by trainer.num_workers=3"):
        advantage.train("ppo", quiet=True, **{"trainer.num_workers": 3})


# ---- with a local Ray instance --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ppo_with_two_workers_learns_cartpole(tmp_path, ray_local):
    run = advantage.train(
        "ppo", quiet=True, **LEARN, **{"trainer.num_workers": 2, "trainer.run_dir": str(tmp_path / "r")}
    )
    evals = [r["eval/return_mean"] for r in run.metrics if "eval/return_mean" in r]
    assert max(evals) >= 475 and run.step <= 100_000  # the cartpole preset's single-process budget


@pytest.mark.slow
def test_a_worker_killed_mid_training_is_replaced_and_the_run_still_learns(tmp_path, ray_local, monkeypatch):
    from advantage.rollout.remote import RemoteCollector

    original = RemoteCollector.collect
    killed = []

    def collect(self, step, lam):
        if self.version == 5 and not killed:  # after 5 rollouts: SIGKILL worker 0's process
            pid = ray_local.get(self.workers[0].pid.remote())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        return original(self, step, lam)

    monkeypatch.setattr(RemoteCollector, "collect", collect)
    run = advantage.train(
        "ppo", quiet=True, **LEARN, **{"trainer.num_workers": 2, "trainer.run_dir": str(tmp_path / "r")}
    )
    assert killed
    restarts = [r["train/worker_restarts"] for r in run.metrics if "train/worker_restarts" in r]
    assert restarts[-1] == 1
    evals = [r["eval/return_mean"] for r in run.metrics if "eval/return_mean" in r]
    assert max(evals) >= 475


@pytest.mark.slow
def test_without_fault_tolerance_a_dead_worker_stops_the_run_naming_it(tmp_path, ray_local, monkeypatch):
    from advantage.rollout.remote import RemoteCollector, WorkerError

    original = RemoteCollector.collect

    def collect(self, step, lam):
        if self.version == 2:
            os.kill(ray_local.get(self.workers[1].pid.remote()), signal.SIGKILL)
        return original(self, step, lam)

    monkeypatch.setattr(RemoteCollector, "collect", collect)
    with pytest.raises(WorkerError, match=r"rollout worker 1 failed .*trainer.fault_tolerance=false"):
        advantage.train(
            "ppo",
            quiet=True,
            **{
                **LEARN,
                "trainer.num_workers": 2,
                "trainer.fault_tolerance": False,
                "trainer.total_steps": 4096,
                "trainer.run_dir": str(tmp_path / "r"),
            },
        )


@pytest.mark.slow
def test_trpo_with_workers_and_normalisation_runs(tmp_path, ray_local):
    run = advantage.train(
        "trpo",
        quiet=True,
        **{
            "env.num_envs": 2,
            "algorithm.n_steps": 128,
            "algorithm.normalize_obs": True,
            "algorithm.normalize_reward": True,
            "trainer.num_workers": 2,
            "trainer.total_steps": 1024,
            "trainer.eval_every": 0,
            "trainer.eval_episodes": 2,
            "trainer.tensorboard": False,
            "trainer.run_dir": str(tmp_path / "t"),
        },
    )
    rows = [r for r in run.metrics if "train/kl" in r]
    assert len(rows) >= 4 and all(r["train/kl"] <= 0.01 for r in rows)
    assert run.checkpoint.tensors["obs_rms.count"] > 1000  # the learner updated the statistics


@pytest.mark.slow
def test_a2c_with_workers_runs_and_logs_their_rollouts(tmp_path, ray_local):
    run = advantage.train(
        "a2c",
        quiet=True,
        **{"env.num_envs": 4, "algorithm.critic_target": "mc", "algorithm.normalize_obs": True},
        **{"trainer.num_workers": 2, "trainer.total_steps": 200, "trainer.log_every": 50},
        **{"trainer.eval_every": 0, "trainer.eval_episodes": 2, "trainer.tensorboard": False},
        **{"trainer.run_dir": str(tmp_path / "a")},
    )
    rows = [r for r in run.metrics if "train/weights_version" in r]
    versions = [r["train/weights_version"] for r in rows]
    # one rollout of 4 envs × 5 steps (reset steps not counted) per update, each with new weights
    assert len(rows) == 4 and versions == sorted(versions) and versions[-1] >= run.step / 20
    assert all(math.isfinite(r["train/value_loss"]) for r in rows)
    assert run.checkpoint.tensors["obs_rms.count"] > run.step  # the learner updated the statistics


_DRIVER = os.getpid()


def _only_in_the_driver(**kwargs):
    """An env that cannot be built in a worker process (like one whose code the workers cannot import)."""
    import gymnasium as gym

    if os.getpid() != _DRIVER:
        raise RuntimeError("this env cannot be built here")
    return gym.make("CartPole-v1", **kwargs)


@pytest.mark.slow
def test_a_worker_that_can_never_start_stops_the_run_with_the_cause(tmp_path, ray_local):
    import gymnasium as gym

    from advantage.rollout.remote import MAX_ATTEMPTS, WorkerError

    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    gym.register("AdvantageDriverOnly-v0", entry_point=_only_in_the_driver, max_episode_steps=500)
    with pytest.raises(
        WorkerError, match=rf"failed {MAX_ATTEMPTS + 1} times in a row .*cannot be built here"
    ):
        advantage.train(
            "ppo",
            quiet=True,
            **{
                **LEARN,
                "env.id": "AdvantageDriverOnly-v0",
                "trainer.num_workers": 2,
                "trainer.total_steps": 2048,
                "trainer.run_dir": str(tmp_path / "r"),
            },
        )


@pytest.mark.slow
def test_grpo_with_two_workers_matches_the_single_process_reward_curve(tmp_path, ray_local):
    """Generation and scoring in 2 workers: the run ends, every step used the weights of that step, and
    the reward curve agrees with the one-process run within noise (same mean over the last 10 steps to
    within 3 standard errors; the samples differ, since the workers draw their own random numbers)."""
    import statistics

    sys.path.insert(0, os.path.dirname(__file__))
    from test_grpo import TINY

    over = {
        **TINY,
        "trainer.total_steps": 20,
        "data.rollout_batch_size": 8,
        "worker.rollout.n": 8,
        "data.answer_format": "plain",
        "data.format_reward": 0.5,
    }
    curves = {}
    for n in (0, 2):
        run = advantage.train(
            "grpo",
            quiet=True,
            **over,
            **{"trainer.num_workers": n, "trainer.run_dir": str(tmp_path / f"w{n}")},
        )
        rows = [r for r in run.metrics if "train/reward/mean" in r]
        assert [r["step"] for r in rows] == list(range(1, 21))
        if n:
            assert [r["train/weights_version"] for r in rows] == list(range(1, 21))
            assert rows[-1]["train/worker_restarts"] == 0
        curves[n] = [r["train/reward/mean"] for r in rows]
    a, b = curves[0][-10:], curves[2][-10:]
    se = (statistics.variance(a) / len(a) + statistics.variance(b) / len(b)) ** 0.5
    assert abs(statistics.fmean(a) - statistics.fmean(b)) <= 3 * se + 0.02, curves
