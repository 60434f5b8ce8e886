"""Run configuration: dataclasses in sections, YAML files, dotted overrides, presets, validation.

A run's config is one dataclass per algorithm with the sections ``env`` (or ``data``), ``algorithm``,
``model`` and ``trainer``. Values come, in increasing priority, from the dataclass defaults, the
algorithm's default overrides, a named preset (``preset=NAME``), a YAML file (``--config F``) and dotted
overrides (``algorithm.gamma=0.9``).

OmegaConf does the parsing: YAML files, the typed reading of ``key=value`` strings, merging and
``${oc.env:VAR}`` interpolation. Validation is ours because a user should see *every* problem at once
(OmegaConf's structured configs stop at the first): unknown keys with a close-match suggestion, wrong
types and out-of-range values, each naming the field, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from advantage.errors import ConfigError

# ----------------------------------------------------------------------------------------------------
# Declaring options


def option(
    default: Any,
    help: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
    choices: Iterable[str] | None = None,
) -> Any:
    """A config field with its help text and allowed values (closed ``[lo, hi]`` unless ``*_open``)."""
    meta = {"help": help, "lo": lo, "hi": hi, "lo_open": lo_open, "hi_open": hi_open}
    meta["choices"] = tuple(choices) if choices is not None else None
    if isinstance(default, list | dict):  # a fresh copy per instance, as dataclasses require
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def section(cls: type, help: str = "") -> Any:
    """A nested section (a dataclass) of a config."""
    return field(default_factory=cls, metadata={"help": help})


@dataclass
class EnvConfig:
    """The ``env`` section. Keys other than those below are passed to ``gymnasium.make`` as keyword
    arguments (e.g. ``env.is_slippery=false``) and checked against the environment's constructor."""

    id: str = option("FrozenLake-v1", "Gymnasium environment id")
    max_episode_steps: int | None = option(None, "override the environment's time limit", lo=1)
    wrappers: str = option(
        "none",
        "preprocessing: none, or atari (frame skip, 84x84 gray, 4-frame stack)",
        choices=("none", "atari"),
    )
    kwargs: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "extra gymnasium.make kwargs", "extra": True}
    )


@dataclass
class VecEnvConfig(EnvConfig):
    """The ``env`` section of algorithms that step several environments at once."""

    num_envs: int = option(8, "environments stepped together (a gymnasium vector env)", lo=1)
    vectorization: str = option(
        "auto",
        "auto: the env's own vectorized version when it has one, else sync; sync; async",
        choices=("auto", "sync", "async"),
    )


@dataclass
class TrainerConfig:
    """The ``trainer`` section, common to every algorithm."""

    seed: int = option(0, "seed of every random number generator of the run", lo=0)
    total_steps: int = option(100_000, "environment steps to train for", lo=0)
    eval_every: int = option(10_000, "evaluate every N environment steps (0: only at the end)", lo=0)
    eval_episodes: int = option(100, "episodes per evaluation", lo=1)
    stop_at_return: float | None = option(None, "stop training once eval/return_mean reaches this")
    checkpoint_every: int = option(0, "checkpoint every N environment steps (0: only at the end)", lo=0)
    keep_checkpoints: int = option(3, "how many checkpoints to keep (the newest)", lo=1)
    log_every: int = option(1000, "log training metrics every N environment steps", lo=1)
    run_dir: str | None = option(None, "run folder (default runs/<algo>-<env>-<YYYYmmdd-HHMMSS>)")
    progress: str = option("auto", "progress display", choices=("auto", "bar", "lines", "none"))
    tensorboard: bool = option(True, "write TensorBoard event files")
    torch_threads: int = option(1, "torch CPU threads (small networks are fastest on one)", lo=1)
    device: str = option("cpu", "torch device for networks: cpu, cuda, cuda:N")
    num_workers: int = option(
        0, "Ray rollout workers (0: everything in this process, Ray never imported)", lo=0
    )
    ray_address: str | None = option(None, "join this Ray cluster (auto or host:port); default: start one")
    worker_timeout: float = option(
        120.0, "seconds a worker may take for a rollout before it is replaced", lo=0, lo_open=True
    )
    fault_tolerance: bool = option(True, "replace failed or hung workers (false: stop the run)")


