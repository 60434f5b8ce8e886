"""Exact planning as runs (SPEC T3): ``value_iteration``, ``policy_iteration`` and ``policy_evaluation`` on
the known model of a toy-text env, with the solvers of :mod:`advantage.algos.tabular.dynamic_programming`,
so ``advantage train value_iteration env.id=FrozenLake-v1`` can be evaluated with ``advantage eval`` like
any other run.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from advantage.algos.tabular.common import TablePolicy, check_discrete, fixed_policy_table, table_shape
from advantage.algos.tabular.dynamic_programming import (
    policy_evaluation,
    policy_iteration,
    q_from_v,
    value_iteration,
)
from advantage.configs.tabular import PlanningConfig
from advantage.context import RunContext, Snapshot
from advantage.envs import tabular_model
from advantage.errors import ConfigError


def train(cfg: PlanningConfig, ctx: RunContext, method: str) -> None:
    a = cfg.algorithm
    env = ctx.make_env()
    model = tabular_model(env, cfg.env.id)
    env.close()
    n_states, n_actions = table_shape(env)
    if method == "value_iteration":
        v, q, iters = value_iteration(model, a.gamma, a.theta, a.max_iterations)
        policy, tensors = TablePolicy(q), {"v": v, "q": q}
    elif method == "policy_iteration":
        v, q, actions, iters = policy_iteration(model, a.gamma, a.max_iterations)
        policy, tensors = TablePolicy(q), {"v": v, "q": q, "policy": actions}
    else:
        pi = fixed_policy_table(a.policy, n_states, n_actions)
        try:
            v = policy_evaluation(model, pi, a.gamma)
        except ValueError as e:
            raise ConfigError(f"algorithm.gamma={a.gamma}: {e}") from None
        q, iters = q_from_v(model, v, a.gamma), 1
        policy, tensors = TablePolicy(pi, kind="probs", seed=cfg.trainer.seed), {"v": v, "q": q, "pi": pi}
    ctx.log(0, {"plan/iterations": iters, "plan/v_mean": float(v.mean()), "plan/v_max": float(v.max())})
    ctx.finish(0, Snapshot(policy, tensors, {}))


def check_env(cfg: PlanningConfig, env: gym.Env, name: str) -> None:
    check_discrete(cfg, env, name)
    tabular_model(env, cfg.env.id)  # raises EnvError if the model is not known


def _policy(cfg: PlanningConfig, env: gym.Env, tensors: Any) -> TablePolicy:
    if "pi" in tensors:
        return TablePolicy(tensors["pi"].numpy(), kind="probs", seed=cfg.trainer.seed)
    return TablePolicy(tensors["q"].numpy())
