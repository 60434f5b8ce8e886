"""REINFORCE, off-policy REINFORCE and A2C: bad inputs, batches of whole episodes, critic targets, exact
resume, and learning CartPole-v1."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import advantage
from advantage.algos.a2c import critic_targets
from advantage.algos.reinforce import (
    collect_episodes,
    episode_quotas,
    optimal_constant_baseline,
    per_episode_gradients,
)
from advantage.config import VecEnvConfig
from advantage.envs import make_vec_env
from advantage.errors import ConfigError, EnvError, NonFiniteError
from advantage.math import gae
from advantage.nn import ActorCritic

FAST = {"trainer.tensorboard": False, "trainer.eval_episodes": 2, "trainer.eval_every": 0}

# --------------------------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("algo", ["reinforce", "reinforce_is", "a2c"])
def test_discrete_observations_are_one_hot_not_refused(algo):
    """FrozenLake's Discrete observations reach the MLP one-hot (tests/test_spaces.py: every space)."""
    over = {
        "env.id": "FrozenLake-v1",
        "env.num_envs": 2,
        "env.max_episode_steps": 20,
        "trainer.total_steps": 100,
    }
    assert advantage.train(algo, quiet=True, **FAST, **over).step >= 100


@pytest.mark.parametrize("algo", ["reinforce", "a2c"])
def test_squash_needs_box_actions(algo):
    with pytest.raises(
        EnvError, match="model.squash=true needs a Box action space; CartPole-v1 has Discrete"
    ):
        advantage.train(algo, quiet=True, **{"model.squash": True})


def test_more_envs_than_episodes_per_batch_is_a_config_error():
    with pytest.raises(
        ConfigError, match=r"env.num_envs \(16\) must be <= algorithm.episodes_per_update \(8\)"
    ):
        advantage.train("reinforce", quiet=True, **{"env.num_envs": 16})


@pytest.mark.parametrize(
    ("algo", "overrides", "message"),
    [
        (
            "reinforce",
            {"algorithm.return_type": "whole"},  # the default baseline is value
            "algorithm.baseline=value needs algorithm.return_type=reward_to_go",
        ),
        (
            "reinforce",
            {
                "algorithm.return_type": "whole",
                "algorithm.baseline": "mean",
                "algorithm.discount_weight": True,
            },
            "algorithm.discount_weight=true needs algorithm.return_type=reward_to_go",
        ),
        (
            "reinforce_is",
            {"algorithm.return_type": "whole", "algorithm.baseline": "none"},
            "reinforce_is needs algorithm.return_type=reward_to_go",
        ),
        ("reinforce", {"algorithm.baseline": "optimum"}, "algorithm.baseline must be one of .*optimal"),
        ("reinforce", {"algorithm.episodes_per_update": 0}, "algorithm.episodes_per_update must be >= 1"),
        ("reinforce_is", {"algorithm.max_weight": 0.5}, "algorithm.max_weight must be >= 1, got 0.5"),
        ("reinforce", {"algorithm.reuse": 2}, "unknown key algorithm.reuse"),
        ("a2c", {"algorithm.critic_target": "lambda"}, "algorithm.critic_target must be one of td, mc"),
        ("a2c", {"algorithm.n_steps": 0}, "algorithm.n_steps must be >= 1, got 0"),
        ("a2c", {"algorithm.minibatch_size": 64}, "unknown key algorithm.minibatch_size"),
    ],
)
def test_config_errors_name_field_value_and_allowed(algo, overrides, message):
    with pytest.raises(ConfigError, match=message):
        advantage.train(algo, quiet=True, **overrides)


class NaNReward(gym.Wrapper):
    def __init__(self, env):
        super().__init__(env)
        self.t = 0

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        self.t += 1
        return obs, (float("nan") if self.t == 37 else r), term, trunc, info


gym.register("NaNRewardCartPoleRA-v0", entry_point=lambda **kw: NaNReward(gym.make("CartPole-v1")))


@pytest.mark.parametrize("algo", ["reinforce", "a2c"])
def test_nan_reward_stops_at_the_step_naming_it(algo):
    extra = {"algorithm.episodes_per_update": 1} if algo == "reinforce" else {}
    with pytest.raises(NonFiniteError, match="reward from the environment is nan"):
        advantage.train(
            algo,
            quiet=True,
            **FAST,
            **{"env.id": "NaNRewardCartPoleRA-v0", "env.num_envs": 1, "trainer.total_steps": 1000, **extra},
        )


