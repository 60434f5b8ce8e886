"""TRPO: the trust-region math against dense linear algebra, the exact KL, the line search, bad input,
exact resume and learning CartPole with every accepted step inside the trust region."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
import torch

import advantage
from advantage.algos.trpo import distribution, mean_kl
from advantage.errors import ConfigError
from advantage.math import conjugate_gradient, fisher_vector_product, flat_grad, line_search, natural_step
from advantage.nn import ActorCritic

FAST = {"trainer.tensorboard": False, "trainer.eval_episodes": 2, "trainer.eval_every": 0}


# ---- conjugate gradient ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 5, 30])
def test_conjugate_gradient_solves_random_spd_systems(n):
    g = torch.Generator().manual_seed(n)
    m = torch.randn(n, n, generator=g, dtype=torch.float64)
    a = m @ m.T + 0.1 * torch.eye(n, dtype=torch.float64)  # SPD
    b = torch.randn(n, generator=g, dtype=torch.float64)
    x = conjugate_gradient(lambda v: a @ v, b, iters=3 * n, residual_tol=1e-24)
    torch.testing.assert_close(x, torch.linalg.solve(a, b), rtol=1e-8, atol=1e-8)


def test_conjugate_gradient_stops_after_its_iterations():
    a = torch.diag(torch.arange(1.0, 11.0, dtype=torch.float64))
    b = torch.ones(10, dtype=torch.float64)
    calls = []
    conjugate_gradient(lambda v: calls.append(1) or a @ v, b, iters=4)
    assert len(calls) == 4
    # one iteration is the steepest-descent step b·b / bᵀAb · b
    x1 = conjugate_gradient(lambda v: a @ v, b, iters=1)
    torch.testing.assert_close(x1, (b @ b) / (b @ a @ b) * b)


# ---- Fisher-vector products --------------------------------------------------------------------------------


def _tiny(action_space: gym.Space) -> ActorCritic:
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-1, 1, (3,))
    return ActorCritic(obs_space, action_space, [5], activation="tanh").double()


def _policy_params(model: ActorCritic) -> list[torch.nn.Parameter]:
    return [*model.pi_body.parameters(), *model.head.parameters()]


def test_fisher_vector_product_equals_the_explicit_fisher_matrix_of_a_categorical_policy():
    """F = E_s Σ_a π(a|s) ∇log π(a|s) ∇log π(a|s)ᵀ, built from per-action gradients, against the
    double-backprop Hessian of the mean KL times random vectors."""
    model = _tiny(gym.spaces.Discrete(3))
    params = _policy_params(model)
    obs = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    logp = distribution(model, obs)  # [4, 3]
    fisher = 0
    for s in range(4):
        for act in range(3):
            gl = flat_grad(logp[s, act], params, retain_graph=True)
            fisher = fisher + logp[s, act].exp().detach() * torch.outer(gl, gl)
    fisher = fisher / 4
    fvp = fisher_vector_product(mean_kl(model, obs, logp.detach(), None), params, damping=0.0)
    for seed in range(3):
        v = torch.randn(fisher.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(fvp(v), fisher @ v, rtol=1e-10, atol=1e-12)
    v = torch.ones(fisher.shape[0], dtype=torch.float64)
    fvp_damped = fisher_vector_product(mean_kl(model, obs, logp.detach(), None), params, damping=0.1)
    torch.testing.assert_close(fvp_damped(v), fisher @ v + 0.1 * v, rtol=1e-10, atol=1e-12)


def test_fisher_vector_product_equals_the_kl_hessian_of_a_gaussian_policy():
    model = _tiny(gym.spaces.Box(-2, 2, (2,)))
    with torch.no_grad():
        model.head.log_std.copy_(torch.tensor([-0.3, 0.2]))
    params = _policy_params(model)
    obs = torch.randn(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    old_mu, old_ls = distribution(model, obs).detach(), model.head.log_std.detach().clone()
    theta0 = torch.nn.utils.parameters_to_vector(params).detach()

    def kl_at(theta: torch.Tensor) -> torch.Tensor:
        torch.nn.utils.vector_to_parameters(theta, params)
        return mean_kl(model, obs, old_mu, old_ls)

    # central differences of the exact gradient give the Hessian column by column
    cols, eps = [], 1e-5
    for i in range(theta0.shape[0]):
        e = torch.zeros_like(theta0)
        e[i] = eps
        gp = flat_grad(kl_at(theta0 + e), params)
        gm = flat_grad(kl_at(theta0 - e), params)
        cols.append((gp - gm) / (2 * eps))
    hessian = torch.stack(cols, 1)
    torch.nn.utils.vector_to_parameters(theta0, params)
    fvp = fisher_vector_product(mean_kl(model, obs, old_mu, old_ls), params)
    v = torch.randn(theta0.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(fvp(v), hessian @ v, rtol=1e-6, atol=1e-8)


def test_mean_kl_is_exact():
    torch.manual_seed(0)
    for space in (gym.spaces.Discrete(4), gym.spaces.Box(-1, 1, (3,))):
        model = _tiny(space)
        obs = torch.randn(7, 3, dtype=torch.float64)
        old = distribution(model, obs).detach()
        old_ls = None if isinstance(space, gym.spaces.Discrete) else model.head.log_std.detach().clone()
        assert float(mean_kl(model, obs, old, old_ls).detach()) == pytest.approx(0.0, abs=1e-12)
        with torch.no_grad():
            for p in _policy_params(model):
                p.add_(0.3 * torch.randn_like(p))
        new = distribution(model, obs)
        if old_ls is None:
            p, q = torch.distributions.Categorical(logits=old), torch.distributions.Categorical(logits=new)
        else:
            p = torch.distributions.Normal(old, old_ls.exp())
            q = torch.distributions.Normal(new, model.head.log_std.exp().expand_as(new))
        want = torch.distributions.kl_divergence(p, q)
        want = want.mean() if old_ls is None else want.sum(-1).mean()
        assert float(mean_kl(model, obs, old, old_ls).detach()) == pytest.approx(float(want), rel=1e-10)


def test_natural_step_meets_the_quadratic_kl_model_exactly():
    a = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
    s = torch.tensor([1.0, -2.0], dtype=torch.float64)
    step = natural_step(s, lambda v: a @ v, max_kl=0.01)
    assert float(0.5 * step @ a @ step) == pytest.approx(0.01, rel=1e-12)


# ---- line search ------------------------------------------------------------------------------------------


def _quadratic_problem():
    """One parameter θ (starting at 0); surrogate θ − θ²; 'KL' θ²/2."""
    theta = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))

    def evaluate():
        x = float(theta)
        return x - x * x, 0.5 * x * x

    return theta, evaluate


def test_line_search_accepts_the_full_step_inside_the_trust_region():
    theta, evaluate = _quadratic_problem()
    res = line_search(evaluate, [theta], torch.tensor([0.1], dtype=torch.float64), max_kl=0.01)
    assert res.accepted and res.fraction == 1.0 and res.backtracks == 0
    assert float(theta) == pytest.approx(0.1)
    assert res.kl == pytest.approx(0.005) and res.improvement == pytest.approx(0.09)


def test_line_search_backtracks_until_the_kl_fits():
    theta, evaluate = _quadratic_problem()
    # full step 0.3: KL 0.045 > 0.01; 0.24: 0.0288; 0.192: 0.0184; 0.1536: 0.0118; 0.12288: 0.00755 ✓
    res = line_search(evaluate, [theta], torch.tensor([0.3], dtype=torch.float64), max_kl=0.01)
    assert res.accepted and res.backtracks == 4
    assert res.fraction == pytest.approx(0.8**4)
    assert float(theta) == pytest.approx(0.3 * 0.8**4) and res.kl <= 0.01


def test_line_search_rejects_a_step_that_never_improves_and_restores_the_parameters():
    theta, evaluate = _quadratic_problem()
    res = line_search(
        evaluate, [theta], torch.tensor([-0.05], dtype=torch.float64), max_kl=0.01, max_backtracks=3
    )
    assert not res.accepted and res.backtracks == 4 and res.fraction == 0.0
    assert float(theta) == 0.0


# ---- bad input ------------------------------------------------------------------------------------------


def test_shared_trunk_is_refused():
    with pytest.raises(ConfigError, match="model.shared_trunk=true is not allowed for trpo"):
        advantage.train("trpo", quiet=True, **{"model.shared_trunk": True})


def test_discrete_observations_are_one_hot_not_refused():
    """FrozenLake's Discrete observations reach the MLP one-hot (tests/test_spaces.py: every space)."""
    over = {"env.id": "FrozenLake-v1", "env.num_envs": 2, "algorithm.n_steps": 64, "trainer.total_steps": 128}
    assert advantage.train("trpo", quiet=True, **FAST, **over).step >= 128


