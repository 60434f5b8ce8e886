"""Restore an environment by replaying its current episode: exact resume where the state is not plain data.

:func:`advantage.envs.env_state` keeps an environment's plain attributes. That is the whole state of the
classic-control and toy-text tasks, but not of a Box2D world (LunarLander, BipedalWalker, CarRacing), a
MuJoCo simulation or a user's env whose state lives in objects: restoring their plain attributes alone
leaves the physics where the fresh copy was, and the run silently diverges.

Every Gymnasium environment draws its randomness from ``env.unwrapped.np_random``, seeded at ``reset``
(the Gymnasium API's contract). So the episode in progress is determined by the generator's state just
before its ``reset`` (or the seed given to it), the reset's options, and the actions taken since.
:class:`EpisodeRecorder` keeps exactly that, per sub-environment of a vector env, and
:func:`restore_env` rebuilds a fresh copy by resetting it the same way and stepping the same
actions, then checks that the observation it reaches is the saved one (a digest), so an env with
randomness of its own (``random``, the clock) is detected, never silently resumed in the wrong place.
:func:`~advantage.envs.env_state` saves each recorder's episode with its layer; :func:`restore_env`
restores the plain attributes and then replays.

Limits: an episode longer than :data:`MAX_ACTIONS` steps (an env without a time limit) stops recording
and is restored from its plain attributes alone (:func:`~advantage.envs.set_env_state`); state that lives
across episodes in objects (a curriculum counter held in a dict, say) is not replayed.
"""

from __future__ import annotations

import hashlib
from typing import Any

import gymnasium as gym
import numpy as np

from advantage.envs.state import _BIT_GENERATORS, RECORDER, _decode_plain, _encode, _layers, set_env_state

MAX_ACTIONS = 100_000  # longest episode replayed on restore (one sub-env); beyond, plain attributes only


def _digest(obs: Any) -> str:
    """A digest of an observation (an array, or a dict / tuple of arrays): dtype, shape and bytes."""
    h = hashlib.sha256()

    def feed(x: Any) -> None:
        if isinstance(x, dict):
            for k in sorted(x, key=str):
                h.update(str(k).encode())
                feed(x[k])
        elif isinstance(x, tuple | list):
            for item in x:
                feed(item)
        else:
            a = np.asarray(x)
            h.update(f"{a.dtype.str}{a.shape}".encode())
            h.update(np.ascontiguousarray(a).tobytes())

    feed(obs)
    return h.hexdigest()


class _Log:
    """The current episode of one env: how it was reset and the actions since (an object, so the plain
    state saver skips it: :func:`replay_state` saves it)."""

    __slots__ = ("actions", "digest", "ok", "options", "rng", "seed")

    def __init__(self) -> None:
        self.seed: int | None = None
        self.rng: dict[str, Any] | None = None
        self.options: Any = None
        self.actions: list[Any] = []
        self.digest: str | None = None
        self.ok = False  # replayable: reset seen, seeded or from a known generator, options plain