# --------------------------------------------------------------------------------------------- pieces


class _Ctx:
    def __init__(self):
        self.episodes = []

    def episode(self, step, ret, length):
        self.episodes.append((ret, length))


def test_episode_quotas_split_evenly():
    assert episode_quotas(3, 8).tolist() == [3, 3, 2]
    assert episode_quotas(4, 4).tolist() == [1, 1, 1, 1]


def test_a_batch_holds_exactly_the_quota_of_whole_episodes():
    """Every row is one whole episode from its first step; only the batch's steps are counted."""
    torch.manual_seed(0)
    env = make_vec_env(VecEnvConfig(id="CartPole-v1", num_envs=3))
    env.reset(seed=0)
    model = ActorCritic(env.single_observation_space, env.single_action_space, [16])
    ctx = _Ctx()
    batch, step, discarded = collect_episodes(env, model, episode_quotas(3, 7), 100, ctx)  # type: ignore[arg-type]
    env.close()
    lengths = batch.mask.sum(-1)
    assert batch.mask.shape[0] == 7 == len(ctx.episodes)
    assert step - 100 == int(lengths.sum())
    assert discarded >= 0
    for row, n in zip(batch.mask, lengths.long().tolist(), strict=True):  # contiguous from step 0
        assert row[:n].all() and not row[n:].any()
    # CartPole pays 1 per step: each row's reward sum is its length, and the lengths match the episodes
    torch.testing.assert_close(batch.rewards.sum(-1), lengths)
    assert sorted(lengths.tolist()) == sorted(float(n) for _, n in ctx.episodes)
    assert (batch.obs[:, 0].abs() <= 0.05).all()  # every row starts from a reset state


def test_per_episode_gradients_match_one_backward_per_episode():
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-1, 1, (3,))
    model = ActorCritic(obs_space, gym.spaces.Discrete(2), [8])
    params = [*model.pi_body.parameters(), *model.head.parameters()]
    obs, act = torch.randn(4, 5, 3), torch.randint(0, 2, (4, 5))
    mask = torch.tensor([[1.0] * 5, [1.0] * 3 + [0.0] * 2, [1.0] * 1 + [0.0] * 4, [1.0] * 4 + [0.0]])
    ka, kb = torch.randn(4, 5) * mask, torch.rand(4, 5) * mask
    logp = model.evaluate(obs.reshape(20, 3), act.reshape(20))[0].view(4, 5)
    g, c = per_episode_gradients(logp, [ka, kb], params)
    for i in range(4):
        lp = model.evaluate(obs[i], act[i])[0]
        for k, got in ((ka, g), (kb, c)):
            grads = torch.autograd.grad((k[i] * lp).sum(), params, retain_graph=True)
            want = torch.cat([x.flatten() for x in grads])
            torch.testing.assert_close(got[i], want)
    # Leave-one-out b* of episode 0 is built from episodes 1..3 only.
    b = optimal_constant_baseline(g, c)
    torch.testing.assert_close(b[0], (c[1:] * g[1:]).sum() / (c[1:] * c[1:]).sum())


def test_mc_and_td_critic_targets():
    """td at λ=1 and mc are the same target; for λ<1 they differ; mc bootstraps at a truncation and at the
    rollout end but not at a termination."""
    g = 0.9
    r = torch.tensor([[1.0, 1.0, 1.0, 0.0, 1.0, 1.0]])
    v = torch.tensor([[0.5, 0.4, 0.3, 2.0, 0.2, 0.1]])
    nv = torch.tensor([[0.4, 0.3, 2.0, 0.2, 0.1, 3.0]])  # V(final obs) = 2.0 after the truncated step 2
    term = torch.tensor([[False, False, False, False, True, False]])
    trunc = torch.tensor([[False, False, True, False, False, False]])
    mc = critic_targets(r, v, nv, term, trunc, torch.zeros_like(r), g, "mc")
    expect = [
        1 + g * (1 + g * (1 + g * 2.0)),
        1 + g * (1 + g * 2.0),
        1 + g * 2.0,
        0 + g * 1.0,
        1.0,
        1 + g * 3.0,
    ]
    torch.testing.assert_close(mc, torch.tensor([expect]))
    adv1 = gae(r, v, nv, term, trunc, g, 1.0)
    torch.testing.assert_close(critic_targets(r, v, nv, term, trunc, adv1, g, "td"), mc)
    adv0 = gae(r, v, nv, term, trunc, g, 0.0)
    td0 = critic_targets(r, v, nv, term, trunc, adv0, g, "td")
    torch.testing.assert_close(td0, r + g * nv * (~term))  # seed 003's one-step target r + γV(s')
    assert not torch.allclose(td0, mc)


