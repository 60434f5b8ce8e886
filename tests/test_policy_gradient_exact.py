r"""Policy-gradient estimators against the exact gradient of a small random MDP (CPU, float64, no gym).

The MDP has 4 states, 2 actions and a terminal state (every step ends the episode with probability 0.15
to 0.3), Gaussian reward noise around random means, and a random start distribution. The policy is a table
of softmax logits θ[s, a]. Exactly,

.. math::
    V^\pi = (I - \gamma P_\pi)^{-1} R_\pi, \qquad J(\theta) = d_0^\top V^\pi,

solved with ``torch.linalg.solve`` and differentiated by autograd. Many episodes are then sampled (numpy,
all episodes in parallel) and each estimator of the library (:mod:`advantage.algos.reinforce` for the
returns, outer weights, leave-one-out baselines and importance weights; :func:`advantage.math.reward_to_go`)
is averaged and compared with :math:`\nabla J`.

How "unbiased" is checked. A tabular softmax gradient has S·A = 8 components, but for each state the two
actions' components are exact negatives, so 4 are free. Each estimate is computed per batch of K = 8
episodes (the leave-one-out baselines need a batch; batches are independent) and each of the 4 free
components of the batch mean must lie within 4 standard errors of the exact value. A Bonferroni bound:
a correct estimator fails with probability ≤ 4 · P(|N(0,1)| > 4) ≈ 2.5e-4; the seeds are fixed, so the
test is deterministic. A biased estimator must miss by more than 10 standard errors, and its Hotelling
statistic :math:`T^2 = n\,\bar d^\top \hat\Sigma^{-1}\bar d` (χ²₄ under no bias; 23.5 is its 1e-4 quantile)
is reported too.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from advantage.algos.tabular.dynamic_programming import policy_evaluation
from advantage.envs import TabularModel
from advantage.math import POLICY_LOSSES, aggregate, reward_to_go
from advantage.math.policy_gradient import (
    cumulative_weights,
    episode_returns,
    leave_one_out_mean,
    optimal_constant_baseline,
    outer_weights,
)

F64 = torch.float64
S, A, GAMMA, K = 4, 2, 0.8, 8  # states, actions, discount, episodes per batch
T_MAX = 200  # P(an episode lasts 200 steps) <= 0.85**200 ≈ 1e-14: never reached (asserted)
N_EPISODES = 8 * 20_000
REWARD_NOISE = 0.5


# --------------------------------------------------------------------------------------------- the MDP


class MDP:
    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        p_end = rng.uniform(0.15, 0.3, size=(S, A))
        self.P = rng.dirichlet(np.ones(S), size=(S, A)) * (1 - p_end)[..., None]  # [S, A, S], excl. end
        self.p_full = np.concatenate([self.P, p_end[..., None]], axis=-1)  # last column: terminate
        self.R = rng.uniform(0.5, 1.5, size=(S, A))
        self.d0 = rng.dirichlet(np.ones(S))
        self.theta = torch.tensor(rng.normal(0.0, 0.7, size=(S, A)), dtype=F64)

    def value(self, theta: torch.Tensor, gamma: float = GAMMA) -> torch.Tensor:
        pi = torch.softmax(theta, -1)
        p_pi = torch.einsum("sa,sat->st", pi, torch.as_tensor(self.P))
        r_pi = (pi * torch.as_tensor(self.R)).sum(-1)
        return torch.linalg.solve(torch.eye(S, dtype=F64) - gamma * p_pi, r_pi)

    def J(self, theta: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(self.d0) @ self.value(theta)

    def grad_J(self, theta: torch.Tensor) -> torch.Tensor:
        th = theta.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(self.J(th), th)
        return g

    def q(self, theta: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(self.R) + GAMMA * torch.as_tensor(self.P) @ self.value(theta)

    def visit_weighted_gradient(self, theta: torch.Tensor, discount: float) -> torch.Tensor:
        r""":math:`\sum_s d(s) \sum_a \nabla\pi(a|s) Q^\gamma(s, a)` with visit weights
        :math:`d = d_0^\top (I - \text{discount}\cdot P_\pi)^{-1}` and Q held fixed. discount = γ gives
        :math:`\nabla J` (the policy-gradient theorem); discount = 1 gives the expectation of the
        reward-to-go estimator *without* the outer :math:`\gamma^t`."""
        pi = torch.softmax(theta, -1)
        p_pi = torch.einsum("sa,sat->st", pi, torch.as_tensor(self.P))
        d = torch.linalg.solve((torch.eye(S, dtype=F64) - discount * p_pi).T, torch.as_tensor(self.d0))
        q = self.q(theta).detach()
        th = theta.clone().requires_grad_(True)
        (g,) = torch.autograd.grad((d[:, None] * torch.softmax(th, -1) * q).sum(), th)
        return g

    def sample(self, theta: torch.Tensor, n: int, seed: int) -> dict[str, torch.Tensor]:
        """``n`` episodes under softmax(θ), all in parallel: states, actions, rewards, mask ``[n, T_MAX]``."""
        rng = np.random.default_rng(seed)
        pi = torch.softmax(theta, -1).numpy()
        states = np.zeros((n, T_MAX), dtype=np.int64)
        actions = np.zeros((n, T_MAX), dtype=np.int64)
        rewards, mask = np.zeros((n, T_MAX)), np.zeros((n, T_MAX))
        s = rng.choice(S, size=n, p=self.d0)
        alive = np.ones(n, dtype=bool)
        cum = self.p_full.cumsum(-1)
        for t in range(T_MAX):
            if not alive.any():
                break
            states[:, t], mask[:, t] = s, alive
            a = (rng.random(n) >= pi[s, 0]).astype(np.int64)
            actions[:, t] = a
            rewards[:, t] = np.where(alive, self.R[s, a] + REWARD_NOISE * rng.standard_normal(n), 0.0)
            nxt = (rng.random(n)[:, None] >= cum[s, a]).sum(-1)  # index S: the episode ends
            alive = alive & (nxt < S)
            s = np.where(nxt < S, nxt, 0)
        assert not alive.any()
        out = {"states": states, "actions": actions, "rewards": rewards, "mask": mask}
        out = {k: v[:, :t] for k, v in out.items()}  # up to the longest episode
        return {k: torch.as_tensor(v) for k, v in out.items()}


def log_probs(theta: torch.Tensor, ep: dict[str, torch.Tensor]) -> torch.Tensor:
    """``log π(a_t|s_t)`` ``[n, T]`` (differentiable in θ)."""
    return torch.log_softmax(theta, -1)[ep["states"], ep["actions"]]


def per_episode(theta: torch.Tensor, ep: dict[str, torch.Tensor], coef: torch.Tensor) -> torch.Tensor:
    r"""Per-episode gradients :math:`\sum_t coef_t \nabla_\theta\log\pi(a_t|s_t)`, ``[n, S, A]``.

    For a softmax table :math:`\nabla_{\theta[s]}\log\pi(a|s) = e_a - \pi(\cdot|s)`; the sum is one
    ``scatter_add`` over time into the visited states' rows."""
    pi = torch.softmax(theta, -1)
    s, a, m = ep["states"], ep["actions"], ep["mask"]
    score = torch.nn.functional.one_hot(a, A).to(F64) - pi[s]  # [n, T, A]
    src = (coef * m)[..., None] * score
    out = torch.zeros(s.shape[0], S, A, dtype=F64)
    return out.scatter_add_(1, s[..., None].expand(-1, -1, A), src)


