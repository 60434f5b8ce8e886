"""Save and restore the internal state of a Gymnasium environment without pickle.

Exact resume needs the environment exactly where it was: the current state, the step counter of the
time limit, and the state of the environment's random generator. We walk the wrapper chain and keep each
layer's plain attributes: numbers, strings, numpy scalars and numeric arrays, numpy random generators, and
tuples or lists of these (nested, bounded). Objects (spaces, a physics engine's world, dicts such as the
constant tables ``P``) are rebuilt by the constructor and skipped; environments whose state lives in such
objects are restored by replaying the episode instead (:mod:`advantage.envs.replay`). The result is JSON.

What a restore accepts is what an environment legitimately stores, not what a fresh copy happens to hold:
an attribute may change dtype or shape from one step to the next (Acrobot's state is float32 after
``reset`` and float64 after a step), go from ``None`` to an array and back, or be a list that grows. What it
refuses, always: a name the class defines as behaviour (a method, a property, any descriptor), a dunder, a
value of another category than the live one (a string where the env holds a number, data where it holds an
object such as a space), a random generator other than numpy's own bit generators, and anything that does
not decode to plain data. Nothing in a saved state is ever called, imported or unpickled.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import gymnasium as gym
import numpy as np

_SCALARS = (bool, int, float, str, type(None))
# Credentials an env holds (``self.api_key``) are rebuilt by its constructor; never write them to disk.
_SECRET_NAME = re.compile(r"key|token|secret|passw|credential|auth", re.IGNORECASE)
# Attributes that are the constructor's choice, not state: never saved, never set from a file (a saved
# ``render_mode`` set into an env would open a window, or stop a video env from rendering).
_NOT_STATE = frozenset({"render_mode"})

MAX_SEQUENCE = 10_000  # most numbers kept in one tuple or list, nested ones counted (saved and restored)
MAX_ARRAY = 1_000_000  # most elements of one numpy array kept as state
RECORDER = "EpisodeRecorder"  # advantage.envs.replay's wrapper: a checkpoint from before it lacks the layer
MAX_DEPTH = 8  # deepest nesting of tuples and lists kept as state


def _encode(value: Any, depth: int = 0, budget: list[int] | None = None) -> Any:
    """The JSON form of one plain value, or None when it is not plain state (rebuilt by the constructor)."""
    if isinstance(value, np.generic):  # before the scalars: np.float64 is a subclass of float
        if value.dtype.kind not in "biuf":
            return None
        return {"np": value.dtype.str, "v": value.item()}
    if isinstance(value, _SCALARS):
        return {"v": value}
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf" or value.size > MAX_ARRAY:
            return None
        return {"nd": value.dtype.str, "shape": list(value.shape), "v": value.ravel().tolist()}
    if isinstance(value, np.random.Generator):
        return {"rng": value.bit_generator.state}
    if isinstance(value, tuple | list) and depth < MAX_DEPTH:
        # e.g. MountainCar's state (position, velocity) after a step, Blackjack's hands (lists that grow)
        budget = [MAX_SEQUENCE] if budget is None else budget
        budget[0] -= len(value)
        if budget[0] < 0:
            return None
        items = [_encode(x, depth + 1, budget) for x in value]
        if all(item is not None and "rng" not in item for item in items):
            return {"seq": type(value).__name__, "v": items}
    return None


# The bit generators numpy ships; a checkpoint naming anything else is refused (``getattr(np.random,
# name)()`` on a name from a file would call any function of ``numpy.random``).
_BIT_GENERATORS = {"PCG64": np.random.PCG64, "PCG64DXSM": np.random.PCG64DXSM, "MT19937": np.random.MT19937}
_BIT_GENERATORS |= {"Philox": np.random.Philox, "SFC64": np.random.SFC64}


def _category(value: Any) -> str:
    """What kind of thing a live attribute holds: ``none``, ``bool``, ``str``, ``number`` (Python and numpy
    numbers, numeric arrays, and tuples and lists: a wrapper's record of the last step may hold a dict
    beside numbers, and is replaced whole), ``rng``, or ``object`` (anything else: never replaced by a
    saved value)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "str"
    if isinstance(value, np.random.Generator):
        return "rng"
    if isinstance(value, tuple | list) or _encode(value) is not None:
        return "number"  # ints, floats, numpy numbers and arrays, (nested) sequences of them
    return "object"


