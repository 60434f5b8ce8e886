"""One helper to make environments, with errors a user can act on.

``make_env(cfg)`` builds a Gymnasium environment from the ``env`` config section; ``check_env_config``
validates the id and the keyword arguments before anything runs (so the config's problems are reported
together); ``require_space`` turns "this algorithm cannot handle that space" into one clear sentence,
naming the algorithms that can. ``encode_observations`` gives the algorithms whose networks are MLPs
(``flatten_observations(cfg)``) every observation space with a vector encoding as one vector.
"""

from __future__ import annotations

import difflib
import inspect
import warnings
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import vector as vector_wrappers

from advantage.config import EnvConfig, RunConfig, VecEnvConfig
from advantage.envs.atari import atari_wrappers, register_ale
from advantage.envs.replay import EpisodeRecorder
from advantage.envs.user import is_user_id, needs_env_object, resolve
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


# ---- observations as one vector: what the algorithms whose networks are MLPs see ------------------------

# The observation spaces with a vector encoding (Gymnasium's flatten_space), in the words of the errors.
VECTOR_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
VECTOR_OBSERVATIONS = "Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple"


def flatten_observations(cfg: RunConfig) -> bool:
    """Whether the algorithm of ``cfg`` gets its observations encoded as one vector
    (:func:`encode_observations`): its config class says so (``flatten_obs = True``: the networks are MLPs,
    as in PPO, A2C, TRPO, REINFORCE, DQN, DDPG, TD3 and SAC), unless ``model.cnn`` keeps image
    observations for a convolutional network (DQN). The tabular and linear methods index their tables by
    the raw Discrete observation: no ``flatten_obs``, False. Every env an algorithm trains, checks or
    evaluates on is made with this answer, so evaluation sees the encoding training saw."""
    if not getattr(type(cfg), "flatten_obs", False):
        return False
    return not getattr(getattr(cfg, "model", None), "cnn", False)


