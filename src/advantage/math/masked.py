"""Masked reductions, whitening, and the loss aggregation modes.

Every on-policy batch is ``[B, T]`` (or a flat ``[N]``) plus a ``mask`` of the same shape, float or bool,
with 1 where an element counts and 0 where it is padding (after EOS, after the end of an episode). A float
mask is used as a weight: ``Σ x·mask / Σ mask``. Masked-out elements may hold anything, NaN and ±inf
included; they are selected away with ``torch.where`` before any arithmetic, so they never reach a result
or a gradient.

Rows (sequences) lie along the last dimension. A row with no valid element reduces to 0, never NaN.

``mask=None`` means every element counts (a classic-control batch has no padding): the same results as an
all-ones mask, bit for bit, without the selects and weight products, which on the few-row batches of
classic control cost more than the arithmetic (and add nodes to every backward pass).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from advantage.math.registry import FunctionRegistry


# name -> aggregation. Metadata: ``counts``, what its default denominator counts (``tokens``, ``rows``
# with a valid token, or all ``rows``): :func:`step_normalizer` gives that count for a whole step.
class LossAggregation(Protocol):
    """``(loss, mask, normalizer, max_len) -> scalar``."""

    def __call__(
        self,
        loss: Tensor,
        mask: Tensor | None,
        /,
        normalizer: float | Tensor | None = None,
        max_len: int | None = None,
    ) -> Tensor: ...


LOSS_AGGREGATIONS: FunctionRegistry[LossAggregation] = FunctionRegistry("loss aggregation")


def _weights(x: Tensor, mask: Tensor | None) -> Tensor | None:
    """The mask as a weight tensor in ``x``'s dtype, after checking shapes (``None``: every element)."""
    if mask is None:
        return None
    if mask.shape != x.shape:
        raise ValueError(f"mask must have the shape of the data {tuple(x.shape)}, got {tuple(mask.shape)}")
    return mask.to(dtype=x.dtype, device=x.device)


def _weighted(x: Tensor, w: Tensor | None) -> Tensor:
    # where, not x * w: padding may hold NaN/inf, and NaN * 0 is NaN (in the value and in the gradient).
    return x if w is None else torch.where(w != 0, x * w, torch.zeros_like(x))


def _count(x: Tensor, w: Tensor | None, dim: int | None = None) -> Tensor:
    """``Σ w`` (over everything, or along ``dim``); without a mask, the element count as a tensor of
    ``x``'s dtype (what the sum of an all-ones mask is, exactly, below 2^24 elements)."""
    if w is not None:
        return w.sum() if dim is None else w.sum(dim=dim)
    if dim is None:
        return torch.tensor(float(x.numel()), dtype=x.dtype, device=x.device)
    shape = list(x.shape)
    n = shape.pop(dim)
    return torch.full(shape, float(n), dtype=x.dtype, device=x.device)


def _mean(total: Tensor, x: Tensor, w: Tensor | None) -> Tensor:
    """``total / Σ w`` (0 where nothing is valid); without a mask and with elements, the count is known
    and non-zero: a plain division by it (the same value, without building and checking a count tensor)."""
    if w is None and x.numel() > 0:
        return total / float(x.numel())
    return _safe_div(total, _count(x, w))


def keep(valid: Tensor | None, x: Tensor) -> Tensor:
    """``x`` where ``valid`` (bool), 0 elsewhere; ``valid=None`` keeps everything."""
    return x if valid is None else torch.where(valid, x, torch.zeros_like(x))


def _safe_div(num: Tensor, den: Tensor) -> Tensor:
    """``num / den`` with 0 where ``den == 0`` (``num`` is 0 there), without a NaN gradient."""
    return num / torch.where(den != 0, den, torch.ones_like(den))


def masked_sum(x: Tensor, mask: Tensor | None, dim: int | None = None) -> Tensor:
    r""":math:`\sum_i x_i m_i`, over everything (``dim=None``, a scalar) or along ``dim``.

    Args:
        x: ``[B, T]`` or ``[N]``.
        mask: float or bool, shape of ``x``; ``None``: every element counts.
        dim: ``None`` for a scalar, or the dimension to reduce (``-1``: one value per row, ``[B]``).
    """
    s = _weighted(x, _weights(x, mask))
    return s.sum() if dim is None else s.sum(dim=dim)


