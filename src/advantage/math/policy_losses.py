r"""Policy-gradient surrogate losses: vanilla PG, PPO-Clip (with asymmetric and dual clipping), PPO-Penalty,
GSPO (sequence-level ratio).

One signature for the whole registry, hyperparameters bound with ``functools.partial``::

    loss_fn = partial(POLICY_LOSSES[name], clip_low=0.2, clip_high=0.28)   # the spec's params
    loss, metrics = loss_fn(logp, old_logp, advantages, mask)              # all [B, T]
    scalar = aggregate(loss, mask, mode)

Each function returns the *per-element* loss (shape of ``logp``, 0 at masked positions; aggregation is the
caller's choice, see :func:`advantage.math.masked.aggregate`; ``pg``, ``ppo_clip`` and ``ppo_penalty``
take ``mask=None`` for a batch without padding) and a dict of detached scalar metrics (masked
means over the valid elements).

Ratios are formed in log space, :math:`\rho = \exp(\text{clamp}(\log\pi - \log\pi_\text{old}, -c, c))`,
in float32 (float64 if the inputs are float64), so bf16 log-probs and a policy that moved far never give
``inf``. Masked-out positions may hold anything (``-inf`` log-probs of padding, NaN advantages); they
never reach the loss or the gradient.
"""

from __future__ import annotations

import functools
from typing import Protocol

import torch
from torch import Tensor

from advantage.math.kl import k3_from_ratio
from advantage.math.masked import keep, masked_mean
from advantage.math.registry import FunctionRegistry


# name -> loss. Metadata: ``clipped`` (a clipped ratio with ``clip_low`` / ``clip_high``: the losses a
# language-model actor offers).
class PolicyLoss(Protocol):
    """``(logp, old_logp, advantages, mask) -> (loss, metrics)``, all ``[B, T]``; hyperparameters bound by
    name (``partial(loss, **hyperparameters)``, the names in the entry's ``params``)."""

    def __call__(
        self, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor | None, /
    ) -> tuple[Tensor, dict[str, Tensor]]: ...


POLICY_LOSSES: FunctionRegistry[PolicyLoss] = FunctionRegistry("policy loss")


def _valid(mask: Tensor | None, like: Tensor) -> Tensor | None:
    """The mask as bool, after checking its shape; ``None`` (every element valid) stays ``None``."""
    if mask is None:
        return None
    if mask.shape != like.shape:
        raise ValueError(f"mask must have the shape of logp {tuple(like.shape)}, got {tuple(mask.shape)}")
    return mask.to(device=like.device) != 0


def _compute_dtype(*xs: Tensor) -> torch.dtype:
    return functools.reduce(torch.promote_types, (x.dtype for x in xs), torch.float32)


def _log_ratio(logp: Tensor, old_logp: Tensor, valid: Tensor | None, clamp: float) -> tuple[Tensor, Tensor]:
    """``(log ρ, ρ)`` in fp32/fp64, log ρ clamped to ``[-clamp, clamp]`` and 0 at masked positions."""
    if clamp <= 0:
        raise ValueError(f"log_ratio_clamp must be > 0, got {clamp}")
    dtype = _compute_dtype(logp, old_logp)
    lr = logp.to(dtype) - old_logp.to(dtype)
    # Zero the padding before exp: -inf - (-inf) is NaN, and NaN would leak into the gradient.
    lr = keep(valid, lr).clamp(-clamp, clamp)
    return lr, torch.exp(lr)


def _clean(x: Tensor, valid: Tensor | None, dtype: torch.dtype) -> Tensor:
    return keep(valid, x.to(dtype))


@POLICY_LOSSES.register(summary="vanilla policy gradient")
def pg(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor | None
) -> tuple[Tensor, dict[str, Tensor]]:
    r"""Vanilla policy gradient (REINFORCE surrogate; Williams 1992).

    .. math::
        \ell_t = -\hat A_t \log\pi_\theta(a_t \mid s_t), \qquad
        \nabla_\theta \ell_t = -\hat A_t \nabla_\theta \log\pi_\theta(a_t \mid s_t)

    ``advantages`` are constants (detach them; a return, a baseline-subtracted return or GAE). Valid only
    on fresh samples from the current policy; ``old_logp`` is unused (kept for the shared signature).

    Args:
        logp, old_logp, advantages, mask: ``[B, T]`` or ``[N]``.

    Returns:
        ``(loss, {})``; loss has the shape of ``logp``, 0 where masked.
    """
    valid = _valid(mask, logp)
    dtype = _compute_dtype(logp)
    loss = -_clean(advantages, valid, dtype) * _clean(logp, valid, dtype)
    return loss, {}


