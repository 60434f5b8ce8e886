"""Save and restore the internal state of a Gymnasium environment without pickle.

Exact resume needs the environment exactly where it was: the current state, the step counter of the
time limit, and the state of the environment's random generator. We walk the wrapper chain and keep each
layer's plain attributes (numbers, strings, short tuples or lists of numbers, numpy arrays and random
generators). Constant tables such as
``P`` (dicts) are rebuilt by the constructor and skipped. The result is JSON.
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


MAX_SEQUENCE = 10_000  # longest tuple or list of numbers kept as state (saved and restored alike)


def _encode(value: Any) -> Any:
    if isinstance(value, _SCALARS):
        return {"v": value}
    if isinstance(value, np.generic):
        return {"np": value.dtype.str, "v": value.item()}
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf" and value.size <= 1_000_000:
        return {"nd": value.dtype.str, "shape": list(value.shape), "v": value.ravel().tolist()}
    if isinstance(value, np.random.Generator):
        return {"rng": value.bit_generator.state}
    if isinstance(value, tuple | list) and len(value) <= MAX_SEQUENCE:
        # a short sequence of numbers, e.g. MountainCar's state (position, velocity) after a step
        items = [_encode(x) for x in value]
        if all(item is not None and _kind(item) == "v" for item in items):
            return {"seq": type(value).__name__, "v": items}
    return None  # not plain state: rebuilt by the constructor


# The bit generators numpy ships; a checkpoint naming anything else is refused (``getattr(np.random,
# name)()`` on a name from a file would call any function of ``numpy.random``).
_BIT_GENERATORS = {"PCG64": np.random.PCG64, "PCG64DXSM": np.random.PCG64DXSM, "MT19937": np.random.MT19937}
_BIT_GENERATORS |= {"Philox": np.random.Philox, "SFC64": np.random.SFC64}


_UNSET = {"v": None}  # what a name the fresh env does not have yet is compared with


def _kind(enc: dict[str, Any]) -> str:
    """``rng``, ``nd`` or ``v`` (a scalar: a numpy scalar and a Python one are interchangeable, as an
    env's counter can be either from one step to the next)."""
    return next((k for k in ("rng", "nd", "seq") if k in enc), "v")


def _decode(enc: Any, fresh: dict[str, Any], current: Any, where: str) -> Any:
    """The value of one attribute. ``fresh`` is what :func:`_encode` gives for the attribute of a freshly
    built env: the saved value must have the same kind, type, dtype and shape (raises ValueError)."""
    unset = _kind(fresh) == "v" and fresh["v"] is None  # e.g. set on the first step only: any kind
    # the same numbers as an array or a tuple: MountainCar's state is an array after reset, a tuple after
    # a step (each is still checked as what it is)
    swap = isinstance(enc, dict) and {_kind(enc), _kind(fresh)} == {"nd", "seq"}
    if not isinstance(enc, dict) or (_kind(enc) != _kind(fresh) and not unset and not swap):
        raise ValueError(f"{where}: not a {_kind(fresh)!r} value like the environment's own")
    if "rng" in enc:
        state = enc["rng"]
        name = state.get("bit_generator") if isinstance(state, dict) else None
        if name not in _BIT_GENERATORS:
            raise ValueError(f"{where}: unknown bit generator {str(name)[:40]!r}")
        rng = (
            current
            if isinstance(current, np.random.Generator)
            else np.random.Generator(_BIT_GENERATORS[name]())
        )
        if type(rng.bit_generator).__name__ != name:
            rng = np.random.Generator(_BIT_GENERATORS[name]())
        rng.bit_generator.state = state
        return rng
    if "seq" in enc:
        items = enc.get("v")
        if not (
            enc["seq"] in ("tuple", "list")
            and isinstance(items, list)
            and len(items) <= MAX_SEQUENCE
            and all(isinstance(x, dict) and _kind(x) == "v" for x in items)
        ):
            raise ValueError(f"{where}: not a short tuple or list of numbers")
        values = [_decode(x, _UNSET, None, f"{where}[{i}]") for i, x in enumerate(items)]
        return tuple(values) if enc["seq"] == "tuple" else values
    if "nd" in enc:
        same = unset or swap or (enc["nd"] == fresh["nd"] and enc.get("shape") == fresh["shape"])
        if not same or np.dtype(enc["nd"]).kind not in "biuf":
            raise ValueError(f"{where}: dtype or shape differs from the environment's own")
        return np.asarray(enc["v"], dtype=np.dtype(enc["nd"])).reshape(enc["shape"])
    value, like = enc.get("v"), fresh.get("v")
    if "np" in enc:
        if np.dtype(enc["np"]).kind not in "biuf" or not isinstance(value, int | float):
            raise ValueError(f"{where}: not a numeric numpy scalar")
        value = np.dtype(enc["np"]).type(value)

    def number(x: Any) -> bool:
        return isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool)

    mixed = like is not None and value is not None and type(value) is not type(like)
    if mixed and not (number(value) and number(like)):
        raise ValueError(f"{where}: a {type(value).__name__}, the environment has a {type(like).__name__}")
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
            if k in ("env", "envs") or (isinstance(v, str) and _SECRET_NAME.search(k)):
                continue
            enc = _encode(v)
            if enc is not None:
                attrs[k] = enc
        out.append({"type": type(layer).__name__, "attrs": attrs})
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
    Only plain attributes are set: those the environment's own snapshot holds, each with its own kind,
    type, dtype and shape, and names it does not have yet (created on a later step); never a name its
    class defines (a method or property). Random generators only of numpy's bit generators. Anything
    else raises ValueError. A checkpoint can still change the value of an attribute the environment
    itself stores, such as CartPole's ``gravity``: the manifest's hashes detect damage, not a forger."""
    layers = _layers(env)
    own = env_state(env)
    if not isinstance(state, list) or not all(
        isinstance(s, dict) and isinstance(s.get("attrs"), dict) for s in state
    ):
        raise ValueError("the saved environment state is not a list of layers with attributes")
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
    for layer, saved, mine in zip(layers, state, own, strict=True):
        # names the fresh env's snapshot lacks: only plain instance attributes (holding a value it does
        # not save yet, or created later), never a name the class defines (a method, a property)
        unknown = [
            k
            for k in saved["attrs"]
            if k not in mine["attrs"]
            and (
                not str(k).isidentifier()
                or str(k).startswith("__")
                or (k not in vars(layer) and _class_behaviour(layer, k))
            )
        ]
        if unknown:
            names = ", ".join(repr(str(k)[:40]) for k in unknown[:5])
            raise ValueError(f"{mine['type']} has no saved attribute {names} of its own")
        values = {
            k: _decode(enc, mine["attrs"].get(k, _UNSET), getattr(layer, k, None), f"{mine['type']}.{k}")
            for k, enc in saved["attrs"].items()
        }
        for k, value in values.items():
            setattr(layer, k, value)
