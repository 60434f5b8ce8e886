"""Hostile inputs: mistyped env ids, environments that break the Gymnasium contract, NaN/inf injected at a
known step, a bad YAML file, checkpoints that do not fit the model, and changed settings on resume.

Language-model inputs (empty or malformed datasets, a tokenizer without a pad token, remote code) are
covered in test_sft.py, test_lm.py and test_text_tasks.py; ``docs/reliability.md`` lists them.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from safetensors.torch import save as st_save

import advantage
from advantage.checkpoint import load_checkpoint
from advantage.cli import main
from advantage.errors import CheckpointError, ConfigError, EnvError, NonFiniteError
from advantage.resolve import resolve_config
from advantage.runs import Run

FAST = {"trainer.tensorboard": False, "trainer.eval_every": 0, "trainer.eval_episodes": 2}
SMALL_PPO = {"env.num_envs": 2, "algorithm.n_steps": 32, "algorithm.minibatch_size": 32}


# ---- mistyped environment ids ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env_id, message",
    [
        (
            "CartPole-v9",
            "env.id 'CartPole-v9' is not registered; available versions: CartPole-v0, CartPole-v1",
        ),
        ("Cartpole-v1", "not a registered Gymnasium environment; did you mean CartPole-v1"),
        ("cartpole", "did you mean CartPole-v1"),
    ],
)
def test_mistyped_env_id_names_it_and_suggests(env_id, message):
    with pytest.raises(ConfigError) as info:
        resolve_config("ppo", overrides={"env.id": env_id})
    assert message in str(info.value)
    assert not Path("runs").exists()


# ---- environments that break the Gymnasium contract -----------------------------------------------------


class Hostile(gym.Env):
    """CartPole-shaped env (Box(-1, 1, (4,)), 2 actions, 10-step episodes) that misbehaves on request."""

    observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, mode: str = "ok", render_mode=None):
        self.mode, self.t = mode, 0

    def _obs(self):
        return {
            "out_of_bounds": np.full(4, 5.0, np.float32),
            "float64": np.zeros(4, np.float64),
            "list": [0.0, 0.0, 0.0, 0.0],
            "shape": np.zeros(5, np.float32),
        }.get(self.mode, np.zeros(4, np.float32))

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs() if self.mode == "old_reset" else (self._obs(), {})

    def step(self, action):
        self.t += 1
        if self.mode == "old_step":  # the pre-0.26 Gym API: (obs, reward, done, info)
            return self._obs(), 1.0, self.t >= 10, {}
        return self._obs(), 1.0, self.t >= 10, False, {}


gym.register("AdvantageHostile-v0", entry_point=Hostile, max_episode_steps=50)


def _train_hostile(algo, mode, **over):
    extra = SMALL_PPO if algo == "ppo" else {"algorithm.learning_starts": 64, "algorithm.batch_size": 32}
    return advantage.train(
        algo,
        quiet=True,
        **FAST,
        **extra,
        **{"env.id": "AdvantageHostile-v0", "env.mode": mode, "trainer.total_steps": 256},
        **over,
    )


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
@pytest.mark.parametrize("mode", ["float64", "list"])
def test_observation_of_another_dtype_warns_and_is_cast(algo, mode):
    """Documented behaviour: Gymnasium's passive env checker warns (wrong dtype, not an array) and the
    observation is cast to float32 — many real envs return float64."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = _train_hostile(algo, mode)
    assert run.step >= 256
    text = " ".join(str(w.message) for w in caught)
    assert "observation space" in text or "numpy array" in text, text


@pytest.mark.parametrize(
    "mode, message",
    [
        pytest.param(
            "shape",
            r"reset\(\) returned an observation of shape \(5,\); the observation space is Box",
            id="shape",
        ),
        pytest.param(
            "out_of_bounds",
            r"reset\(\) returned an observation with \[0\] = 5 outside its bounds \[-1, 1\]",
            id="out_of_bounds",
        ),
        pytest.param("old_reset", r"reset\(\) must return \(obs, info\)", id="old_reset"),
        pytest.param(
            "old_step", r"step\(\) must return \(obs, reward, terminated, truncated, info\)", id="old_step"
        ),
    ],
)
@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_observation_of_the_wrong_shape_or_old_gym_api_is_a_clear_error(algo, mode, message):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(EnvError, match=message):
            _train_hostile(algo, mode)


# ---- NaN / inf injected at a known step ------------------------------------------------------------------

BAD_STEP = 1500