@POLICY_LOSSES.register(clipped=True, summary="PPO-Clip, token ratio")
def ppo_clip(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor | None,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    dual_clip: float | None = None,
    log_ratio_clamp: float = 20.0,
    with_metrics: bool = True,
) -> tuple[Tensor, dict[str, Tensor]]:
    r"""PPO-Clip surrogate (Schulman et al. 2017, eq. 7).

    .. math::
        \rho_t = \frac{\pi_\theta(a_t|s_t)}{\pi_{\text{old}}(a_t|s_t)}, \qquad
        \ell_t = -\min\big(\rho_t \hat A_t,\ \text{clip}(\rho_t, 1-\epsilon_\text{lo}, 1+\epsilon_\text{hi})
        \hat A_t\big)

    ``clip_high`` different from ``clip_low`` is DAPO's "clip-higher" (Yu et al. 2025). With
    ``dual_clip = c > 1`` (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL"), the
    objective for :math:`\hat A_t < 0` is also bounded below by :math:`c \hat A_t`, i.e. the loss is capped
    at :math:`-c \hat A_t`, so a negative-advantage action whose ratio has grown huge cannot dominate.
    Where a branch is clipped, the loss is constant in θ and the gradient is 0.

    Args:
        logp: ``[B, T]`` log-probs of the taken actions under the current policy (with grad).
        old_logp: ``[B, T]`` log-probs under the policy that collected the data (no grad).
        advantages: ``[B, T]`` (no grad).
        mask: ``[B, T]`` float or bool, or ``None`` (every element valid: no selects).
        clip_low: :math:`\epsilon_\text{lo}` in [0, 1).
        clip_high: :math:`\epsilon_\text{hi} \ge 0`; ``None`` means ``clip_low``.
        dual_clip: ``None``, or c > 1.
        log_ratio_clamp: :math:`\log\rho` is clamped to ``[-c, c]`` before ``exp``.
        with_metrics: compute the metrics below (False skips them, e.g. in all but the logged epoch).

    Returns:
        ``(loss, metrics)``: loss has the shape of ``logp`` (fp32, or fp64 for fp64 input), 0 where masked.
        Metrics (masked means): ``clipfrac`` — fraction of valid elements where the clipped term is the
        active one (strictly smaller objective, so the gradient is 0), split into ``clipfrac_low``
        (:math:`\rho < 1-\epsilon_\text{lo}` and :math:`\hat A < 0`) and ``clipfrac_high``
        (:math:`\rho > 1+\epsilon_\text{hi}` and :math:`\hat A > 0`), which add up to ``clipfrac`` (the
        balance tells whether clip-higher is doing anything); ``approx_kl`` — k3 estimate of
        :math:`KL(\pi_\text{old}\|\pi_\theta)`, mean of :math:`(\rho-1) - \log\rho`; ``ratio_mean``; and
        ``dual_clipfrac`` when ``dual_clip`` is set.
    """
    if not 0.0 <= clip_low < 1.0:
        raise ValueError(f"clip_low must be in [0, 1), got {clip_low}")
    if clip_high is None:
        clip_high = clip_low
    if clip_high < 0.0:
        raise ValueError(f"clip_high must be >= 0, got {clip_high}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (or None), got {dual_clip}")
    valid = _valid(mask, logp)
    log_ratio, ratio = _log_ratio(logp, old_logp, valid, log_ratio_clamp)
    adv = _clean(advantages, valid, ratio.dtype)

    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * adv
    objective = torch.minimum(unclipped, clipped)
    metrics: dict[str, Tensor] = {}
    if dual_clip is not None:
        floor = dual_clip * adv
        dual_active = (adv < 0) & (objective < floor)
        objective = torch.where(dual_active, floor, objective)
        if with_metrics:
            metrics["dual_clipfrac"] = masked_mean(dual_active.to(ratio.dtype), mask).detach()
    loss = keep(valid, -objective)

    if with_metrics:
        with torch.no_grad():
            metrics["clipfrac"] = masked_mean((clipped < unclipped).to(ratio.dtype), mask)
            low = (ratio < 1.0 - clip_low) & (adv < 0)  # the lower bound is the active term
            high = (ratio > 1.0 + clip_high) & (adv > 0)  # the upper bound is the active term
            metrics["clipfrac_low"] = masked_mean(low.to(ratio.dtype), mask)
            metrics["clipfrac_high"] = masked_mean(high.to(ratio.dtype), mask)
            metrics["approx_kl"] = masked_mean(k3_from_ratio(log_ratio, ratio), mask)
            metrics["ratio_mean"] = masked_mean(ratio, mask)
    return loss, metrics