def masked_mean(x: Tensor, mask: Tensor | None, dim: int | None = None) -> Tensor:
    r""":math:`\sum_i x_i m_i / \sum_i m_i`, over everything or along ``dim``; 0 where no element is valid.

    Args:
        x: ``[B, T]`` or ``[N]``.
        mask: float or bool, shape of ``x``; ``None``: every element counts.
        dim: ``None`` for a scalar, or the dimension to reduce (``-1``: per-row means, ``[B]``).
    """
    w = _weights(x, mask)
    s = _weighted(x, w)
    if dim is None:
        return _mean(s.sum(), x, w)
    return _safe_div(s.sum(dim=dim), _count(x, w, dim))


def masked_var(x: Tensor, mask: Tensor | None, unbiased: bool = True) -> Tensor:
    r"""Scalar variance of the valid elements.

    .. math::
        \mu = \frac{\sum m x}{n}, \quad \sigma^2 = \frac{\sum m (x-\mu)^2}{n - 1 \text{ (unbiased) or } n},
        \quad n = \sum m

    Returns 0 (not NaN) when there are too few elements: ``n == 0``, or ``n <= 1`` when unbiased.
    A float mask counts as frequency weights (``n`` is its sum).

    Args:
        x: ``[B, T]`` or ``[N]``.
        mask: float or bool, shape of ``x``; ``None``: every element counts.
        unbiased: Bessel's correction (divide by ``n - 1``), as ``torch.var``'s default.
    """
    w = _weights(x, mask)
    n = _count(x, w)
    mu = _safe_div(_weighted(x, w).sum(), n)
    ss = _weighted((x - mu) ** 2, w).sum()
    den = n - 1 if unbiased else n
    return torch.where(den > 0, ss / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(ss))


