"""A user's own environment: the example env trained, interrupted, resumed and evaluated through the command
line; the Python API's ``env=`` forms; exact resume on an env whose attributes change dtype and shape; and
one clear line (exit 2, no run folder) for each way a named env can be wrong."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import advantage

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "custom_env"
SHORT = {
    "trainer.total_steps": 2048,
    "trainer.eval_every": 0,
    "trainer.eval_episodes": 3,
    "trainer.tensorboard": False,
    "trainer.plot": False,
}


def _cli(*args: str, cwd: Path | None = None, path: Path = EXAMPLE, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(path), OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "advantage.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, **kw
    )


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["grid_target:GridTarget-v0", "grid_target:GridTarget"])
def test_the_example_env_trains_is_interrupted_resumes_and_evaluates_from_the_cli(tmp_path, env_id):
    run_dir = tmp_path / "run"
    over = [
        f"{k}={v}"
        for k, v in {**SHORT, "trainer.total_steps": 8192, "trainer.checkpoint_every": 1024}.items()
    ]
    env = dict(os.environ, PYTHONPATH=str(EXAMPLE), OMP_NUM_THREADS="1")
    p = subprocess.Popen(
        [sys.executable, "-m", "advantage.cli", "train", "ppo", f"env.id={env_id}", *over,
         f"trainer.run_dir={run_dir}", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not os.path.lexists(run_dir / "checkpoints" / "latest"):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.02)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    config = (run_dir / "config.yaml").read_text()
    assert f"id: {env_id}" in config  # what a new process needs to rebuild the env
    resumed = _cli("resume", str(run_dir), "trainer.total_steps=12000", "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert "could not be restored exactly" not in resumed.stderr  # the example resumes exactly
    ev = _cli("eval", str(run_dir), "--episodes", "5", "--json", "--video")
    assert ev.returncode == 0, ev.stderr
    assert "video: skipped: " in ev.stderr and "render modes are ['ansi']" in ev.stderr  # no frames to film
    result = json.loads(ev.stdout.strip().splitlines()[-1])
    assert result["step"] >= 12000 and np.isfinite(result["return_mean"])
    # a new process without the module on its path: one line saying how to fix it
    lost = _cli("eval", str(run_dir), "--json", path=tmp_path)
    assert lost.returncode == 2 and "no module named 'grid_target'" in lost.stderr
    assert "Traceback" not in lost.stderr


# ---- custom envs of the tests ------------------------------------------------------------------------


class ShapeShifter(gym.Env):
    """State attributes that change dtype and shape, go None <-> array, and a list that grows; Dict
    observations and MultiDiscrete actions."""

    observation_space = gym.spaces.Dict(
        {"x": gym.spaces.Box(-10, 10, (2,), np.float32), "phase": gym.spaces.Discrete(3)}
    )
    action_space = gym.spaces.MultiDiscrete([2, 3])

    def __init__(self) -> None:
        self.state = None
        self.history: list[float] = []
        self.extra = None
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = self.np_random.normal(size=2).astype(np.float32)
        self.history, self.extra, self.t = [], None, 0
        return self._obs(), {}

    def _obs(self):
        return {"x": np.clip(self.state, -10, 10).astype(np.float32), "phase": self.t % 3}

    def step(self, action):
        self.t += 1
        push = np.array([action[0] - 0.5, action[1] - 1.0])
        self.state = (self.state.astype(np.float64) * 0.9 + push + 0.1 * self.np_random.normal(size=2))[-2:]
        self.history.append(float(self.state[0]))
        self.extra = np.arange(self.t % 3 + 1, dtype=np.int16) if self.t % 2 else None
        reward = -float(np.abs(self.state).sum())
        return self._obs(), reward, False, self.t >= 60, {}


class RaisesOnReset(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        raise RuntimeError("the simulator is not running")

    def step(self, action):
        raise AssertionError("unreachable")


class OutsideItsSpace(RaisesOnReset):
    def reset(self, *, seed=None, options=None):
        super(RaisesOnReset, self).reset(seed=seed)
        return np.array([5.0, 0.0], np.float32), {}  # outside Box(-1, 1)


def _ppo_run(tmp_path, name: str, total: int, env) -> advantage.Run:
    keys = {**SHORT, "trainer.total_steps": total, "trainer.run_dir": str(tmp_path / name)}
    keys |= {"env.num_envs": 2, "algorithm.n_steps": 64, "trainer.log_every": 64}
    return advantage.train("ppo", env=env, quiet=True, **keys)


def test_exact_resume_on_an_env_whose_attributes_change_dtype_and_shape(tmp_path):
    """Same final weights, optimizer state, env state and metrics rows as an uninterrupted run."""
    straight = _ppo_run(tmp_path, "a", 1024, ShapeShifter)
    assert straight.config.env.id == f"{__name__}:ShapeShifter"  # importable again by a new process
    first = _ppo_run(tmp_path, "b", 512, ShapeShifter)
    resumed = advantage.resume(first.dir, quiet=True, **{"trainer.total_steps": 1024})
    a, b = straight.checkpoint, resumed.checkpoint
    assert a.step == b.step >= 1024
    for k in a.tensors:
        assert torch.equal(a.tensors[k], b.tensors[k]), k
    assert a.state["algo"] == b.state["algo"]
    assert not (resumed.dir / "events.jsonl").exists()  # nothing was restarted

    def rows(run):  # the training rows (an interrupted run also evaluates where it stopped), without clocks
        keep = [r for r in run.metrics if any(k.startswith("train/") for k in r)]
        return [{k: v for k, v in r.items() if k != "time" and "per_second" not in k} for r in keep]

    assert rows(straight) == rows(resumed)


class OwnRandomness(ShapeShifter):
    """Draws from Python's global ``random`` as well: no snapshot or replay can put it back."""

    def step(self, action):
        out = super().step(action)
        self.state = self.state + random.random()  # state that no seed reproduces
        return self._obs(), *out[1:]


