"""Pieces shared by the tabular algorithms: ε-greedy, the table policy, the fixed policy that prediction
evaluates (:func:`fixed_policy_table`), checks, a sampling run's saved state (their config sections are in
:mod:`advantage.configs.tabular`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Discrete

from advantage.configs.linear import LinearConfig
from advantage.configs.tabular import PlanningConfig, TDConfig
from advantage.context import RunContext
from advantage.envs import env_state, flatten_observations, make_env, require_space
from advantage.envs.replay import restore_or_restart
from advantage.errors import ConfigError
from advantage.registry import Policy
from advantage.resolve import resolve_config
from advantage.run_folder import load_latest, run_config


def epsilon_greedy(q_row: np.ndarray, epsilon: float, rng: np.random.Generator) -> int:
    """With probability ε a uniform action, else a greedy one with ties broken uniformly (so an
    all-zero table does not always pick action 0)."""
    if rng.random() < epsilon:
        return int(rng.integers(q_row.shape[0]))
    best = np.flatnonzero(q_row == q_row.max())
    return int(best[0] if best.shape[0] == 1 else best[rng.integers(best.shape[0])])


def epsilon_greedy_probs(q_row: np.ndarray, epsilon: float) -> np.ndarray:
    """π(·|s) of the ε-greedy policy: ε/|A| everywhere plus (1−ε) shared by the greedy actions."""
    n = q_row.shape[0]
    best = q_row == q_row.max()
    return np.full(n, epsilon / n) + (1.0 - epsilon) * best / best.sum()


class TablePolicy:
    """A policy stored as a table ``[S, A]``.

    ``kind="q"``: action values; the policy is greedy (first maximum when ``deterministic``, a uniform
    choice among maxima otherwise). ``kind="probs"``: a stochastic policy π(a|s) that is always sampled
    (a prediction run evaluates exactly that policy).
    """

    def __init__(self, table: np.ndarray, kind: str = "q", seed: int = 0):
        if kind not in ("q", "probs"):
            raise ValueError(f"kind must be 'q' or 'probs', got {kind!r}")
        self.table, self.kind = np.asarray(table, dtype=np.float64), kind
        self.rng = np.random.default_rng(seed)

    def act(self, obs: Any, deterministic: bool = True) -> int:
        row = self.table[int(obs)]
        if self.kind == "probs":
            return int(self.rng.choice(row.shape[0], p=row / row.sum()))
        if deterministic:
            return int(np.argmax(row))
        return epsilon_greedy(row, 0.0, self.rng)


def fixed_policy_table(spec: str, n_states: int, n_actions: int) -> np.ndarray:
    """π(a|s) ``[S, A]`` of the policy named by ``algorithm.policy``: ``"random"`` (uniform), or the folder of
    a tabular run (its greedy policy, or the π of a prediction run)."""
    if spec == "random":
        return np.full((n_states, n_actions), 1.0 / n_actions)
    policy = run_policy(spec)
    if not isinstance(policy, TablePolicy) or policy.table.shape != (n_states, n_actions):
        raise ConfigError(
            f"algorithm.policy {spec!r} is not a tabular policy for a {n_states}x{n_actions} table"
        )
    if policy.kind == "probs":
        return policy.table / policy.table.sum(axis=1, keepdims=True)
    return np.eye(n_actions)[policy.table.argmax(axis=1)]


def run_policy(run_dir: str) -> Policy | None:
    """The trained policy of the run in ``run_dir``, rebuilt from its ``config.yaml`` and latest checkpoint
    by its algorithm's ``policy`` function (as :attr:`advantage.runs.Run.policy` does); None for an
    algorithm without one (a language model's)."""
    algo, cfg = resolve_config(None, run_config(run_dir), check_device=False)
    if algo.policy is None:
        return None
    env = make_env(cfg.env, flatten_obs=flatten_observations(cfg))
    try:
        return algo.policy(cfg, env, load_latest(Path(run_dir)).tensors)
    finally:
        env.close()


def check_discrete(cfg: TDConfig | PlanningConfig | LinearConfig, env: gym.Env, name: str) -> None:
    """``check_env`` of the tabular methods (``name``: the algorithm): Discrete observations and actions."""
    obs, act = env.observation_space, env.action_space
    require_space(name, cfg.env.id, "observation", obs, gym.spaces.Discrete, other=act)
    require_space(name, cfg.env.id, "action", act, gym.spaces.Discrete, other=obs)


def table_shape(env: gym.Env) -> tuple[int, int]:
    return int(cast(Discrete, env.observation_space).n), int(cast(Discrete, env.action_space).n)


def sampler_state(rng: np.random.Generator, env: gym.Env, obs: int, **extra: Any) -> dict[str, Any]:
    """What a sampling tabular run checkpoints besides its tables: the rng, the env mid-episode, the current
    state and ``extra`` (the next action, the running episode, ...)."""
    return {"rng": dict(rng.bit_generator.state), "env": env_state(env), "obs": int(obs), **extra}


def start_sampler(
    ctx: RunContext, env: gym.Env, seed: int
) -> tuple[np.random.Generator, int, int, dict[str, Any]]:
    """``(rng, obs, step, saved)`` of a sampling tabular run: fresh (the rng seeded with ``seed``, the first
    state of ``env.reset(seed=seed)``, step 0, nothing saved), or resumed, the inverse of
    :func:`sampler_state` (``env`` put back mid-episode; ``saved`` is the checkpoint's ``state["algo"]``,
    where the caller reads its ``extra`` fields)."""
    if ctx.restored is None:
        return np.random.default_rng(seed), int(env.reset(seed=seed)[0]), 0, {}
    saved = ctx.restored.state["algo"]
    env.reset(seed=seed)
    rng = np.random.default_rng()
    rng.bit_generator.state = saved["rng"]
    fresh = restore_or_restart(env, saved["env"], seed, ctx.restored.step, ctx)
    if fresh is not None:  # a new episode: the running one's return, length and transitions are dropped
        saved = {**saved, "obs": int(fresh), "ep_return": 0.0, "ep_len": 0, "episode": None}
    return rng, saved["obs"], ctx.restored.step, saved
