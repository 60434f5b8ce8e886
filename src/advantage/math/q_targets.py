r"""Q-learning targets, target-network updates and the dueling head's combination rule.

Pure tensor functions, except :func:`polyak_update`, the single in-place helper of this module (it writes
into the target network's parameters; everything else returns new tensors). Shapes: a batch of ``B``
transitions, ``A`` discrete actions.

The targets are values, not losses: no gradient is stopped here. Compute the next-state Q values under
``torch.no_grad()`` (as the target network always is), so the regression is the semi-gradient TD update
of DQN (Mnih et al. 2015), not a residual-gradient one.

n-step transitions come from the replay buffer (:class:`advantage.data.ReplayBuffer` with ``n_step > 1``)
already summed: ``rewards`` holds :math:`R^{(k)}_t = \sum_{i<k} \gamma^i r_{t+i}` and the per-sample
discount :math:`\gamma^k` is passed as ``gamma``, so the same target functions serve 1-step and n-step
learning.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

__all__ = [
    "clipped_double_q_target",
    "double_q_target",
    "dueling_combine",
    "polyak_update",
    "soft_q_target",
    "td_target",
]

DUELING_MODES = ("max", "mean")


def _check(rewards: Tensor, terminated: Tensor, gamma: float | Tensor, **qs: Tensor) -> Tensor:
    """Validate shapes and return ``terminated`` as a bool tensor ``[B]`` on the rewards' device."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be [B], got shape {tuple(rewards.shape)}")
    B = rewards.shape[0]
    if terminated.shape != rewards.shape:
        raise ValueError(f"terminated must have the shape of rewards ({B},), got {tuple(terminated.shape)}")
    for name, q in qs.items():
        if q.dim() != 2 or q.shape[0] != B:
            raise ValueError(f"{name} must be [B, A] with B={B}, got shape {tuple(q.shape)}")
    if isinstance(gamma, Tensor):
        if gamma.shape not in ((), rewards.shape):
            raise ValueError(f"gamma as a tensor must be [] or [B] with B={B}, got {tuple(gamma.shape)}")
    elif not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    return terminated.to(device=rewards.device, dtype=torch.bool)


def _bootstrap(rewards: Tensor, terminated: Tensor, gamma: float | Tensor, next_value: Tensor) -> Tensor:
    # `where`, not a multiply by (1 - term): a terminal row's next value is never read, even if inf/NaN.
    boot = gamma * next_value.to(rewards.dtype)
    return rewards + torch.where(terminated, torch.zeros_like(boot), boot)


def td_target(rewards: Tensor, next_q: Tensor, terminated: Tensor, gamma: float | Tensor) -> Tensor:
    r"""Q-learning / DQN target (Watkins 1989; Mnih et al. 2015): the label :math:`r + \gamma Q(s')`.

    .. math::
        y = r + \gamma\,(1 - \text{term})\,\max_{a'} Q_\text{target}(s', a')

    Only a true termination zeroes the bootstrap; a time-limit truncation keeps it (the buffer stores the
    final observation as ``s'`` and ``terminated=False``).

    Args:
        rewards: float ``[B]``, the reward :math:`r` (or the n-step sum :math:`R^{(k)}`).
        next_q: ``[B, A]``, target-network values :math:`Q_\text{target}(s', \cdot)`.
        terminated: bool (or 0/1) ``[B]``.
        gamma: discount in [0, 1] as a float, or a ``[B]`` tensor of per-sample discounts
            (:math:`\gamma^k` of each n-step transition, the buffer's ``discounts``).

    Returns:
        ``y``, ``[B]``.
    """
    term = _check(rewards, terminated, gamma, next_q=next_q)
    return _bootstrap(rewards, term, gamma, next_q.max(dim=-1).values)