def _decode_plain(enc: Any, where: str, depth: int = 0, budget: list[int] | None = None) -> Any:
    """Plain data from its JSON form (the inverse of :func:`_encode` for everything but generators).
    Raises ValueError for anything else."""
    if not isinstance(enc, dict):
        raise ValueError(f"{where}: not a saved value")
    if "seq" in enc:
        items = enc.get("v")
        budget = [MAX_SEQUENCE] if budget is None else budget
        if not (enc["seq"] in ("tuple", "list") and isinstance(items, list) and depth < MAX_DEPTH):
            raise ValueError(f"{where}: not a short tuple or list of numbers")
        budget[0] -= len(items)
        if budget[0] < 0:
            raise ValueError(f"{where}: not a short tuple or list of numbers (over {MAX_SEQUENCE} items)")
        values = [_decode_plain(x, f"{where}[{i}]", depth + 1, budget) for i, x in enumerate(items)]
        return tuple(values) if enc["seq"] == "tuple" else values
    if "rng" in enc:
        raise ValueError(f"{where}: a random generator inside a sequence")
    if "nd" in enc:
        dtype, shape, flat = enc["nd"], enc.get("shape"), enc.get("v")
        if not (
            isinstance(dtype, str)
            and len(dtype) <= 8
            and isinstance(shape, list)
            and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_ARRAY for n in shape)
            and isinstance(flat, list)
            and len(flat) <= MAX_ARRAY
        ):
            raise ValueError(f"{where}: not a numeric array")
        try:
            dt = np.dtype(dtype)
            if dt.kind not in "biuf" or dt.itemsize > 16:
                raise TypeError(dtype)
            return np.asarray(flat, dtype=dt).reshape(shape)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"{where}: not a numeric array of dtype and shape as saved") from None
    value = enc.get("v")
    if "np" in enc:
        try:
            if not (isinstance(enc["np"], str) and len(enc["np"]) <= 8 and isinstance(value, int | float)):
                raise TypeError
            dt = np.dtype(enc["np"])
            if dt.kind not in "biuf":
                raise TypeError
            with np.errstate(over="raise", invalid="raise"):
                out = dt.type(value)
            if dt.kind in "iub" and out != value:  # a value the dtype does not hold (would wrap)
                raise OverflowError
            return out
        except (TypeError, ValueError, OverflowError, FloatingPointError):
            raise ValueError(f"{where}: not a numpy number of its dtype") from None
    if not isinstance(value, _SCALARS):
        raise ValueError(f"{where}: not a plain value")
    return value


def _decode(enc: Any, current: Any, where: str) -> Any:
    """The value of one attribute whose live value is ``current``: any plain value of the same category
    (or into ``None``, or ``None`` itself), or a numpy random generator into a generator or ``None``."""
    live = _category(current)
    if live == "object":
        raise ValueError(f"{where}: the environment holds a {type(current).__name__} there, not plain data")
    if isinstance(enc, dict) and "rng" in enc:
        if live not in ("rng", "none"):
            raise ValueError(f"{where}: a random generator, the environment has a {live}")
        state = enc["rng"]
        name = state.get("bit_generator") if isinstance(state, dict) else None
        if not isinstance(name, str) or name not in _BIT_GENERATORS:
            raise ValueError(f"{where}: unknown bit generator {str(name)[:40]!r}")
        rng = current if isinstance(current, np.random.Generator) else None
        if rng is None or type(rng.bit_generator).__name__ != name:
            rng = np.random.Generator(_BIT_GENERATORS[name]())
        try:
            rng.bit_generator.state = state
        except (TypeError, ValueError, KeyError, OverflowError):
            raise ValueError(f"{where}: not a {name} state") from None
        return rng
    value = _decode_plain(enc, where)
    got = _category(value)
    if got != live and "none" not in (got, live):
        raise ValueError(f"{where}: a {got}, the environment has a {live}")
    return value


def _layers(env: Any) -> list[Any]:
    """Every wrapper and base env below ``env``; for a Sync vector env, also every sub-environment."""
    layers, node = [], env
    while True:
        layers.append(node)
        for sub in getattr(node, "envs", None) or []:
            if isinstance(sub, gym.Env):
                layers.extend(_layers(sub))
        if not hasattr(node, "env") or node.env is node:
            return layers
        node = node.env


