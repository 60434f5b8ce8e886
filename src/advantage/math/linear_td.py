"""Linear TD: semi-gradient TD(0), gradient-TD (TDC, GTD2) and their expected (DP) updates (SPEC T4).

The value estimate is linear in features, :math:`\\hat v(s) = w^\\top x(s)`. With the one-step TD error

.. math::
    \\delta_t = r_{t+1} + \\gamma\\,(1 - \\text{term})\\, w^\\top x_{t+1} - w^\\top x_t

and the per-decision importance weight :math:`\\rho_t = \\pi(a_t|s_t) / \\mu(a_t|s_t)` of the target policy
π against the behaviour policy μ (Sutton & Barto 2018, §11.1–11.2, §11.7):

* semi-gradient TD(0), S&B eq. 11.2: :math:`w \\leftarrow w + \\alpha \\rho_t \\delta_t x_t`;
* TDC (Sutton et al. 2009, "Fast gradient-descent methods for temporal-difference learning with linear
  function approximation"; S&B eq. 11.29), with a second weight vector :math:`h` (S&B's :math:`v`)
  that tracks :math:`C^{-1} \\mathbb E[\\rho\\delta x]`:
  :math:`w \\leftarrow w + \\alpha \\rho_t (\\delta_t x_t - \\gamma x_{t+1} x_t^\\top h)`,
  :math:`h \\leftarrow h + \\beta \\rho_t (\\delta_t - h^\\top x_t) x_t`;
* GTD2 (same paper; S&B eq. 11.30):
  :math:`w \\leftarrow w + \\alpha \\rho_t (x_t - \\gamma x_{t+1}) x_t^\\top h`,
  with the same :math:`h` update.

Their expectations under a state distribution :math:`d` (``D = diag(d)``), the target policy's
transition matrix :math:`P_\\pi` and expected reward :math:`r_\\pi` are linear in the weights:

.. math::
    \\mathbb E[\\rho\\delta x] = A w + b,\\quad A = \\Phi^\\top D (\\gamma P_\\pi - I) \\Phi,\\quad
    b = \\Phi^\\top D r_\\pi,\\quad C = \\Phi^\\top D \\Phi,\\quad
    M = \\gamma \\Phi^\\top P_\\pi^\\top D \\Phi,

so expected TD is :math:`w \\leftarrow w + \\alpha (A w + b)`, expected TDC
:math:`w \\leftarrow w + \\alpha (A w + b - M h)`, expected GTD2 :math:`w \\leftarrow w + \\alpha (C - M) h`
(:math:`C - M = -A^\\top`), and :math:`h \\leftarrow h + \\beta (A w + b - C h)` for both. Expected TD
diverges exactly when :math:`A` has an eigenvalue with positive real part (and :math:`\\alpha` is small):
the deadly triad on Baird's counterexample. The gradient-TD methods follow the gradient of the projected
Bellman error :math:`\\|A w + b\\|^2_{C^{-1}}`, which converges for any :math:`d`.

Shapes: ``w, h, x [d]``; ``phi [S, d]`` (one row per state); ``p_pi [S, S]``; vectors over states ``[S]``.
Everything is float64 (the divergence runs through many orders of magnitude).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


def linear_td_error(
    w: Tensor, x: Tensor, x_next: Tensor, reward: float, gamma: float, terminated: bool = False
) -> Tensor:
    """:math:`\\delta = r + \\gamma (1 - \\text{term}) w^\\top x' - w^\\top x` (a 0-d tensor).
    A terminated step bootstraps with 0 by a select, so a non-finite ``w·x'`` there cannot leak in."""
    v_next = torch.zeros((), dtype=w.dtype) if terminated else w @ x_next
    return reward + gamma * v_next - w @ x


def semi_gradient_td_step(
    w: Tensor,
    x: Tensor,
    x_next: Tensor,
    reward: float,
    gamma: float,
    rho: float,
    alpha: float,
    terminated: bool = False,
) -> tuple[Tensor, Tensor]:
    """Off-policy semi-gradient TD(0), S&B eq. 11.2: :math:`w + \\alpha \\rho \\delta x`. Returns ``(w, δ)``.
    The gradient of the target :math:`\\gamma w^\\top x'` is ignored: that is what "semi" means."""
    delta = linear_td_error(w, x, x_next, reward, gamma, terminated)
    return w + alpha * rho * delta * x, delta