def double_q_target(
    rewards: Tensor,
    next_q_online: Tensor,
    next_q_target: Tensor,
    terminated: Tensor,
    gamma: float | Tensor,
) -> Tensor:
    r"""Double DQN target (van Hasselt, Guez & Silver 2016).

    .. math::
        a^* = \arg\max_{a'} Q_\text{online}(s', a'), \qquad
        y = r + \gamma\,(1 - \text{term})\,Q_\text{target}(s', a^*)

    The online network chooses the action and the target network values it, so an action the target
    network happens to overestimate is not also the one whose value is taken; this removes the upward
    bias that the max of :func:`td_target` accumulates (study notes: "max用online_model，Q值用target_model").
    Ties in the argmax go to the lowest action index (``torch.argmax``).

    Args:
        rewards: float ``[B]``.
        next_q_online: ``[B, A]``, online-network values at :math:`s'` (used only for the argmax).
        next_q_target: ``[B, A]``, target-network values at :math:`s'`.
        terminated: bool (or 0/1) ``[B]``.
        gamma: float in [0, 1] or per-sample ``[B]`` discounts (see :func:`td_target`).

    Returns:
        ``y``, ``[B]``.
    """
    term = _check(rewards, terminated, gamma, next_q_online=next_q_online, next_q_target=next_q_target)
    if next_q_online.shape != next_q_target.shape:
        raise ValueError(
            f"next_q_online {tuple(next_q_online.shape)} and next_q_target {tuple(next_q_target.shape)} "
            "must have the same shape"
        )
    best = next_q_online.argmax(dim=-1, keepdim=True).to(next_q_target.device)  # [B, 1]
    return _bootstrap(rewards, term, gamma, next_q_target.gather(-1, best).squeeze(-1))


def _check_ensemble(rewards: Tensor, terminated: Tensor, gamma: float | Tensor, next_qs: Tensor) -> Tensor:
    term = _check(rewards, terminated, gamma)
    if next_qs.dim() != 2 or next_qs.shape[1] != rewards.shape[0] or next_qs.shape[0] < 1:
        raise ValueError(
            f"next_qs must be [K, B] with K >= 1 critics and B={rewards.shape[0]}, got {tuple(next_qs.shape)}"
        )
    return term


def clipped_double_q_target(
    rewards: Tensor, next_qs: Tensor, terminated: Tensor, gamma: float | Tensor
) -> Tensor:
    r"""Clipped double-Q target of TD3 (Fujimoto, van Hoof & Meger 2018, eq. 10), for continuous actions.

    .. math::
        y = r + \gamma\,(1 - \text{term})\,\min_{k} Q_{\bar\theta_k}(s', \tilde a')

    where :math:`\tilde a'` is the action the (target) policy takes at :math:`s'` (TD3 adds clipped noise
    to it: target policy smoothing). Taking the minimum of ``K`` independently trained critics counters the
    overestimation that a max (DQN) or an actor climbing a single critic's errors (DDPG) builds up; with
    ``K = 1`` this is DDPG's target :math:`r + \gamma Q_{\bar\theta}(s', \mu_{\bar\phi}(s'))`.

    Args:
        rewards: float ``[B]``.
        next_qs: ``[K, B]``, the target critics' values at :math:`(s', \tilde a')`.
        terminated: bool (or 0/1) ``[B]``; a truncation is not a termination and keeps the bootstrap.
        gamma: float in [0, 1] or per-sample ``[B]`` discounts (see :func:`td_target`).

    Returns:
        ``y``, ``[B]``.
    """
    term = _check_ensemble(rewards, terminated, gamma, next_qs)
    return _bootstrap(rewards, term, gamma, next_qs.min(dim=0).values)


def soft_q_target(
    rewards: Tensor,
    next_qs: Tensor,
    next_logp: Tensor,
    terminated: Tensor,
    gamma: float | Tensor,
    alpha: float | Tensor,
) -> Tensor:
    r"""Soft Bellman target of SAC (Haarnoja et al. 2018), with the clipped double-Q minimum.

    .. math::
        y = r + \gamma\,(1 - \text{term})\,
            \Big(\min_k Q_{\bar\theta_k}(s', a') - \alpha \log\pi(a' \mid s')\Big),
        \qquad a' \sim \pi(\cdot \mid s')

    The bracket is a one-sample estimate of the soft state value :math:`V(s') = \mathbb E_{a'\sim\pi}
    [Q(s', a') - \alpha\log\pi(a'|s')]`: the entropy bonus is part of the return being learned.

    Args:
        rewards: float ``[B]``.
        next_qs: ``[K, B]``, target critics at :math:`(s', a')`.
        next_logp: ``[B]``, :math:`\log\pi(a' \mid s')` of the same sampled :math:`a'`.
        terminated: bool (or 0/1) ``[B]``.
        gamma: float in [0, 1] or per-sample ``[B]`` discounts.
        alpha: the entropy temperature :math:`\alpha \ge 0`, a float or a ``[]``/``[1]`` tensor.

    Returns:
        ``y``, ``[B]``.
    """
    term = _check_ensemble(rewards, terminated, gamma, next_qs)
    if next_logp.shape != rewards.shape:
        raise ValueError(f"next_logp must be [B] with B={rewards.shape[0]}, got {tuple(next_logp.shape)}")
    return _bootstrap(rewards, term, gamma, next_qs.min(dim=0).values - alpha * next_logp)


