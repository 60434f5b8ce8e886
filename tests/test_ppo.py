"""PPO: bad inputs, NaN detection, exact resume, learning CartPole and the penalty variant."""

import itertools

import gymnasium as gym
import numpy as np
import pytest

import advantage
from advantage.errors import ConfigError, EnvError, NonFiniteError

FAST = {"trainer.tensorboard": False, "trainer.eval_episodes": 2, "trainer.eval_every": 0}


def test_discrete_observations_rejected():
    with pytest.raises(EnvError, match="ppo needs a Box observation space; FrozenLake-v1 has Discrete"):
        advantage.train("ppo", quiet=True, **{"env.id": "FrozenLake-v1"})


def test_squash_needs_box_actions():
    with pytest.raises(
        EnvError, match="model.squash=true needs a Box action space; CartPole-v1 has Discrete"
    ):
        advantage.train("ppo", quiet=True, **{"model.squash": True})


def test_minibatch_larger_than_rollout_is_a_config_error():
    with pytest.raises(ConfigError, match=r"algorithm.minibatch_size \(4096\) must be <= the rollout size"):
        advantage.train("ppo", quiet=True, **{"algorithm.minibatch_size": 4096})


class NaNReward(gym.Wrapper):
    def __init__(self, env):
        super().__init__(env)
        self.t = 0

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        self.t += 1
        return obs, (float("nan") if self.t == 37 else r), term, trunc, info


gym.register("NaNRewardCartPole-v0", entry_point=lambda **kw: NaNReward(gym.make("CartPole-v1")))


def test_nan_reward_stops_at_the_step_naming_it():
    with pytest.raises(NonFiniteError, match="reward from the environment is nan"):
        advantage.train(
            "ppo",
            quiet=True,
            **FAST,
            **{
                "env.id": "NaNRewardCartPole-v0",
                "env.num_envs": 1,
                "algorithm.minibatch_size": 32,
                "trainer.total_steps": 1000,
            },
        )


def test_resume_is_exact(assert_resume_exact):
    common = {
        **FAST,
        "trainer.total_steps": 2048,
        "env.num_envs": 4,
        "algorithm.n_steps": 64,
        "algorithm.minibatch_size": 64,
        "algorithm.n_epochs": 2,
        "algorithm.normalize_obs": True,
        "algorithm.normalize_reward": True,
    }
    assert_resume_exact("ppo", common, at=1000)


def test_box_actions_and_eval_policy_shapes():
    run = advantage.train(
        "ppo",
        quiet=True,
        **FAST,
        **{
            "env.id": "Pendulum-v1",
            "env.num_envs": 2,
            "algorithm.n_steps": 64,
            "algorithm.minibatch_size": 64,
            "trainer.total_steps": 256,
            "model.squash": True,
        },
    )
    a = run.act(np.zeros(3, dtype=np.float32))
    assert a.shape == (1,) and -2.0 <= a[0] <= 2.0
    assert np.isfinite(run.evaluate(episodes=1)["return_mean"])


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_solves_cartpole_within_100k_steps(seed):
    run = advantage.train(
        "ppo",
        quiet=True,
        **{
            "trainer.seed": seed,
            "trainer.eval_every": 5000,
            "trainer.eval_episodes": 10,
            "trainer.stop_at_return": 475,
            "trainer.tensorboard": False,
        },
    )
    evals = [r for r in run.metrics if "eval/return_mean" in r]
    assert max(r["eval/return_mean"] for r in evals) >= 475
    assert run.step <= 100_000


@pytest.mark.slow
def test_ppo_penalty_learns_cartpole_and_beta_follows_the_rule():
    run = advantage.train(
        "ppo",
        quiet=True,
        **{
            "algorithm.objective": "penalty",
            "trainer.eval_every": 5000,
            "trainer.eval_episodes": 10,
            "trainer.stop_at_return": 475,
            "trainer.tensorboard": False,
        },
    )
    rows = [r for r in run.metrics if "train/beta" in r]
    assert max(r["eval/return_mean"] for r in run.metrics if "eval/return_mean" in r) >= 475
    target = 0.01
    for before, after in itertools.pairwise(rows):
        d, beta = before["train/kl"], before["train/beta"]
        expected = beta / 2 if d < target / 1.5 else 2 * beta if d > 1.5 * target else beta
        assert after["train/beta"] == pytest.approx(expected)


@pytest.mark.slow
def test_ppo_pendulum_reaches_minus_250_within_200k_steps():
    run = advantage.train(
        "ppo",
        quiet=True,
        **{
            "preset": "pendulum",
            "trainer.seed": 0,
            "trainer.eval_every": 20_000,
            "trainer.eval_episodes": 10,
            "trainer.tensorboard": False,
        },
    )
    evals = [r["eval/return_mean"] for r in run.metrics if "eval/return_mean" in r]
    assert run.step <= 204_800 and evals[-1] >= -250, evals


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_eval_video_for_classic_control(env_id):
    run = advantage.train(
        "ppo",
        quiet=True,
        **FAST,
        **{
            "env.id": env_id,
            "env.num_envs": 2,
            "algorithm.n_steps": 64,
            "algorithm.minibatch_size": 64,
            "trainer.total_steps": 128,
        },
    )
    video = run.video()
    assert video.parent == run.dir / "videos" and video.stat().st_size > 1000
    assert video.read_bytes()[4:8] == b"ftyp"
