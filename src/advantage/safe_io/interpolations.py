"""OmegaConf interpolations costed before they are resolved (:func:`check_interpolations`): ``${…}`` can
make a few hundred bytes expand to gigabytes, or to millions of resolutions, so each config tree's
interpolations are scanned and their resolutions and characters counted first (the rules of bounded
reading: :mod:`advantage.safe_io.read`)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

from advantage.errors import AdvantageError, ConfigError
from advantage.safe_io.read import Error, MiB

# Interpolations: ``${…}`` resolutions OmegaConf would perform (it does not cache a string it resolved),
# and the characters they produce, over the whole config.
INTERPOLATION_MAX_RESOLUTIONS = 1000
INTERPOLATION_MAX_CHARS = 1 * MiB


# Resolvers whose first argument is a key of the config (its value is what they return).
_KEY_RESOLVERS = ("oc.select", "oc.deprecated", "oc.dict.keys", "oc.dict.values")
_PATH_PART = re.compile(r"\[([^\]]*)\]|([^.\[\]]+)")


_NESTED = "\x00"  # where a nested interpolation stood in the text of the one around it


class _Interp:
    """One ``${…}``: its text between the braces (each nested interpolation replaced by
    :data:`_NESTED`) and the interpolations nested in it, in order."""

    __slots__ = ("nested", "text")

    def __init__(self, text: str, nested: list[_Interp]):
        self.text, self.nested = text, nested


def _scan(s: str, i: int = 0, stop: str | None = None) -> tuple[list[_Interp], str, int]:
    """The interpolations in ``s`` from ``i`` (to the ``}`` closing the enclosing one when ``stop``),
    the text outside them (:data:`_NESTED` where each stood) and the index after the end. ``\\${`` is
    literal text, as OmegaConf reads it; quotes and braces inside an interpolation are kept balanced so a
    ``}`` in them does not close it."""
    found: list[_Interp] = []
    literal: list[str] = []
    braces = 0
    quote: str | None = None
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\" and i + 1 < n:
            literal.append(s[i : i + 2])
            i += 2
            continue
        if s.startswith("${", i):
            nested, text, i = _scan(s, i + 2, "}")
            found.append(_Interp(text, nested))
            literal.append(_NESTED)
            continue
        if stop is not None:
            if quote:
                quote = None if c == quote else quote
            elif c in "'\"":
                quote = c
            elif c == "{":
                braces += 1
            elif c == "}":
                if braces == 0:
                    return found, "".join(literal), i + 1
                braces -= 1
        literal.append(c)
        i += 1
    return found, "".join(literal), i


_DYNAMIC_KEY = (
    "a key built from another interpolation (${a.${b}}): its target, and so its cost, cannot be known "
    "before resolving it"
)


class _Costs:
    """Resolutions and characters of every interpolated value of a config tree (plain containers, as
    ``OmegaConf.to_container(resolve=False)`` gives), memoized per node. OmegaConf resolves a node each
    time it is referenced, so a reference costs one resolution plus all of its target's."""

    def __init__(self, tree: Any, what: str, error: Error):
        self.tree, self.what, self.error = tree, what, error
        self.memo: dict[tuple[Any, ...], tuple[int, int]] = {}
        self.active: set[tuple[Any, ...]] = set()

    def refuse(self, why: str) -> AdvantageError:
        return self.error(f"{self.what}: {why}; refused before resolving it")

    def over(self, cost: int, size: int) -> None:
        if cost > INTERPOLATION_MAX_RESOLUTIONS:
            raise self.refuse(
                f"its ${{…}} interpolations take more than {INTERPOLATION_MAX_RESOLUTIONS} resolutions "
                "(references to references: an interpolation bomb?)"
            )
        if size > INTERPOLATION_MAX_CHARS:
            raise self.refuse(
                f"its ${{…}} interpolations expand to more than {INTERPOLATION_MAX_CHARS} characters "
                "(an interpolation bomb?)"
            )

    def node(self, path: tuple[Any, ...]) -> tuple[int, int]:
        """``(resolutions, characters)`` of resolving the node at ``path`` (a container: all of it)."""
        if path in self.memo:
            return self.memo[path]
        if path in self.active:  # a cycle: OmegaConf reports it itself
            return 1, 0
        value = self._get(path)
        self.active.add(path)
        try:
            if isinstance(value, Mapping):
                parts = [self.node((*path, k)) for k in value]
                keys = sum(len(str(k)) for k in value)
                cost = (sum(p[0] for p in parts), sum(p[1] for p in parts) + keys)
            elif isinstance(value, list):
                parts = [self.node((*path, i)) for i in range(len(value))]
                cost = (sum(p[0] for p in parts), sum(p[1] for p in parts))
            elif isinstance(value, str) and "${" in value:
                cost = self._string(value, path)
            else:
                cost = (0, len(str(value)))
        finally:
            self.active.discard(path)
        self.memo[path] = cost
        self.over(*cost)
        return cost

    def _get(self, path: tuple[Any, ...]) -> Any:
        value = self.tree
        for part in path:
            value = value[part]
        return value

    def _find(self, base: tuple[Any, ...], key: str) -> tuple[Any, ...] | None:
        """The path of the node ``key`` names, relative to the container at ``base`` (None: no such node,
        which OmegaConf reports itself)."""
        value: Any = self._get(base)
        path = list(base)
        for bracket, plain in _PATH_PART.findall(key):
            part: Any = (bracket or plain).strip()
            if isinstance(value, Mapping):
                if part not in value:
                    return None
            elif isinstance(value, list):
                if not part.lstrip("-").isdigit() or not -len(value) <= int(part) < len(value):
                    return None
                part = int(part) % len(value)
            else:
                return None
            path.append(part)
            value = value[part]
        return tuple(path)

    def _string(self, s: str, path: tuple[Any, ...]) -> tuple[int, int]:
        found, literal, _ = _scan(s)
        cost, size = 0, len(literal) - len(found)
        for interp in found:
            c, n = self._interp(interp, path)
            cost, size = cost + c, size + n
            self.over(cost, size)
        return cost, size

    def _interp(self, interp: _Interp, path: tuple[Any, ...]) -> tuple[int, int]:
        """One ``${…}`` in the value at ``path``: one resolution, its nested interpolations, and the
        node it reads (a key, or the key argument of a selecting resolver)."""
        cost, size = 1, len(interp.text) - len(interp.nested)
        for inner in interp.nested:
            c, n = self._interp(inner, path)
            cost, size = cost + c, size + n
        text = interp.text.strip()
        resolver, colon, args = text.partition(":")
        key = text
        if colon and re.fullmatch(r"[A-Za-z_][\w.]*", resolver.strip()):
            name = resolver.strip()
            key = args.split(",", 1)[0].strip()
            if name == "oc.env":
                size += _longest_env() if _NESTED in key else len(os.environ.get(key, ""))
                return cost, size
            if name == "oc.decode":
                # it parses its argument as a config value and resolves any ${…} in the text it gets:
                # allowed for an environment variable or literal text without ${…}, not for the config's
                # own values, whose text could hold further interpolations
                if "${" in args or not all(_is_env(inner) for inner in interp.nested):
                    raise self.refuse(
                        "${oc.decode:…} of a config value or of text holding ${…}: what it resolves, and so "
                        "its cost, cannot be known before resolving it (decode an environment variable "
                        "instead)"
                    )
                return cost, size
            if name not in _KEY_RESOLVERS:
                return cost, size
        if _NESTED in key:
            raise self.refuse(_DYNAMIC_KEY)
        dots = len(key) - len(key.lstrip("."))
        base = path[: len(path) - dots] if dots else ()
        try:
            target = self._find(base, key[dots:]) if key[dots:] else base
        except (KeyError, IndexError, TypeError):
            target = None
        if target is None:
            return cost, size
        c, n = self.node(target)
        return cost + c, size + n