@torch.no_grad()
def polyak_update(target_params: Iterable[Tensor], online_params: Iterable[Tensor], tau: float) -> None:
    r"""Soft target-network update (Lillicrap et al. 2016), **in place**: :math:`\theta' \leftarrow
    \tau\theta + (1-\tau)\theta'`.

    The single in-place helper of this module: it overwrites every tensor of ``target_params`` and returns
    nothing. ``tau = 1`` is DQN's hard copy (Mnih et al. 2015, every C steps) and is done
    with an exact copy; ``tau = 0`` leaves the target unchanged. Runs under ``torch.no_grad``, two
    in-place operations per tensor (a multi-tensor kernel saved under 2 % of a SAC step:
    ``benchmarks/results/fast_paths.md``).

    Args:
        target_params: the target network's parameters, e.g. ``target.parameters()``; floating point.
        online_params: the online network's parameters in the same order and shapes.
        tau: interpolation weight in [0, 1].
    """
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must be in [0, 1], got {tau}")
    targets, onlines = list(target_params), list(online_params)
    if len(targets) != len(onlines):
        raise ValueError(
            f"target_params and online_params must pair up, got {len(targets)} and {len(onlines)} tensors"
        )
    for i, (t, o) in enumerate(zip(targets, onlines, strict=True)):
        if t.shape != o.shape:
            raise ValueError(f"parameter {i}: target shape {tuple(t.shape)} != online {tuple(o.shape)}")
    if not targets or tau == 0.0:
        return
    if tau == 1.0:
        for t, o in zip(targets, onlines, strict=True):
            t.copy_(o)
        return
    # (1-τ)θ' + τθ, the same arithmetic as SB3's polyak_update
    for t, o in zip(targets, onlines, strict=True):
        t.mul_(1.0 - tau).add_(o, alpha=tau)


def dueling_combine(value: Tensor, advantages: Tensor, mode: str = "mean") -> Tensor:
    r"""Dueling-network aggregation (Wang et al. 2016) of a state value and per-action advantages.

    .. math::
        \text{max:}\quad Q(s,a) = V(s) + \big(A(s,a) - \max_{a'} A(s,a')\big)

        \text{mean:}\quad Q(s,a) = V(s) + \big(A(s,a) - \tfrac{1}{|\mathcal A|} \sum_{a'} A(s,a')\big)

    ``V + A`` alone is unidentifiable (add C to V and subtract it from every A: the same Q; Wang et al. 2016
    §3, "unidentifiable").
    The ``max`` form, Wang et al.'s eq. (8) (and the notes'), forces the greedy action's advantage to 0, so
    :math:`\max_a Q = V`; the ``mean`` form, eq. (9), which Wang et al. use in all their experiments because
    it trains more stably, makes :math:`\text{mean}_a Q = V` (V is then off by a constant from the true
    state value, but the ordering of actions is unchanged).

    Args:
        value: ``[B, 1]`` (or ``[..., 1]``), the value stream.
        advantages: ``[B, A]`` (or ``[..., A]``), the advantage stream.
        mode: ``"max"`` or ``"mean"``.

    Returns:
        ``Q``, ``[B, A]``.
    """
    if mode not in DUELING_MODES:
        raise ValueError(f"mode must be one of {DUELING_MODES}, got {mode!r}")
    if value.dim() != advantages.dim() or value.shape[-1] != 1:
        raise ValueError(
            f"value must be [B, 1] next to advantages [B, A] {tuple(advantages.shape)}, "
            f"got {tuple(value.shape)}"
        )
    if mode == "max":
        baseline = advantages.max(dim=-1, keepdim=True).values
    else:
        baseline = advantages.mean(dim=-1, keepdim=True)
    return value + (advantages - baseline)
