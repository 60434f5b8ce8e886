r"""Registries that own their names: the functions a config picks by name, each registered where it is
defined, with its metadata.

A math module makes a registry and decorates its functions::

    GROUP_ADVANTAGES = FunctionRegistry("group advantage")

    @GROUP_ADVANTAGES.register(groups=True, process="group")
    def grpo(rewards: Tensor, group_size: int, eps: float = 1e-6) -> ...: ...

The name is the function's own (``grpo``; a registry made with ``prefix="kl_"`` drops that prefix:
``kl_k3`` is ``k3``), so it is written once. What a caller needs to know about an entry travels with
it as keyword metadata (whether it needs groups, whether its advantages are per token, ...), plus its
hyperparameters (the parameters that have defaults, read from the signature) and a one-line summary
(the ``summary`` keyword, else the docstring's first line). A registry is a read-only mapping
``name -> function``.

**Without torch.** The configs list these names as their ``choices`` and check a value's metadata (a
group advantage with ``worker.rollout.n=1``) when a config is read, and reading a config imports no torch
(``advantage list``, a config error). :func:`static_specs` reads the same names and metadata from the
module's source with :mod:`ast` (the decorator's arguments are literals), without importing it;
``tests/test_math_registry.py`` checks that it agrees with the imported registry, entry by entry.
This module imports nothing heavy, and :mod:`advantage.math` imports its modules lazily, so
``from advantage.math.registry import static_specs`` costs no torch.
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar, cast, overload

__all__ = ["FunctionRegistry", "Spec", "choices", "described", "static_specs"]

F = TypeVar("F")  # the registry's function type: a Protocol giving the shared call signature
G = TypeVar("G")  # a decorated function keeps its own signature

# Metadata values are literals (the static reader evaluates them with ast.literal_eval).
Meta = Mapping[str, object]


@dataclass(frozen=True)
class Spec:
    """One registered function: its ``name``, ``summary``, hyperparameters ``params`` (the parameters
    with defaults, in signature order) and the decorator's keyword ``meta``."""

    name: str
    summary: str
    params: tuple[str, ...]
    meta: Meta = field(default_factory=dict)

    def get(self, key: str, default: object = None) -> object:
        """The metadata value ``key`` (``default`` when the decorator did not give it)."""
        return self.meta.get(key, default)


def _summary(meta: Meta, doc: str | None) -> str:
    given = meta.get("summary")
    if isinstance(given, str):
        return given
    return (doc or "").strip().splitlines()[0].rstrip(".") if doc and doc.strip() else ""


class FunctionRegistry(Mapping[str, F], Generic[F]):
    """Named functions of one kind (a group advantage, a policy loss, ...), filled by :meth:`register`.

    Args:
        what: what an entry is, for error messages (``"group advantage"``).
        prefix: dropped from a function's name to give its registry name (``"kl_"``).
    """

    def __init__(self, what: str, prefix: str = ""):
        self.what, self.prefix = what, prefix
        self._fns: dict[str, F] = {}
        self._specs: dict[str, Spec] = {}

    @overload
    def register(self, fn: G, /) -> G: ...

    @overload
    def register(self, fn: None = None, /, **meta: object) -> Callable[[G], G]: ...

    def register(self, fn: G | None = None, /, **meta: object) -> Callable[[G], G] | G:
        """Decorator: ``@R.register`` or ``@R.register(key=literal, ...)``. The function is returned
        unchanged; registering a name twice is an error."""

        def add(f: G) -> G:
            if not callable(f):
                raise TypeError(f"a {self.what} must be a function, got {f!r}")
            name = str(getattr(f, "__name__", "")).removeprefix(self.prefix)
            if name in self._fns:
                raise ValueError(f"{self.what} {name!r} is registered twice")
            sig = inspect.signature(f)
            params = tuple(
                p.name for p in sig.parameters.values() if p.default is not inspect.Parameter.empty
            )
            self._fns[name] = cast(F, f)
            self._specs[name] = Spec(name, _summary(meta, f.__doc__), params, dict(meta))
            return f

        return add(fn) if fn is not None else add

    def bind(self, name: str, **available: object) -> F:
        """Entry ``name`` with the hyperparameters it takes (its spec's ``params``) bound from
        ``available``, by name; the values of ``available`` it does not take are left out (a config section
        offers the values of every entry it can pick)."""
        params = self.spec(name).params
        fn = self._fns[name]
        if not callable(fn):  # registered functions are; this narrows the type
            raise TypeError(f"{self.what} {name!r} is not callable")
        return cast(F, functools.partial(fn, **{k: v for k, v in available.items() if k in params}))

    def spec(self, name: str) -> Spec:
        """The :class:`Spec` of ``name``; a clear error naming the allowed ones otherwise."""
        self._check(name)
        return self._specs[name]

    def specs(self) -> dict[str, Spec]:
        return dict(self._specs)

    def _check(self, name: str) -> None:
        if name not in self._fns:
            raise KeyError(f"unknown {self.what} {name!r}; allowed: {', '.join(self._fns)}")

    def __getitem__(self, name: str) -> F:
        self._check(name)
        return self._fns[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fns)

    def __len__(self) -> int:
        return len(self._fns)

    def __repr__(self) -> str:
        return f"FunctionRegistry({self.what!r}: {', '.join(self._fns)})"