def _is_env(interp: _Interp) -> bool:
    return interp.text.strip().startswith("oc.env:") and all(_is_env(i) for i in interp.nested)


def _longest_env() -> int:
    return max((len(v) for v in os.environ.values()), default=0)


def check_interpolations(tree: Any, what: str = "config", *, error: Error = ConfigError) -> None:
    """Refuse a config tree (plain containers, unresolved) whose ``${…}`` interpolations would take more
    than :data:`INTERPOLATION_MAX_RESOLUTIONS` resolutions or expand to more than
    :data:`INTERPOLATION_MAX_CHARS` characters, counted before anything is resolved: a ~360-byte file of
    references to references (``b: ${a}${a}${a}``, ``c: ${b}${b}${b}``, …) grows geometrically. Keys built
    from other interpolations and ``oc.decode`` of a config value, whose cost cannot be counted in
    advance, are refused too."""
    costs = _Costs(tree, what, error)
    total_cost = total_size = 0
    try:
        for path in _interpolated_leaves(tree):
            c, n = costs.node(path)
            total_cost, total_size = total_cost + c, total_size + n
            costs.over(total_cost, total_size)
    except RecursionError:
        raise costs.refuse("its ${…} interpolations are nested or chained too deeply") from None


def _interpolated_leaves(tree: Any) -> Iterator[tuple[Any, ...]]:
    stack: list[tuple[Any, tuple[Any, ...]]] = [(tree, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, Mapping):
            stack.extend((v, (*path, k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(value))
        elif isinstance(value, str) and "${" in value:
            yield path