class Inject(gym.Wrapper):
    """Replaces the reward or the observation of the ``k``-th step with ``value``."""

    def __init__(self, env, what: str, k: int, value: float):
        super().__init__(env)
        self.what, self.k, self.value, self.t = what, k, value, 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.t += 1
        if self.t == self.k:
            if self.what == "reward":
                reward = self.value
            else:
                obs = np.full_like(obs, self.value)
        return obs, reward, terminated, truncated, info


def _make_injected(base: str, what: str, value: float, **kwargs):
    return Inject(gym.make(base, **kwargs), what, BAD_STEP, value)


gym.register("AdvantageInject-v0", entry_point=_make_injected)

# One CartPole env whose BAD_STEP-th reward is 1e30: finite, so it passes the reward check, but its square
# overflows float32.
OVERFLOWING_REWARD = {
    "env.id": "AdvantageInject-v0",
    "env.base": "CartPole-v1",
    "env.what": "reward",
    "env.value": 1e30,
    "env.num_envs": 1,
}


@pytest.mark.parametrize(
    "algo, base, what, value",
    [
        pytest.param("q_learning", "FrozenLake-v1", "reward", float("nan")),
        ("ppo", "CartPole-v1", "reward", float("inf")),
        ("ppo", "CartPole-v1", "observation", float("nan")),
        ("dqn", "CartPole-v1", "reward", float("-inf")),
        pytest.param("dqn", "CartPole-v1", "observation", float("nan")),
    ],
)
def test_non_finite_value_stops_at_its_step_naming_it_and_the_last_checkpoint_loads(
    tmp_path, algo, base, what, value
):
    env_over = {"env.is_slippery": False} if base == "FrozenLake-v1" else {"env.num_envs": 1}
    if algo == "ppo":
        env_over["algorithm.minibatch_size"] = 32
    run_dir = tmp_path / "run"
    with pytest.raises(NonFiniteError) as info:
        advantage.train(
            algo,
            quiet=True,
            **FAST,
            **env_over,
            **{
                "env.id": "AdvantageInject-v0",
                "env.base": base,
                "env.what": what,
                "env.value": value,
                "trainer.total_steps": 3000,
                "trainer.checkpoint_every": 500,
                "trainer.run_dir": str(run_dir),
            },
        )
    assert f"step {BAD_STEP}: {what}" in str(info.value)
    ck = load_checkpoint(run_dir / "checkpoints")
    assert 0 < ck.step < BAD_STEP
    assert all(torch.isfinite(t).all() for t in ck.tensors.values() if t.is_floating_point())
    Run(run_dir).evaluate(episodes=1)  # the last checkpoint is a working policy


@pytest.mark.parametrize(
    "algo, over, component",
    [
        ("ppo", {"algorithm.minibatch_size": 32, "algorithm.normalize_reward": False}, "value loss inf"),
        ("a2c", {}, "value loss inf"),
        ("reinforce", {"algorithm.baseline": "value"}, "value loss inf"),
        ("dqn", {"algorithm.loss": "mse"}, "TD loss is inf"),
    ],
)
def test_a_loss_that_overflows_stops_before_the_weights_change_and_the_last_checkpoint_loads(
    tmp_path, algo, over, component
):
    """A reward of 1e30 is finite, so it passes the reward check, but its square overflows float32: the
    first loss computed on it is inf. The run stops at that update, names the step and the component, and
    never saves weights touched by it."""
    run_dir = tmp_path / "run"
    with pytest.raises(NonFiniteError) as info:
        advantage.train(
            algo,
            quiet=True,
            **FAST,
            **over,
            **OVERFLOWING_REWARD,
            **{
                "trainer.total_steps": 6000,
                "trainer.checkpoint_every": 500,
                "trainer.run_dir": str(run_dir),
            },
        )
    message = str(info.value)
    step = int(message.split(":")[0].removeprefix("step "))
    assert step >= BAD_STEP, message
    assert component in message and "weights not updated" in message, message
    ck = load_checkpoint(run_dir / "checkpoints")
    assert 0 < ck.step <= step
    assert all(torch.isfinite(t).all() for t in ck.tensors.values() if t.is_floating_point())
    Run(run_dir).evaluate(episodes=1)


# ---- a bad YAML file ---------------------------------------------------------------------------------


