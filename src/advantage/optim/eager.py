"""Optimizers without ``torch._dynamo``: the compiler's 1-4 s import is not paid by runs that never compile
(the ``no_dynamo`` fast path of :mod:`advantage.kernels`).

``torch.optim`` guards each optimizer method against tracing: ``add_param_group``, ``zero_grad``,
``state_dict`` and ``load_state_dict`` are wrapped by ``torch._disable_dynamo``, which imports
``torch._dynamo`` on its first call, and every ``step`` goes through ``_use_grad_for_differentiable``,
which imports it on every call to insert graph breaks. In eager mode both wrappers are no-ops around the
method; the import alone costs 1.2 s on a quiet 2-core machine (more under load) before the first update,
more than a whole CartPole run's training.

:func:`install` fills ``torch._disable_dynamo``'s own per-function cache (the attribute it reads before
importing) with a dispatcher that calls the method directly while ``torch._dynamo`` has never been
imported, and hands over to torch's real ``torch._dynamo.disable`` as soon as it has (anyone who compiles
imports it first, so tracing still sees the guard). :func:`step` calls an optimizer's undecorated
``step`` under ``no_grad`` -- what the decorator does in eager mode -- and falls back to ``opt.step()``
whenever hooks, a differentiable optimizer or a loaded ``torch._dynamo`` could make them differ.

:func:`install` changes ``torch.optim`` for the whole process, so only the ``advantage`` command calls it
(:func:`advantage.cli.main`), never an import of a library module: a program that imports ``advantage``
keeps torch as it is (and pays the import once). Every private name read here is checked first
(:func:`hooks_readable`, the wrapper's shape); where one is missing, torch's own path runs.

Nothing changes numerically: the same functions of ``torch.optim`` run (tests compare parameters and
state dicts against plain ``opt.step()``).
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.optim import optimizer as _optimizer_module

from advantage import kernels

_DYNAMO = "torch._dynamo"
_installed = False


def _dispatcher(fn: Callable[..., Any]) -> Callable[..., Any]:
    """What ``torch._disable_dynamo``'s wrapper calls: ``fn`` itself until ``torch._dynamo`` is loaded,
    then torch's own ``torch._dynamo.disable(fn)`` (cached back into the attribute it reads)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if _DYNAMO not in sys.modules:
            return fn(*args, **kwargs)
        import torch._dynamo

        try:
            real = torch._dynamo.disable(fn, True, wrapping=False)
        except TypeError:  # torch before 2.8: no ``wrapping`` argument (its wrapper is what it returns)
            real = torch._dynamo.disable(fn, True)
        fn.__dynamo_disable = real  # type: ignore[attr-defined]  # torch's cache: later calls skip this
        return real(*args, **kwargs)

    return call


def install() -> None:
    """Pre-fill the ``torch._disable_dynamo`` cache of every ``torch.optim.Optimizer`` method it wraps.

    Idempotent; a no-op for methods whose wrapper does not have the expected shape (another torch
    version), which then import ``torch._dynamo`` as before."""
    global _installed
    if _installed:
        return
    _installed = True
    for name, member in vars(torch.optim.Optimizer).items():
        fn = getattr(member, "__wrapped__", None)
        inner = getattr(member, "__code__", None)
        # torch._compile._disable_dynamo's wrapper is a closure named ``inner`` over ``fn``
        if fn is None or inner is None or member.__name__ != name or "fn" not in inner.co_freevars:
            continue
        if getattr(fn, "__dynamo_disable", None) is None:
            fn.__dynamo_disable = _dispatcher(fn)


def hooked(opt: torch.optim.Optimizer) -> bool:
    """Whether a direct step could skip something of ``opt.step()``: step hooks registered on ``opt`` or on
    every optimizer, or (another torch) hook registries not where they are read here."""
    registries = (
        getattr(opt, "_optimizer_step_pre_hooks", None),
        getattr(opt, "_optimizer_step_post_hooks", None),
        getattr(_optimizer_module, "_global_optimizer_pre_hooks", None),
        getattr(_optimizer_module, "_global_optimizer_post_hooks", None),
    )
    return any(not isinstance(r, dict) or r for r in registries)


@functools.cache
def _raw_step(cls: type[torch.optim.Optimizer]) -> Callable[..., Any]:
    """``cls.step`` without its wrappers (the profiler/hook layer and ``_use_grad_for_differentiable``)."""
    return inspect.unwrap(cls.step)


def step(opt: Any) -> None:
    """``opt.step()`` in eager mode without the ``torch._dynamo`` import: the undecorated step of the
    optimizer's class under ``torch.no_grad()`` (the decorator's eager behaviour for a non-differentiable
    optimizer). Falls back to ``opt.step()`` when step hooks are registered, the optimizer is
    differentiable, or ``torch._dynamo`` is already loaded (nothing left to save); anything that is not a
    ``torch.optim.Optimizer`` is stepped with its own ``step()``."""
    if (
        not isinstance(opt, torch.optim.Optimizer)
        or not _installed  # without install() the dynamo import is paid by the optimizer's constructor
        or not kernels.enabled("no_dynamo")
        or _DYNAMO in sys.modules
        or hooked(opt)
        or any(g.get("differentiable", False) for g in opt.param_groups)
    ):
        opt.step()
        return
    with torch.no_grad():
        _raw_step(type(opt))(opt)  # type: ignore[arg-type]  # a class is hashable (mypy checks its instances)
    opt._opt_called = True  # type: ignore[attr-defined]  # what the hook layer records (LR-scheduler check)