@POLICY_LOSSES.register(summary="PPO-Penalty, adaptive KL")
def ppo_penalty(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor | None,
    *,
    beta: float | Tensor,
    log_ratio_clamp: float = 20.0,
    with_metrics: bool = True,
) -> tuple[Tensor, dict[str, Tensor]]:
    r"""PPO-Penalty (adaptive-KL) surrogate (Schulman et al. 2017 §4, eq. 8).

    .. math::
        \ell_t = -\rho_t \hat A_t + \beta\,\big[(\rho_t - 1) - \log\rho_t\big]

    The bracket is the k3 estimator of :math:`KL(\pi_\text{old}\|\pi_\theta)` per sample: unbiased and
    non-negative under samples from :math:`\pi_\text{old}` (which is how the batch was collected). At
    :math:`\rho = 1` the penalty's gradient :math:`\beta(\rho - 1)\nabla\log\pi` vanishes, so the first
    step equals vanilla PG's. Adapt β between iterations with
    :class:`advantage.math.kl.AdaptiveKLController`, fed the ``approx_kl`` metric.

    Args:
        logp, old_logp, advantages, mask: ``[B, T]`` or ``[N]`` (see :func:`ppo_clip`).
        beta: penalty coefficient β >= 0 (keyword; no default, it changes every iteration).
        log_ratio_clamp: :math:`\log\rho` is clamped to ``[-c, c]`` before ``exp``.
        with_metrics: compute the metrics (False returns ``{}``).

    Returns:
        ``(loss, metrics)``: per-element loss, 0 where masked; ``approx_kl`` (mean k3) and ``ratio_mean``.
    """
    valid = _valid(mask, logp)
    log_ratio, ratio = _log_ratio(logp, old_logp, valid, log_ratio_clamp)
    adv = _clean(advantages, valid, ratio.dtype)
    k3 = k3_from_ratio(log_ratio, ratio)
    loss = keep(valid, -ratio * adv + beta * k3)
    metrics: dict[str, Tensor] = {}
    if with_metrics:
        with torch.no_grad():
            metrics = {"approx_kl": masked_mean(k3, mask), "ratio_mean": masked_mean(ratio, mask)}
    return loss, metrics


