"""Linear value prediction: semi-gradient TD(0), TDC and GTD2, sampled or expected (SPEC T4).

Each estimates :math:`v_\\pi` of a target policy π as :math:`\\hat v(s) = w^\\top x(s)` from the
experience of a behaviour policy μ, with the updates of :mod:`advantage.math.linear_td`:

* ``semi_gradient_td``: :math:`w \\leftarrow w + \\alpha\\rho_t\\delta_t x_t` (S&B eq. 11.2); with
  ``algorithm.bootstrap=false`` the target is the per-decision importance-sampled Monte Carlo return
  instead, :math:`w \\leftarrow w + \\alpha (G^\\rho_t - w^\\top x_t) x_t` (gradient Monte Carlo);
* ``tdc`` and ``gtd2``: the gradient-TD methods of Sutton et al. (2009), with a second weight vector
  :math:`h` (``algorithm.beta`` its step size).

The deadly triad (Sutton & Barto 2018, §11.3): function approximation, bootstrapping and off-policy
training together can make the weights diverge. On ``Baird-v0`` with its features, behaviour policy
(dashed 6/7) and target policy (always solid), semi-gradient TD's ‖w‖ grows without bound although every
true value is 0 and representable. Each leg can be removed by one option: ``algorithm.behavior=target``
(on-policy), ``algorithm.features=onehot`` (tabular), ``algorithm.bootstrap=false`` (Monte Carlo);
TDC and GTD2 converge with all three legs present.

``algorithm.update=expected`` replaces the sample by its expectation under the behaviour policy's state
distribution :math:`d_\\mu` (:func:`~advantage.math.linear_td.expected_td_system`): one step is one
deterministic update, :math:`w \\leftarrow w + \\alpha(Aw + b)` (Figure 11.2's "DP" curve).

Logged every ``trainer.log_every`` steps: ``train/weight_norm`` ‖w‖, ``train/value_error``
:math:`\\sqrt{\\overline{VE}}` under :math:`d_\\mu` against the exact :math:`v_\\pi` (a linear solve on the
known model), ``train/value_error_max`` (the largest error over all states) and ``train/pbe``
:math:`\\sqrt{\\overline{PBE}}`.

Implementation details:

1. States and rewards come from the env; the importance weight is :math:`\\rho = \\pi(a|s)/\\mu(a|s)` with
   both policies as tables ``[S, A]``; a behaviour policy that never takes an action π takes is an error.
2. A time-limit truncation is not a termination: TD bootstraps from the next state as usual. A Monte Carlo
   return ends at the episode's end (on Baird-v0 every reward is 0, so the cut changes nothing).
3. ``d_μ`` restarts at the env's start distribution on termination and after the time limit, so it is
   exactly the distribution of the states a sampled run updates.
4. Weights are float64 torch tensors: a diverging run stays finite over many orders of magnitude; a
   non-finite ‖w‖ stops the run with a clear error (the last checkpoint is kept).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

from advantage.algos.tabular import linear_common
from advantage.algos.tabular.common import TablePolicy, sampler_state, start_sampler, table_shape
from advantage.algos.tabular.dynamic_programming import policy_evaluation
from advantage.configs.linear import GradientTDAlgorithm, GradientTDConfig, SemiGradientTDConfig
from advantage.context import RunContext, Snapshot
from advantage.envs import tabular_model
from advantage.errors import ConfigError
from advantage.math.linear_td import (
    expected_gradient_td_update,
    expected_semi_gradient_update,
    expected_td_system,
    expected_td_update,
    gradient_mc_step,
    gradient_td_step,
    per_decision_returns,
    projected_bellman_error,
    semi_gradient_td_step,
)


class _Problem:
    """Everything fixed for a run: features, policies, the model's expected-update system, the truth."""

    def __init__(self, cfg: SemiGradientTDConfig | GradientTDConfig, env: Any):
        a = cfg.algorithm
        model = tabular_model(env, cfg.env.id)
        features = linear_common.resolve_features(a.features, cfg.env.id)
        self.phi = linear_common.feature_matrix(features, int(env.observation_space.n))
        self.pi = linear_common.policy_table(env, "target", a.target, cfg.env.id)
        if a.behavior == "target":
            self.mu = self.pi
        else:
            self.mu = linear_common.policy_table(env, "behavior", a.behavior, cfg.env.id)
        uncovered = (self.pi > 0) & (self.mu <= 0)
        if uncovered.any():
            s, act = map(int, np.argwhere(uncovered)[0])
            raise ConfigError(
                f"algorithm.behavior={a.behavior}: the behaviour policy never takes action {act} in state "
                f"{s}, which the target policy takes, so no importance weight exists"
            )
        self.rho = np.divide(self.pi, self.mu, out=np.zeros_like(self.pi), where=self.mu > 0)
        self.d = linear_common.visit_distribution(env, model, self.mu)
        self.v_true = policy_evaluation(model, self.pi, a.gamma)
        p_pi = np.einsum("sa,sat->st", self.pi, model.transitions)
        r_pi = np.einsum("sa,sa->s", self.pi, model.rewards)
        t = torch.from_numpy
        self.x = t(self.phi)
        self.system = expected_td_system(self.x, t(self.d), t(p_pi), t(r_pi), a.gamma)

    def metrics(self, w: torch.Tensor) -> dict[str, float]:
        values = (self.x @ w).numpy()
        return {
            **linear_common.value_metrics(w, values, self.v_true, self.d),
            "train/pbe": float(projected_bellman_error(w, self.system)),
        }


