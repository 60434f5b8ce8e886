"""Env state saved and restored on any environment: plain attributes, episodes replayed, and a clear
answer where neither puts the env back exactly (then a resume starts fresh episodes).

The class under test is Gymnasium's registry (every classic-control, toy-text, Box2D and MuJoCo id that
builds here) and the values an env may store (property-based), not a list of named environments.
"""

from __future__ import annotations

import contextlib
import json
import random
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from benchmarks import env_matrix as matrix
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from advantage.envs import env_state, set_env_state
from advantage.envs.replay import EpisodeRecorder, restore_env
from advantage.envs.state import _decode, _decode_plain, _encode


def registry_ids() -> list[str]:
    """Every id of the four families whose env builds here (the env matrix's own list; old MuJoCo
    versions need mujoco<3)."""
    return matrix.env_ids()[0]


IDS = registry_ids()
# Box2D worlds that live across episodes (made once in __init__, emptied by reset): one episode replayed
# into a fresh world does not give the same contacts, so these resume with fresh episodes, saying so.
NOT_EXACT = {"BipedalWalker-v3", "BipedalWalkerHardcore-v3"}


def _vec(env_id: str) -> gym.vector.VectorEnv:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make_vec(env_id, num_envs=2, vectorization_mode="sync", wrappers=[EpisodeRecorder])


def _same(a, b) -> bool:
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a[:4], b[:4], strict=True))


@pytest.mark.parametrize("env_id", IDS)
def test_every_registry_env_is_restored_exactly_or_says_why(env_id):
    """Save mid-episode (after some episodes ended), restore into a fresh copy through JSON, then step
    both with the same actions: the same observations, rewards and ends, or restore_env gives a reason.
    Never a copy that silently steps elsewhere."""
    env = _vec(env_id)
    env.reset(seed=3)
    env.action_space.seed(3)
    for _ in range(300):
        env.step(env.action_space.sample())
    saved = json.loads(json.dumps(env_state(env)))
    copy = _vec(env_id)
    copy.reset(seed=99)
    why = restore_env(copy, saved)
    if env_id in NOT_EXACT and why is not None:
        assert "randomness of its own" in why
        return
    assert why is None, why
    env.action_space.seed(4)
    for t in range(80):
        action = env.action_space.sample()
        assert _same(env.step(action), copy.step(action)), (env_id, t)


def test_a_checkpoint_from_before_recording_restores_its_plain_attributes():
    """State saved by an env without the recorder layer (checkpoints written before it) still restores."""
    plain = gym.make_vec("Acrobot-v1", num_envs=2, vectorization_mode="sync")
    plain.reset(seed=0)
    for _ in range(30):
        plain.step(plain.action_space.sample())
    saved = json.loads(json.dumps(env_state(plain)))
    copy = _vec("Acrobot-v1")
    copy.reset(seed=1)
    assert restore_env(copy, saved) is None
    for _ in range(20):
        a = plain.action_space.sample()
        assert _same(plain.step(a), copy.step(a))


# ---- custom envs: changing dtypes and shapes, growing lists; an env that cannot be captured -------------


class ShapeShifter(gym.Env):
    """State attributes that change dtype and shape, go None <-> array, and a list that grows."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.state = None
        self.history: list[float] = []
        self.extra = None
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = self.np_random.normal(size=2).astype(np.float32)
        self.history, self.extra, self.t = [], None, 0
        return self.state.astype(np.float32), {}

    def step(self, action):
        self.t += 1
        self.state = np.append(self.state.astype(np.float64), self.np_random.normal())[-2:]  # float64 now
        self.history.append(float(self.state[0]))
        self.extra = np.arange(self.t % 3 + 1, dtype=np.int16) if self.t % 2 else None
        obs = self.state.astype(np.float32)
        return obs, float(action) - float(np.sum(self.history[-3:])), self.t >= 40, False, {}


class OwnRandomness(ShapeShifter):
    """Draws from Python's global ``random``: no snapshot or replay can put it back."""

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        return obs + np.float32(random.random()), r, term, trunc, info


@pytest.mark.parametrize("cls, exact", [(ShapeShifter, True), (OwnRandomness, False)])
def test_custom_envs_restore_exactly_or_say_why(cls, exact):
    def make():
        return gym.vector.SyncVectorEnv([lambda: EpisodeRecorder(cls()) for _ in range(2)])

    env = make()
    env.reset(seed=0)
    for t in range(57):  # past one episode end (40 steps), mid-way through the next
        env.step(np.array([t % 2, 1]))
    saved = json.loads(json.dumps(env_state(env)))
    copy = make()
    copy.reset(seed=5)
    why = restore_env(copy, saved)
    if not exact:
        assert why is not None and "randomness of its own" in why
        return
    assert why is None, why
    for t in range(30):
        a = np.array([1, t % 2])
        assert _same(env.step(a), copy.step(a))


# ---- property-based: any value an env may store round-trips; anything else is a ValueError ----------