def batch_means(x: torch.Tensor) -> torch.Tensor:
    """``[n, ...]`` per-episode vectors -> ``[n / K, ...]`` batch means (the estimate of one update)."""
    return x.reshape(-1, K, *x.shape[1:]).mean(1)


class Estimate:
    """Mean, standard error and per-episode total variance of an estimator's batch means."""

    def __init__(self, per_ep: torch.Tensor):
        b = batch_means(per_ep)[..., 0]  # the 4 free components (action 1's are the negatives)
        self.n = b.shape[0]
        self.mean = b.mean(0)
        self.cov = torch.cov(b.T)
        self.se = self.cov.diag().sqrt() / self.n**0.5
        self.total_var = K * self.cov.trace().item()  # per-episode equivalent: K × Var(batch mean)

    def z(self, exact: torch.Tensor) -> torch.Tensor:
        return (self.mean - exact[:, 0]) / self.se

    def hotelling(self, exact: torch.Tensor) -> float:
        d = self.mean - exact[:, 0]
        return float(self.n * d @ torch.linalg.solve(self.cov, d))


# --------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def mdp() -> MDP:
    return MDP(seed=0)


@pytest.fixture(scope="module")
def on_policy(mdp: MDP) -> dict[str, torch.Tensor]:
    """Episodes under π_θ with every on-policy estimator's per-episode gradients."""
    th = mdp.theta
    ep = mdp.sample(th, N_EPISODES, seed=1)
    m, r = ep["mask"], ep["rewards"]
    G0 = episode_returns(r, m, GAMMA, "whole")  # [n, T], G_0 at every step
    Gt = episode_returns(r, m, GAMMA, "reward_to_go")
    w = outer_weights(m, GAMMA, discount_weight=True)  # γ^t
    ones = outer_weights(m, GAMMA, discount_weight=False)
    v = mdp.value(th)[ep["states"]] * m  # exact V^π(s_t)
    to_batches = lambda x: x.reshape(-1, K, *x.shape[1:])  # noqa: E731
    loo_t = leave_one_out_mean(to_batches(Gt), to_batches(m), per_step=True).reshape(Gt.shape)
    loo_0 = leave_one_out_mean(to_batches(G0), to_batches(m), per_step=False).reshape(G0.shape)
    # The library's leave-one-out optimal constant, from per-episode gradients g (b = 0) and c (∂/∂b).
    g_rtg, c_rtg = per_episode(th, ep, w * Gt), per_episode(th, ep, w)
    b_rtg = optimal_constant_baseline(to_batches(g_rtg.flatten(1)), to_batches(c_rtg.flatten(1))).reshape(-1)
    g_whole, c_whole = per_episode(th, ep, G0), per_episode(th, ep, ones)
    b_whole = optimal_constant_baseline(to_batches(g_whole.flatten(1)), to_batches(c_whole.flatten(1)))
    b_whole = b_whole.reshape(-1)
    return {
        "ep": ep,
        "whole": g_whole,
        "whole_mean": per_episode(th, ep, G0 - loo_0),
        "whole_optimal": g_whole - b_whole[:, None, None] * c_whole,
        "rtg": g_rtg,
        "rtg_no_outer_weight": per_episode(th, ep, Gt),
        "rtg_mean": per_episode(th, ep, w * (Gt - loo_t)),
        "rtg_value": per_episode(th, ep, w * (Gt - v)),
        "rtg_optimal": g_rtg - b_rtg[:, None, None] * c_rtg,
        "g_whole": g_whole,
        "c_whole": c_whole,
        "g_rtg": g_rtg,
        "c_rtg": c_rtg,
    }