def env_state(env: gym.Env | gym.vector.VectorEnv) -> list[dict[str, Any]]:
    """The state of every wrapper layer and the base environment, outermost first."""
    out = []
    for layer in _layers(env):
        attrs = {}
        for k, v in vars(layer).items():
            if k in ("env", "envs") or k in _NOT_STATE or (isinstance(v, str) and _SECRET_NAME.search(k)):
                continue
            enc = _encode(v)
            if enc is not None:
                attrs[k] = enc
        entry: dict[str, Any] = {"type": type(layer).__name__, "attrs": attrs}
        if hasattr(type(layer), "replay_record"):  # advantage.envs.replay.EpisodeRecorder
            entry["replay"] = layer.replay_record()
        out.append(entry)
    return out


def _class_behaviour(layer: Any, name: str) -> bool:
    """Whether ``name`` is something the layer's class defines as behaviour (a method, a property, any
    descriptor). A plain class-level default such as ``gym.Env._np_random = None`` is data: an instance
    attribute of that name appears on the first reset, so a snapshot of a fresh env lacks it."""
    try:
        attr = inspect.getattr_static(type(layer), name)
    except AttributeError:
        return False
    return callable(attr) or hasattr(type(attr), "__get__")


def set_env_state(env: gym.Env | gym.vector.VectorEnv, state: list[dict[str, Any]]) -> None:
    """Restore what :func:`env_state` saved into an environment built from the same config (and reset).

    Every attribute is decoded first and set only when all of them decode (nothing is half-applied). Only
    plain instance attributes are set: never a name the class defines as behaviour (a method, a property,
    a descriptor), a dunder, or an attribute holding an object (a constructor's choice such as
    ``render_mode``, which older checkpoints saved, is skipped); each value must be of the live
    attribute's category (see :func:`_decode`). Random generators only of numpy's bit generators.
    Anything else raises ValueError. A checkpoint can still change the value of an attribute the
    environment itself stores, such as CartPole's ``gravity``: the manifest's hashes detect damage, not a
    forger."""
    layers = _layers(env)
    if not isinstance(state, list) or not all(
        isinstance(s, dict) and isinstance(s.get("attrs"), dict) for s in state
    ):
        raise ValueError("the saved environment state is not a list of layers with attributes")
    if not any(s.get("type") == RECORDER for s in state):  # saved before episodes were recorded
        layers = [x for x in layers if type(x).__name__ != RECORDER]
    if [type(x).__name__ for x in layers] != [s.get("type") for s in state]:
        saved_outer = str(state[0].get("type")) if state else ""
        hint = (
            " (the checkpoint holds the env's own vectorized version: resume with env.vectorization=native)"
            if type(layers[0]).__name__ == "SyncVectorEnv"
            and saved_outer.endswith("VectorEnv")
            and saved_outer not in ("SyncVectorEnv", "AsyncVectorEnv")
            else ""
        )
        raise ValueError(
            "the environment's wrappers differ from the checkpoint's: "
            f"{[type(x).__name__ for x in layers]} vs {[str(s.get('type'))[:40] for s in state]}{hint}"
        )
    plan: list[tuple[Any, dict[str, Any]]] = []
    for layer, saved in zip(layers, state, strict=True):
        name = type(layer).__name__
        bad = [
            k
            for k in saved["attrs"]
            if not (isinstance(k, str) and k.isidentifier())
            or k.startswith("__")
            or k in ("env", "envs")
            or _class_behaviour(layer, k)
        ]
        if bad:
            names = ", ".join(repr(str(k)[:40]) for k in bad[:5])
            raise ValueError(f"{name} has no saved attribute {names} of its own")
        values = {  # a constructor's choice (render_mode), saved by older versions, is never set
            k: _decode(enc, vars(layer).get(k, getattr(type(layer), k, None)), f"{name}.{k}")
            for k, enc in saved["attrs"].items()
            if k not in _NOT_STATE
        }
        plan.append((layer, values))
    for layer, values in plan:
        for k, value in values.items():
            setattr(layer, k, value)
