"""Tolerances for comparing two fp32 computations of the same quantity, from the computation's error bound
rather than from one CPU's rounding (AVX-512 and AVX2 kernels sum in different orders and blockings).

The bound used: a sum of ``n`` terms, in any order and any blocking, is off by at most ``n·u·Σ|terms|``
(Higham, *Accuracy and Stability of Numerical Algorithms*, §4.2), ``u = 2⁻²⁴`` for fp32. Two computations
of the same value are then at most twice that apart. A gradient summed over items (one batch, micro-batches,
a packed layout) is ``Σ_i g_i``; each ``g_i`` goes through the same chain of sums (the tokens a weight's
gradient adds up, per layer the projections' inputs, the MLP's width and the attention's positions, the
vocabulary), so to first order it is off by at most ``k·u·|g_i|`` per element, with ``k`` the total length
of that chain, and the sum of the items by ``k·u·Σ_i|g_i|``. The per-item gradients are computed one
item at a time for the magnitudes; cancellation between items (``|Σ g_i| ≪ Σ|g_i|``) is what a tolerance
taken from ``|Σ g_i|`` alone would miss.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

U = 2.0**-24  # fp32 unit roundoff


def chain_length(config, tokens: int, positions: int) -> int:
    """``k`` for a decoder with this ``config``: ``tokens`` summed into a weight's gradient, per layer the
    4 projections over the hidden size, the MLP's width and ``positions`` attended, then the vocabulary."""
    per_layer = 4 * config.hidden_size + config.intermediate_size + positions
    return tokens + config.num_hidden_layers * per_layer + config.vocab_size


def summed_bound(parts: Sequence[Sequence[torch.Tensor]], k: int) -> float:
    """What two fp32 computations of ``Σ_i parts[i]`` (each a list over parameters) may differ by, in every
    element: ``2·k·u·max Σ_i|g_i|``, the largest per-item magnitude sum over all parameters. Normwise, not
    per element: an element's rounding is set by the terms its sums add, not by its own value (a key
    bias's gradient is exactly 0, since softmax ignores a shift of every score; computed, it is the
    rounding of terms the size of the query's gradient)."""
    largest = max(float(sum(p[j].detach().abs().double() for p in parts).max()) for j in range(len(parts[0])))
    return 2 * k * U * largest


def assert_within(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], bound: float) -> None:
    """Every element of ``got`` within ``bound`` of ``want``; the message names the worst tensor."""
    for j, (a, b) in enumerate(zip(got, want, strict=True)):
        diff = float((a.double() - b.double()).abs().max())
        assert diff <= bound, f"tensor {j}: differs by {diff:.3g}, above its bound {bound:.3g}"
