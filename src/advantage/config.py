"""Run configuration: dataclasses in sections, their options, presets and validation.

A run's config is one dataclass per algorithm with the sections ``env`` (or ``data``), ``algorithm``,
``model`` and ``trainer``. Values come, in increasing priority, from the dataclass defaults, the
algorithm's default overrides, a named preset (``preset=NAME``), a YAML file (``--config F``) and dotted
overrides (``algorithm.gamma=0.9``).

Reading the values (YAML files, ``key=value`` strings, merging, ``${oc.env:VAR}`` interpolation, with
OmegaConf where needed) is :mod:`advantage.config_sources`. Validation is ours because a user should see
*every* problem at once (OmegaConf's structured configs stop at the first): unknown keys with a
close-match suggestion, wrong types and out-of-range values, each naming the field, the value and what
is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import Field, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast

from advantage import kernels
from advantage.errors import ConfigError

if TYPE_CHECKING:
    from advantage.configs.llm import DataConfig, LMModelConfig, LMTrainerConfig

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
    meta: dict[str, Any] = {"help": help, "lo": lo, "hi": hi, "lo_open": lo_open, "hi_open": hi_open}
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

    num_envs: int = option(8, "environments stepped together (a gymnasium vector env)", lo=1, hi=4096)
    vectorization: str = option(
        "auto",
        "auto: the env's own vectorized version when it has one and num_envs >= 2, else sync; native; "
        "sync; async",
        choices=("auto", "native", "sync", "async"),
    )


@dataclass
class TrainerConfig:
    """The ``trainer`` section, common to every algorithm."""

    seed: int = option(0, "seed of every random number generator of the run", lo=0, hi=2**31 - 1)
    total_steps: int = option(100_000, "environment steps to train for", lo=0, hi=10**13)
    eval_every: int = option(10_000, "evaluate every N environment steps (0: only at the end)", lo=0)
    eval_episodes: int = option(100, "episodes per evaluation", lo=1)
    stop_at_return: float | None = option(None, "stop training once eval/return_mean reaches this")
    checkpoint_every: int = option(0, "checkpoint every N environment steps (0: only at the end)", lo=0)
    keep_checkpoints: int = option(3, "how many checkpoints to keep (the newest)", lo=1)
    log_every: int = option(1000, "log training metrics every N environment steps", lo=1)
    run_dir: str | None = option(None, "run folder (default runs/<algo>-<env>-<YYYYmmdd-HHMMSS>)")
    progress: str = option("auto", "progress display", choices=("auto", "bar", "lines", "none"))
    tensorboard: bool = option(
        True, "write TensorBoard event files (by a separate process that follows metrics.jsonl)"
    )
    plot: bool = option(
        True, "draw plots/learning_curve.png when the run ends (by that separate process; `advantage plot`)"
    )
    torch_threads: int = option(
        1, "torch CPU threads (small networks are fastest on one)", lo=1, hi=4 * (os.cpu_count() or 1)
    )
    device: str = option(
        "cpu",
        "cpu only: these small networks train fastest on the CPU (sft, grpo, dpo, reward_model and "
        "ppo_rlhf take cuda)",
    )
    num_workers: int = option(
        0, "Ray rollout workers (0: everything in this process, Ray never imported)", lo=0
    )
    ray_address: str | None = option(None, "join this Ray cluster (auto or host:port); default: start one")
    worker_timeout: float = option(
        120.0, "seconds a worker may take for a rollout before it is replaced", lo=0, lo_open=True
    )
    fault_tolerance: bool = option(True, "replace failed or hung workers (false: stop the run)")
    kernels: str = option(
        "fast",
        "fast paths: fast (every one), reference (torch's and transformers' own code only), or a "
        "comma-separated list of advantage.kernels.FAST_PATHS; what each buys: docs/fast_paths.md",
    )
    schedule_steps: list[list[int]] = option(
        [],
        "the totals a resumed run's earlier parts scheduled against: [[until_step, total], ...], written "
        "by advantage resume (steps before until_step use that total; later ones trainer.total_steps)",
    )

    def problems(self) -> list[str]:
        out = schedule_steps_problems(self.schedule_steps) + kernels.problems(self.kernels)
        if self.device != "cpu":
            out.append(
                f"device={self.device!r}: this algorithm trains on the CPU only (its small networks are "
                "fastest there); trainer.device=cuda is for the language-model algorithms "
                "(sft, grpo, dpo, reward_model, ppo_rlhf)"
            )
        return out


def schedule_steps_problems(parts: list[list[int]]) -> list[str]:
    """``trainer.schedule_steps`` must be ``[until_step, total]`` pairs of positive ints, ``until_step``
    increasing (what :func:`advantage.runs.resume` writes)."""
    pairs_ok = all(len(p) == 2 and all(isinstance(v, int) and v >= 1 for v in p) for p in parts)
    untils = [p[0] for p in parts] if pairs_ok else []
    if not pairs_ok or untils != sorted(set(untils)):
        return [
            f"schedule_steps must be [until_step, total] pairs of positive ints, until_step increasing; "
            f"got {parts!r}"
        ]
    return []


def device_problem(device: str, *, available: bool = True) -> str | None:
    """Why ``trainer.device=device`` cannot be used, or None.

    ``cpu``, ``cuda``, ``cuda:N`` and ``mps`` are the accepted spellings. With ``available``, the device
    must also exist here: torch built with CUDA and a visible GPU (``cuda:N``: N below the device count),
    or Apple's MPS backend.
    """
    dev = str(device).strip()
    if not re.fullmatch(r"cpu|cuda|cuda:\d+|mps", dev):
        hint = " (did you mean cuda?)" if dev.lower() in ("gpu", "cuda0", "nvidia") else ""
        return f"trainer.device must be cpu, cuda, cuda:N or mps; got {device!r}{hint}"
    if not available or dev == "cpu":
        return None
    import torch

    if dev.startswith("cuda"):
        if not torch.backends.cuda.is_built():
            return (
                f"trainer.device={dev}: this torch ({torch.__version__}) is built without CUDA; "
                "use trainer.device=cpu, or install a CUDA build of torch"
            )
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            return f"trainer.device={dev}: no CUDA device is visible; use trainer.device=cpu"
        index = int(dev.partition(":")[2] or 0)
        if index >= count:
            have = ", ".join(f"cuda:{i}" for i in range(count))
            return f"trainer.device={dev}: this machine has {count} CUDA device(s) ({have})"
    if dev == "mps" and not torch.backends.mps.is_available():
        return "trainer.device=mps: the MPS backend is not available here; use trainer.device=cpu"
    return None


# ----------------------------------------------------------------------------------------------------
# What the code shared by the algorithms reads of a config. The sections are read-only properties, so a
# config whose section is a subclass (LMTrainerConfig, VecEnvConfig) matches as well.


class ConfigDataclass(Protocol):
    """Any config dataclass: an algorithm's config or one of its sections."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]