# --------------------------------------------------------------------------------------------- resume


def test_a2c_resume_is_exact(assert_resume_exact):
    common = {
        **FAST,
        "trainer.total_steps": 3000,
        "env.num_envs": 4,
        "algorithm.n_steps": 8,
        "algorithm.normalize_obs": True,
        "algorithm.ent_coef": 0.01,
    }
    assert_resume_exact("a2c", common, at=1000)


@pytest.mark.parametrize(
    ("algo", "baseline"), [("reinforce", "value"), ("reinforce", "optimal"), ("reinforce_is", "mean")]
)
def test_reinforce_resume_is_exact(assert_resume_exact, algo, baseline):
    common = {
        **FAST,
        "trainer.total_steps": 3000,
        "env.num_envs": 2,
        "algorithm.episodes_per_update": 4,
        "algorithm.baseline": baseline,
        "algorithm.discount_weight": True,
    }
    assert_resume_exact(algo, common, at=1000)


@pytest.mark.parametrize("algo", ["reinforce", "a2c"])
def test_box_actions_and_eval_policy_shapes(algo):
    size = {"algorithm.episodes_per_update": 2} if algo == "reinforce" else {"algorithm.n_steps": 16}
    run = advantage.train(
        algo,
        quiet=True,
        **FAST,
        **{
            "env.id": "Pendulum-v1",
            "env.num_envs": 2,
            "trainer.total_steps": 800,
            "model.squash": True,
            **size,
        },
    )
    a = run.act(np.zeros(3, dtype=np.float32))
    assert a.shape == (1,) and -2.0 <= a[0] <= 2.0
    assert np.isfinite(run.evaluate(episodes=1)["return_mean"])


def test_reinforce_is_logs_importance_weights():
    run = advantage.train(
        "reinforce_is",
        quiet=True,
        **FAST,
        **{"trainer.total_steps": 2000, "algorithm.reuse": 3, "algorithm.max_weight": 2.0},
    )
    rows = [r for r in run.metrics if "train/rho_episode_mean" in r]
    assert rows and all(0 < r["train/rho_episode_mean"] <= 2.0 for r in rows)
    assert all(0 <= r["train/rho_clipped_frac"] <= 1 for r in rows)


# --------------------------------------------------------------------------------------------- learning


def _solves_cartpole(algo, seed, **overrides):
    run = advantage.train(
        algo,
        quiet=True,
        **{
            "trainer.seed": seed,
            "trainer.eval_every": 10_000,
            "trainer.eval_episodes": 10,
            "trainer.stop_at_return": 475,
            "trainer.tensorboard": False,
            **overrides,
        },
    )
    evals = [r["eval/return_mean"] for r in run.metrics if "eval/return_mean" in r]
    assert max(evals) >= 475, evals
    assert run.step <= 500_000


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a2c_solves_cartpole_within_500k_steps(seed):
    _solves_cartpole("a2c", seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reinforce_with_a_value_baseline_solves_cartpole_within_500k_steps(seed):
    _solves_cartpole("reinforce", seed)


@pytest.mark.slow
def test_reinforce_is_solves_cartpole_within_500k_steps():
    _solves_cartpole("reinforce_is", 0)


def test_a2c_rmsprop_over_all_parameters_at_once_is_the_per_tensor_arithmetic():
    """A2C's RMSprop runs its foreach kernels (one per arithmetic step over every parameter); they give the
    parameters and state of torch's per-tensor loop (its CPU default) bit for bit."""
    import torch

    from advantage.algos.a2c import make_optimizer
    from advantage.configs.a2c import A2CAlgorithm

    def run(foreach: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
        if foreach:
            opt = make_optimizer(m, A2CAlgorithm())  # type: ignore[arg-type]
            assert opt.defaults["foreach"] is True
        else:
            a = A2CAlgorithm()
            opt = torch.optim.RMSprop(
                m.parameters(), lr=a.learning_rate, alpha=a.rmsprop_alpha, eps=a.optimizer_eps
            )
        for _ in range(5):
            opt.zero_grad()
            m(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
        return [p.detach() for p in m.parameters()] + [s["square_avg"] for s in opt.state.values()]

    assert all(torch.equal(a, b) for a, b in zip(run(True), run(False), strict=True))