def test_bad_yaml_lists_every_problem_in_one_error(capsys):
    Path("bad.yaml").write_text(
        "algo: ppo\n"
        "algorithm:\n"
        "  clip_rang: 0.2\n"  # unknown key
        "  n_epochs: ten\n"  # wrong type
        "  clip_range: -0.1\n"  # negative clip
        "  minibatch_size: 4096\n"  # more than env.num_envs × n_steps = 8 × 32
    )
    assert main(["train", "--config", "bad.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "error: 4 config problems:", err
    text = "\n".join(err)
    assert "unknown key algorithm.clip_rang; did you mean algorithm.clip_range?" in text
    assert "algorithm.n_epochs must be an integer, got 'ten'" in text
    assert "algorithm.clip_range must be in (0, 1], got -0.1" in text
    assert "algorithm.minibatch_size (4096) must be <= the rollout size" in text
    assert not Path("runs").exists()


# ---- checkpoints that do not fit the model; changed settings on resume --------------------------------

PPO_RUN = {**FAST, **SMALL_PPO, "trainer.total_steps": 256, "trainer.progress": "none"}


def _ppo_run(tmp_path) -> Run:
    return advantage.train("ppo", quiet=True, **PPO_RUN, **{"trainer.run_dir": str(tmp_path / "run")})


def _rewrite_tensors(folder: Path, tensors: dict) -> None:
    """Replace a checkpoint's tensors and re-sign the manifest (so only the model check can object)."""
    data = st_save(tensors)
    (folder / "tensors.safetensors").write_bytes(data)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["tensors.safetensors"] = {
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_checkpoint_with_missing_and_misshapen_tensors_lists_them(tmp_path):
    run = _ppo_run(tmp_path)
    ck = run.checkpoint
    tensors = dict(ck.tensors)
    del tensors["model.pi_body.0.bias"]
    tensors["model.value_head.0.weight"] = torch.zeros(1, 7)
    tensors["model.extra.weight"] = torch.zeros(2)
    _rewrite_tensors(ck.path, tensors)
    with pytest.raises(CheckpointError) as info:
        advantage.resume(run.dir, quiet=True, **{"trainer.total_steps": 512})
    msg = str(info.value)
    assert str(ck.path) in msg
    assert "missing keys ['pi_body.0.bias']" in msg
    assert "unexpected keys ['extra.weight']" in msg
    assert "value_head.0.weight: checkpoint (1, 7) vs model (1, 64)" in msg


def test_resume_with_another_architecture_lists_keys_and_shapes(tmp_path, capsys):
    run = _ppo_run(tmp_path)
    capsys.readouterr()
    with pytest.raises(CheckpointError) as info:
        advantage.resume(run.dir, quiet=True, **{"trainer.total_steps": 512, "model.hidden_sizes": [32]})
    msg = str(info.value)
    assert "unexpected keys ['pi_body.2.bias', 'pi_body.2.weight'" in msg
    assert "pi_body.0.weight: checkpoint (64, 4) vs model (32, 4)" in msg
    assert "warning: model.hidden_sizes changed on resume: [64, 64] -> [32]" in capsys.readouterr().err


def test_a_failed_resume_leaves_the_run_folder_usable(tmp_path):
    run = _ppo_run(tmp_path)
    with pytest.raises(CheckpointError):
        advantage.resume(run.dir, quiet=True, **{"trainer.total_steps": 512, "model.hidden_sizes": [32]})
    Run(run.dir).evaluate(episodes=1)
    assert advantage.resume(run.dir, quiet=True, **{"trainer.total_steps": 512}).step >= 512


def test_changed_hyperparameter_on_resume_warns_with_old_and_new(tmp_path, capsys):
    run = _ppo_run(tmp_path)
    capsys.readouterr()
    resumed = advantage.resume(
        run.dir,
        quiet=True,
        **{"trainer.total_steps": 512, "algorithm.gamma": 0.9, "algorithm.ent_coef": 0.01},
    )
    err = capsys.readouterr().err.splitlines()
    for line in (
        "algorithm.ent_coef changed on resume: 0.0 -> 0.01",
        "algorithm.gamma changed on resume: 0.98 -> 0.9",
    ):
        # ... and config.yaml, which keeps the new value, no longer reproduces the steps before the resume
        assert any(x.startswith(f"warning: {line} (config.yaml keeps the new value") for x in err), err
    assert not [line for line in err if "trainer." in line]  # trainer.* (total_steps, ...) may change freely
    assert resumed.step >= 512 and resumed.config.algorithm.gamma == 0.9


@pytest.mark.parametrize("algo", ["ppo", "a2c", "trpo", "reinforce", "dqn", "sac"])
@pytest.mark.parametrize("sizes", [[], [0, 8], [64, -1]])
def test_hidden_sizes_that_are_empty_or_not_positive_are_a_config_error(algo, sizes):
    key = "model.actor_hidden" if algo == "sac" else "model.hidden_sizes"
    with pytest.raises(
        ConfigError, match=rf"{key} must be a non-empty list of positive sizes, got \["
    ) as err:
        advantage.train(algo, quiet=True, **{key: sizes, "trainer.total_steps": 100})
    assert str(sizes) in str(err.value)