@POLICY_LOSSES.register(clipped=True, summary="GSPO, sequence ratio")
def gspo(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor | None,
    clip_low: float = 3e-4,
    clip_high: float | None = 4e-4,
    log_ratio_clamp: float = 20.0,
    with_metrics: bool = True,
) -> tuple[Tensor, dict[str, Tensor]]:
    r"""GSPO: clipping on a length-normalized sequence ratio (Zheng et al. 2025, "Group Sequence Policy
    Optimization"; GSPO-token form, eq. 13-14).

    .. math::
        s_i = \exp\Big(\frac{1}{|y_i|}\sum_{t}
        \log\frac{\pi_\theta(y_{i,t}|\cdot)}{\pi_\text{old}(y_{i,t}|\cdot)}\Big), \qquad
        s_{i,t} = \text{sg}[s_i]\,\frac{\pi_\theta(y_{i,t}|\cdot)}{\text{sg}[\pi_\theta(y_{i,t}|\cdot)]}

    .. math::
        \ell_{i,t} = -\min\big(s_{i,t}\hat A_{i,t},\ \text{clip}(s_{i,t}, 1-\epsilon_\text{lo},
        1+\epsilon_\text{hi})\hat A_{i,t}\big)

    :math:`s_{i,t}` has the value :math:`s_i` on every token of row i, so the clipping decision is made per
    sequence (a whole response is in or out), while the gradient flows through each token's own log-prob:
    :math:`\partial\ell_{i,t}/\partial\log\pi_\theta(y_{i,t}) = -\hat A_{i,t}\, s_i` where unclipped. With
    a constant advantage along the row (outcome rewards) and ``seq_mean_token_mean`` aggregation this is
    exactly the sequence-level GSPO objective :math:`-\min(s_i\hat A_i, \text{clip}(s_i)\hat A_i)`, whose
    per-token gradient is :math:`-\hat A_i s_i / |y_i|` (divided by the number of sequences). The
    geometric mean keeps :math:`s_i` in a range comparable across lengths, hence the tiny default clip
    range (the paper's 3e-4 / 4e-4).

    Log-ratios are formed in fp32 (fp64 for fp64 input) and 0 at masked positions; the per-sequence mean
    :math:`\log s_i` is clamped to ``[-c, c]`` before ``exp``. An all-masked row has :math:`s_i = 1` and
    loss 0.

    Args:
        logp: ``[B, T]`` log-probs of the sampled tokens under the current policy (with grad).
        old_logp: ``[B, T]`` under the sampling policy (no grad).
        advantages: ``[B, T]`` (no grad), e.g. ``adv[:, None]`` expanded along the row.
        mask: ``[B, T]`` float or bool; a 1-D input is one sequence; None: every token counts.
        clip_low: :math:`\epsilon_\text{lo}` in [0, 1).
        clip_high: :math:`\epsilon_\text{hi} \ge 0`; None: ``clip_low``.
        log_ratio_clamp: c > 0.
        with_metrics: compute the metrics (False returns ``{}``).

    Returns:
        ``(loss, metrics)``: per-token loss, shape of ``logp``, 0 where masked. Metrics (masked means over
        valid tokens, as in :func:`ppo_clip`): ``clipfrac``, ``clipfrac_low``, ``clipfrac_high``;
        ``approx_kl`` (token-level k3 of :math:`KL(\pi_\text{old}\|\pi_\theta)`); ``seq_ratio_mean``
        (mean :math:`s_i` over rows with a valid token).
    """
    if mask is None:  # every token counts
        mask = torch.ones_like(logp)
    clip_high = clip_low if clip_high is None else clip_high
    if not 0.0 <= clip_low < 1.0:
        raise ValueError(f"clip_low must be in [0, 1), got {clip_low}")
    if clip_high < 0.0:
        raise ValueError(f"clip_high must be >= 0, got {clip_high}")
    if log_ratio_clamp <= 0:
        raise ValueError(f"log_ratio_clamp must be > 0, got {log_ratio_clamp}")
    valid = _valid(torch.ones_like(logp) if mask is None else mask, logp)  # per-row lengths need a mask
    assert valid is not None
    dtype = _compute_dtype(logp, old_logp)
    lp = _clean(logp, valid, dtype)  # padding may hold -inf: zero it before any arithmetic
    log_ratio = lp - _clean(old_logp, valid, dtype)
    n = valid.sum(dim=-1, keepdim=True)
    seq_log_ratio = (log_ratio.sum(dim=-1, keepdim=True) / n.clamp(min=1)).clamp(
        -log_ratio_clamp, log_ratio_clamp
    )
    # Value s_i on every token; gradient s_i · ∇log π(y_t) (only through the token's own log-prob).
    s_tok = torch.exp(seq_log_ratio.detach() + lp - lp.detach())
    adv = _clean(advantages, valid, dtype)

    unclipped = s_tok * adv
    clipped = s_tok.clamp(1.0 - clip_low, 1.0 + clip_high) * adv
    objective = torch.minimum(unclipped, clipped)
    loss = torch.where(valid, -objective, torch.zeros_like(objective))

    metrics: dict[str, Tensor] = {}
    if with_metrics:
        with torch.no_grad():
            s = torch.exp(seq_log_ratio).expand_as(lp)
            tok_lr = log_ratio.clamp(-log_ratio_clamp, log_ratio_clamp)
            metrics["clipfrac"] = masked_mean((clipped < unclipped).to(dtype), mask)
            metrics["clipfrac_low"] = masked_mean(((s < 1.0 - clip_low) & (adv < 0)).to(dtype), mask)
            metrics["clipfrac_high"] = masked_mean(((s > 1.0 + clip_high) & (adv > 0)).to(dtype), mask)
            metrics["approx_kl"] = masked_mean(torch.exp(tok_lr) - 1.0 - tok_lr, mask)
            metrics["seq_ratio_mean"] = masked_mean(torch.exp(seq_log_ratio).squeeze(-1), (n > 0).squeeze(-1))
    return loss, metrics
