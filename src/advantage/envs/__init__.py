"""Environments: one ``make_env`` helper, space checks, known models for planning, state snapshots, and
Baird's counterexample (``Baird-v0``, registered on import)."""

from advantage.envs.baird import BairdEnv, baird_features, register_baird
from advantage.envs.make import (
    check_env_api,
    check_env_config,
    describe_space,
    encode_observations,
    flatten_observations,
    make_env,
    make_vec_env,
    require_space,
    require_vector_observations,
)
from advantage.envs.model import TabularModel, tabular_model
from advantage.envs.state import env_state, set_env_state

register_baird()

__all__ = [
    "BairdEnv",
    "TabularModel",
    "baird_features",
    "check_env_api",
    "check_env_config",
    "describe_space",
    "encode_observations",
    "env_state",
    "flatten_observations",
    "make_env",
    "make_vec_env",
    "require_space",
    "require_vector_observations",
    "set_env_state",
    "tabular_model",
]
