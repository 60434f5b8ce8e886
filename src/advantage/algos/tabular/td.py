"""Tabular TD control: Q-learning, SARSA and Expected SARSA (SPEC T1; Sutton & Barto 2018, ch. 6).

The TD update (Sutton & Barto 2018 §6.4–6.6), with the bootstrap term that names each method:

.. math::
    Q(s, a) \\leftarrow Q(s, a) + \\alpha\\,[\\,r + \\gamma\\,(1 - \\text{term})\\,B(s') - Q(s, a)\\,]

* Q-learning (Watkins 1989): :math:`B(s') = \\max_{a'} Q(s', a')` — off-policy, learns Q* while
  exploring (the target assumes the greedy action will be taken next, Sutton & Barto §6.5);
* SARSA (Rummery & Niranjan 1994): :math:`B(s') = Q(s', a')` with ``a'`` the action actually taken next;
* Expected SARSA (van Seijen et al. 2009): :math:`B(s') = \\sum_{a'} \\pi(a'|s') Q(s', a')` under the
  ε-greedy policy.

Implementation details:

1. ε-greedy exploration, ε decaying linearly from ``epsilon_start`` to ``epsilon_end`` over
   ``epsilon_decay_fraction`` of the run; ties between greedy actions are broken uniformly.
2. Optional linear decay of α to ``alpha_end`` (Robbins–Monro style step sizes for stochastic tasks).
3. A *terminated* step bootstraps with 0; a *truncated* step (time limit) bootstraps with B(s') as usual,
   since the task could have gone on.
4. The table is float64 numpy: per-step updates of single entries are far cheaper in numpy than in torch.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from advantage.algos.tabular.common import (
    TablePolicy,
    epsilon_greedy,
    epsilon_greedy_probs,
    sampler_state,
    start_sampler,
    table_shape,
)
from advantage.configs.tabular import TDConfig
from advantage.context import RunContext, Snapshot
from advantage.schedules import linear_schedule, schedule_total


def bootstrap_value(method: str, q_next: np.ndarray, next_action: int, epsilon: float) -> float:
    """B(s') of the update rule above for one next state."""
    if method == "q_learning":
        return float(q_next.max())
    if method == "sarsa":
        return float(q_next[next_action])
    return float(epsilon_greedy_probs(q_next, epsilon) @ q_next)


def train(cfg: TDConfig, ctx: RunContext, method: str) -> None:
    a_cfg, t = cfg.algorithm, cfg.trainer
    env = ctx.make_env()
    n_states, n_actions = table_shape(env)

    def epsilon(step: int) -> float:
        return linear_schedule(
            a_cfg.epsilon_start,
            a_cfg.epsilon_end,
            a_cfg.epsilon_decay_fraction,
            step,
            schedule_total(t, step, after_step=True),
        )

    def alpha(step: int) -> float:
        if a_cfg.alpha_end is None:
            return a_cfg.alpha
        total = schedule_total(t, step, after_step=True)  # an update, after the step
        return linear_schedule(a_cfg.alpha, a_cfg.alpha_end, 1.0, step, total)

    rng, obs, step, s = start_sampler(ctx, env, t.seed)
    if ctx.restored is None:
        q = np.full((n_states, n_actions), cfg.model.init_value, dtype=np.float64)
        action = epsilon_greedy(q[obs], epsilon(0), rng)
    else:
        q = ctx.restored.tensors["q"].numpy().copy()
        action = s["action"]
    ep_return, ep_len = s.get("ep_return", 0.0), s.get("ep_len", 0)

    def snapshot() -> Snapshot:
        state = sampler_state(rng, env, obs, action=int(action), ep_return=ep_return, ep_len=ep_len)
        return Snapshot(TablePolicy(q.copy()), {"q": q}, state)

    while step < t.total_steps:
        next_obs, reward, terminated, truncated, _ = env.step(action)
        ctx.check_finite(step + 1, "reward", float(reward))
        step += 1
        eps = epsilon(step)
        # SARSA bootstraps with the action it will actually take next, so it picks a' before the update;
        # Q-learning and Expected SARSA pick it after (Sutton & Barto 2018, §6.4–6.6).
        next_action = epsilon_greedy(q[next_obs], eps, rng) if method == "sarsa" and not terminated else -1
        target = float(reward)
        if not terminated:
            target += a_cfg.gamma * bootstrap_value(method, q[next_obs], next_action, eps)
        q[obs, action] += alpha(step) * (target - q[obs, action])
        ep_return += float(reward)
        ep_len += 1
        if terminated or truncated:
            ctx.episode(step, ep_return, ep_len)
            obs, _ = env.reset()
            action = epsilon_greedy(q[obs], eps, rng)
            ep_return, ep_len = 0.0, 0
        else:
            obs = next_obs
            action = next_action if method == "sarsa" else epsilon_greedy(q[obs], eps, rng)
        if step % 1000 == 0:
            ctx.log(step, {"train/epsilon": eps, "train/alpha": alpha(step)})
        if ctx.tick(step, snapshot):
            break
    ctx.finish(step, snapshot())
    env.close()


def _policy(cfg: TDConfig, env: gym.Env, tensors: Any) -> TablePolicy:
    return TablePolicy(tensors["q"].numpy())