def test_bad_values_are_listed_together():
    with pytest.raises(ConfigError) as info:
        advantage.train(
            "trpo",
            quiet=True,
            **{"algorithm.max_kl": 0, "algorithm.backtrack_coef": 1.5, "algorithm.cg_iters": 0},
        )
    text = str(info.value)
    assert "algorithm.max_kl" in text and "algorithm.backtrack_coef" in text and "algorithm.cg_iters" in text


# ---- training -----------------------------------------------------------------------------------------


SMALL = {
    **FAST,
    "env.num_envs": 2,
    "algorithm.n_steps": 128,
    "algorithm.vf_epochs": 2,
    "algorithm.vf_minibatch_size": 64,
    "algorithm.normalize_obs": True,
    "algorithm.normalize_reward": True,
}


def test_continuous_actions_run_and_every_step_stays_in_the_trust_region(tmp_path):
    run = advantage.train(
        "trpo",
        quiet=True,
        preset="pendulum",
        **{**SMALL, "trainer.total_steps": 2048, "trainer.run_dir": str(tmp_path / "p")},
    )
    rows = [r for r in run.metrics if "train/kl" in r]
    assert len(rows) >= 8  # 2 envs × 128 steps per rollout, minus the masked reset steps
    assert all(r["train/kl"] <= 0.01 for r in rows)
    assert any(r["train/accepted"] == 1.0 for r in rows)
    assert all(math.isfinite(r["train/value_loss"]) for r in rows)


def test_resume_is_exact(assert_resume_exact):
    tensors = assert_resume_exact("trpo", {**SMALL, "trainer.total_steps": 2048}, at=1000)
    assert any(k.startswith("vf_optim") for k in tensors)  # the critic's Adam state is in the checkpoint


@pytest.mark.slow
def test_learns_cartpole_inside_the_trust_region(tmp_path):
    run = advantage.train(
        "trpo",
        quiet=True,
        **{
            "trainer.seed": 0,
            "trainer.eval_every": 5000,
            "trainer.eval_episodes": 10,
            "trainer.stop_at_return": 475,
            "trainer.tensorboard": False,
            "trainer.run_dir": str(tmp_path / "c"),
        },
    )
    evals = [r["eval/return_mean"] for r in run.metrics if "eval/return_mean" in r]
    assert max(evals) >= 475 and run.step <= 200_000
    kls = [r["train/kl"] for r in run.metrics if "train/kl" in r]
    assert kls and max(kls) <= 0.01