@dataclass(frozen=True)
class Preset:
    """A named set of dotted overrides, e.g. ``Preset("slippery 4x4", {"env.is_slippery": True})``."""

    summary: str
    overrides: Mapping[str, Any]


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


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """Parse ``key=value`` strings as YAML scalars (``0.9`` float, ``false`` bool, ``abc`` str)."""
    items = list(items)
    bad = [s for s in items if "=" not in s or s.startswith("=")]
    if bad:
        raise ConfigError([f"override {s!r} must look like key=value, e.g. algorithm.gamma=0.9" for s in bad])
    try:
        parsed = OmegaConf.to_container(OmegaConf.from_dotlist(items), resolve=False)
    except OmegaConfBaseException as e:
        raise ConfigError(f"cannot parse overrides {items}: {e}") from None
    return typing.cast(dict[str, Any], parsed)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file; errors name the file (and the line, for syntax errors)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--config {str(path)!r}: no such file")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"--config {str(path)!r} is not valid YAML: {' '.join(str(e).split())}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"--config {str(path)!r} must hold a mapping of sections, got {type(data).__name__}"
        )
    return data


# ----------------------------------------------------------------------------------------------------
# Validation


def _type_name(tp: Any) -> str:
    names = {
        int: "an integer",
        float: "a number",
        bool: "true or false",
        str: "a string",
        dict: "a mapping",
        list: "a list",
    }
    if typing.get_origin(tp) is list:
        return f"a list of {_type_name(typing.get_args(tp)[0]).split(' ', 1)[-1]}s"
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else names.get(a, str(a)) for a in typing.get_args(tp))
    return names.get(typing.get_origin(tp) or tp, str(tp))


