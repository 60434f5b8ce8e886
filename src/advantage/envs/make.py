"""One helper to make environments, with errors a user can act on.

``make_env(cfg)`` builds a Gymnasium environment from the ``env`` config section; ``check_env_config``
validates the id and the keyword arguments before anything runs (so the config's problems are reported
together); ``require_space`` turns "this algorithm cannot handle that space" into one clear sentence.
"""

from __future__ import annotations

import difflib
import inspect
import warnings
from typing import Any

import gymnasium as gym
import numpy as np

from advantage.config import EnvConfig, VecEnvConfig
from advantage.envs.atari import atari_wrappers, register_ale
from advantage.errors import EnvError

# Toy-text tasks with a goal: an episode that terminates there is a success (info["is_success"], the key
# Stable-Baselines3 and Gymnasium-Robotics use), so evaluation can report a success rate.
_SUCCESS_ON_TERMINATION = {
    "FrozenLakeEnv": "positive_reward",
    "CliffWalkingEnv": "any",
    "TaxiEnv": "positive_reward",
}


class SuccessInfo(gym.Wrapper):
    """Adds ``info["is_success"]`` on the step that ends an episode for goal-reaching toy-text tasks:
    FrozenLake (reached the goal: reward 1), CliffWalking (reached the goal: the only termination),
    Taxi (a correct drop-off: reward 20)."""

    def __init__(self, env: gym.Env, rule: str):
        super().__init__(env)
        self.rule = rule

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            info = dict(info)
            info["is_success"] = bool(terminated and (self.rule == "any" or float(reward) > 0))
        return obs, reward, terminated, truncated, info


def _entry_point_class(env_id: str) -> Any:
    spec = gym.spec(env_id)
    ep = spec.entry_point
    if callable(ep):
        return ep
    module, _, attr = str(ep).partition(":")
    mod = __import__(module, fromlist=[attr])
    return getattr(mod, attr)


def check_env_id(env_id: str) -> list[str]:
    """Problems with an env id: unknown, or an old version (with the registered ones suggested)."""
    try:
        register_ale(env_id)
    except EnvError as e:
        return [str(e)]
    if env_id in gym.registry:
        return []
    ids = list(gym.registry)
    base = env_id.rsplit("-v", 1)[0]
    versions = sorted(i for i in ids if i.rsplit("-v", 1)[0] == base)
    if versions:
        return [f"env.id {env_id!r} is not registered; available versions: {', '.join(versions)}"]
    close = difflib.get_close_matches(env_id, ids, n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(close)}?" if close else "; see gymnasium.registry for the ids"
    return [f"env.id {env_id!r} is not a registered Gymnasium environment{hint}"]


def check_env_config(cfg: EnvConfig) -> list[str]:
    """Every problem with the ``env`` section: the id and each extra keyword argument, checked against
    the environment constructor's signature (names, and the type of its default)."""
    problems = check_env_id(cfg.id)
    if problems or not cfg.kwargs:
        return problems
    try:
        sig = inspect.signature(_entry_point_class(cfg.id))
    except (TypeError, ValueError, ImportError, AttributeError):
        return []  # nothing to check against
    params = {n: p for n, p in sig.parameters.items() if n not in ("self", "render_mode")}
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return []
    for key, value in cfg.kwargs.items():
        p = params.get(key)
        if p is None:
            close = difflib.get_close_matches(key, list(params), n=1, cutoff=0.6)
            hint = f"; did you mean env.{close[0]}?" if close else ""
            allowed = ", ".join(params) or "none"
            problems.append(f"unknown key env.{key} for {cfg.id}{hint} (its options: {allowed})")
            continue
        default = p.default
        if isinstance(default, bool) and not isinstance(value, bool):
            problems.append(f"env.{key} must be true or false, got {value!r}")
        elif isinstance(default, int | float) and not isinstance(default, bool):
            if isinstance(value, bool) or not isinstance(value, int | float):
                problems.append(f"env.{key} must be a number, got {value!r}")
        elif isinstance(default, str) and not isinstance(value, str | list):
            problems.append(f"env.{key} must be a string, got {value!r}")
    return problems


def _make_kwargs(cfg: EnvConfig) -> dict[str, Any]:
    """The keyword arguments of ``gym.make`` for a checked ``env`` section (:class:`EnvError` otherwise)."""
    problems = check_env_config(cfg)
    if problems:
        raise EnvError("; ".join(problems))
    kwargs = dict(cfg.kwargs)
    if cfg.max_episode_steps is not None:
        kwargs["max_episode_steps"] = cfg.max_episode_steps
    return kwargs


# Gymnasium's entry-point module → the extra of this package that installs what it needs.
_EXTRAS = {"gymnasium.envs.box2d": "box2d", "gymnasium.envs.mujoco": "mujoco"}


def _extra_hint(env_id: str, error: Exception) -> str:
    """Gymnasium's missing-dependency message, pointing at this package's extra where one covers it."""
    module = str(gym.spec(env_id).entry_point).partition(":")[0]
    extra = next((x for m, x in _EXTRAS.items() if module.startswith(m)), None)
    return f"{error}; install it with: pip install 'advantage[{extra}]'" if extra else str(error)