def vector_encodable(space: gym.Space) -> bool:
    """A space with a vector encoding: Box, Discrete, MultiDiscrete, MultiBinary, or a Dict or Tuple of
    them (nested too)."""
    if isinstance(space, VECTOR_SPACES):
        return True
    if isinstance(space, gym.spaces.Dict):
        return all(vector_encodable(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return all(vector_encodable(s) for s in space.spaces)
    return False


def _needs_encoding(space: gym.Space) -> bool:
    """Not already a vector (a 1-D Box), and encodable."""
    is_vector = isinstance(space, gym.spaces.Box) and len(space.shape) == 1
    return not is_vector and vector_encodable(space)


def encoded_dtype(space: gym.Space) -> np.dtype:
    """The dtype of ``space``'s encoding: a Box keeps its own (an image stays uint8, flattened); the others'
    (one-hots, bits, Dict and Tuple parts) are uint8 when every entry is an integer in [0, 255] and
    float32 otherwise (a part with real numbers). Gymnasium's own would be int64 for a one-hot (eight
    bytes per 0 or 1 in a replay buffer) and float64 for mixed parts."""
    if isinstance(space, gym.spaces.Box):
        return space.dtype
    flat = cast(gym.spaces.Box, gym.spaces.flatten_space(space))  # a Box for every encodable space
    if np.issubdtype(flat.dtype, np.integer) and flat.low.min() >= 0 and flat.high.max() <= 255:
        return np.dtype(np.uint8)
    return np.dtype(np.float32)


def encode_observations(env: gym.Env) -> gym.Env:
    r"""``env`` with its observations encoded as one vector, as Stable-Baselines3's MLP policies see them
    (its ``FlattenExtractor``, and ``CombinedExtractor`` for the vector parts of a Dict), by Gymnasium's
    :class:`~gymnasium.wrappers.FlattenObservation` (``flatten_space``):

    * ``Box`` of shape ``[d_1, …, d_k]``: flattened to ``[d_1·…·d_k]`` (an image ``[H, W, C]`` to
      ``[H·W·C]``);
    * ``Discrete(n, start)``: the one-hot ``e_{x − start}`` ``[n]``;
    * ``MultiDiscrete(nvec)``: the one-hots of its entries concatenated ``[Σ nvec]``;
    * ``MultiBinary(shape)``: its bits ``[Π shape]``;
    * ``Dict`` (in its key order) and ``Tuple``: each part encoded and concatenated.

    The result has the dtype :func:`encoded_dtype` (cast where Gymnasium's differs). A 1-D Box is returned
    as it is, and so is a space without a vector encoding (``Text``, ``Graph``, ``Sequence``): the
    algorithm's space check refuses it by name."""
    space = env.observation_space
    if not _needs_encoding(space):
        return env
    dtype = encoded_dtype(space)
    env = gym.wrappers.FlattenObservation(env)
    flat = cast(gym.spaces.Box, env.observation_space)
    if flat.dtype != dtype:
        env = gym.wrappers.TransformObservation(env, lambda obs: obs.astype(dtype), _cast_box(flat, dtype))
    return env


def _cast_box(box: gym.spaces.Box, dtype: np.dtype) -> gym.spaces.Box:
    """``box`` with elements of ``dtype`` (its bounds cast first: Gymnasium has no precision to warn of)."""
    return gym.spaces.Box(box.low.astype(dtype), box.high.astype(dtype), box.shape, dtype)


def _encode_vector_observations(env: gym.vector.VectorEnv) -> gym.vector.VectorEnv:
    """:func:`encode_observations` for a native vector env (its vector wrappers)."""
    dtype = encoded_dtype(env.single_observation_space)
    env = vector_wrappers.FlattenObservation(env)
    flat = cast(gym.spaces.Box, env.single_observation_space)
    if flat.dtype != dtype:
        env = vector_wrappers.TransformObservation(
            env, lambda obs: obs.astype(dtype), single_observation_space=_cast_box(flat, dtype)
        )
    return env


def _entry_point_class(env_id: str) -> Any:
    spec = gym.spec(resolve(env_id))
    ep = spec.entry_point
    if callable(ep):
        return ep
    module, _, attr = str(ep).partition(":")
    mod = __import__(module, fromlist=[attr])
    return getattr(mod, attr)


def check_env_id(env_id: str) -> list[str]:
    """Problems with an env id: unknown, or an old version (with the registered ones suggested); for a
    user's ``module:name`` (:mod:`advantage.envs.user`), a module that cannot be imported or a name that is
    not an env."""
    if is_user_id(env_id) or needs_env_object(env_id):
        why = needs_env_object(env_id)
        if why:
            return [why]
        try:
            resolve(env_id)
        except EnvError as e:
            return [str(e)]
        return []
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
    module = str(gym.spec(resolve(env_id)).entry_point).partition(":")[0]
    extra = next((x for m, x in _EXTRAS.items() if module.startswith(m)), None)
    return f"{error}; install it with: pip install 'advantage[{extra}]'" if extra else str(error)


def make_env(cfg: EnvConfig, *, render_mode: str | None = None, flatten_obs: bool = False) -> gym.Env:
    """Build the environment described by the ``env`` section; ``flatten_obs``: its observations encoded as
    one vector (:func:`encode_observations`), what the algorithms with MLP networks get
    (:func:`flatten_observations`).

    Raises:
        EnvError: unknown id, bad keyword arguments, or a constructor that fails.
    """
    kwargs = _make_kwargs(cfg)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            env = gym.make(resolve(cfg.id), render_mode=render_mode, **kwargs)
    except gym.error.DependencyNotInstalled as e:
        raise EnvError(f"cannot make env.id {cfg.id!r}: {_extra_hint(cfg.id, e)}") from None
    except gym.error.Error as e:
        raise EnvError(f"cannot make env.id {cfg.id!r}: {e}") from None
    except (TypeError, ValueError) as e:
        raise EnvError(f"cannot make env.id {cfg.id!r} with {kwargs}: {e}") from None
    except EnvError:
        raise
    except Exception as e:
        raise EnvError(
            f"cannot make env.id {cfg.id!r}: its constructor raised {type(e).__name__}: {e}"
        ) from None
    if cfg.wrappers == "atari":
        env = atari_wrappers(env, training=False)  # evaluation: real scores, whole games
    rule = _SUCCESS_ON_TERMINATION.get(type(env.unwrapped).__name__)
    if rule is not None:
        env = SuccessInfo(env, rule)
    return encode_observations(env) if flatten_obs else env


# A native vector env's numpy arrays cost more per step than one scalar env: CartPole-v1, one torch
# thread, measured alone: 1 copy 60 µs (native) against 17 µs (sync) per step, 16 copies 42 against 176
# µs. (The two cross between 4 and 8 copies, but checkpoints of 2+ copies hold the native env's state, so
# only the single copy moved to sync; env.vectorization=native resumes a single-copy run saved before.)
NATIVE_FROM = 2


def make_vec_env(cfg: VecEnvConfig, *, flatten_obs: bool = False) -> gym.vector.VectorEnv:
    """A Gymnasium vector env of ``cfg.num_envs`` copies, with the ``NEXT_STEP`` autoreset of Gymnasium 1.x:
    the step that ends an episode returns its *final* observation, and the env's next step resets it
    (ignoring the action, reward 0). Collectors mask that reset step out of the batch.

    ``vectorization=auto`` uses the environment's own vectorized implementation when Gymnasium has one
    (e.g. ``CartPoleVectorEnv``: all copies stepped in one numpy call) for ``NATIVE_FROM`` copies or more,
    otherwise a ``SyncVectorEnv``.

    ``flatten_obs``: each copy's observations encoded as one vector (:func:`encode_observations`, applied
    to every copy; a native vector env, whose observations are already vectors, is left as it is).
    """
    kwargs = _make_kwargs(cfg)
    mode = cfg.vectorization
    has_native = gym.spec(resolve(cfg.id)).vector_entry_point is not None
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
            wrappers: list[Callable[[gym.Env], Any]] = (
                [lambda e: atari_wrappers(e, training=True)] if cfg.wrappers == "atari" else []
            )
            if wrappers and mode == "vector_entry_point":
                mode = "sync"
            if flatten_obs and mode != "vector_entry_point":
                wrappers.append(encode_observations)
            if mode == "sync":  # outermost: exact resume by replaying the episode (advantage.envs.replay)
                wrappers.append(EpisodeRecorder)
            env = gym.make_vec(
                resolve(cfg.id),
                num_envs=cfg.num_envs,
                vectorization_mode=mode,
                wrappers=wrappers or None,
                **kwargs,
            )
    except gym.error.Error as e:
        raise EnvError(f"cannot make env.id {cfg.id!r} x{cfg.num_envs}: {e}") from None
    except (TypeError, ValueError) as e:
        raise EnvError(f"cannot make env.id {cfg.id!r} x{cfg.num_envs} with {kwargs}: {e}") from None
    except EnvError:
        raise
    except Exception as e:
        raise EnvError(
            f"cannot make env.id {cfg.id!r} x{cfg.num_envs}: its constructor raised {type(e).__name__}: {e}"
        ) from None
    autoreset = env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
    if autoreset != gym.vector.AutoresetMode.NEXT_STEP:
        env.close()
        raise EnvError(f"{cfg.id}: vector env autoreset mode {autoreset} is not supported (need NEXT_STEP)")
    if flatten_obs and mode == "vector_entry_point" and _needs_encoding(env.single_observation_space):
        env = _encode_vector_observations(env)  # a native vector env without vector observations
    return env


def check_env_api(env_id: str, env: gym.Env) -> None:
    """One reset and one step: the Gymnasium API (``reset -> (obs, info)``, ``step -> (obs, reward,
    terminated, truncated, info)``) and observations that fit the declared space (:func:`_check_obs`), so
    a broken env is one clear error before training rather than a ValueError from inside a vector env or
    an encoder. Checks the base env: the wrappers Gymnasium adds would fail first, with a bare unpacking
    error."""
    env = env.unwrapped
    out: tuple[Any, ...] = _call(env_id, "reset()", lambda: env.reset(seed=0))
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        raise EnvError(
            f"{env_id}: reset() must return (obs, info), got {type(out).__name__} "
            "(the pre-0.26 Gym API? port the env to Gymnasium or wrap it with shimmy)"
        )
    _check_obs(env_id, "reset()", out[0], env.observation_space)
    out = _call(env_id, "step()", lambda: env.step(env.action_space.sample()))
    if not (isinstance(out, tuple) and len(out) == 5):
        got = f"a {len(out)}-tuple" if isinstance(out, tuple) else type(out).__name__
        raise EnvError(
            f"{env_id}: step() must return (obs, reward, terminated, truncated, info), got {got} "
            "(the pre-0.26 Gym API's (obs, reward, done, info)?)"
        )
    _check_obs(env_id, "step()", out[0], env.observation_space)


def _call(env_id: str, where: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, with any exception the env raises turned into one line naming the env and the call."""
    try:
        return fn()
    except EnvError:
        raise
    except Exception as e:
        raise EnvError(f"{env_id}: {where} raised {type(e).__name__}: {e}") from None


def _check_obs(env_id: str, where: str, obs: Any, space: gym.Space) -> None:
    """:class:`EnvError` naming the env, ``where`` (``reset()`` or ``step()``), the observation (or its
    part) and the space, unless ``obs`` fits ``space``: every Discrete, MultiDiscrete and MultiBinary part
    a member of its space (its one-hot or bits exist only then), every Box part of the declared shape,
    Dict parts under the declared keys, Tuple parts as many as declared. A Box part's dtype and bounds
    are not checked here: Gymnasium's env checker warns about them and the value is cast (many envs
    return float64 for a float32 space, and clipping to the bounds would change the task)."""
    problem = _obs_problem(obs, space, "")
    if problem:
        raise EnvError(
            f"{env_id}: {where} returned an observation {problem}; the observation space is "
            f"{describe_space(space)}"
        )


def _obs_problem(obs: Any, space: gym.Space, path: str) -> str | None:
    """What is wrong with ``obs`` (at ``path`` inside the observation, ``""`` for all of it), or None."""
    where = f"whose part {path} is " if path else ""
    if isinstance(space, gym.spaces.Box):
        if np.shape(obs) != space.shape:
            return f"whose part {path} has shape {np.shape(obs)}" if path else f"of shape {np.shape(obs)}"
        # outside the bounds (another dtype is cast, as Gymnasium's checker only warns about it)
        x = np.asarray(obs, dtype=np.float64)
        low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
        outside = ~((x >= low) & (x <= high))  # NaN counts as outside
        if outside.any():
            idx = tuple(int(k) for k in np.argwhere(outside)[0])
            at = f"{path}{list(idx) if idx else ''}"
            return (
                f"{'whose part ' if path else 'with '}{at or 'value'} = {x[idx]:g} outside its bounds "
                f"[{low[idx]:g}, {high[idx]:g}]"
            )
        return None
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, dict) or set(obs) != set(space.spaces):
            return f"{where}{_describe_value(obs)} (expected the keys {list(space.spaces)})"
        for key, part in space.spaces.items():
            problem = _obs_problem(obs[key], part, f"{path}[{key!r}]")
            if problem:
                return problem
        return None
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(obs, tuple | list) or len(obs) != len(space.spaces):
            return f"{where}{_describe_value(obs)} (expected a tuple of {len(space.spaces)})"
        for i, part in enumerate(space.spaces):
            problem = _obs_problem(obs[i], part, f"{path}[{i}]")
            if problem:
                return problem
        return None
    if not space.contains(obs):
        return f"{where}{_describe_value(obs)}, not in {describe_space(space)}"
    return None


def _describe_value(x: Any) -> str:
    """A value in a few words: ``5 (int)``, ``[0 2 1] (int64, shape (3,))``, ``a dict with keys [...]``."""
    if isinstance(x, dict):
        return f"a dict with keys {sorted(map(str, x))}"
    if isinstance(x, tuple):
        return f"a tuple of {len(x)}"
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError):
        return type(x).__name__
    if arr.dtype == object:
        return type(x).__name__
    if isinstance(x, np.ndarray | list):
        return f"{np.array2string(arr, threshold=8)} ({arr.dtype}, shape {arr.shape})"
    return f"{x!r} ({type(x).__name__})"


def describe_space(space: gym.Space) -> str:
    """A space in the words of an error: ``Discrete(4)``, ``Box(-2.0, 2.0, (1,))`` (uniform bounds) or
    ``Box(4,)``, ``MultiDiscrete([3, 2])``, ``MultiBinary(5)``, ``Dict(pos: Box(...), goal: Discrete(3))``,
    ``Tuple(MultiBinary(2), Discrete(2))``."""
    if isinstance(space, gym.spaces.Discrete):
        start = f", start={int(space.start)}" if int(space.start) != 0 else ""
        return f"Discrete({int(space.n)}{start})"
    if isinstance(space, gym.spaces.Box):
        low, high = np.unique(space.low), np.unique(space.high)
        if low.size == 1 and high.size == 1:  # uniform bounds read best: Box(-2.0, 2.0, (1,))
            return f"Box({float(low[0])}, {float(high[0])}, {tuple(space.shape)})"
        return f"Box{tuple(space.shape)}"
    if isinstance(space, gym.spaces.MultiDiscrete):
        start = f", start={space.start.tolist()}" if np.any(space.start != 0) else ""
        return f"MultiDiscrete({space.nvec.tolist()}{start})"
    if isinstance(space, gym.spaces.MultiBinary):
        n = space.n
        return f"MultiBinary({n if isinstance(n, int | np.integer) else tuple(n)})"
    if isinstance(space, gym.spaces.Dict):
        return "Dict(" + ", ".join(f"{k}: {describe_space(v)}" for k, v in space.spaces.items()) + ")"
    if isinstance(space, gym.spaces.Tuple):
        return "Tuple(" + ", ".join(describe_space(v) for v in space.spaces) + ")"
    return type(space).__name__


def algorithms_for(observation_space: gym.Space | None, action_space: gym.Space | None) -> list[str]:
    """The registered algorithms whose method handles these spaces (either may be None: any), by the
    ``observation_spaces`` and ``action_spaces`` of their registry records, sorted."""
    from advantage.registry import all_algorithms

    def fits(space: gym.Space | None, kinds: tuple[str, ...]) -> bool:
        return space is None or type(space).__name__ in kinds

    return sorted(
        name
        for name, spec in all_algorithms().items()
        if spec.uses_env
        and spec.action_spaces
        and fits(observation_space, spec.observation_spaces)
        and fits(action_space, spec.action_spaces)
    )


def _algorithms_hint(which: str, space: gym.Space, other: gym.Space | None) -> str:
    """``"; algorithms for Box observations and Box actions: a2c, ddpg, ..."``, or ``""`` when none."""
    obs, act = (space, other) if which == "observation" else (other, space)
    names = algorithms_for(obs, act)
    if not names:
        return ""
    kinds = [f"{type(s).__name__} {w}s" for s, w in ((obs, "observation"), (act, "action")) if s is not None]
    return f"; algorithms for {' and '.join(kinds)}: {', '.join(names)}"


def require_space(
    algo: str,
    env_id: str,
    which: str,
    space: gym.Space,
    kind: type[gym.Space] | tuple[type[gym.Space], ...],
    *,
    other: gym.Space | None = None,
) -> None:
    """Raise ``EnvError("q_learning needs a Discrete observation space; CartPole-v1 has Box(4,); algorithms
    for Box observations and Discrete actions: a2c, dqn, ...")``; with several kinds, ``"ppo needs a
    Discrete or Box action space; ..."``. ``other``: the env's other space (its action space when
    ``which`` is ``"observation"``), so the algorithms named fit both."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(space, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        if len(kinds) > 2:
            names = ", ".join(k.__name__ for k in kinds[:-1]) + f" or {kinds[-1].__name__}"
        raise EnvError(
            f"{algo} needs a {names} {which} space; {env_id} has {describe_space(space)}"
            + _algorithms_hint(which, space, other)
        )


def require_vector_observations(algo: str, env_id: str, space: gym.Space, action_space: gym.Space) -> None:
    """The check of the algorithms whose MLP gets the observation as one vector (:func:`encode_observations`):
    ``space`` (encoded or not) must have a vector encoding; otherwise ``EnvError("ppo needs a Box,
    Discrete, MultiDiscrete, MultiBinary, Dict or Tuple observation space; X has Text; ...")``."""
    if not vector_encodable(space):
        raise EnvError(
            f"{algo} needs a {VECTOR_OBSERVATIONS} observation space; {env_id} has {describe_space(space)}"
            + _algorithms_hint("observation", space, action_space)
        )