# ----------------------------------------------------------------------------------------------------
# The same names and metadata, read from the source without importing it


def _registry_call(node: ast.expr) -> ast.Call | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "FunctionRegistry":
        return node
    return None


def _decorator_meta(dec: ast.expr, registry: str) -> dict[str, object] | None:
    """The keyword metadata of ``@registry.register`` / ``@registry.register(...)``, else None."""
    call = dec if isinstance(dec, ast.Call) else None
    target = call.func if call is not None else dec
    if not (
        isinstance(target, ast.Attribute)
        and target.attr == "register"
        and isinstance(target.value, ast.Name)
        and target.value.id == registry
    ):
        return None
    return {kw.arg: ast.literal_eval(kw.value) for kw in (call.keywords if call else []) if kw.arg}


def _params(args: ast.arguments) -> tuple[str, ...]:
    positional = [*args.posonlyargs, *args.args]
    with_default = positional[len(positional) - len(args.defaults) :]
    kwonly = [a for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
    return tuple(a.arg for a in [*with_default, *kwonly])


@functools.cache
def static_specs(target: str) -> dict[str, Spec]:
    """``{name: Spec}`` of the registry ``"module:VARIABLE"`` (a module of :mod:`advantage.math`, e.g.
    ``"advantages:GROUP_ADVANTAGES"``), read from its source without importing it (no torch)."""
    module, _, registry = target.partition(":")
    path = Path(__file__).with_name(f"{module}.py")
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    prefix: str | None = None
    out: dict[str, Spec] = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == registry for t in targets):
            value = getattr(node, "value", None)
            call = _registry_call(value) if value is not None else None
            if call is not None:
                found = [ast.literal_eval(k.value) for k in call.keywords if k.arg == "prefix"]
                found += [ast.literal_eval(a) for a in call.args[1:2]]
                prefix = str(found[0]) if found else ""
        elif isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                meta = _decorator_meta(dec, registry)
                if meta is not None:
                    if prefix is None:
                        raise ValueError(f"{path}: {registry} is used before it is made")
                    name = node.name.removeprefix(prefix)
                    out[name] = Spec(name, _summary(meta, ast.get_docstring(node)), _params(node.args), meta)
    if prefix is None:
        raise ValueError(f"{path} makes no FunctionRegistry named {registry}")
    return out


def choices(target: str, **where: object) -> tuple[str, ...]:
    """The names of the registry ``"module:VARIABLE"`` whose metadata has every ``key=value`` of
    ``where`` (a missing key counts as ``None``), in registration order, without importing it."""
    return tuple(
        name for name, spec in static_specs(target).items() if all(spec.get(k) == v for k, v in where.items())
    )


def described(target: str, what: str, **where: object) -> str:
    """``"WHAT: name (summary), ..."``: the help text of an option that picks from ``target``, for the
    names :func:`choices` gives."""
    specs = static_specs(target)
    return f"{what}: " + ", ".join(f"{n} ({specs[n].summary})" for n in choices(target, **where))