def _episode(saved: dict[str, list] | None = None) -> SimpleNamespace:
    """The running episode of a Monte Carlo run (``saved``: a checkpoint's): states, rewards and
    importance weights until its end."""
    return SimpleNamespace(**(saved or {"states": [], "rewards": [], "rhos": []}))


def train(cfg: SemiGradientTDConfig | GradientTDConfig, ctx: RunContext, method: str) -> None:
    a, t = cfg.algorithm, cfg.trainer
    env = ctx.make_env()
    prob = _Problem(cfg, env)
    n_actions = table_shape(env)[1]
    gradient_td = method in ("tdc", "gtd2")
    beta = cast(GradientTDAlgorithm, a).beta if gradient_td else 0.0  # the second step size: TDC, GTD2
    bootstrap = getattr(a, "bootstrap", True)
    sampled = a.update == "sampled"

    rng, obs, step, s = start_sampler(ctx, env, t.seed)
    ep_return, ep_len = s.get("ep_return", 0.0), s.get("ep_len", 0)
    episode = _episode(s.get("episode"))
    if ctx.restored is None:
        w = torch.from_numpy(linear_common.initial_weights(cfg, prob.phi.shape[1]).copy())
        h = torch.zeros_like(w)
    else:
        w = ctx.restored.tensors["w"].clone()
        h = ctx.restored.tensors["h"].clone() if gradient_td else torch.zeros_like(w)

    def snapshot() -> Snapshot:
        state = sampler_state(rng, env, obs, ep_return=ep_return, ep_len=ep_len, episode=vars(episode))
        tensors = {"w": w.clone(), **({"h": h.clone()} if gradient_td else {})}
        return Snapshot(TablePolicy(prob.pi, kind="probs", seed=t.seed), tensors, state)

    if step == 0:
        ctx.log(0, prob.metrics(w))
    mc_targets = torch.from_numpy(prob.v_true)
    while step < t.total_steps:
        if not sampled:
            if not bootstrap:  # the mean Monte Carlo target is v_π itself: gradient descent on the VE
                w = expected_semi_gradient_update(w, prob.x, torch.from_numpy(prob.d), mc_targets, a.alpha)
            elif method == "semi_gradient_td":
                w = expected_td_update(w, prob.system, a.alpha)
            else:
                w, h = expected_gradient_td_update(method, w, h, prob.system, a.alpha, beta)
            step += 1
        else:
            action = int(rng.choice(n_actions, p=prob.mu[obs]))
            next_obs, reward, terminated, truncated, _ = env.step(action)
            next_obs = int(next_obs)
            ctx.check_finite(step + 1, "reward", float(reward))
            step += 1
            rho = float(prob.rho[obs, action])
            x, x_next = prob.x[obs], prob.x[next_obs]
            if not bootstrap:
                episode.states.append(obs)
                episode.rewards.append(float(reward))
                episode.rhos.append(rho)
            elif method == "semi_gradient_td":
                w, _ = semi_gradient_td_step(w, x, x_next, float(reward), a.gamma, rho, a.alpha, terminated)
            else:
                w, h, _ = gradient_td_step(
                    method, w, h, x, x_next, float(reward), a.gamma, rho, a.alpha, beta, terminated
                )
            ep_return += float(reward)
            ep_len += 1
            if terminated or truncated:
                if not bootstrap:
                    returns = per_decision_returns(
                        torch.tensor(episode.rewards, dtype=torch.float64),
                        torch.tensor(episode.rhos, dtype=torch.float64),
                        a.gamma,
                    )
                    for s_t, g_t in zip(episode.states, returns, strict=True):
                        w = gradient_mc_step(w, prob.x[s_t], g_t, a.alpha)
                    episode = _episode()
                ctx.episode(step, ep_return, ep_len)
                obs, ep_return, ep_len = int(env.reset()[0]), 0.0, 0
            else:
                obs = next_obs
        if step % t.log_every == 0:
            linear_common.check_weights(ctx, step, w)
            ctx.log(step, prob.metrics(w))
        if ctx.tick(step, snapshot):
            break
    linear_common.check_weights(ctx, step, w)
    ctx.finish(step, snapshot())
    env.close()


def _policy(cfg: SemiGradientTDConfig | GradientTDConfig, env: gym.Env, tensors: Any) -> TablePolicy:
    """The evaluated policy is the target policy π (prediction does not change it)."""
    pi = linear_common.policy_table(env, "target", cfg.algorithm.target, cfg.env.id)
    return TablePolicy(pi, kind="probs", seed=cfg.trainer.seed)