def _coerce(value: Any, tp: Any) -> tuple[bool, Any]:
    """Return ``(ok, value)`` with int accepted for float and integral floats for int."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if arg is type(None):
                if value is None:
                    return True, None
                continue
            ok, v = _coerce(value, arg)
            if ok:
                return True, v
        return False, value
    orig_tp, tp = tp, origin or tp
    if tp is typing.Any:
        return True, value
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        if isinstance(value, bool):
            return False, value
        if isinstance(value, int):
            return True, value
        if isinstance(value, float) and value.is_integer():
            return True, int(value)
        return False, value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False, value
        return True, float(value)
    if tp is str:
        return isinstance(value, str), value
    if tp is dict:
        return isinstance(value, dict), value
    if tp in (list, tuple):
        (item_tp,) = typing.get_args(orig_tp)[:1] or (typing.Any,)
        if not isinstance(value, list | tuple):
            return False, value
        items = [_coerce(v, item_tp) for v in value]
        if not all(ok for ok, _ in items):
            return False, value
        return True, [v for _, v in items]
    return True, value


def _suggest(word: str, options: Iterable[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f"; did you mean {prefix}{close[0]}?" if close else ""


def _check_range(name: str, value: Any, meta: Mapping[str, Any]) -> str | None:
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        return f"{name} must be one of {', '.join(choices)}; got {value!r}{_suggest(str(value), choices)}"
    lo, hi = meta.get("lo"), meta.get("hi")
    if value is None or (lo is None and hi is None) or not isinstance(value, int | float):
        return None
    bad_lo = lo is not None and (value <= lo if meta.get("lo_open") else value < lo)
    bad_hi = hi is not None and (value >= hi if meta.get("hi_open") else value > hi)
    if not (bad_lo or bad_hi):
        return None
    if lo is not None and hi is not None:
        left = "(" if meta.get("lo_open") else "["
        right = ")" if meta.get("hi_open") else "]"
        allowed = f"in {left}{lo:g}, {hi:g}{right}"
    elif lo is not None:
        allowed = f"{'>' if meta.get('lo_open') else '>='} {lo:g}"
    else:
        allowed = f"{'<' if meta.get('hi_open') else '<='} {hi:g}"
    return f"{name} must be {allowed}, got {value!r}"


def _takes_extra(cls: type) -> bool:
    """A section whose ``kwargs`` field collects the keys it does not declare (``env.is_slippery``,
    ``data.digits``): they are passed on to the environment or task, which checks them."""
    return any(f.name == "kwargs" and f.metadata.get("extra") for f in dataclasses.fields(cls))


def _build(cls: type, data: Any, prefix: str, problems: list[str], cross: bool = True) -> Any:
    """Build ``cls`` from ``data``, appending every problem found to ``problems``."""
    where = prefix.rstrip(".") or "config"
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        problems.append(f"{where} must be a mapping of keys, got {data!r}")
        return cls()
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    takes_extra = _takes_extra(cls)
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        f = fields.get(key)
        if f is None or (key == "kwargs" and takes_extra):
            if takes_extra:
                extra[key] = value  # e.g. environment kwargs; checked by the section's owner
                continue
            problems.append(
                f"unknown key {name}{_suggest(str(key), fields, prefix)} (allowed: {', '.join(fields)})"
            )
            continue
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = _build(tp, value, name + ".", problems, cross)
            continue
        ok, coerced = _coerce(value, tp)
        if not ok:
            problems.append(f"{name} must be {_type_name(tp)}, got {value!r} ({type(value).__name__})")
            continue
        msg = _check_range(name, coerced, f.metadata)
        if msg:
            problems.append(msg)
            continue
        kwargs[key] = coerced
    if takes_extra:
        kwargs["kwargs"] = extra
    obj = cls(**kwargs)
    check = getattr(obj, "problems", None) if cross else None
    if callable(check):
        problems.extend(f"{prefix}{p}" if not p.startswith(prefix) else p for p in check())
    return obj


def build(cls: type, data: Mapping[str, Any], *, cross_checks: bool = True) -> tuple[Any, list[str]]:
    """Build the config dataclass ``cls`` from nested ``data``, returning it with the list of problems
    (invalid values are left at their defaults). A section may add cross-field checks with a
    ``problems(self) -> list[str]`` method; ``cross_checks=False`` skips them (to check a partial config,
    such as a tuned-hyperparameters entry, key by key)."""
    problems: list[str] = []
    return _build(cls, data, "", problems, cross_checks), problems


def validate(cls: type, data: Mapping[str, Any]) -> Any:
    """Like :func:`build`, but raise :class:`ConfigError` listing every problem."""
    obj, problems = build(cls, data)
    if problems:
        raise ConfigError(problems)
    return obj


def to_dict(cfg: Any) -> dict[str, Any]:
    """The config as plain nested dicts, env and task kwargs flattened into their sections (as a user
    writes them), ready for YAML."""
    out = dataclasses.asdict(cfg)
    for name in ("env", "data"):
        sec = out.get(name)
        if isinstance(sec, dict) and isinstance(sec.get("kwargs"), dict):
            sec.update(sec.pop("kwargs"))
    return out


def dump_yaml(data: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=False)


def interpolations(*trees: Mapping[str, Any]) -> dict[str, str]:
    """Dotted keys whose merged value is a ``${...}`` interpolation, with its unresolved text (saved as is,
    so a secret read with ``${oc.env:VAR}`` stays in the environment)."""
    merged = OmegaConf.merge(*[OmegaConf.create(dict(t)) for t in trees])
    raw = flatten(typing.cast(dict[str, Any], OmegaConf.to_container(merged, resolve=False)))
    return {k: v for k, v in raw.items() if isinstance(v, str) and "${" in v}


def merge(*trees: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge nested dicts (later wins) and resolve ``${...}`` interpolations."""
    try:
        merged = OmegaConf.merge(*[OmegaConf.create(dict(t)) for t in trees])
        return typing.cast(dict[str, Any], OmegaConf.to_container(merged, resolve=True))
    except OmegaConfBaseException as e:
        raise ConfigError(f"cannot resolve config: {' '.join(str(e).split())}") from None


def describe(cls: type, prefix: str = "") -> list[tuple[str, Any, str]]:
    """``(dotted key, default, help)`` for every option of a config class (for ``advantage list``)."""
    rows: list[tuple[str, Any, str]] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            rows.extend(describe(hints[f.name], f"{prefix}{f.name}."))
        elif f.name != "kwargs":
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = None
            rows.append((f"{prefix}{f.name}", default, f.metadata.get("help", "")))
    return rows