# --------------------------------------------------------------------------------------------- tests


def test_exact_machinery_agrees(mdp: MDP, on_policy):
    """∇J by autograd = the policy-gradient theorem; V^π = the library's exact policy evaluation; the
    library's pg loss aggregated per episode has gradient −(mean of the per-episode estimators)."""
    th = mdp.theta
    torch.testing.assert_close(mdp.grad_J(th), mdp.visit_weighted_gradient(th, GAMMA), rtol=1e-10, atol=1e-12)
    pi = torch.softmax(th, -1).numpy()
    v_lib = policy_evaluation(TabularModel(mdp.P, mdp.R), pi, GAMMA)
    np.testing.assert_allclose(mdp.value(th).numpy(), v_lib, rtol=1e-12)

    ep = {k: v[:64] for k, v in on_policy["ep"].items()}
    m = ep["mask"]
    psi = outer_weights(m, GAMMA, True) * episode_returns(ep["rewards"], m, GAMMA, "reward_to_go")
    th_ = th.clone().requires_grad_(True)
    logp = log_probs(th_, ep)
    loss, _ = POLICY_LOSSES["pg"](logp, logp.detach(), psi, m)
    (grad,) = torch.autograd.grad(aggregate(loss, m, "seq_mean_token_sum_norm", max_len=1), th_)
    torch.testing.assert_close(-grad, per_episode(th, ep, psi).mean(0), rtol=1e-10, atol=1e-12)


UNBIASED = ["whole", "whole_mean", "whole_optimal", "rtg", "rtg_mean", "rtg_value", "rtg_optimal"]


@pytest.mark.parametrize("name", UNBIASED)
def test_estimator_is_unbiased(mdp: MDP, on_policy, name):
    exact = mdp.grad_J(mdp.theta)
    est = Estimate(on_policy[name])
    z = est.z(exact)
    assert z.abs().max() < 4, f"{name}: mean {est.mean} vs exact {exact[:, 0]}, z = {z}"


