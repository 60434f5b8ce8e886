r"""The one place that steps an optimizer: :func:`step`, :func:`zero_grad`, :func:`clip_grad_norm`, and
:func:`adam`, the Adam/AdamW every trainer builds.

For a network of ~10^5 parameters on a CPU, ``torch.optim``'s per-call Python (step hooks, profiler
ranges, the dynamo guard, regrouping the tensors by device and dtype) costs more than the arithmetic of a
step. :func:`step` makes the same kernel calls directly where that grouping is trivial (one parameter
group, one device and dtype) -- the ``optimizer_step`` fast path of :mod:`advantage.kernels` -- and calls
``opt.step()`` otherwise. What it buys, on and off, at the sizes the README quotes:
``benchmarks/results/fast_paths.md``.

Every use of a private torch name by the optimizer code is here (and in :mod:`advantage.optim.eager`),
each behind a feature check (:data:`FEATURES`) that falls back to the public path when this torch does
not have it; ``tests/test_optim.py`` forces each fallback and checks it gives the reference result, and
checks the fast path against ``opt.step()`` bit for bit (state, parameters, a resumed checkpoint).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import torch
from torch import Tensor

from advantage import kernels
from advantage.optim import eager

__all__ = ["FEATURES", "adam", "clip_grad_norm", "fused_supported", "step", "zero_grad"]


def _has(*names: str) -> bool:
    return all(callable(getattr(torch, n, None)) for n in names)


# What this torch offers of the private kernels the fast path calls. A False entry sends every call to the
# public path (tests set them False to force it).
FEATURES: dict[str, bool] = {
    # torch's fused Adam/AdamW kernels (CPU since torch 2.4), called as torch's fused path calls them
    "fused_adam": _has("_fused_adam_", "_fused_adamw_", "_foreach_add_"),
    # the multi-tensor kernels of torch's foreach paths (RMSprop's, clip_grad_norm_'s)
    "foreach": _has("_foreach_norm", "_foreach_mul_", "_foreach_add_", "_foreach_addcmul_", "_foreach_sqrt")
    and _has("_foreach_addcdiv_"),
}


@functools.cache
def _fused_cpu() -> bool:
    """Whether ``torch.optim.Adam(fused=True)`` accepts CPU tensors in this torch (2.4 and later)."""
    try:
        torch.optim.Adam([torch.zeros(1, requires_grad=True)], fused=True)
    except (RuntimeError, ValueError, TypeError):
        return False
    return True


def fused_supported(params: Sequence[Tensor]) -> bool:
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
    fused = True if fused_supported(params) else None
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
    """``opt.step()``: the one optimizer step of every trainer.

    With the ``optimizer_step`` fast path, two kinds of optimizer are stepped with torch's own kernels in
    torch's order, for one parameter group on one device and dtype, with their state created as torch
    creates it in ``opt.state`` (checkpoints save and load it as usual):

    * ``torch.optim.Adam`` / ``AdamW`` with ``fused=True``: the step counters' increment and one
      ``_fused_adam_`` / ``_fused_adamw_`` call, as torch's fused path;
    * ``torch.optim.RMSprop`` with ``foreach=True``, without momentum, centring or weight decay: the
      ``_foreach`` kernels of torch's multi-tensor path, in its order (``v ← αv + (1−α)g²``,
      ``θ ← θ − lr·g / (√v + ε)``).

    Anything else (several groups or dtypes, amsgrad, maximize, step hooks, a grad scaler, another
    optimizer or setting, the fast path off, or a torch without these kernels) calls torch's step
    (through :func:`advantage.optim.eager.step`, which skips only the ``torch._dynamo`` import)."""
    if not kernels.enabled("optimizer_step") or not _lean(opt):
        eager.step(opt)
        return
    group = opt.param_groups[0]
    params = [p for p in group["params"] if p.grad is not None]
    if not params:
        return
    if type(opt) is torch.optim.RMSprop:
        _rmsprop_step(opt, group, params)
        return
    state = opt.state
    for p in params:
        if not state[p]:
            state[p].update(_fused_adam_state(p))
    with torch.no_grad():
        _fused_adam_update(params, [state[p] for p in params], group, type(opt) is torch.optim.AdamW)


def _lean(opt: torch.optim.Optimizer) -> bool:
    """Whether :func:`step` can make torch's kernel calls itself for ``opt``."""
    groups = opt.param_groups
    if len(groups) != 1 or eager.hooked(opt):
        return False
    group, kind = groups[0], type(opt)
    if kind is torch.optim.Adam or kind is torch.optim.AdamW:
        if not (FEATURES["fused_adam"] and group.get("fused") and not group["amsgrad"]):
            return False
        if any(isinstance(b, Tensor) for b in group["betas"]):
            return False
    elif kind is torch.optim.RMSprop:  # its multi-tensor path (foreach=True), the simple form
        if not (FEATURES["foreach"] and group.get("foreach") and group["momentum"] == 0):
            return False
        if group["centered"] or group["weight_decay"] != 0:
            return False
    else:
        return False
    if group["maximize"] or group["capturable"] or group["differentiable"]:
        return False
    if any(isinstance(v, Tensor) for k, v in group.items() if k in ("lr", "weight_decay", "eps", "alpha")):
        return False
    if getattr(opt, "grad_scale", None) is not None or getattr(opt, "found_inf", None) is not None:
        return False
    params = [p for p in group["params"] if p.grad is not None]
    if any(type(p) is not torch.nn.Parameter and type(p) is not Tensor for p in params):
        return False  # e.g. DTensor shards (trainer.strategy=fsdp): torch's step knows their layout
    return len({(p.device, p.dtype) for p in params}) <= 1 and not any(p.is_complex() for p in params[:1])


