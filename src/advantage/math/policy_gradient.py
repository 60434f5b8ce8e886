"""Policy-gradient estimator pieces: returns per step, the outer discount, per-decision importance
weights and unbiased baselines (Williams 1992; Greensmith et al. 2004;
Precup et al. 2000; Levine's CS285 lecture 5).

Pure tensor functions on ``[E, T]`` batches: E episodes, each a row from its first step, padded to T
steps, plus a mask (0 on padding). REINFORCE composes them with ``POLICY_LOSSES["pg"]``; the exact
gradient tests (``tests/test_policy_gradient_exact.py``) check each estimator against ∇J computed
exactly on a small MDP.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from advantage.math.returns import reward_to_go

__all__ = [
    "cumulative_weights",
    "episode_returns",
    "leave_one_out_mean",
    "optimal_constant_baseline",
    "outer_weights",
]


def episode_returns(rewards: Tensor, mask: Tensor, gamma: float, return_type: str) -> Tensor:
    """:math:`R_t`: the reward-to-go :math:`G_t`, or the whole return :math:`G_0` at every step; 0 where
    masked. ``rewards`` must be 0 on padding (a row holds one episode from its first step)."""
    g = reward_to_go(torch.where(mask != 0, rewards, torch.zeros_like(rewards)), gamma)
    if return_type == "whole":
        g = g[..., :1].expand_as(g)
    return torch.where(mask != 0, g, torch.zeros_like(g))


def outer_weights(mask: Tensor, gamma: float, discount_weight: bool) -> Tensor:
    """:math:`w_t = \\gamma^t` (the discounted objective's outer weight; Thomas 2014) or 1; 0 where masked."""
    dtype = mask.dtype if mask.is_floating_point() else torch.get_default_dtype()
    t = torch.arange(mask.shape[-1], dtype=torch.float64, device=mask.device)
    w = (gamma**t if discount_weight else torch.ones_like(t)).to(dtype).expand(mask.shape)
    return torch.where(mask != 0, w, torch.zeros_like(w))


def cumulative_weights(
    logp: Tensor, behaviour_logp: Tensor, mask: Tensor, max_weight: float | None
) -> Tensor:
    r"""Per-decision importance weights :math:`\bar\rho_{0:t} = \min(\prod_{k\le t}\pi(a_k|s_k)/\mu(a_k|s_k),
    \text{max\_weight})`, formed in log space (no overflow); 0 where masked. No gradient."""
    valid = mask != 0
    log_rho = torch.where(valid, (logp - behaviour_logp).detach(), torch.zeros_like(logp)).cumsum(-1)
    if max_weight is not None:
        log_rho = log_rho.clamp(max=math.log(max_weight))
    return torch.where(valid, log_rho.exp(), torch.zeros_like(log_rho))


def leave_one_out_mean(returns: Tensor, mask: Tensor, per_step: bool) -> Tensor:
    r"""The mean of the *other* episodes' returns: at the same step t over the episodes still running at t
    (``per_step``), or of their step-0 values (whole returns). 0 where no other episode counts.

    .. math::
        b_{i,t} = \frac{\sum_{j\ne i} m_{j,t} R_{j,t}}{\sum_{j\ne i} m_{j,t}}

    Independent of episode i, so :math:`E[b_{i,t}\nabla\log\pi(a_{i,t}|s_{i,t})] = 0`: unbiased at any E.

    Args:
        returns, mask: ``[..., E, T]``; episodes along dim -2 (leading dims: independent batches).
    """
    m = (mask != 0).to(returns.dtype)
    r = torch.where(mask != 0, returns, torch.zeros_like(returns))
    if not per_step:
        r, m = r[..., :1], m[..., :1]
    total, count = r.sum(-2, keepdim=True) - r, m.sum(-2, keepdim=True) - m
    return (total / count.clamp(min=1)).expand_as(returns)


def optimal_constant_baseline(g: Tensor, c: Tensor) -> Tensor:
    r"""Leave-one-out variance-optimal constant baseline ``[..., E]`` from per-episode gradients
    ``[..., E, P]``.

    The estimator of episode i is :math:`g_i - b\,c_i`; its total variance
    :math:`E\|g - bc\|^2 - \|\nabla J\|^2` is smallest at :math:`b^* = E\langle c, g\rangle / E\|c\|^2`
    (Greensmith et al. 2004; CS285 lecture 5, with :math:`c = \nabla\log\pi(\tau)` and :math:`g = R\,c` for
    whole returns). Episode i gets the estimate from the other episodes of its batch (dim -2), so its
    baseline is independent of it.
    """
    num, den = (c * g).sum(-1), (c * c).sum(-1)
    loo_num, loo_den = num.sum(-1, keepdim=True) - num, den.sum(-1, keepdim=True) - den
    return torch.where(loo_den > 0, loo_num / loo_den.clamp(min=1e-30), torch.zeros_like(num))