numeric_dtypes = st.sampled_from(
    ["bool", "int8", "int16", "int32", "int64", "uint8", "uint64", "float32", "float64"]
)
arrays = numeric_dtypes.flatmap(lambda d: hnp.arrays(d, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    numeric_dtypes.flatmap(lambda d: hnp.from_dtype(np.dtype(d), allow_nan=False).map(np.dtype(d).type)),
)
plain_values = st.recursive(
    st.one_of(scalars, arrays),
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.lists(inner, max_size=5).map(tuple)),
    max_leaves=30,
)


def _equal(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return (
            a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        )
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and (a == b or (a != a and b != b))
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plain_values)
def test_any_plain_value_round_trips_through_json(value):
    enc = _encode(value)
    assert enc is not None
    back = _decode_plain(json.loads(json.dumps(enc)), "x")
    assert _equal(back, value)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["v", "np", "nd", "shape", "seq", "rng", "x"]), inner, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(json_values, st.sampled_from([None, 1.5, np.zeros(2), "s", [1, 2], np.random.default_rng(0)]))
def test_any_forged_value_decodes_or_is_a_value_error(enc, current):
    with contextlib.suppress(ValueError):
        _decode(enc, current, "x")


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_a_forged_state_never_half_applies_or_raises_anything_else(forged):
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    saved = env_state(env)
    state = json.loads(json.dumps(saved))
    state[-1]["attrs"]["state"] = forged
    before = env.unwrapped.state.copy()
    try:
        set_env_state(env, state)
    except ValueError:
        assert np.array_equal(env.unwrapped.state, before)


def test_a_31_digit_scalar_is_a_value_error_not_an_overflow():
    with pytest.raises(ValueError, match="not a numpy number"):
        _decode({"np": "<i8", "v": 10**30}, np.int64(1), "x")
    with pytest.raises(ValueError, match="not a numeric array"):
        _decode({"nd": "<i8", "shape": [1], "v": [10**30]}, np.zeros(1), "x")


# ---- exact resume of whole runs: ppo and sac on every classic-control and Box2D env ----------------------

CONTROL = [i for i in IDS if any(f in str(gym.spec(i).entry_point) for f in ("classic_control", "box2d"))]
RUN_KEYS = {
    "ppo": {
        "env.num_envs": 2,
        "algorithm.n_steps": 64,
        "algorithm.minibatch_size": 64,
        "algorithm.n_epochs": 2,
    },
    "sac": {
        "env.num_envs": 2,
        "algorithm.learning_starts": 64,
        "algorithm.buffer_size": 10_000,  # CarRacing's images: the default million would need 51 GiB
        "algorithm.batch_size": 32,
        "model.actor_hidden": [32, 32],
        "model.critic_hidden": [32, 32],
    },
}


def _cells() -> list[tuple[str, str]]:
    cells = []
    for env_id in CONTROL:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            box = isinstance(gym.make(env_id).action_space, gym.spaces.Box)
        cells += [("ppo", env_id)] + ([("sac", env_id)] if box else [])
    # CarRacing's 96x96x3 frames take minutes here: run with -m heavy
    return [
        pytest.param(a, e, marks=pytest.mark.heavy) if e.startswith("CarRacing") else (a, e) for a, e in cells
    ]


@pytest.mark.slow
@pytest.mark.parametrize("algo, env_id", _cells())
def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path, monkeypatch, algo, env_id):
    """Stopped by SIGTERM half-way and resumed: the same final weights, optimizer state, observation
    statistics, RNG and env state as a run never interrupted (or, for the Box2D worlds that live across
    episodes, a resume that says it started fresh episodes)."""
    import signal

    import advantage
    from advantage.context import RunContext

    keys = {
        "env.id": env_id,
        "trainer.total_steps": 512,
        "trainer.eval_every": 0,
        "trainer.eval_episodes": 1,
        "trainer.tensorboard": False,
        "trainer.plot": False,
        "hyperparams": "none",
        **RUN_KEYS[algo],
    }
    straight = advantage.train(algo, quiet=True, **keys, **{"trainer.run_dir": str(tmp_path / "a")})
    original, stopped_at = RunContext.tick, []

    def tick(self, step, snapshot):
        if step >= 256 and not stopped_at:
            stopped_at.append(step)
            signal.raise_signal(signal.SIGTERM)
        return original(self, step, snapshot)

    with monkeypatch.context() as m:
        m.setattr(RunContext, "tick", tick)
        half = advantage.train(algo, quiet=True, **keys, **{"trainer.run_dir": str(tmp_path / "b")})
    assert half.step == stopped_at[0] < 512
    resumed = advantage.resume(half.dir, quiet=True)
    if (resumed.dir / "events.jsonl").exists():
        assert env_id in NOT_EXACT, (resumed.dir / "events.jsonl").read_text()
        return
    a, b = straight.checkpoint, resumed.checkpoint
    assert a.step == b.step
    differ = [k for k in a.tensors if not torch.equal(a.tensors[k], b.tensors[k])]
    assert not differ, differ
    assert a.state["algo"] == b.state["algo"]  # optimizer settings, RNGs, the env state
