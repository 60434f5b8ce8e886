"""Where a config's values come from, as text: dotted ``key=value`` overrides, YAML files (bounded
reads), their deep merge and ``${...}`` interpolations, and dotted-key helpers. The schema the values are
checked against (sections, options, validation) is :mod:`advantage.config`.

OmegaConf does the parsing where it is needed: the typed reading of ``key=value`` strings, merging and
``${oc.env:VAR}`` interpolation; plain values (the common case) are read without importing it.
"""

from __future__ import annotations

import itertools
import re
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from advantage.errors import ConfigError

# ----------------------------------------------------------------------------------------------------
# Dict helpers


def set_dotted(tree: dict[str, Any], key: str, value: Any) -> None:
    """``set_dotted(d, "a.b", 1)`` makes ``d == {"a": {"b": 1}}`` (merging into what is there)."""
    parts = key.split(".")
    node = tree
    for p in parts[:-1]:
        nxt = node.get(p)
        if not isinstance(nxt, dict):
            nxt = node[p] = {}
        node = nxt
    node[parts[-1]] = value


def nest(dotted: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1, "a.c": 2}`` -> ``{"a": {"b": 1, "c": 2}}``."""
    out: dict[str, Any] = {}
    for k, v in dotted.items():
        set_dotted(out, k, v)
    return out


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Inverse of :func:`nest`."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


_KEY = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_INT = re.compile(r"-?(0|[1-9]\d*)")
_FLOAT = re.compile(r"-?\d+\.\d+([eE][-+]?\d+)?|-?\d+[eE][-+]?\d+")
_WORD = re.compile(r"[A-Za-z_][\w\-./]*")
# YAML 1.1 words with a meaning of their own (booleans, null, inf/nan): left to OmegaConf's parser
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "null", "true", "false", "inf", "nan"}


def _simple_overrides(items: list[str]) -> dict[str, Any] | None:
    """``key=value`` items whose values are plain integers, decimals, ``true``/``false`` or words
    (``CartPole-v1``, ``runs/a``), parsed as OmegaConf's dotlist parser parses them, without importing it
    (0.1 s of every command). None when any item needs the real parser (lists, quotes, YAML 1.1's other
    spellings, interpolations, a key that is also the prefix of another)."""
    out: dict[str, Any] = {}
    for item in items:
        key, _, raw = item.partition("=")
        if not _KEY.fullmatch(key):
            return None
        if _INT.fullmatch(raw):
            value: Any = int(raw)
        elif _FLOAT.fullmatch(raw):
            value = float(raw)
        elif raw in ("true", "True", "false", "False"):
            value = raw.lower() == "true"
        elif _WORD.fullmatch(raw) and raw.lower().lstrip(".") not in _YAML_WORDS:
            value = raw
        else:
            return None
        out[key] = value
    keys = sorted(out)
    if any(b.startswith(a + ".") for a, b in itertools.pairwise(keys)):
        return None
    return nest(out)


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """Parse ``key=value`` strings as YAML scalars (``0.9`` float, ``false`` bool, ``abc`` str)."""
    items = list(items)
    bad = [s for s in items if "=" not in s or s.startswith("=")]
    if bad:
        raise ConfigError([f"override {s!r} must look like key=value, e.g. algorithm.gamma=0.9" for s in bad])
    simple = _simple_overrides(items)
    if simple is not None:
        return simple
    from omegaconf import OmegaConf  # here, not at the top: `advantage list` needs no parser
    from omegaconf.errors import OmegaConfBaseException

    try:
        parsed = OmegaConf.to_container(OmegaConf.from_dotlist(items), resolve=False)
    except OmegaConfBaseException as e:
        raise ConfigError(f"cannot parse overrides {items}: {e}") from None
    return typing.cast(dict[str, Any], parsed)


# Bounds on a config file, checked before anything expands it: YAML aliases share one object, but OmegaConf
# copies each use, so 9 nested levels of 9 aliases in 532 bytes become 9^9 nodes (an "alias bomb").
YAML_MAX_BYTES = 1 << 20
YAML_MAX_NODES = 100_000  # mappings, lists and scalars, each alias counted as what it expands to
YAML_MAX_DEPTH = 64


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file; errors name the file (and the line, for syntax errors). Files over
    :data:`YAML_MAX_BYTES` are refused before they are read (the size from the opened file, at most that
    many bytes read), and files whose aliases expand to more than :data:`YAML_MAX_NODES` nodes or nest
    deeper than :data:`YAML_MAX_DEPTH` before anything expands them (:func:`parse_yaml`)."""
    from advantage.safe_io.read import read_bytes

    name = f"--config {str(path)!r}"  # how every error names the file
    data = read_bytes(path, YAML_MAX_BYTES, name, hint="; a config file is small")
    return parse_yaml(data, name, str(path))


