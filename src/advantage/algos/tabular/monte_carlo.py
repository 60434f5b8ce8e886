"""Monte Carlo prediction and control (SPEC T2; Sutton & Barto 2018, ch. 5).

An episode is played to its end, its returns are computed backwards, :math:`G_t = r_{t+1} + γ G_{t+1}`
(one O(T) pass, :func:`advantage.math.reward_to_go`), and every visit — or only the first visit — of a
state (prediction) or state-action pair (control) moves its estimate by the incremental mean
:math:`V \\mathrel{+}= (G - V)/N` (:func:`advantage.math.mc_update`).

* ``mc_prediction`` estimates :math:`V^\\pi` of a fixed policy: the uniform random policy, or the policy
  of an earlier run (``algorithm.policy=runs/...``). Its estimate converges to exact policy evaluation
  (``advantage train policy_evaluation``), which the tests check.
* ``mc_control`` is on-policy first-/every-visit control with an ε-soft (ε-greedy) policy that improves
  after every episode (Sutton & Barto 2018, §5.4).

Implementation details:

1. A time-limit truncation is not a termination: the return of a truncated episode is bootstrapped with
   the current estimate of the last next-state's value (V for prediction; the ε-greedy expectation of Q
   for control) instead of pretending the episode ended there.
2. Estimates and counts are float64 torch tensors so the math core's functions apply unchanged.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

from advantage.algos.tabular.common import (
    TablePolicy,
    epsilon_greedy,
    epsilon_greedy_probs,
    fixed_policy_table,
    sampler_state,
    start_sampler,
    table_shape,
)
from advantage.configs.tabular import (
    MCControlAlgorithm,
    MCControlConfig,
    MCPredictionAlgorithm,
    MCPredictionConfig,
)
from advantage.context import RunContext, Snapshot
from advantage.math import mc_update, reward_to_go
from advantage.schedules import linear_schedule, schedule_total


def _episode(saved: dict[str, list] | None = None) -> SimpleNamespace:
    """The running episode (``saved``: a checkpoint's): what Monte Carlo must keep until the episode ends."""
    return SimpleNamespace(**(saved or {"states": [], "actions": [], "rewards": []}))


def train(cfg: MCControlConfig | MCPredictionConfig, ctx: RunContext, control: bool) -> None:
    a_cfg, t = cfg.algorithm, cfg.trainer
    env = ctx.make_env()
    n_states, n_actions = table_shape(env)
    n_keys = n_states * n_actions if control else n_states
    pi = (
        None
        if control
        else fixed_policy_table(cast(MCPredictionAlgorithm, a_cfg).policy, n_states, n_actions)
    )

    def epsilon(step: int, after_step: bool = False) -> float:
        c = cast(MCControlAlgorithm, a_cfg)  # control only
        total = schedule_total(t, step, after_step=after_step)
        return linear_schedule(c.epsilon_start, c.epsilon_end, c.epsilon_decay_fraction, step, total)

    rng, obs, step, s = start_sampler(ctx, env, t.seed)
    episode = _episode(s.get("episode"))
    if ctx.restored is None:
        est = torch.full((n_keys,), cfg.model.init_value, dtype=torch.float64)
        counts = torch.zeros(n_keys, dtype=torch.float64)
    else:
        est = ctx.restored.tensors["estimate"].clone()
        counts = ctx.restored.tensors["counts"].clone()

    def table() -> np.ndarray:
        return est.numpy().reshape(n_states, n_actions) if control else est.numpy()

    def act(state: int, step: int) -> int:
        if control:
            return epsilon_greedy(table()[state], epsilon(step), rng)
        return int(rng.choice(n_actions, p=cast(np.ndarray, pi)[state]))  # prediction: a fixed policy

    def snapshot() -> Snapshot:
        state = sampler_state(rng, env, obs, episode=vars(episode))
        policy = (
            TablePolicy(table().copy())
            if control
            else TablePolicy(cast(np.ndarray, pi), kind="probs", seed=t.seed)
        )
        return Snapshot(policy, {"estimate": est, "counts": counts}, state)

    while step < t.total_steps:
        action = act(obs, step)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        ctx.check_finite(step + 1, "reward", float(reward))
        step += 1
        episode.states.append(int(obs))
        episode.actions.append(action)
        episode.rewards.append(float(reward))
        obs = next_obs
        if terminated or truncated:
            if terminated:
                boot = 0.0
            elif control:
                boot = float(epsilon_greedy_probs(table()[obs], epsilon(step, True)) @ table()[obs])
            else:
                boot = float(est[obs])
            keys = torch.tensor(episode.states, dtype=torch.long)
            if control:
                keys = keys * n_actions + torch.tensor(episode.actions, dtype=torch.long)
            rewards = torch.tensor(episode.rewards, dtype=torch.float64)
            returns = reward_to_go(rewards, a_cfg.gamma, bootstrap=torch.tensor(boot, dtype=torch.float64))
            est, counts = mc_update(est, counts, keys, returns, first_visit=a_cfg.visit == "first")
            ctx.episode(step, sum(episode.rewards), len(episode.rewards))
            episode = _episode()
            obs, _ = env.reset()
        if control and step % 1000 == 0:
            ctx.log(step, {"train/epsilon": epsilon(step, True)})
        if ctx.tick(step, snapshot):
            break
    ctx.finish(step, snapshot())
    env.close()


def _control_policy(cfg: MCControlConfig, env: gym.Env, tensors: Any) -> TablePolicy:
    n_states, n_actions = table_shape(env)
    return TablePolicy(tensors["estimate"].numpy().reshape(n_states, n_actions))


def _prediction_policy(cfg: MCPredictionConfig, env: gym.Env, tensors: Any) -> TablePolicy:
    n_states, n_actions = table_shape(env)
    return TablePolicy(
        fixed_policy_table(cfg.algorithm.policy, n_states, n_actions), kind="probs", seed=cfg.trainer.seed
    )
