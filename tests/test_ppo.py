"""PPO: bad inputs, NaN detection, exact resume, learning CartPole and the penalty variant."""

import itertools

import gymnasium as gym
import numpy as np
import pytest

import advantage
from advantage.errors import ConfigError, EnvError, NonFiniteError

FAST = {"trainer.tensorboard": False, "trainer.eval_episodes": 2, "trainer.eval_every": 0}


def test_discrete_observations_are_one_hot_not_refused():
    """FrozenLake's Discrete observations reach the MLP one-hot (tests/test_spaces.py: every space)."""
    over = {"env.id": "FrozenLake-v1", "env.num_envs": 2, "algorithm.n_steps": 64, "trainer.total_steps": 128}
    assert advantage.train("ppo", quiet=True, **FAST, **over).step >= 128


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
@pytest.mark.parametrize("seed", [pytest.param(0, marks=pytest.mark.torch_versions), 1, 2])
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


def test_actor_critic_init_is_orthogonal_or_pytorchs_default():
    """``model.init``: ``orthogonal`` gives orthogonal weights, gain √2 in the trunks but 1 on their last
    layer (SB3's ortho_init=True uses √2 there too), 0.01 on the policy head, 1 on the value head, zero
    biases; ``torch`` (ortho_init=False, the zoo's MuJoCo PPO entries) leaves every ``nn.Linear`` at
    PyTorch's default, uniform in ±1/√fan_in."""
    import torch

    from advantage.configs.models import ActorCriticModel
    from advantage.resolve import resolve_config

    obs, act = gym.spaces.Box(-1.0, 1.0, (5,)), gym.spaces.Box(-1.0, 1.0, (3,))
    for init in ("orthogonal", "torch"):
        torch.manual_seed(0)
        net = ActorCriticModel(hidden_sizes=[64, 64], init=init).build(obs, act)
        layers = [(net.head.mean[0], 0.01), (net.value_head[0], 1.0)]
        for body in (net.pi_body, net.v_body):
            linears = [m for m in body if isinstance(m, torch.nn.Linear)]
            layers += [(lin, 2**0.5 if i < len(linears) - 1 else 1.0) for i, lin in enumerate(linears)]
        for lin, gain in layers:
            w, b = lin.weight.detach(), lin.bias.detach()
            if init == "orthogonal":
                assert torch.count_nonzero(b) == 0
                small = min(w.shape)  # orthonormal rows or columns, whichever are fewer, times the gain
                gram = w @ w.T if w.shape[0] == small else w.T @ w
                torch.testing.assert_close(gram, gain**2 * torch.eye(small), atol=1e-5, rtol=0)
            else:
                bound = 1 / lin.in_features**0.5
                assert w.abs().max() <= bound and b.abs().max() <= bound and b.abs().sum() > 0
    for env_id, init in (
        ("Hopper-v5", "torch"),
        ("HalfCheetah-v5", "torch"),
        ("LunarLander-v3", "orthogonal"),
    ):
        _, cfg = resolve_config("ppo", overrides={"env.id": env_id})
        assert cfg.model.init == init, env_id
