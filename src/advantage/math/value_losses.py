r"""Critic (value-function) losses: MSE, PPO2-style clipped, Huber.

One signature for the registry, hyperparameters bound with ``functools.partial``::

    value_loss = partial(VALUE_LOSSES[name], **hyperparameters)     # the spec's params
    loss = value_loss(values, old_values, returns, mask)            # [B, T] per element
    scalar = aggregate(loss, mask, mode)

Each returns the per-element loss with the shape of ``values``, 0 at masked positions (which may hold
anything, NaN included); ``mask=None`` means every element is valid. ``old_values`` are the critic's
predictions at collection time (used by ``clipped`` only); ``returns`` are the regression targets (e.g. GAE
advantages + old values), no grad.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from advantage.math.masked import keep, masked_var
from advantage.math.registry import FunctionRegistry


# name -> critic loss ``f(values, old_values, returns, mask, ...)``.
class ValueLoss(Protocol):
    """``(values, old_values, returns, mask) -> per-element loss``; hyperparameters bound by name."""

    def __call__(
        self, values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor | None, /
    ) -> Tensor: ...


VALUE_LOSSES: FunctionRegistry[ValueLoss] = FunctionRegistry("value loss")


def _prepare(
    values: Tensor, others: tuple[Tensor, ...], mask: Tensor | None
) -> tuple[Tensor | None, list[Tensor]]:
    if mask is None:  # every element valid (no padding): nothing to select away
        return None, [x.to(values.dtype) for x in (values, *others)]
    if mask.shape != values.shape:
        raise ValueError(f"mask must have the shape of values {tuple(values.shape)}, got {tuple(mask.shape)}")
    valid = mask.to(device=values.device) != 0
    # Zero the padding first, so NaN targets at masked positions cannot reach the gradient.
    zero = torch.zeros_like(values)
    return valid, [torch.where(valid, x.to(values.dtype), zero) for x in (values, *others)]


@VALUE_LOSSES.register(summary="squared error")
def mse(values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor | None) -> Tensor:
    r"""Squared error :math:`\ell_t = \tfrac12 (V_\theta(s_t) - R_t)^2`. ``old_values`` is unused.

    Args:
        values, old_values, returns, mask: ``[B, T]`` or ``[N]``.
    """
    valid, (v, r) = _prepare(values, (returns,), mask)
    return keep(valid, 0.5 * (v - r) ** 2)


@VALUE_LOSSES.register(summary="PPO2 clipped squared error")
def clipped(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor | None, clip: float = 0.2
) -> Tensor:
    r"""Clipped value loss of OpenAI baselines' PPO2 (Huang et al. 2022, "37 implementation details", #9).

    .. math::
        V^\text{clip}_t = V_\text{old} + \text{clip}(V_\theta - V_\text{old}, -\epsilon, \epsilon), \qquad
        \ell_t = \tfrac12 \max\big((V_\theta - R_t)^2,\ (V^\text{clip}_t - R_t)^2\big)

    The max makes it pessimistic: moving the prediction further than ε from the old one earns no
    reduction in loss (gradient 0 when the clipped branch is the larger one).

    Args:
        values, old_values, returns, mask: ``[B, T]`` or ``[N]``.
        clip: ε >= 0, in the units of the values.
    """
    if clip < 0:
        raise ValueError(f"clip must be >= 0, got {clip}")
    valid, (v, old, r) = _prepare(values, (old_values, returns), mask)
    v_clip = old + (v - old).clamp(-clip, clip)
    return keep(valid, 0.5 * torch.maximum((v - r) ** 2, (v_clip - r) ** 2))


@VALUE_LOSSES.register(summary="Huber (smooth L1)")
def huber(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor | None, delta: float = 1.0
) -> Tensor:
    r"""Huber loss (``torch.nn.functional.huber_loss``, ``reduction="none"``); smooth-L1 for δ = 1.

    .. math::
        \ell_t = \begin{cases} \tfrac12 e^2, & |e| \le \delta \\ \delta(|e| - \tfrac12\delta), & |e| > \delta
        \end{cases}, \qquad e = V_\theta - R_t

    ``old_values`` is unused.

    Args:
        values, old_values, returns, mask: ``[B, T]`` or ``[N]``.
        delta: δ > 0, where the quadratic turns linear.
    """
    if delta <= 0:
        raise ValueError(f"delta must be > 0, got {delta}")
    valid, (v, r) = _prepare(values, (returns,), mask)
    return keep(valid, F.huber_loss(v, r, reduction="none", delta=delta))


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor | None = None) -> float:
    r"""How much of the returns' variance the critic explains:

    .. math::
        \mathrm{EV} = 1 - rac{\mathrm{Var}(R - V)}{\mathrm{Var}(R)}

    1 for a perfect critic, 0 for one no better than a constant, negative for a worse one; NaN when the
    returns do not vary (or there are fewer than two). Variances are unbiased (Bessel's correction); with
    ``mask``, over the valid elements only (:func:`advantage.math.masked.masked_var`).

    Args:
        values: the critic's predictions, any shape.
        returns: the regression targets, shape of ``values``.
        mask: optional, shape of ``values``; nonzero where valid.

    Returns:
        A Python float (a logged diagnostic, read once per update).
    """
    if mask is None:
        var = float(returns.var()) if returns.numel() > 1 else 0.0
        return float("nan") if var == 0 else 1 - float((returns - values).var()) / var
    var = float(masked_var(returns, mask))
    return float("nan") if var == 0 else 1.0 - float(masked_var(returns - values, mask)) / var