def test_dropping_the_outer_discount_weight_is_biased(mdp: MDP, on_policy):
    """Reward-to-go without γ^t estimates Σ_s η(s) Σ_a ∇π(a|s) Q(s,a) with *undiscounted* visit counts η,
    not ∇J: it matches the former within 4 s.e. and misses the latter by far more."""
    exact = mdp.grad_J(mdp.theta)
    biased_target = mdp.visit_weighted_gradient(mdp.theta, 1.0)
    est = Estimate(on_policy["rtg_no_outer_weight"])
    assert est.z(biased_target).abs().max() < 4
    assert est.z(exact).abs().max() > 10
    assert est.hotelling(exact) > 10 * 23.5


def test_reward_to_go_and_baselines_reduce_variance(on_policy):
    var = {name: Estimate(on_policy[name]).total_var for name in UNBIASED}
    assert var["rtg"] < var["whole"]
    assert var["whole_mean"] < var["whole"] and var["whole_optimal"] < var["whole"]
    for b in ("rtg_mean", "rtg_value", "rtg_optimal"):
        assert var[b] < var["rtg"], (b, var)
    assert var["rtg_value"] < var["rtg_mean"]  # a state baseline beats any constant here


@pytest.mark.parametrize("kind", ["whole", "rtg"])
def test_optimal_constant_baseline_has_the_lowest_variance(mdp: MDP, on_policy, kind):
    """Constants b estimated on one half of the episodes, variances measured on the other half:
    Var(g − b c) is smallest at b* = E⟨c, g⟩ / E‖c‖² among b = 0, b = J (the mean return), b* ± δ."""
    g, c = on_policy[f"g_{kind}"].flatten(1), on_policy[f"c_{kind}"].flatten(1)
    half = g.shape[0] // 2
    b_star = float((c[:half] * g[:half]).sum() / (c[:half] * c[:half]).sum())
    if kind == "whole":  # seed 003's formula: E[‖∇log π(τ)‖² R(τ)] / E[‖∇log π(τ)‖²]
        G0 = episode_returns(on_policy["ep"]["rewards"], on_policy["ep"]["mask"], GAMMA, "whole")[:half, 0]
        norm2 = (c[:half] ** 2).sum(-1)
        assert b_star == pytest.approx(float((norm2 * G0).sum() / norm2.sum()), rel=1e-12)

    def total_var(b: float) -> float:
        x = g[half:] - b * c[half:]
        return float(x.var(0).sum())

    delta = 0.25 * abs(b_star)
    v_star = total_var(b_star)
    for label, b in {"0": 0.0, "b*-δ": b_star - delta, "b*+δ": b_star + delta}.items():
        assert v_star < total_var(b), (label, b, b_star)
    # The mean return J: far from b* for whole returns (b* = 3.37, J = 2.44: b* weighs long episodes,
    # whose score norms and returns are both large, more); for reward-to-go b* = 2.47 is so close to J
    # that the two variances differ by 0.05% — within sampling noise of a held-out comparison.
    J = float(mdp.J(mdp.theta))
    if kind == "whole":
        assert v_star < 0.8 * total_var(J)
    else:
        assert v_star <= total_var(J) * (1 + 1e-3)


def test_per_decision_importance_sampling_is_unbiased(mdp: MDP):
    """Episodes from a behaviour policy μ ≠ π; the reward at t' weighed by ρ_{0:t'} = Π π/μ (seed 003), and
    a state baseline times ρ_{0:t}: both average to ∇J(θ) at π's θ."""
    th = mdp.theta
    th_mu = th + torch.as_tensor(np.random.default_rng(7).normal(0.0, 0.5, size=(S, A)))
    ep = mdp.sample(th_mu, N_EPISODES, seed=2)
    m = ep["mask"]
    rho = cumulative_weights(log_probs(th, ep), log_probs(th_mu, ep), m, max_weight=None)
    R = reward_to_go(ep["rewards"] * rho, GAMMA)
    w = outer_weights(m, GAMMA, True)
    v = mdp.value(th)[ep["states"]] * m
    exact = mdp.grad_J(th)
    for name, coef in {"is": w * R, "is_value": w * (R - rho * v)}.items():
        est = Estimate(per_episode(th, ep, coef))
        assert est.z(exact).abs().max() < 4, (name, est.mean, exact[:, 0])
    # Clipping the cumulative weight at 1 (it binds often here) biases the estimate.
    rho_clip = cumulative_weights(log_probs(th, ep), log_probs(th_mu, ep), m, max_weight=1.0)
    est = Estimate(per_episode(th, ep, w * reward_to_go(ep["rewards"] * rho_clip, GAMMA)))
    assert est.z(exact).abs().max() > 4
