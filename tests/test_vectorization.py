"""How ``env.vectorization=auto`` picks the vector env, and resuming a run saved with the other kind."""

from __future__ import annotations

import pytest

from advantage.config import VecEnvConfig
from advantage.envs import env_state, make_vec_env, set_env_state
from advantage.errors import EnvError


def _kind(**kw: object) -> str:
    env = make_vec_env(VecEnvConfig(**kw))  # type: ignore[arg-type]
    try:
        return type(env).__name__
    finally:
        env.close()


def test_auto_steps_a_single_copy_as_a_scalar_env_and_several_natively():
    assert _kind(id="CartPole-v1", num_envs=1) == "SyncVectorEnv"
    assert _kind(id="CartPole-v1", num_envs=2) == "CartPoleVectorEnv"
    assert _kind(id="CartPole-v1", num_envs=16) == "CartPoleVectorEnv"
    assert _kind(id="CartPole-v1", num_envs=1, vectorization="native") == "CartPoleVectorEnv"
    assert _kind(id="Pendulum-v1", num_envs=4) == "SyncVectorEnv"  # no native version


def test_native_without_a_native_version_is_a_clear_error():
    with pytest.raises(EnvError, match=r"vectorization=native.*Pendulum-v1.*no vectorized version"):
        make_vec_env(VecEnvConfig(id="Pendulum-v1", num_envs=1, vectorization="native"))


def test_a_native_checkpoint_restored_into_a_scalar_env_names_the_way_back():
    native = make_vec_env(VecEnvConfig(id="CartPole-v1", num_envs=1, vectorization="native"))
    native.reset(seed=0)
    saved = env_state(native)
    sync = make_vec_env(VecEnvConfig(id="CartPole-v1", num_envs=1))
    sync.reset(seed=0)
    with pytest.raises(ValueError, match="resume with env.vectorization=native"):
        set_env_state(sync, saved)
    again = make_vec_env(VecEnvConfig(id="CartPole-v1", num_envs=1, vectorization="native"))
    again.reset(seed=1)
    set_env_state(again, saved)
    assert env_state(again) == saved
    for env in (native, sync, again):
        env.close()