def make_env(cfg: EnvConfig, *, render_mode: str | None = None) -> gym.Env:
    """Build the environment described by the ``env`` section.

    Raises:
        EnvError: unknown id, bad keyword arguments, or a constructor that fails.
    """
    kwargs = _make_kwargs(cfg)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            env = gym.make(cfg.id, render_mode=render_mode, **kwargs)
    except gym.error.DependencyNotInstalled as e:
        raise EnvError(f"cannot make env.id {cfg.id!r}: {_extra_hint(cfg.id, e)}") from None
    except gym.error.Error as e:
        raise EnvError(f"cannot make env.id {cfg.id!r}: {e}") from None
    except (TypeError, ValueError) as e:
        raise EnvError(f"cannot make env.id {cfg.id!r} with {kwargs}: {e}") from None
    if cfg.wrappers == "atari":
        env = atari_wrappers(env, training=False)  # evaluation: real scores, whole games
    rule = _SUCCESS_ON_TERMINATION.get(type(env.unwrapped).__name__)
    if rule is not None:
        env = SuccessInfo(env, rule)
    return env


# A native vector env's numpy arrays cost more per step than one scalar env: CartPole-v1, one torch
# thread, measured alone: 1 copy 60 µs (native) against 17 µs (sync) per step, 16 copies 42 against 176
# µs. (The two cross between 4 and 8 copies, but checkpoints of 2+ copies hold the native env's state, so
# only the single copy moved to sync; env.vectorization=native resumes a single-copy run saved before.)
NATIVE_FROM = 2


def make_vec_env(cfg: VecEnvConfig) -> gym.vector.VectorEnv:
    """A Gymnasium vector env of ``cfg.num_envs`` copies, with the ``NEXT_STEP`` autoreset of Gymnasium 1.x:
    the step that ends an episode returns its *final* observation, and the env's next step resets it
    (ignoring the action, reward 0). Collectors mask that reset step out of the batch.

    ``vectorization=auto`` uses the environment's own vectorized implementation when Gymnasium has one
    (e.g. ``CartPoleVectorEnv``: all copies stepped in one numpy call) for ``NATIVE_FROM`` copies or more,
    otherwise a ``SyncVectorEnv``.
    """
    kwargs = _make_kwargs(cfg)
    mode = cfg.vectorization
    has_native = gym.spec(cfg.id).vector_entry_point is not None
    if mode == "native" and not has_native:
        raise EnvError(
            f"env.vectorization=native: {cfg.id!r} has no vectorized version (use auto, sync or async)"
        )
    if mode == "auto":
        mode = "native" if has_native and cfg.num_envs >= NATIVE_FROM else "sync"
    mode = "vector_entry_point" if mode == "native" else mode
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            wrappers = [lambda e: atari_wrappers(e, training=True)] if cfg.wrappers == "atari" else None
            if wrappers and mode == "vector_entry_point":
                mode = "sync"
            env = gym.make_vec(
                cfg.id, num_envs=cfg.num_envs, vectorization_mode=mode, wrappers=wrappers, **kwargs
            )
    except gym.error.Error as e:
        raise EnvError(f"cannot make env.id {cfg.id!r} x{cfg.num_envs}: {e}") from None
    except (TypeError, ValueError) as e:
        raise EnvError(f"cannot make env.id {cfg.id!r} x{cfg.num_envs} with {kwargs}: {e}") from None
    autoreset = env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
    if autoreset != gym.vector.AutoresetMode.NEXT_STEP:
        env.close()
        raise EnvError(f"{cfg.id}: vector env autoreset mode {autoreset} is not supported (need NEXT_STEP)")
    return env


def check_env_api(env_id: str, env: gym.Env) -> None:
    """One reset and one step: the Gymnasium API (``reset -> (obs, info)``, ``step -> (obs, reward,
    terminated, truncated, info)``) and observations of the declared shape, so a broken env is one clear
    error before training rather than a ValueError from inside a vector env. Checks the base env: the
    wrappers Gymnasium adds would fail first, with a bare unpacking error."""
    env = env.unwrapped
    out: tuple[Any, ...] = env.reset(seed=0)
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        raise EnvError(
            f"{env_id}: reset() must return (obs, info), got {type(out).__name__} "
            "(the pre-0.26 Gym API? port the env to Gymnasium or wrap it with shimmy)"
        )
    _check_obs(env_id, "reset()", out[0], env.observation_space)
    out = env.step(env.action_space.sample())
    if not (isinstance(out, tuple) and len(out) == 5):
        got = f"a {len(out)}-tuple" if isinstance(out, tuple) else type(out).__name__
        raise EnvError(
            f"{env_id}: step() must return (obs, reward, terminated, truncated, info), got {got} "
            "(the pre-0.26 Gym API's (obs, reward, done, info)?)"
        )
    _check_obs(env_id, "step()", out[0], env.observation_space)


def _check_obs(env_id: str, where: str, obs: Any, space: gym.Space) -> None:
    if isinstance(space, gym.spaces.Box) and np.shape(obs) != space.shape:
        raise EnvError(
            f"{env_id}: {where} returned an observation of shape {np.shape(obs)}; "
            f"the observation space is {describe_space(space)}"
        )


def describe_space(space: gym.Space) -> str:
    if isinstance(space, gym.spaces.Discrete):
        return f"Discrete({space.n})"
    if isinstance(space, gym.spaces.Box):
        low, high = np.unique(space.low), np.unique(space.high)
        if low.size == 1 and high.size == 1:  # uniform bounds read best: Box(-2.0, 2.0, (1,))
            return f"Box({float(low[0])}, {float(high[0])}, {tuple(space.shape)})"
        return f"Box{tuple(space.shape)}"
    return type(space).__name__


def require_space(
    algo: str, env_id: str, which: str, space: gym.Space, kind: type[gym.Space] | tuple[type[gym.Space], ...]
) -> None:
    """Raise ``EnvError("q_learning needs a Discrete observation space; CartPole-v1 has Box(4,)")``; with
    several kinds, ``"ppo needs a Discrete or Box action space; ..."``."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(space, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise EnvError(f"{algo} needs a {names} {which} space; {env_id} has {describe_space(space)}")