class EpisodeRecorder(gym.Wrapper):
    """Records how the current episode began and every action since (see the module docstring). Put it
    outermost, so a replay passes through every wrapper below (time limit counters included)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._log = _Log()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        log = _Log()
        rng = getattr(self.env.unwrapped, "_np_random", None)
        log.seed, log.options = seed, options
        if seed is None and isinstance(rng, np.random.Generator):
            log.rng = dict(rng.bit_generator.state)
        log.ok = (seed is not None or log.rng is not None) and (
            options is None or _encode(options) is not None
        )
        obs, info = self.env.reset(seed=seed, options=options)
        log.digest = None
        self._log, self._obs = log, obs
        return obs, info

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        log = self._log
        if log.ok:
            if len(log.actions) >= MAX_ACTIONS:
                log.ok, log.actions = False, []
            else:
                log.actions.append(np.array(action, copy=True) if isinstance(action, np.ndarray) else action)
        self._obs = out[0]
        return out

    def replay_record(self) -> dict[str, Any] | None:
        """The JSON form of the episode so far (saved by :func:`~advantage.envs.env_state` with this
        layer), or None when it cannot be replayed."""
        log = self._log
        if not log.ok:
            return None
        actions = [_encode(a) for a in log.actions]
        if any(a is None for a in actions):  # an action that is not plain data
            return None
        return {
            "seed": log.seed,
            "rng": log.rng,
            "options": _encode(log.options),
            "actions": actions,
            "obs": _digest(self._obs),
        }


def restore_env(env: Any, state: Any) -> str | None:
    """Restore ``env`` (built from the same config, and reset) to a saved :func:`~advantage.envs.env_state`:
    its plain attributes, then each recorded episode replayed (:class:`EpisodeRecorder` layers). Returns
    None when the environment is exactly where it was saved, else why not (one line): the caller then
    starts fresh episodes instead."""
    if isinstance(env, gym.vector.AsyncVectorEnv):  # its copies live in other processes
        return "an async vector env's copies run in other processes, whose state is not saved"
    try:
        set_env_state(env, state)
    except ValueError as e:
        return str(e)
    if not any(s.get("type") == RECORDER for s in state):
        return None  # a checkpoint from before episodes were recorded: its plain attributes, as then
    for i, (layer, saved) in enumerate(zip(_layers(env), state, strict=True)):
        if not isinstance(layer, EpisodeRecorder):
            continue
        record = saved.get("replay")
        if not isinstance(record, dict):
            return f"copy {i}'s episode was not recorded (longer than {MAX_ACTIONS} steps, or not seeded)"
        try:
            why = _replay_one(layer, record)
        except (ValueError, TypeError, KeyError, IndexError, OverflowError, AssertionError) as e:
            why = f"replaying an episode failed ({type(e).__name__}: {str(e)[:120]})"
        if why is not None:
            return why
    return None


def _replay_one(rec: EpisodeRecorder, s: dict[str, Any]) -> str | None:
    seed, rng_state = s.get("seed"), s.get("rng")
    options = _decode_plain(s["options"], "options") if s.get("options") is not None else None
    saved_actions = s.get("actions")
    if not (
        isinstance(saved_actions, list)
        and len(saved_actions) <= MAX_ACTIONS
        and isinstance(s.get("obs"), str)
    ):
        return "the recorded episode is malformed"
    actions = [_decode_plain(a, f"actions[{t}]") for t, a in enumerate(saved_actions)]
    if seed is not None:
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**128:
            return "the recorded reset seed is not a seed"
        rec.reset(seed=seed, options=options)
    else:
        name = rng_state.get("bit_generator") if isinstance(rng_state, dict) else None
        if not isinstance(name, str) or name not in _BIT_GENERATORS or not isinstance(rng_state, dict):
            return f"unknown bit generator {str(name)[:40]!r}"
        generator = np.random.Generator(_BIT_GENERATORS[name]())
        generator.bit_generator.state = rng_state
        rec.env.unwrapped._np_random = generator  # what reset(seed=None) draws the episode from
        rec.reset(options=options)
    space = rec.action_space
    for t, action in enumerate(actions):
        a = np.asarray(action, dtype=space.dtype) if isinstance(space, gym.spaces.Box) else action
        _, _, terminated, truncated, _ = rec.step(a)
        if (terminated or truncated) and t < len(actions) - 1:
            return "the replayed episode ended early: the environment has randomness of its own"
    if _digest(rec._obs) != s["obs"]:
        return "the replayed episode reached another observation: the environment has randomness of its own"
    return None


def restore_or_restart(env: Any, state: Any, seed: int, step: int, ctx: Any) -> Any | None:
    """Put ``env`` (built from the run's config) back where the checkpoint's ``state`` left it: None when
    it is there exactly (:func:`advantage.envs.replay.restore_env`); otherwise the envs start fresh
    episodes (reset with a seed of this step, so a resumed run is still reproducible), ``ctx`` says so in
    one line and in the run folder, and the new first observation is returned. A resume never stops on an
    environment it cannot capture: the learner, buffers and counters carry on."""
    why = restore_env(env, state)
    if why is None:
        return None
    obs, _ = env.reset(seed=restart_seed(seed, step))
    if ctx is not None and hasattr(ctx, "env_restarted"):
        ctx.env_restarted(step, why)
    return obs


def restart_seed(seed: int, step: int) -> int:
    """The reset seed of envs restarted at ``step`` on resume: new episodes, the same on every resume."""
    return (seed * 1_000_003 + step) % 2**31
