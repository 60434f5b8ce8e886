"""Returns, n-step returns, Monte Carlo value estimates and GAE.

Pure tensor functions: no modules, no configs, no I/O. Time is the last dimension, so every function
accepts a single trajectory ``[T]`` or a batch of rows ``[B, T]`` (B environments or sequences).

Episode boundaries inside a row are given by boolean ``terminated`` / ``truncated`` tensors of the same
shape as ``rewards``: step ``t`` ended an episode if either is true. A *terminated* step has no future
(its bootstrap value is 0); a *truncated* step (time limit) and the last step of a rollout could have gone
on, so they bootstrap with the critic's value of the following observation (the study notes, "Computing GAE
on a rollout"; Gymnasium's ``terminated``/``truncated`` API).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "discounted_return",
    "first_visit_mask",
    "gae",
    "mc_update",
    "n_step_returns",
    "reward_to_go",
]


def _as_bool(x: Tensor | None, like: Tensor) -> Tensor:
    if x is None:
        return torch.zeros_like(like, dtype=torch.bool)
    if x.shape != like.shape:
        raise ValueError(
            f"episode flags must have the shape of rewards {tuple(like.shape)}, got {tuple(x.shape)}"
        )
    return x.to(dtype=torch.bool, device=like.device)


def discounted_return(rewards: Tensor, gamma: float) -> Tensor:
    r"""Whole-trajectory discounted return :math:`G_0 = \sum_{t=0}^{T-1} \gamma^t r_t`.

    This is the weight of every action in the plain REINFORCE estimator (Williams 1992; the study notes:
    "return 的期望", :math:`r(\tau)`). Computed backwards, :math:`G = r_t + \gamma G`, in O(T).

    Args:
        rewards: ``[T]`` or ``[B, T]``, one trajectory per row.
        gamma: discount factor in [0, 1].

    Returns:
        ``[]`` or ``[B]``.
    """
    return reward_to_go(rewards, gamma)[..., 0]


def reward_to_go(
    rewards: Tensor,
    gamma: float,
    dones: Tensor | None = None,
    bootstrap: Tensor | None = None,
) -> Tensor:
    r"""Discounted reward-to-go :math:`G_t = r_t + \gamma (1 - d_t) G_{t+1}`, computed backwards in O(T).

    Sutton & Barto (2018) §5.1's Monte Carlo return (computed from the end of the episode, one pass), the
    reward-to-go. ``dones[t]`` marks the last step of an episode; the recursion restarts there, so several
    episodes can share a row. The value after the last step of the row is ``bootstrap`` (default 0).

    Args:
        rewards: ``[T]`` or ``[B, T]``.
        gamma: discount factor in [0, 1].
        dones: optional bool ``[T]`` / ``[B, T]``; true where an episode ends.
        bootstrap: optional ``[]`` / ``[B]`` value of the state after the row's last step, used only if
            that step is not itself a done step.

    Returns:
        ``G`` with the shape of ``rewards``.
    """
    dones_b = _as_bool(dones, rewards)
    out = torch.empty_like(rewards)
    carry = torch.zeros_like(rewards[..., 0]) if bootstrap is None else bootstrap.to(rewards.dtype)
    zero = torch.zeros_like(carry)
    for t in range(rewards.shape[-1] - 1, -1, -1):
        # A select, not a multiply by (1 - d): after a done step nothing is read, even an inf/NaN bootstrap.
        carry = rewards[..., t] + torch.where(dones_b[..., t], zero, gamma * carry)
        out[..., t] = carry
    return out


def n_step_returns(
    rewards: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    gamma: float,
    n: int,
) -> Tensor:
    r"""n-step returns, truncated at episode and rollout ends.

    .. math::
        G^{(n)}_t = \sum_{l=0}^{k-1} \gamma^l r_{t+l} + \gamma^k (1-\text{term}_{t+k-1}) V(s_{t+k})


    ``k = min(n, steps to the end of the episode or of the row)``: the sum stops at the first step that
    ends an episode (terminated or truncated) or at the end of the rollout, and bootstraps there with the
    critic unless that step was a true termination (Sutton & Barto 2018 §7.1; Schulman et al. 2016 §3:
    :math:`\hat A^{(n)}_t = G^{(n)}_t - v_t`).

    Args:
        rewards, next_values, terminated, truncated: ``[T]`` or ``[B, T]``; ``next_values[t]`` is
            :math:`V(s_{t+1})`, the value of the observation after step t (for a truncated step, of
            the final observation, not of the reset one).
        gamma: discount in [0, 1].
        n: number of real rewards to use, ``n >= 1``.

    Returns:
        ``[T]`` or ``[B, T]``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    term = _as_bool(terminated, rewards)
    stop = term | _as_bool(truncated, rewards)
    T = rewards.shape[-1]
    out = torch.zeros_like(rewards)
    alive = torch.ones_like(rewards, dtype=torch.bool)  # row t still accumulating
    discount = 1.0
    for lag in range(min(n, T)):
        # Step t + lag for each start t; starts whose window runs past the row have already stopped.
        width = T - lag
        r = rewards[..., lag:]
        a = alive[..., :width]
        out[..., :width] += torch.where(a, discount * r, torch.zeros_like(r))
        last = stop[..., lag:] | (lag == n - 1)
        last = last.clone()
        last[..., -1] = True  # the end of the row is the end of what was collected
        ends_here = a & last
        # A select, not a multiply by (1 - term): a terminal next value is never read, even if inf/NaN.
        boot = discount * gamma * next_values[..., lag:]
        out[..., :width] += torch.where(ends_here & ~term[..., lag:], boot, torch.zeros_like(boot))
        alive[..., :width] = a & ~last
        discount *= gamma
    return out


def gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    gamma: float,
    lam: float,
) -> Tensor:
    r"""Generalized Advantage Estimation (Schulman et al. 2016, ICLR; "High-Dimensional Continuous Control").

    .. math::
        \delta_t = r_t + \gamma (1 - \text{term}_t) V(s_{t+1}) - V(s_t), \qquad
        \hat A_t = \delta_t + \gamma \lambda (1 - \text{done}_t) \hat A_{t+1}, \quad \hat A_T = 0

    with ``done = terminated | truncated``. The backward recursion stops at every episode end, so two
    episodes in one row are computed exactly as if alone. A terminated step bootstraps with 0; a truncated
    step and the last step of the row bootstrap with ``next_values`` (so ``next_values[t]`` of a truncated
    step must be the value of the *final* observation, not of the observation after reset).

    Checks: with γ=0.9, λ=0.8, rewards (0, 0, 1), values (0.4, 0.5, 0.6) and termination at the last step,
    the advantages are (0.28616, 0.328, 0.4) (study notes' worked table); λ=0 gives the TD error δ; λ=1 on a
    terminated episode gives the discounted return minus the value.

    Args:
        rewards, values, next_values: float ``[T]`` or ``[B, T]``.
        terminated, truncated: bool (or 0/1) ``[T]`` or ``[B, T]``.
        gamma: discount in [0, 1].
        lam: λ in [0, 1].

    Returns:
        Advantages with the shape of ``rewards``. Value targets are ``advantages + values``.
    """
    term = _as_bool(terminated, rewards)
    done = term | _as_bool(truncated, rewards)
    # Selects, not multiplies by (1 - term) / (1 - done): the value after a terminated step is defined as
    # 0 and never read, so an inf or NaN there (a diverged critic, a placeholder) cannot poison the row,
    # and nothing crosses an episode boundary.
    deltas = rewards + torch.where(term, torch.zeros_like(next_values), gamma * next_values) - values
    if deltas.device.type == "cpu" and not deltas.requires_grad:
        # The same recursion on NumPy views: a NumPy op on a few numbers costs a fraction of a torch op,
        # and a short rollout (A2C's 5 steps) is all per-op cost. Same float arithmetic (the scalar
        # γλ rounded to the array's dtype, as torch does), tested bit for bit against the loop below.
        d, dn = deltas.numpy(), done.numpy()
        res = np.empty_like(d)
        c, zero = d.dtype.type(gamma * lam), d.dtype.type(0)
        acc = np.zeros_like(d[..., 0])
        for t in range(d.shape[-1] - 1, -1, -1):
            acc = d[..., t] + np.where(dn[..., t], zero, c * acc)
            res[..., t] = acc
        return torch.from_numpy(res)
    out = torch.empty_like(deltas)
    carry = torch.zeros_like(deltas[..., 0])
    for t in range(deltas.shape[-1] - 1, -1, -1):
        carry = deltas[..., t] + torch.where(done[..., t], torch.zeros_like(carry), (gamma * lam) * carry)
        out[..., t] = carry
    return out


def first_visit_mask(states: Tensor) -> Tensor:
    """Bool ``[T]``: true at the first occurrence of each state in one episode (first-visit Monte Carlo).

    Args:
        states: integer ``[T]`` (state ids, or state-action ids for Q estimates).
    """
    seen: set[int] = set()
    mask = torch.zeros(states.shape, dtype=torch.bool)
    for t, s in enumerate(states.tolist()):
        if s not in seen:
            seen.add(s)
            mask[t] = True
    return mask


def mc_update(
    values: Tensor,
    counts: Tensor,
    states: Tensor,
    returns: Tensor,
    first_visit: bool = True,
) -> tuple[Tensor, Tensor]:
    r"""Monte Carlo estimate update with the incremental mean.

    .. math::
        N \mathrel{+}= 1, \qquad V \mathrel{+}= (G - V)/N


    Sutton & Barto §5.1 / SPEC T2: every visit (or only the first visit) of a state in an episode
    contributes its return ``G_t``; the running mean avoids storing all returns. Visits are applied in
    time order, so the result equals the sample mean of all contributing returns.

    Args:
        values: float ``[S]`` current estimates (not modified).
        counts: float or int ``[S]`` number of returns averaged so far (not modified).
        states: int ``[T]`` state (or flattened state-action) index of each step of one episode.
        returns: float ``[T]`` return from each step (see :func:`reward_to_go`).
        first_visit: only the first occurrence of each state counts if true (first-visit MC), else every
            occurrence (every-visit MC).

    Returns:
        ``(values, counts)``, new tensors.
    """
    values = values.clone()
    counts = counts.clone()
    use = first_visit_mask(states) if first_visit else torch.ones(states.shape, dtype=torch.bool)
    for s, g in zip(states[use].tolist(), returns[use].tolist(), strict=True):
        counts[s] += 1
        values[s] += (g - values[s]) / counts[s]
    return values, counts
