"""Dynamic programming on a known model: exact policy evaluation, value iteration, policy iteration
(SPEC T3; Sutton & Barto 2018 §3.5, §4).

These are the ground truth the learned methods are checked against: Q* for Q-learning, V^π for Monte
Carlo prediction and the linear methods, and exact policy gradients. With the model of
:mod:`advantage.envs.model`,

.. math::
    Q(s, a) = R(s, a) + γ \\sum_{s'} P(s' | s, a)\\, V(s'), \\qquad
    V^π(s) = \\sum_a π(a|s)\\, Q^π(s, a), \\qquad V^*(s) = \\max_a Q^*(s, a)

(``P`` excludes terminating transitions, so a terminal state's value is 0).

* :func:`policy_evaluation` solves the linear system :math:`(I - γ P_π) V = R_π` exactly.
* :func:`value_iteration` applies the Bellman optimality backup until the largest change is below θ.
* :func:`policy_iteration` alternates exact evaluation and greedy improvement until the policy is stable.

Pure functions of a :class:`~advantage.envs.TabularModel` and numpy arrays; the runs that wrap them
(``advantage train value_iteration``) are :mod:`advantage.algos.tabular.planning`.
"""

from __future__ import annotations

import numpy as np

from advantage.envs import TabularModel


def q_from_v(model: TabularModel, v: np.ndarray, gamma: float) -> np.ndarray:
    """One Bellman backup: ``Q[s, a] = R[s, a] + γ Σ_s' P[s, a, s'] V[s']``. Shapes ``[S] -> [S, A]``."""
    return model.rewards + gamma * model.transitions @ v


def policy_evaluation(model: TabularModel, pi: np.ndarray, gamma: float) -> np.ndarray:
    """Exact :math:`V^π` ``[S]`` of a stochastic policy ``pi [S, A]`` by solving :math:`(I-γP_π)V=R_π`.

    Raises ValueError if the system is singular (γ = 1 with a policy that can loop forever)."""
    p_pi = np.einsum("sa,sat->st", pi, model.transitions)
    r_pi = np.einsum("sa,sa->s", pi, model.rewards)
    a = np.eye(model.num_states) - gamma * p_pi
    try:
        v = np.linalg.solve(a, r_pi)
    except np.linalg.LinAlgError:
        v = np.full(model.num_states, np.nan)  # singular: refused below
    if not np.all(np.isfinite(v)) or np.linalg.cond(a) > 1e12:
        raise ValueError(f"(I - γ P_π) is singular for γ={gamma}: the policy can loop forever; use γ < 1")
    return v


def value_iteration(
    model: TabularModel, gamma: float, theta: float = 1e-10, max_iterations: int = 100_000
) -> tuple[np.ndarray, np.ndarray, int]:
    """Bellman optimality iteration :math:`V \\leftarrow \\max_a [R + γ P V]` until
    :math:`\\max_s |ΔV| < θ`. Returns ``(V* [S], Q* [S, A], iterations)``."""
    v = np.zeros(model.num_states)
    for it in range(1, max_iterations + 1):  # noqa: B007  (`it` is returned)
        q = q_from_v(model, v, gamma)
        v_new = q.max(axis=1)
        delta = float(np.max(np.abs(v_new - v)))
        v = v_new
        if delta < theta:
            break
    return v, q_from_v(model, v, gamma), it


def greedy(q: np.ndarray, previous: np.ndarray | None = None, tol: float = 1e-12) -> np.ndarray:
    """Greedy actions ``[S]``; keeps the previous action when it is within ``tol`` of the best, so policy
    iteration does not cycle between equally good actions."""
    best = q.argmax(axis=1)
    if previous is None:
        return best
    keep = q[np.arange(q.shape[0]), previous] >= q.max(axis=1) - tol
    return np.where(keep, previous, best)


def policy_iteration(
    model: TabularModel, gamma: float, max_iterations: int = 10_000
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Howard's policy iteration from the all-zeros policy.

    Returns ``(V* [S], Q* [S, A], π* [S], iterations)``."""
    actions = np.zeros(model.num_states, dtype=np.int64)
    eye = np.eye(model.num_actions)
    for it in range(1, max_iterations + 1):  # noqa: B007  (`it` is returned)
        v = policy_evaluation(model, eye[actions], gamma)
        q = q_from_v(model, v, gamma)
        new = greedy(q, actions)
        if np.array_equal(new, actions):
            break
        actions = new
    return v, q, actions, it