def test_an_env_that_cannot_be_captured_resumes_with_fresh_episodes_and_says_so(tmp_path, capfd):
    first = _ppo_run(tmp_path, "a", 256, OwnRandomness)
    stopped = first.step
    resumed = advantage.resume(first.dir, quiet=True, **{"trainer.total_steps": 512})
    assert resumed.step >= 512
    err = capfd.readouterr().err
    assert "could not be restored exactly" in err and "randomness of its own" in err
    (event,) = [json.loads(x) for x in (first.dir / "events.jsonl").read_text().splitlines()]
    assert event["event"] == "env_restarted" and event["step"] == stopped


@pytest.mark.slow
def test_dict_observations_and_multidiscrete_actions_through_the_cli_forms(tmp_path):
    """The test module's own env class named as module:Class, trained, resumed exactly and evaluated by
    three processes."""
    run_dir = tmp_path / "run"
    keys = [f"{k}={v}" for k, v in SHORT.items()] + ["env.num_envs=2", "algorithm.n_steps=64"]
    common = dict(path=Path(__file__).parent, timeout=300)
    train = _cli("train", "a2c", "env.id=test_user_env:ShapeShifter", *keys, f"trainer.run_dir={run_dir}",
                 "trainer.total_steps=512", "--quiet", **common)  # fmt: skip
    assert train.returncode == 0, train.stderr
    resumed = _cli("resume", str(run_dir), "trainer.total_steps=1024", "--quiet", **common)
    assert resumed.returncode == 0 and "could not be restored" not in resumed.stderr, resumed.stderr
    ev = _cli("eval", str(run_dir), "--episodes", "2", "--json", **common)
    assert ev.returncode == 0 and np.isfinite(json.loads(ev.stdout.splitlines()[-1])["return_mean"])


def test_a_lambda_env_trains_and_resumes_with_the_same_object(tmp_path):
    def factory():
        return ShapeShifter()

    run = _ppo_run(tmp_path, "a", 256, factory)
    assert run.config.env.id.startswith("advantage-local/")
    assert advantage.resume(run.dir, env=factory, quiet=True, **{"trainer.total_steps": 512}).step >= 512
    assert np.isfinite(advantage.Run(run.dir, env=factory).evaluate(episodes=2)["return_mean"])


def test_an_env_instance_is_refused_with_how_to_pass_it(tmp_path):
    with pytest.raises(advantage.EnvError, match="not an instance"):
        _ppo_run(tmp_path, "a", 256, ShapeShifter())


@pytest.mark.parametrize(
    "env_id, message",
    [
        ("no_such_module_xyz:Env-v0", "no module named 'no_such_module_xyz'"),
        ("bad-name:Env", "is not a module name"),
        ("os;rm:x", "is not a module name"),
        ("{mod}:NOT_AN_ENV", "a int, not a gymnasium.Env subclass"),
        ("{mod}:NotEnv", "not a gymnasium.Env subclass"),
        ("{mod}:missing", "has no attribute 'missing'"),
        ("{mod}:broken", "its constructor raised ZeroDivisionError"),
        ("{mod}:RaisesOnReset", "reset() raised RuntimeError: the simulator is not running"),
        ("{mod}:OutsideItsSpace", "reset() returned an observation"),
        ("broken_import_mod:X", "importing 'broken_import_mod' failed: ValueError: at import"),
    ],
)
def test_a_named_env_that_is_wrong_is_one_line_exit_2_and_no_run_folder(tmp_path, env_id, message):
    (tmp_path / "user_envs_mod.py").write_text(
        textwrap.dedent(
            """
            import gymnasium as gym
            from test_user_env import RaisesOnReset, OutsideItsSpace
            NOT_AN_ENV = 3
            class NotEnv:
                pass
            def broken():
                return 1 / 0
            """
        )
    )
    (tmp_path / "broken_import_mod.py").write_text("raise ValueError('at import')\n")
    path = os.pathsep.join([str(tmp_path), str(Path(__file__).parent)])
    run_dir = tmp_path / "run"
    out = _cli(
        "train", "ppo", f"env.id={env_id.format(mod='user_envs_mod')}", f"trainer.run_dir={run_dir}",
        "trainer.total_steps=64", path=Path(path), timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert len([x for x in out.stderr.splitlines() if x.strip()]) == 1, out.stderr
    assert not run_dir.exists()


class OffsetActions(gym.Env):
    """A corridor whose actions are Discrete(2, start=5): 5 steps left, 6 right (an env that asserts it
    never sees an index)."""

    observation_space = gym.spaces.Box(0, 10, (1,), np.float32)
    action_space = gym.spaces.Discrete(2, start=5)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        assert action in (5, 6), action
        self.pos = min(10, max(0, self.pos + (1 if action == 6 else -1)))
        return np.array([self.pos], np.float32), float(self.pos == 10), self.pos == 10, False, {}


def test_dqn_and_its_probe_act_in_a_discrete_space_with_an_offset(tmp_path):
    keys = {**SHORT, "trainer.total_steps": 600, "trainer.run_dir": str(tmp_path / "a")}
    keys |= {
        "algorithm.learning_starts": 100,
        "algorithm.overestimation_every": 200,
        "env.max_episode_steps": 50,
    }
    run = advantage.train("dqn", env=OffsetActions, quiet=True, **keys)
    assert any("train/overestimation" in r for r in run.metrics)
    assert run.act(np.array([3.0], np.float32)) in (5, 6)