def parse_yaml(data: bytes, name: str, where: str) -> dict[str, Any]:
    """The mapping of a YAML config held in ``data`` (read by the caller, e.g. from a run folder without
    following a link), checked as :func:`load_yaml` checks a file; ``name`` is how errors name it and
    ``where`` the file name YAML's syntax errors show. The bounded loader
    (:func:`advantage.safe_io.read.parse_yaml`) counts values, aliases and nesting before it builds
    anything; invalid UTF-8 is an error naming the byte."""
    from advantage.safe_io.read import parse_yaml as bounded

    if len(data) > YAML_MAX_BYTES:
        raise ConfigError(f"{name} is over {YAML_MAX_BYTES} bytes; a config file is small")
    parsed = bounded(data, name, where=where, max_nodes=YAML_MAX_NODES, max_depth=YAML_MAX_DEPTH)
    if parsed is None:
        return {}
    if not isinstance(parsed, dict):
        raise ConfigError(f"{name} must hold a mapping of sections, got {type(parsed).__name__}")
    return parsed


def dump_yaml(data: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=False)


_PLAIN = (str, int, float, bool, type(None))


def _plain(value: Any) -> bool:
    """A tree of dicts, lists and scalars without ``${...}``: what merging needs no OmegaConf for."""
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    # "${...}" is an interpolation and "???" OmegaConf's missing value (which a merge does not apply)
    return isinstance(value, _PLAIN) and not (isinstance(value, str) and ("${" in value or value == "???"))


def _merge_plain(trees: tuple[Mapping[str, Any], ...]) -> dict[str, Any] | None:
    """OmegaConf's merge of plain trees, without importing it (0.1 s of a config error's time): nested
    dicts merge key by key, anything else is replaced by the later value, tuples become lists. None where
    OmegaConf would be needed: an interpolation, another type (a tuple, say), or a key whose value changes
    kind (dict, list or scalar), where OmegaConf has rules and errors of its own."""
    if not all(_plain(t) for t in trees):
        return None

    def copy(v: Any) -> Any:
        if isinstance(v, Mapping):
            return {k: copy(x) for k, x in v.items()}
        if isinstance(v, list):
            return [copy(x) for x in v]
        return v

    def kind(v: Any) -> str:
        return "dict" if isinstance(v, Mapping) else "list" if isinstance(v, list) else "scalar"

    def into(dst: dict[str, Any], src: Mapping[str, Any]) -> bool:
        for k, v in src.items():
            old = dst.get(k)
            if old is not None and v is not None and kind(old) != kind(v):
                return False
            if isinstance(old, dict) and isinstance(v, Mapping):
                if not into(old, v):
                    return False
            else:
                dst[k] = copy(v)
        return True

    out: dict[str, Any] = {}
    for t in trees:
        if not into(out, t):
            return None
    return out


def interpolations(*trees: Mapping[str, Any]) -> dict[str, str]:
    """Dotted keys whose merged value is a ``${...}`` interpolation, with its unresolved text (saved as is,
    so a secret read with ``${oc.env:VAR}`` stays in the environment)."""
    if _merge_plain(trees) is not None:
        return {}  # no interpolation anywhere
    from omegaconf import OmegaConf

    merged = OmegaConf.merge(*[OmegaConf.create(dict(t)) for t in trees])
    raw = flatten(typing.cast(dict[str, Any], OmegaConf.to_container(merged, resolve=False)))
    return {k: v for k, v in raw.items() if isinstance(v, str) and "${" in v}


def merge(*trees: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge nested dicts (later wins) and resolve ``${...}`` interpolations."""
    plain = _merge_plain(trees)
    if plain is not None:
        return plain
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from advantage.safe_io.interpolations import check_interpolations

    try:
        merged = OmegaConf.merge(*[OmegaConf.create(dict(t)) for t in trees])
        # counted before anything resolves: a few hundred bytes of references to references can stand
        # for gigabytes, or millions of resolutions
        check_interpolations(OmegaConf.to_container(merged, resolve=False))
        return typing.cast(dict[str, Any], OmegaConf.to_container(merged, resolve=True))
    except OmegaConfBaseException as e:
        raise ConfigError(f"cannot resolve config: {' '.join(str(e).split())}") from None