GRADIENT_TD_METHODS = ("tdc", "gtd2")


def _check_gradient_td(method: str) -> None:
    if method not in GRADIENT_TD_METHODS:
        raise ValueError(f"method must be one of {GRADIENT_TD_METHODS}, got {method!r}")


def gradient_td_step(
    method: str,
    w: Tensor,
    h: Tensor,
    x: Tensor,
    x_next: Tensor,
    reward: float,
    gamma: float,
    rho: float,
    alpha: float,
    beta: float,
    terminated: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """One sampled step of a gradient-TD method (Sutton et al. 2009). Returns ``(w, h, δ)``.

    * ``method="tdc"``, TDC (TD with gradient correction), S&B eq. 11.29:
      :math:`w + \\alpha\\rho(\\delta x - \\gamma x' (x^\\top h))`;
    * ``method="gtd2"``, GTD2, S&B eq. 11.30: :math:`w + \\alpha\\rho (x - \\gamma x') (x^\\top h)`;

    and for both :math:`h + \\beta\\rho(\\delta - h^\\top x) x`.
    On a terminated step :math:`x'` is taken as 0 (no next state)."""
    _check_gradient_td(method)
    delta = linear_td_error(w, x, x_next, reward, gamma, terminated)
    g_next = torch.zeros_like(x) if terminated else gamma * x_next
    if method == "tdc":
        w_new = w + alpha * rho * (delta * x - g_next * (x @ h))
    else:
        w_new = w + alpha * rho * (x - g_next) * (x @ h)
    h_new = h + beta * rho * (delta - h @ x) * x
    return w_new, h_new, delta


def gradient_mc_step(w: Tensor, x: Tensor, target: Tensor | float, alpha: float) -> Tensor:
    """Gradient Monte Carlo (S&B §9.3): :math:`w + \\alpha (G - w^\\top x) x`. The target does not depend on
    ``w``, so this is a true stochastic gradient step on the value error."""
    return w + alpha * (target - w @ x) * x


def per_decision_returns(rewards: Tensor, rhos: Tensor, gamma: float, bootstrap: float = 0.0) -> Tensor:
    """Per-decision importance-sampled returns (Precup, Sutton & Singh 2000):
    :math:`G_t = \\rho_t (r_{t+1} + \\gamma G_{t+1})`, :math:`G_T =` ``bootstrap`` (0 for a finished
    episode). Its expectation under the behaviour policy is :math:`v_\\pi(s_t)`.
    ``rewards, rhos [T] -> [T]`` (float64)."""
    out = torch.empty_like(rewards, dtype=torch.float64)
    g = torch.tensor(float(bootstrap), dtype=torch.float64)
    for t in range(rewards.shape[-1] - 1, -1, -1):
        g = rhos[t] * (rewards[t] + gamma * g)
        out[t] = g
    return out


def state_distribution(p: Tensor, start: Tensor, horizon: int | None = None) -> Tensor:
    """The distribution of the states a policy visits, ``[S]``, for its transition matrix ``p [S, S]``
    (rows may sum to less than 1: the rest is termination) and the start distribution ``start [S]``.

    An episode restarts from ``start`` when it terminates and, with a ``horizon``, after ``horizon`` steps
    (a time limit). With a horizon the result is exactly the average state distribution over one
    episode's steps, :math:`\\frac{1}{H}\\sum_{k<H} \\mu_k`; without one it is the stationary distribution
    of the restarting chain (for a continuing task, the on-policy distribution of S&B §9.2; for an
    episodic task, the normalized expected visits from the start)."""
    s = p.shape[0]
    restart = p + (1.0 - p.sum(dim=1, keepdim=True)).clamp_min(0.0) * start[None, :]
    if horizon is not None:
        mu, total = start.clone(), torch.zeros(s, dtype=p.dtype)
        for _ in range(horizon):
            total += mu
            mu = mu @ restart
        return total / total.sum()
    # Stationary distribution d = d P~, sum d = 1: a least-squares solve of the stacked system.
    lhs = torch.cat([(restart - torch.eye(s, dtype=p.dtype)).T, torch.ones(1, s, dtype=p.dtype)])
    rhs = torch.cat([torch.zeros(s, dtype=p.dtype), torch.ones(1, dtype=p.dtype)])
    d = torch.linalg.lstsq(lhs, rhs[:, None]).solution[:, 0]
    d = d.clamp_min(0.0)
    return d / d.sum()


class LinearTDSystem(NamedTuple):
    """The expected-update matrices of linear TD under a state distribution (see the module docstring):
    ``A [d, d]``, ``b [d]``, ``C [d, d]``, ``M [d, d]``."""

    A: Tensor
    b: Tensor
    C: Tensor
    M: Tensor


def expected_td_system(phi: Tensor, d: Tensor, p_pi: Tensor, r_pi: Tensor, gamma: float) -> LinearTDSystem:
    """:math:`A = \\Phi^\\top D(\\gamma P_\\pi - I)\\Phi`, :math:`b = \\Phi^\\top D r_\\pi`,
    :math:`C = \\Phi^\\top D \\Phi`, :math:`M = \\gamma \\Phi^\\top P_\\pi^\\top D \\Phi`.
    ``phi [S, d]``, ``d [S]``, ``p_pi [S, S]``, ``r_pi [S]``."""
    dphi = d[:, None] * phi
    c = phi.T @ dphi
    m = gamma * (p_pi @ phi).T @ dphi
    return LinearTDSystem(A=m.T - c, b=dphi.T @ r_pi, C=c, M=m)


def expected_td_update(w: Tensor, system: LinearTDSystem, alpha: float) -> Tensor:
    """Expected (DP) semi-gradient TD(0): :math:`w + \\alpha (A w + b)`, the mean of
    :func:`semi_gradient_td_step` over the state distribution and the behaviour policy."""
    return w + alpha * (system.A @ w + system.b)


def expected_gradient_td_update(
    method: str, w: Tensor, h: Tensor, system: LinearTDSystem, alpha: float, beta: float
) -> tuple[Tensor, Tensor]:
    """The expected (DP) update of :func:`gradient_td_step`:

    * ``method="tdc"``, expected TDC: :math:`w + \\alpha (A w + b - M h)`;
    * ``method="gtd2"``, expected GTD2: :math:`w + \\alpha (C - M) h`;

    and for both :math:`h + \\beta (A w + b - C h)`."""
    _check_gradient_td(method)
    g = system.A @ w + system.b
    w_step = g - system.M @ h if method == "tdc" else (system.C - system.M) @ h
    return w + alpha * w_step, h + beta * (g - system.C @ h)


def expected_semi_gradient_update(
    w: Tensor, phi: Tensor, weights: Tensor, targets: Tensor, alpha: float
) -> Tensor:
    """:math:`w + \\alpha \\Phi^\\top \\mathrm{diag}(\\text{weights}) (\\text{targets} - \\Phi w)`: the mean
    update towards fixed targets, e.g. gradient Monte Carlo (targets :math:`v_\\pi`) or one sweep of
    semi-gradient Q-learning (targets the Bellman backup of the current estimate, held fixed).
    ``phi [N, d]``, ``weights, targets [N]``."""
    return w + alpha * phi.T @ (weights * (targets - phi @ w))


def projected_bellman_error(w: Tensor, system: LinearTDSystem) -> Tensor:
    """:math:`\\sqrt{\\overline{PBE}} = \\sqrt{(A w + b)^\\top C^{+} (A w + b)}` (S&B eq. 11.26–11.27), with
    the pseudo-inverse when some feature direction has no weight under the distribution."""
    g = system.A @ w + system.b
    return torch.sqrt((g @ torch.linalg.pinv(system.C) @ g).clamp_min(0.0))


def value_error(values: Tensor, true_values: Tensor, d: Tensor) -> Tensor:
    """:math:`\\sqrt{\\overline{VE}} = \\sqrt{\\sum_s d(s) (\\hat v(s) - v_\\pi(s))^2}` (S&B eq. 9.1)."""
    return torch.sqrt((d * (values - true_values) ** 2).sum())