def _fused_adam_state(p: Tensor) -> dict[str, Tensor]:
    """The state torch's fused Adam/AdamW path creates for ``p`` at its first step."""
    return {
        "step": torch.zeros((), dtype=torch.float32, device=p.device),
        "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
        "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
    }


def _fused_adam_update(
    params: list[Tensor], states: list[dict[str, Tensor]], group: dict[str, Any], decoupled: bool
) -> None:
    """What torch's fused Adam (``decoupled=False``) or AdamW path does for one group on one device and
    dtype: add 1 to every step counter, then one ``_fused_adam_`` / ``_fused_adamw_`` call. Every parameter
    needs a gradient. (``tests/test_optim.py`` checks the counters against torch's own step, so a torch
    that moved the increment into the kernel fails a test instead of double-counting.)"""
    steps = [s["step"] for s in states]
    beta1, beta2 = group["betas"]
    fused: Callable[..., Any] = torch._fused_adamw_ if decoupled else torch._fused_adam_
    torch._foreach_add_(steps, 1)
    fused(
        params,
        [cast(Tensor, p.grad) for p in params],
        [s["exp_avg"] for s in states],
        [s["exp_avg_sq"] for s in states],
        [],
        steps,
        amsgrad=False,
        lr=group["lr"],
        beta1=beta1,
        beta2=beta2,
        weight_decay=group["weight_decay"],
        eps=group["eps"],
        maximize=False,
        grad_scale=None,
        found_inf=None,
    )


def _rmsprop_step(opt: torch.optim.Optimizer, group: dict[str, Any], params: list[Tensor]) -> None:
    """torch's ``_multi_tensor_rmsprop`` for momentum 0, uncentred, no weight decay (the same kernels in the
    same order; the state as its ``_init_group`` creates it)."""
    state = opt.state
    for p in params:
        if not state[p]:
            state[p]["step"] = torch.zeros((), dtype=_scalar_dtype())
            state[p]["square_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
    states = [state[p] for p in params]
    grads = [cast(Tensor, p.grad) for p in params]
    square_avgs = [s["square_avg"] for s in states]
    alpha = group["alpha"]
    with torch.no_grad():
        torch._foreach_add_([s["step"] for s in states], _ONE, alpha=1.0)
        torch._foreach_mul_(square_avgs, alpha)
        torch._foreach_addcmul_(square_avgs, grads, grads, value=1 - alpha)
        avg = torch._foreach_sqrt(square_avgs)
        torch._foreach_add_(avg, group["eps"])
        torch._foreach_addcdiv_(params, grads, avg, value=-group["lr"])


_ONE = torch.tensor(1.0)  # torch's RMSprop adds a CPU tensor 1.0 to its CPU step counters


def _scalar_dtype() -> torch.dtype:
    """The dtype of torch's optimizer step counters (as ``torch.optim.optimizer._get_scalar_dtype``)."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
