r"""The one place that steps an optimizer: :func:`step`, :func:`zero_grad`, :func:`clip_grad_norm`, and
:func:`adam`, the Adam/AdamW every trainer builds.

Every step is torch's own (``opt.step()``), through :func:`advantage.optim.eager.step`, which in the
``advantage`` command only skips the import of torch's compiler module (the ``no_dynamo`` fast path of
:mod:`advantage.kernels`). An earlier fast path made torch's fused-Adam and foreach-RMSprop kernel calls
directly, without ``torch.optim``'s per-call Python; it saved at most 5 % of any whole step measured at the
sizes the README quotes (``benchmarks/results/fast_paths.md``) and was removed, with the re-implemented
optimizer state and step counters it needed. The gradient clip's fast path (torch's foreach kernels called
directly, the ``clip_grad_norm`` path) saved 13 % of DQN's training and stays.

Every private torch name of the optimizer code is here and in :mod:`advantage.optim.eager`, each behind a
feature check (:data:`FEATURES`, the hook registries' type) that falls back to the public path;
``tests/test_optim.py`` forces each fallback and checks it gives the reference result.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from advantage import kernels
from advantage.optim import eager

__all__ = ["FEATURES", "adam", "clip_grad_norm", "step", "zero_grad"]


def _has(*names: str) -> bool:
    return all(callable(getattr(torch, n, None)) for n in names)


# What this torch offers of the private kernels the clip's fast path calls. False sends every call to the
# public path (tests set it False to force it).
FEATURES: dict[str, bool] = {"foreach": _has("_foreach_norm", "_foreach_mul_")}


@functools.cache
def _fused_cpu() -> bool:
    """Whether ``torch.optim.Adam(fused=True)`` accepts CPU tensors in this torch (2.4 and later)."""
    try:
        torch.optim.Adam([torch.zeros(1, requires_grad=True)], fused=True)
    except (RuntimeError, ValueError, TypeError):
        return False
    return True


def _fused_supported(params: Sequence[Tensor]) -> bool:
    """``fused=True`` is available for these parameters: all on CPU (when this torch has the CPU kernel)
    or all on CUDA, floating point."""
    if not params or not all(p.is_floating_point() for p in params):
        return False
    devices = {p.device.type for p in params}
    return devices == {"cuda"} or (devices == {"cpu"} and _fused_cpu())


def adam(
    params: Iterable[Tensor],
    lr: float,
    *,
    weight_decay: float = 0.0,
    decoupled: bool = False,
    **kwargs: Any,
) -> torch.optim.Optimizer:
    """``torch.optim.Adam`` (``decoupled=False``) or ``AdamW`` over ``params``, ``fused=True`` where this
    torch has the fused kernel for their device (one kernel per step instead of a dozen ops per parameter;
    the same update, tested) and torch's default implementation otherwise. Step it with :func:`step`."""
    params = list(params)
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    fused = True if _fused_supported(params) else None
    return cls(params, lr=lr, weight_decay=weight_decay, fused=fused, **kwargs)


def zero_grad(params: Iterable[Tensor]) -> None:
    """``optimizer.zero_grad(set_to_none=True)`` for the optimizer's parameters ``params`` (without its
    profiler scope and dynamo guard)."""
    for p in params:
        p.grad = None


def clip_grad_norm(params: Iterable[Tensor], max_norm: float) -> Tensor:
    r"""``torch.nn.utils.clip_grad_norm_(params, max_norm)``: the total 2-norm
    :math:`n = \lVert (\lVert g_i \rVert)_i \rVert` of the gradients, returned, and
    :math:`g_i \leftarrow g_i \cdot \min\big(\text{max\_norm} / (n + 10^{-6}), 1\big)` in place.

    The one gradient clip of every trainer. ``max_norm <= 0`` is the trainers' ``max_grad_norm=0``, no
    clip: the gradients stay as they are and the norm is not computed (0 is returned). With the
    ``clip_grad_norm`` fast path (one device and dtype), torch's foreach kernels are called directly,
    without ``clip_grad_norm_``'s per-call grouping; the values are the same bit for bit."""
    if max_norm <= 0:
        return torch.zeros(())
    params = list(params)  # a generator such as model.parameters() is read twice below
    grads = [p.grad for p in params if p.grad is not None]
    if (
        not kernels.enabled("clip_grad_norm")
        or not FEATURES["foreach"]
        or not grads
        or len({(g.device, g.dtype) for g in grads}) > 1
    ):
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    with torch.no_grad():
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
        torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


def step(opt: torch.optim.Optimizer) -> None:
    """``opt.step()``: the one optimizer step of every trainer (:func:`advantage.optim.eager.step`: in the
    ``advantage`` command, without importing torch's compiler module; the same kernels either way)."""
    eager.step(opt)
