"""Save and restore the internal state of a Gymnasium environment without pickle.

Exact resume needs the environment exactly where it was: the current state, the step counter of the
time limit, and the state of the environment's random generator. We walk the wrapper chain and keep each
layer's plain attributes (numbers, strings, numpy arrays and random generators). Constant tables such as
``P`` (dicts) are rebuilt by the constructor and skipped. The result is JSON.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np

_SCALARS = (bool, int, float, str, type(None))
# Credentials an env holds (``self.api_key``) are rebuilt by its constructor; never write them to disk.
_SECRET_NAME = re.compile(r"key|token|secret|passw|credential|auth", re.IGNORECASE)


def _encode(value: Any) -> Any:
    if isinstance(value, _SCALARS):
        return {"v": value}
    if isinstance(value, np.generic):
        return {"np": value.dtype.str, "v": value.item()}
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf" and value.size <= 1_000_000:
        return {"nd": value.dtype.str, "shape": list(value.shape), "v": value.ravel().tolist()}
    if isinstance(value, np.random.Generator):
        return {"rng": value.bit_generator.state}
    return None  # not plain state: rebuilt by the constructor


def _decode(enc: dict[str, Any], current: Any) -> Any:
    if "rng" in enc:
        if isinstance(current, np.random.Generator):
            current.bit_generator.state = enc["rng"]
            return current
        rng = np.random.Generator(getattr(np.random, enc["rng"]["bit_generator"])())
        rng.bit_generator.state = enc["rng"]
        return rng
    if "nd" in enc:
        return np.asarray(enc["v"], dtype=np.dtype(enc["nd"])).reshape(enc["shape"])
    if "np" in enc:
        return np.dtype(enc["np"]).type(enc["v"])
    return enc["v"]


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


def env_state(env: gym.Env) -> list[dict[str, Any]]:
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


def set_env_state(env: gym.Env, state: list[dict[str, Any]]) -> None:
    """Restore what :func:`env_state` saved into an environment built from the same config."""
    layers = _layers(env)
    if [type(x).__name__ for x in layers] != [s["type"] for s in state]:
        raise ValueError(
            "the environment's wrappers differ from the checkpoint's: "
            f"{[type(x).__name__ for x in layers]} vs {[s['type'] for s in state]}"
        )
    for layer, saved in zip(layers, state, strict=True):
        for k, enc in saved["attrs"].items():
            setattr(layer, k, _decode(enc, getattr(layer, k, None)))