class RunConfig(ConfigDataclass, Protocol):
    """An algorithm's config: a dataclass with a ``trainer`` section (and others, per algorithm)."""

    @property
    def trainer(self) -> TrainerConfig: ...


class EnvRunConfig(RunConfig, Protocol):
    """The config of an algorithm that trains on a Gymnasium env: an ``env`` section too."""

    @property
    def env(self) -> EnvConfig: ...


class VecEnvRunConfig(EnvRunConfig, Protocol):
    """The config of an algorithm that steps several environments at once."""

    @property
    def env(self) -> VecEnvConfig: ...


class LMRunConfig(RunConfig, Protocol):
    """The config of a language-model algorithm: its ``data`` (the task), the policy's ``model`` and a
    language-model ``trainer`` section."""

    @property
    def data(self) -> DataConfig: ...

    @property
    def model(self) -> LMModelConfig: ...

    @property
    def trainer(self) -> LMTrainerConfig: ...


@dataclass(frozen=True)
class Preset:
    """A named set of dotted overrides, e.g. ``Preset("slippery 4x4", {"env.is_slippery": True})``."""

    summary: str
    overrides: Mapping[str, Any]


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
    if tp in (bool, str, dict):
        return isinstance(value, tp), value
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        if number and isinstance(value, float) and value.is_integer():
            return True, int(value)
        return number and isinstance(value, int), value
    if tp is float:
        return number, float(value) if number else value
    if tp in (list, tuple):
        (item_tp,) = typing.get_args(orig_tp)[:1] or (typing.Any,)
        if not isinstance(value, list | tuple):
            return False, value
        items = [_coerce(v, item_tp) for v in value]
        if not all(ok for ok, _ in items):
            return False, value
        return True, [v for _, v in items]
    return True, value


def suggest(word: str, options: Iterable[str], prefix: str = "", cutoff: float = 0.6, n: int = 1) -> str:
    """``; did you mean {prefix}{option}?`` naming the ``n`` closest options (joined by "or"), or ``""``
    when none is close enough."""
    close = difflib.get_close_matches(word, list(options), n=n, cutoff=cutoff)
    return f"; did you mean {' or '.join(prefix + c for c in close)}?" if close else ""


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _check_range(name: str, value: Any, meta: Mapping[str, Any]) -> str | None:
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        return f"{name} must be one of {', '.join(choices)}; got {value!r}{suggest(str(value), choices)}"
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
        allowed = f"in {left}{_num(lo)}, {_num(hi)}{right}"
    elif lo is not None:
        allowed = f"{'>' if meta.get('lo_open') else '>='} {_num(lo)}"
    else:
        assert hi is not None  # bad_hi
        allowed = f"{'<' if meta.get('hi_open') else '<='} {_num(hi)}"
    return f"{name} must be {allowed}, got {value!r}"