def masked_whiten(x: Tensor, mask: Tensor | None, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    r"""Normalise with the masked mean and (unbiased) standard deviation of the valid elements.

    .. math::
        \hat x = \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} \;\; (\text{shift\_mean}), \qquad
        \hat x = \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \mu \;\; (\text{otherwise})

    ``shift_mean=False`` rescales the spread but keeps the mean where it was (the convention of TRL's
    ``masked_whiten``; used for rewards, whose sign carries meaning). Statistics are over all valid
    elements of the batch (advantage normalisation, the PPO implementation detail; Huang et al. 2022,
    "The 37 implementation details of PPO"). Masked-out positions come back as 0.

    Args:
        x: ``[B, T]`` or ``[N]``.
        mask: float or bool, shape of ``x``; ``None``: every element counts.
        shift_mean: subtract the mean (true) or keep it (false).
        eps: added to the variance, so a constant input maps to 0 instead of NaN.

    Returns:
        Shape of ``x``: over the valid elements, mean 0 (or the old mean) and unbiased std 1 (for
        ``σ² ≫ ε``).
    """
    w = _weights(x, mask)
    mu = masked_mean(x, mask)
    var = masked_var(x, mask, unbiased=True)
    out = (x - mu) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mu
    return out if w is None else torch.where(w != 0, out, torch.zeros_like(out))


# --------------------------------------------------------------------------- loss aggregation


def _rows(loss: Tensor) -> int:
    return loss.shape[0] if loss.dim() > 1 else 1


@LOSS_AGGREGATIONS.register(counts="tokens", summary="mean over valid tokens")
def token_mean(
    loss: Tensor, mask: Tensor | None, normalizer: float | Tensor | None = None, max_len: int | None = None
) -> Tensor:
    r"""Token mean: :math:`\sum_{b,t} \ell_{bt} m_{bt} / Z`, with :math:`Z = \sum m` by default.

    Every valid token weighs the same, whatever the length of its sequence (PPO on a flat batch; DAPO's
    "token-level policy gradient loss", Yu et al. 2025). ``max_len`` is ignored (it is in the signature so
    every mode takes the same arguments).

    Gradient accumulation: pass ``normalizer`` = the valid-token count of the *whole optimizer step*, so
    that the sum of the micro-batch losses equals the loss of the one big batch (value and gradient).
    Dividing each micro-batch by its own count weighs tokens of short micro-batches more.

    Args:
        loss, mask: ``[B, T]`` or ``[N]``.
        normalizer: Z, a number or scalar tensor.
    """
    w = _weights(loss, mask)
    total = _weighted(loss, w).sum()
    if normalizer is None:
        return _mean(total, loss, w)
    return total / normalizer


@LOSS_AGGREGATIONS.register(counts="valid_rows", summary="mean over tokens, then over sequences")
def seq_mean_token_mean(
    loss: Tensor, mask: Tensor | None, normalizer: float | Tensor | None = None, max_len: int | None = None
) -> Tensor:
    r"""Sequence mean of per-sequence token means (the GRPO paper's :math:`\frac1G\sum_i\frac1{|o_i|}\sum_t`).

    .. math::
        \frac{1}{Z} \sum_{b:\, n_b > 0} \frac{\sum_t \ell_{bt} m_{bt}}{n_b}, \qquad n_b = \sum_t m_{bt}

    with :math:`Z` the number of sequences that have at least one valid token by default (an all-masked
    row contributes nothing and is not counted). For gradient accumulation pass ``normalizer`` = that
    count over the whole optimizer step. ``max_len`` is ignored. A 1-D input is one sequence.

    Args:
        loss, mask: ``[B, T]`` or ``[T]``.
        normalizer: Z, a number or scalar tensor.
    """
    w = _weights(loss, mask)
    n_row = _count(loss, w, -1)
    per_seq = _safe_div(_weighted(loss, w).sum(dim=-1), n_row)  # [B], 0 for empty rows
    total = per_seq.sum()
    if normalizer is None:
        return _safe_div(total, (n_row > 0).to(loss.dtype).sum())
    return total / normalizer


@LOSS_AGGREGATIONS.register(counts="rows", summary="sum over tokens / max_len, mean over sequences")
def seq_mean_token_sum_norm(
    loss: Tensor, mask: Tensor | None, normalizer: float | Tensor | None = None, max_len: int | None = None
) -> Tensor:
    r"""Dr. GRPO aggregation (Liu et al. 2025, "Understanding R1-Zero-Like Training").

    .. math::
        \frac{1}{Z} \sum_b \frac{\sum_t \ell_{bt} m_{bt}}{L_{\max}}

    Each sequence's token *sum* is divided by the fixed constant :math:`L_{\max}` (``max_len``, e.g. the
    maximum completion length), not by its own length, which removes GRPO's length bias. :math:`Z`
    defaults to B, every row (empty rows included). For gradient accumulation pass ``normalizer`` = the
    number of sequences in the whole optimizer step. A 1-D input is one sequence.

    Args:
        loss, mask: ``[B, T]`` or ``[T]``.
        normalizer: Z, a number or scalar tensor.
        max_len: :math:`L_{\max}`, required.
    """
    if max_len is None:
        raise ValueError("seq_mean_token_sum_norm needs max_len (the fixed length constant), got None")
    w = _weights(loss, mask)
    total = _weighted(loss, w).sum() / max_len
    return total / (_rows(loss) if normalizer is None else normalizer)


def aggregate(
    loss: Tensor,
    mask: Tensor | None,
    mode: str,
    normalizer: float | Tensor | None = None,
    max_len: int | None = None,
) -> Tensor:
    """Reduce a per-element loss ``[B, T]`` to a scalar with one of :data:`LOSS_AGGREGATIONS`.

    Modes: ``token_mean`` (:func:`token_mean`), ``seq_mean_token_mean`` (:func:`seq_mean_token_mean`),
    ``seq_mean_token_sum_norm`` (:func:`seq_mean_token_sum_norm`, needs ``max_len``). ``normalizer``
    replaces each mode's default denominator; with gradient accumulation, pass the count of the whole
    optimizer step (tokens, valid sequences, or sequences, by mode) so micro-batch losses add up exactly.
    """
    if mode not in LOSS_AGGREGATIONS:
        raise ValueError(f"loss aggregation mode must be one of {sorted(LOSS_AGGREGATIONS)}, got {mode!r}")
    return LOSS_AGGREGATIONS[mode](loss, mask, normalizer=normalizer, max_len=max_len)


def step_normalizer(mask: Tensor, mode: str) -> float:
    """The denominator of a whole optimizer step for aggregation ``mode`` (its ``counts`` metadata):
    valid tokens, sequences with a valid token, or all sequences of ``mask`` ``[B, T]``. Passed as
    :func:`aggregate`'s ``normalizer`` to every micro-batch, the micro-batch losses add up to the loss of
    the whole step."""
    counts = LOSS_AGGREGATIONS.spec(mode).get("counts")
    if counts == "tokens":
        return float(mask.sum())
    if counts == "valid_rows":
        return float((mask.sum(-1) > 0).sum())
    return float(mask.shape[0])
