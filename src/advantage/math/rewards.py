r"""Reward shaping for language-model RL: pure functions on per-completion tensors ``[B]``, and the
per-token rewards ``[B, T]`` of a score plus a KL penalty (:func:`token_rewards`).

Both functions return a *term to add* to the task reward (``rewards + overlong_penalty(...)``) or the
shaped reward itself (``length_preference``), computed before the group advantages of
:mod:`advantage.math.advantages`. Lengths count generated response tokens (the EOS included), not the
prompt.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["last_token", "length_preference", "overlong_penalty", "token_rewards"]


def overlong_penalty(lengths: Tensor, max_length: int, cache_length: int) -> Tensor:
    r"""DAPO's soft overlong punishment (Yu et al. 2025, "DAPO", eq. 13).

    .. math::
        R_\text{length}(y) = \begin{cases}
        0, & |y| \le L_\max - L_\text{cache} \\
        \dfrac{(L_\max - L_\text{cache}) - |y|}{L_\text{cache}}, & L_\max - L_\text{cache} < |y| \le L_\max \\
        -1, & L_\max < |y|
        \end{cases}

    A linear ramp from 0 to −1 over the last ``cache_length`` tokens before the limit, continuous at both
    ends (−1 at exactly :math:`L_\max`). Added to the task reward, it tells the policy that it is running
    long *before* a truncated answer is scored, rather than punishing truncation alone (a truncated
    response has :math:`|y| = L_\max` and gets −1). ``cache_length = 0`` is the hard cut: 0 up to
    :math:`L_\max`, −1 beyond. DAPO uses :math:`L_\max` = 20480, :math:`L_\text{cache}` = 4096.

    Args:
        lengths: ``[B]`` response lengths (int or float).
        max_length: :math:`L_\max` > 0.
        cache_length: :math:`L_\text{cache}` in ``[0, max_length]``.

    Returns:
        ``[B]`` penalties in [−1, 0], float32 (float64 for float64 lengths).
    """
    if max_length <= 0:
        raise ValueError(f"max_length must be > 0, got {max_length}")
    if not 0 <= cache_length <= max_length:
        raise ValueError(f"cache_length must be in [0, max_length={max_length}], got {cache_length}")
    dtype = torch.promote_types(lengths.dtype, torch.float32)
    n = lengths.to(dtype)
    start = max_length - cache_length
    ramp = (start - n) / max(cache_length, 1)  # only used where start < n <= max_length, so cache > 0
    out = torch.where(n <= start, torch.zeros_like(n), ramp)
    return torch.where(n > max_length, torch.full_like(n, -1.0), out)


def length_preference(rewards: Tensor, lengths: Tensor, group_size: int, weight: float) -> Tensor:
    r"""Prefer the shorter of equally good answers within a group (study notes:
    "针对reward相同但长度不同的回合 … 回合更短的生成结果是我们更想要的").

    In each group of ``group_size`` consecutive rows, let :math:`W` be the rows that reach the group's
    maximum reward :math:`r^* > 0` (the "winners"). If their lengths differ,

    .. math::
        r_i \leftarrow r_i + w\,\frac{\bar\ell_W - \ell_i}{\max_W \ell - \min_W \ell}, \qquad i \in W,

    with :math:`\bar\ell_W` the mean winner length; every other row, and every group whose maximum is
    :math:`\le 0` (all wrong: a short wrong answer earns nothing) or whose winners have equal lengths, is
    unchanged. Properties:

    - the bonus lies strictly inside :math:`(-w, w)` and sums to 0 over the winners, so the group's mean
      reward is unchanged;
    - shorter winners get more, and the ordering between different reward values is kept whenever
      :math:`w` is at most the gap between :math:`r^*` and the next lower reward in the group (winners
      stay above every non-winner).

    Args:
        rewards: ``[B]`` task rewards, groups of ``group_size`` consecutive rows.
        lengths: ``[B]`` response lengths.
        group_size: G >= 1.
        weight: w >= 0, in reward units.

    Returns:
        ``[B]`` shaped rewards, float32 (float64 for float64 rewards).
    """
    if rewards.dim() != 1 or lengths.shape != rewards.shape:
        raise ValueError(
            f"rewards and lengths must both be 1-D [B] of the same size, got {tuple(rewards.shape)} "
            f"and {tuple(lengths.shape)}"
        )
    if group_size < 1 or rewards.shape[0] % group_size != 0:
        raise ValueError(
            f"the batch size must be a multiple of group_size >= 1, got batch size {rewards.shape[0]} "
            f"and group_size {group_size}"
        )
    if weight < 0:
        raise ValueError(f"weight must be >= 0, got {weight}")
    dtype = torch.promote_types(rewards.dtype, torch.float32)
    r = rewards.to(dtype).view(-1, group_size)
    n = lengths.to(dtype).view(-1, group_size)

    top = r.amax(dim=1, keepdim=True)
    win = (r == top) & (top > 0)  # [P, G]
    count = win.sum(dim=1, keepdim=True).clamp(min=1).to(dtype)
    mean = torch.where(win, n, torch.zeros_like(n)).sum(dim=1, keepdim=True) / count
    longest = torch.where(win, n, torch.full_like(n, -torch.inf)).amax(dim=1, keepdim=True)
    shortest = torch.where(win, n, torch.full_like(n, torch.inf)).amin(dim=1, keepdim=True)
    spread = longest - shortest  # -inf for groups without winners; 0 when the winners' lengths agree
    use = win & (spread > 0)
    bonus = weight * (mean - n) / torch.where(spread > 0, spread, torch.ones_like(spread))
    return (r + torch.where(use, bonus, torch.zeros_like(bonus))).view(-1)


def last_token(mask: Tensor) -> Tensor:
    """``[B]`` index of each row's last valid response token (the EOS, or the last token of a truncated
    response). Response masks are contiguous from position 0, so it is ``Σ mask − 1``."""
    return (mask.sum(-1).long() - 1).clamp(min=0)


def token_rewards(scores: Tensor, kl: Tensor, mask: Tensor, beta: float) -> Tensor:
    r"""Per-token rewards :math:`r_t = -\beta\,\mathrm{KL}_t + \mathbb 1[t = \text{last}]\,s` (Ziegler et
    al. 2019 eq. 2 spread over tokens; Stiennon et al. 2020), 0 on padding.

    Args:
        scores: ``[B]`` reward-model scores.
        kl: ``[B, T]`` per-token KL estimates (e.g. k1 = ``old_logp − ref_logp``), no grad.
        mask: ``[B, T]`` response mask.
        beta: KL coefficient β ≥ 0.
    """
    rewards = torch.where(mask != 0, -beta * kl, torch.zeros_like(kl))
    rows = torch.arange(len(scores), device=kl.device)
    rewards[rows, last_token(mask)] += scores.to(rewards.dtype)
    return rewards
