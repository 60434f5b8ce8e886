"""Linear control: semi-gradient Q-learning and SARSA, sampled or expected (SPEC T4).

Action values are linear in state-action features, :math:`\\hat q(s, a) = w^\\top x(s, a)` with
:math:`x(s, a) = x(s) \\otimes e_a` (:func:`~advantage.algos.tabular.linear_common.action_features`), and
move by the semi-gradient step :math:`w \\leftarrow w + \\alpha\\,[\\,G - \\hat q(s, a)\\,]\\, x(s, a)`
(Sutton & Barto 2018, §10.1) with the target

* ``semi_gradient_q_learning``: :math:`G = r + \\gamma \\max_{a'} \\hat q(s', a')` (the greedy target
  policy; no importance weight is needed for a one-step action value);
* ``semi_gradient_sarsa``: :math:`G = r + \\gamma\\,\\rho_{t+1}\\,\\hat q(s', a')`, with :math:`a'` the
  behaviour policy's next action and the per-decision importance weight
  :math:`\\rho_{t+1} = \\pi(a'|s')/\\mu(a'|s')` of the ε-greedy target policy π (``algorithm.epsilon``); its
  expectation is :math:`r + \\gamma \\sum_{a'}\\pi(a'|s')\\hat q(s', a')`. On-policy
  (``algorithm.behavior=target``) ρ = 1 and this is plain semi-gradient SARSA.

``algorithm.behavior`` is the behaviour policy μ: the env's own (Baird-v0: dashed 6/7), uniform, or
``target`` — ε-greedy in the current estimate (on-policy). ``algorithm.update=expected`` applies the mean
of the sampled update over :math:`d_\\mu(s)\\mu(a|s)` and the known model (one step = one sweep), with the
target of the current estimate held fixed during the sweep
(:func:`~advantage.math.linear_td.expected_semi_gradient_update`).

Logged every ``trainer.log_every`` steps: ``train/weight_norm``, ``train/value_error`` (the
:math:`d_\\mu\\mu`-weighted RMS error against :math:`q^*` for Q-learning and against :math:`q_\\pi` of the
current ε-greedy target policy for SARSA, both exact on the known model) and ``train/value_error_max``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from advantage.algos.tabular import linear_common
from advantage.algos.tabular.common import (
    TablePolicy,
    epsilon_greedy_probs,
    sampler_state,
    start_sampler,
    table_shape,
)
from advantage.algos.tabular.dynamic_programming import policy_evaluation, q_from_v, value_iteration
from advantage.configs.linear import LinearControlConfig
from advantage.context import RunContext, Snapshot
from advantage.envs import tabular_model
from advantage.errors import ConfigError
from advantage.math.linear_td import expected_semi_gradient_update


def _greedy_probs(q: np.ndarray, epsilon: float) -> np.ndarray:
    """π(·|s) ``[S, A]`` of the ε-greedy policy in ``q [S, A]``."""
    return np.stack([epsilon_greedy_probs(row, epsilon) for row in q])


def train(cfg: LinearControlConfig, ctx: RunContext, method: str) -> None:
    a, t = cfg.algorithm, cfg.trainer
    env = ctx.make_env()
    n_states, n_actions = table_shape(env)
    model = tabular_model(env, cfg.env.id)
    x = torch.from_numpy(
        linear_common.action_features(
            linear_common.feature_matrix(linear_common.resolve_features(a.features, cfg.env.id), n_states),
            n_actions,
        )
    )  # [S, A, D]
    x_flat = x.reshape(n_states * n_actions, -1)
    fixed_mu = None
    if a.behavior != "target":
        fixed_mu = linear_common.policy_table(env, "behavior", a.behavior, cfg.env.id)
        if method == "semi_gradient_sarsa" and a.epsilon > 0 and np.any(fixed_mu <= 0):
            raise ConfigError(
                f"algorithm.behavior={a.behavior} never takes some action, which SARSA's ε-greedy target "
                "policy takes: no importance weight exists"
            )
    q_star = value_iteration(model, a.gamma, theta=1e-12)[1] if method == "semi_gradient_q_learning" else None

    def q_table(w: torch.Tensor) -> np.ndarray:
        return (x_flat @ w).numpy().reshape(n_states, n_actions)

    def behaviour(q: np.ndarray) -> np.ndarray:
        return fixed_mu if fixed_mu is not None else _greedy_probs(q, a.epsilon)

    def visits(mu: np.ndarray) -> np.ndarray:
        """d_μ(s)μ(a|s) ``[S, A]``: how often each state-action pair is updated."""
        return linear_common.visit_distribution(env, model, mu)[:, None] * mu

    fixed_weights = None if fixed_mu is None else visits(fixed_mu)  # a fixed behaviour policy's: once

    def sa_weights(q: np.ndarray) -> np.ndarray:
        """d_μ(s)μ(a|s) ``[S, A]`` of the behaviour policy μ in ``q``."""
        return fixed_weights if fixed_weights is not None else visits(behaviour(q))

    def metrics(w: torch.Tensor) -> dict[str, float]:
        q = q_table(w)
        weights = sa_weights(q)
        if q_star is not None:
            truth = q_star
        else:
            pi = _greedy_probs(q, a.epsilon)
            truth = q_from_v(model, policy_evaluation(model, pi, a.gamma), a.gamma)
        return linear_common.value_metrics(w, q, truth, weights)

    def next_value(q_next: np.ndarray) -> np.ndarray:
        """B(s') of the expected target, per next state: max (Q-learning) or the ε-greedy mean (SARSA)."""
        if method == "semi_gradient_q_learning":
            return q_next.max(axis=1)
        return (_greedy_probs(q_next, a.epsilon) * q_next).sum(axis=1)

    rng, obs, step, s = start_sampler(ctx, env, t.seed)
    ep_return, ep_len = s.get("ep_return", 0.0), s.get("ep_len", 0)
    if ctx.restored is None:
        w = torch.from_numpy(linear_common.initial_weights(cfg, x.shape[-1], n_actions).copy())
        action = int(rng.choice(n_actions, p=behaviour(q_table(w))[obs]))
    else:
        w = ctx.restored.tensors["w"].clone()
        action = s["action"]

    def snapshot() -> Snapshot:
        state = sampler_state(rng, env, obs, action=int(action), ep_return=ep_return, ep_len=ep_len)
        return Snapshot(TablePolicy(q_table(w)), {"w": w.clone()}, state)

    if step == 0:
        ctx.log(0, metrics(w))
    while step < t.total_steps:
        if a.update == "expected":
            q = q_table(w)
            weights = torch.from_numpy(sa_weights(q)).reshape(-1)
            targets = torch.from_numpy(q_from_v(model, next_value(q), a.gamma)).reshape(-1)
            w = expected_semi_gradient_update(w, x_flat, weights, targets, a.alpha)
            step += 1
        else:
            next_obs, reward, terminated, truncated, _ = env.step(action)
            next_obs = int(next_obs)
            ctx.check_finite(step + 1, "reward", float(reward))
            step += 1
            q_next = (x[next_obs] @ w).numpy()
            mu_next = behaviour(q_next[None, :])[0] if fixed_mu is None else fixed_mu[next_obs]
            next_action = int(rng.choice(n_actions, p=mu_next))
            target = float(reward)
            if not terminated:
                if method == "semi_gradient_q_learning":
                    target += a.gamma * float(q_next.max())
                else:
                    rho = float(epsilon_greedy_probs(q_next, a.epsilon)[next_action] / mu_next[next_action])
                    target += a.gamma * rho * float(q_next[next_action])
            feat = x[obs, action]
            w = w + a.alpha * (target - w @ feat) * feat
            ep_return += float(reward)
            ep_len += 1
            if terminated or truncated:
                ctx.episode(step, ep_return, ep_len)
                obs, ep_return, ep_len = int(env.reset()[0]), 0.0, 0
                action = int(rng.choice(n_actions, p=behaviour(q_table(w))[obs]))
            else:
                obs, action = next_obs, next_action
        if step % t.log_every == 0:
            linear_common.check_weights(ctx, step, w)
            ctx.log(step, metrics(w))
        if ctx.tick(step, snapshot):
            break
    linear_common.check_weights(ctx, step, w)
    ctx.finish(step, snapshot())
    env.close()


def _policy(cfg: LinearControlConfig, env: gym.Env, tensors: Any) -> TablePolicy:
    """The greedy policy in the learned action values."""
    n_states, n_actions = table_shape(env)
    x = linear_common.action_features(
        linear_common.feature_matrix(
            linear_common.resolve_features(cfg.algorithm.features, cfg.env.id), n_states
        ),
        n_actions,
    )
    return TablePolicy(x @ tensors["w"].numpy())