def _takes_extra(cls: type) -> bool:
    """A section whose ``kwargs`` field collects the keys it does not declare (``env.is_slippery``,
    ``data.digits``): they are passed on to the environment or task, which checks them."""
    return any(f.name == "kwargs" and f.metadata.get("extra") for f in dataclasses.fields(cls))


def _elsewhere(key: str, root: type | None, prefix: str) -> str:
    """``; did you mean trainer.total_steps?`` for a key that exists in another section."""
    if root is None:
        return ""
    found = [k for k, _, _ in describe(root) if k.rsplit(".", 1)[-1] == key and k != f"{prefix}{key}"]
    return f"; did you mean {' or '.join(found[:3])}?" if found else ""


def _foreign(name: str, value: Any, root: type) -> str:
    """``; SB3's total_timesteps is trainer.total_steps`` for another library's name
    (:mod:`advantage.migration`), looked up by the dotted names under ``name`` (a nested ``value``)."""
    from advantage.migration import hint, leaves

    return hint(leaves(name, value), [k for k, _, _ in describe(root)])


def _build(
    cls: type, data: Any, prefix: str, problems: list[str], root: type | None = None, cross: bool = True
) -> Any:
    """Build ``cls`` from ``data``, appending every problem found to ``problems`` (``root``: the whole
    config's class, to suggest a key of another section; ``cross``: run the sections' cross-field checks)."""
    root = root or cls
    where = prefix.rstrip(".") or "config"
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        problems.append(f"{where} must be a mapping of keys, got {data!r}{_foreign(where, data, root)}")
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
            hint = (
                _foreign(name, value, root)
                or _elsewhere(str(key), root, prefix)
                or suggest(str(key), fields, prefix)
            )
            problems.append(f"unknown key {name}{hint} (allowed: {', '.join(fields)})")
            continue
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = _build(cast(type, tp), value, name + ".", problems, root, cross)
            continue
        ok, coerced = _coerce(value, tp)
        if not ok:
            problems.append(f"{name} must be {_type_name(tp)}, got {value!r} ({type(value).__name__})")
            continue
        if isinstance(coerced, float) and not math.isfinite(coerced):
            problems.append(f"{name} must be a finite number, got {coerced!r}")
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
        for p in check():
            p = rebase(p, prefix, fields)
            problems.append(p if p.startswith(prefix) else f"{prefix}{p}")
    return obj


def rebase(message: str, prefix: str, keys: Iterable[str]) -> str:
    """A section's message with the section's own keys named in full: a model section nested at
    ``worker.actor.model.`` says ``model.path`` in its checks, which becomes ``worker.actor.model.path``.
    Only ``keys`` (the section's option names) are rewritten, so a file the message names
    (``model.safetensors``) keeps its name."""
    local = prefix.rstrip(".").rsplit(".", 1)[-1]
    names = sorted(keys, key=len, reverse=True)
    if not local or prefix == f"{local}." or not names:
        return message
    alternatives = "|".join(re.escape(k) for k in names)
    return re.sub(rf"(?<![\w.]){re.escape(local)}\.(?=(?:{alternatives})(?![\w-]))", prefix, message)


def build(cls: type, data: Mapping[str, Any], *, cross_checks: bool = True) -> tuple[Any, list[str]]:
    """Build the config dataclass ``cls`` from nested ``data``, returning it with the list of problems
    (invalid values are left at their defaults). A section may add cross-field checks with a
    ``problems(self) -> list[str]`` method; ``cross_checks=False`` skips them (to check a partial config,
    such as a tuned-hyperparameters entry, key by key)."""
    problems: list[str] = []
    return _build(cls, data, "", problems, cross=cross_checks), problems


def validate(cls: type, data: Mapping[str, Any]) -> Any:
    """Like :func:`build`, but raise :class:`ConfigError` listing every problem."""
    obj, problems = build(cls, data)
    if problems:
        raise ConfigError(problems)
    return obj


def to_dict(cfg: ConfigDataclass) -> dict[str, Any]:
    """The config as plain nested dicts, env and task kwargs flattened into their sections (as a user
    writes them), ready for YAML."""
    out = dataclasses.asdict(cfg)
    for name in ("env", "data"):
        sec = out.get(name)
        if isinstance(sec, dict) and isinstance(sec.get("kwargs"), dict):
            sec.update(sec.pop("kwargs"))
    return out


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
