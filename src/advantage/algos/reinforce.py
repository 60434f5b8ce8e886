r"""REINFORCE (Williams 1992): Monte Carlo policy gradient over whole episodes, on- and off-policy.

Sutton & Barto 2018 ch. 13; CS285 lecture 5 (direct differentiation, reward-to-go, baselines, off-policy
gradients, discount factors); Greensmith et al. 2004 (baselines). A batch is E complete episodes
``[E, T]`` plus a mask, and the loss is

.. math::
    L(\theta) = -\frac1E \sum_{i=1}^{E} \sum_t \operatorname{sg}[\Psi_{i,t}]\,\log\pi_\theta(a_{i,t}|s_{i,t}),
    \qquad \Psi_t = w_t\,(R_t - \bar\rho_{0:t}\, b_t),

whose negative gradient estimates :math:`\nabla_\theta J`, :math:`J = \mathbb E[\sum_t \gamma^t r_t]`.

Implementation details:

1. Whole episodes, chosen before they are played: after ``env.reset()`` at the start of a batch,
   environment j of N runs a fixed quota of episodes (``episodes_per_update`` split evenly). A vector env
   steps every copy, so one that has met its quota keeps stepping; those steps are discarded, not counted
   in ``trainer.total_steps`` (``train/discarded_steps``). Taking "the first E episodes to finish" instead
   would bias every batch towards short episodes.
2. A time-limit truncation ends the episode like a termination: the objective is the return of the
   episode as the environment cuts it, so no bootstrap (a Monte Carlo method has no critic to ask).
3. ``return_type``: ``whole`` weighs every step by :math:`R_t = G_0 = \sum_t \gamma^t r_t` (the basic
   estimator, Williams 1992); ``reward_to_go`` by :math:`R_t = G_t = \sum_{t' \ge t}\gamma^{t'-t} r_{t'}`
   (:func:`advantage.math.reward_to_go`; "don't let the past distract you").
4. ``discount_weight`` (default **false**): :math:`w_t = \gamma^t`, the outer weight of the
   discounted reward-to-go estimator. Without it the estimator is *biased* for γ < 1: its expectation
   weighs states by undiscounted visit counts, :math:`\sum_s \eta(s)\sum_a\nabla\pi(a|s)Q^\gamma(s,a)`,
   not by the discounted ones of :math:`\nabla J` (Thomas 2014; ``tests/test_policy_gradient_exact.py``
   measures the bias). Most implementations drop it silently (Spinning Up's VPG, and the A2C/PPO of
   SB3 and CleanRL), and so does the default here, because γ^t starves the late steps of long episodes
   of gradient; set it to true for the unbiased estimator. Reward-to-go only: ``whole`` is unbiased
   without it (G_0 already carries :math:`\gamma^t`), and biased with it.
5. ``baseline``, every choice keeping the estimator unbiased:
   ``none``; ``mean`` — the *leave-one-out* batch mean of the other episodes' returns (for ``whole``,
   their whole returns; for ``reward_to_go``, their reward-to-go at the same time step t, over the
   episodes still running at t), so the baseline never depends on the episode it is applied to (RLOO,
   Kool et al. 2019); ``value`` — a learned :math:`V_\phi(s_t)`, trained by MSE on :math:`G_t` (needs
   ``reward_to_go``: V estimates the return from t, not the whole return); ``optimal`` — the
   variance-optimal constant (Greensmith et al. 2004),
   :math:`b^* = E[\|\nabla\log\pi(\tau)\|^2 R]/E[\|\nabla\log\pi(\tau)\|^2]`, in the general form
   :math:`b^* = \sum_i \langle c_i, g_i\rangle / \sum_i \|c_i\|^2` with per-episode gradients
   :math:`g_i = \nabla\sum_t w_t R_t \log\pi_t` and :math:`c_i = \nabla\sum_t w_t\bar\rho_{0:t}\log\pi_t`
   (the seed's formula for ``whole`` without ``discount_weight``), also leave-one-out. Cost: one
   vmapped backward pass over the batch with 2E cotangents (``is_grads_batched``), about 2E times the
   backward of the loss, and 2E × (policy parameters) floats of memory: for small policies only.
6. Loss: :func:`~advantage.math.policy_losses.pg` aggregated by ``loss_aggregation``; the default
   ``seq_mean_token_sum_norm`` with ``max_len = 1`` is "sum over the steps of an episode, mean over
   episodes", the estimator of :math:`\nabla J` itself (``token_mean`` divides by the batch's step count
   instead, a batch-dependent step size).
7. ``normalize_returns``: whiten :math:`R_t - \bar\rho b_t` over the batch's steps (the PyTorch-example
   trick; a scale-free step size, at the price of a small bias). Adam, separate policy and critic
   learning rates, optional global gradient-norm clipping and entropy bonus.
8. ``reinforce_is``: each batch, collected by :math:`\mu` (the policy at collection time; its log-probs
   are stored), serves ``reuse`` updates. Update k > 0 is off-policy, with Precup et al. 2000's per-decision
   weights: the reward at t' is weighed by
   :math:`\rho_{0:t'} = \prod_{k\le t'}\pi_\theta(a_k|s_k)/\mu(a_k|s_k)`, so
   :math:`R_t = \sum_{t'\ge t}\gamma^{t'-t} r_{t'}\rho_{0:t'}` and the baseline term is
   :math:`\rho_{0:t} b_t`. The cumulative weight is clipped at ``max_weight`` (computed in log space);
   clipping trades bias for variance (unbiased when it never binds). Update 0 has ρ = 1: plain REINFORCE.
   The ``mean`` and ``value`` baselines come from the unweighted returns (V of μ, close to π's); any
   function of the state, times :math:`\rho_{0:t}`, leaves the estimator unbiased.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from advantage import optim
from advantage.configs.reinforce import (  # noqa: F401  (on this API page)
    ReinforceAlgorithm,
    ReinforceConfig,
    ReinforceISAlgorithm,
    ReinforceModel,
)
from advantage.context import RunContext, Snapshot
from advantage.envs import env_state, make_vec_env
from advantage.envs.make import flatten_observations
from advantage.envs.replay import restore_or_restart
from advantage.errors import EnvError, NonFiniteError
from advantage.math import (
    aggregate,
    cumulative_weights,
    episode_returns,
    leave_one_out_mean,
    masked_mean,
    masked_whiten,
    optimal_constant_baseline,
    outer_weights,
    reward_to_go,
)
from advantage.math.masked import token_mean
from advantage.math.policy_losses import pg
from advantage.math.value_losses import mse
from advantage.nn import ActorCritic, ActorCriticPolicy, ObsNormalizer
from advantage.rollout.envsteps import EnvSteps, setup_torch
from advantage.torch_state import LearnerState, load_module

MAX_BATCH_STEPS = 1_000_000  # a batch waits for whole episodes; an env that never ends must not hang it

# ----------------------------------------------------------------------------------------------------
# Collection: whole episodes


@dataclass
class Episodes:
    """E complete episodes, padded to the longest; ``mask`` is 1 on the episode's steps."""

    obs: Tensor  # [E, T, *obs_shape]
    actions: Tensor  # [E, T] (Discrete) or [E, T, *action_shape] (Box)
    logp: Tensor  # [E, T] log μ(a_t|s_t) of the policy that collected them
    rewards: Tensor  # [E, T]
    mask: Tensor  # [E, T] float


def episode_quotas(num_envs: int, episodes: int) -> np.ndarray:
    """How many episodes each environment plays in a batch: ``episodes`` split as evenly as possible."""
    return episodes // num_envs + (np.arange(num_envs) < episodes % num_envs)


def collect_episodes(
    env: gym.vector.VectorEnv, model: ActorCritic, quotas: np.ndarray, step: int, ctx: RunContext
) -> tuple[Episodes, int, int]:
    """Reset every environment, then play until environment j has finished ``quotas[j]`` episodes.

    Returns ``(episodes, step, discarded)``: the batch, the step counter advanced by the batch's steps,
    and the number of steps of environments past their quota."""
    raw, _ = env.reset()
    N = len(quotas)
    finished = np.zeros(N, dtype=np.int64)
    steps = EnvSteps(N)
    rows: list[tuple[Tensor, Tensor, Tensor, np.ndarray, np.ndarray, np.ndarray]] = []
    discarded = 0
    while (finished < quotas).any():
        if len(rows) >= MAX_BATCH_STEPS:
            raise EnvError(
                f"an episode ran past {MAX_BATCH_STEPS} steps; REINFORCE needs episodes that end "
                "(set env.max_episode_steps)"
            )
        obs_t = torch.as_tensor(raw, dtype=torch.float32)
        action, logp, _ = model.act(obs_t)
        raw_next, reward, term, trunc, _ = env.step(model.head.to_env(action))
        live = ~steps.autoreset
        step, use, done = steps.record(step, reward, raw_next, term, trunc, ctx, active=finished < quotas)
        discarded += int((live & ~use).sum())
        finished += done & use
        rows.append((obs_t, action, logp, np.asarray(reward, dtype=np.float64), use, done & use))
        raw = raw_next
    return _pad(rows, N), step, discarded


def _pad(rows: list, num_envs: int) -> Episodes:
    columns = list(zip(*rows, strict=True))
    obs, act, logp = (torch.stack(c) for c in columns[:3])  # [L, N, ...]
    rew = torch.as_tensor(np.stack(columns[3]), dtype=torch.float32)
    use, ends = np.stack(columns[4]), np.stack(columns[5])
    spans = []  # (env, step indices of one episode), env by env, in order
    for j in range(num_envs):
        idx = np.flatnonzero(use[:, j])
        cuts = np.flatnonzero(ends[idx, j]) + 1
        spans += [(j, torch.as_tensor(seg)) for seg in np.split(idx, cuts[:-1])]
    E, T = len(spans), max(len(s) for _, s in spans)
    out = Episodes(
        obs=torch.zeros((E, T, *obs.shape[2:])),
        actions=torch.zeros((E, T, *act.shape[2:]), dtype=act.dtype),
        logp=torch.zeros((E, T)),
        rewards=torch.zeros((E, T)),
        mask=torch.zeros((E, T)),
    )
    for e, (j, s) in enumerate(spans):
        n = len(s)
        out.obs[e, :n], out.actions[e, :n], out.logp[e, :n] = obs[s, j], act[s, j], logp[s, j]
        out.rewards[e, :n], out.mask[e, :n] = rew[s, j], 1.0
    return out


# ----------------------------------------------------------------------------------------------------
# Model and loss


class ReinforceModelParts:
    """The model's parameters split into the policy's and the critic's (separate learning rates)."""

    def __init__(self, model: ActorCritic):
        self.policy = [*model.pi_body.parameters(), *model.head.parameters()]
        own = {id(p) for p in self.policy}
        self.critic = [p for p in model.parameters() if id(p) not in own]


def make_model(cfg: ReinforceConfig, obs_space: gym.Space, action_space: gym.Space) -> ActorCritic:
    m = cfg.model
    return ActorCritic(
        obs_space, action_space, list(m.hidden_sizes), m.activation, False, m.log_std_init, m.squash
    )


def _evaluate(model: ActorCritic, batch: Episodes) -> tuple[Tensor, Tensor, Tensor]:
    E, T = batch.mask.shape
    logp, entropy, values = model.evaluate(
        batch.obs.reshape(E * T, *batch.obs.shape[2:]), batch.actions.reshape(E * T, *batch.actions.shape[2:])
    )
    return logp.view(E, T), entropy.view(E, T), values.view(E, T)


def per_episode_gradients(logp: Tensor, coefs: list[Tensor], params: Sequence[Tensor]) -> list[Tensor]:
    """For each ``coef [E, T]``, the per-episode gradients ``[E, P]`` of
    :math:`\\sum_t coef_{i,t}\\log\\pi_{i,t}`, by one vmapped backward pass (``is_grads_batched``) over
    the graph of ``logp``."""
    E = logp.shape[0]
    y = torch.cat([(k * logp).sum(-1) for k in coefs])  # [len(coefs) · E]
    eye = torch.eye(y.shape[0], dtype=y.dtype)
    grads = torch.autograd.grad(y, params, grad_outputs=eye, is_grads_batched=True, retain_graph=True)
    flat = torch.cat([g.reshape(y.shape[0], -1) for g in grads], dim=1)
    return list(flat.split(E))


def loss_fn(
    model: ActorCritic, parts: ReinforceModelParts, batch: Episodes, a: Any, off_policy: bool
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """``(policy_loss, value_loss, metrics)`` of one batch of episodes (details 3–8 of the docstring)."""
    mask = batch.mask
    logp, entropy, values = _evaluate(model, batch)
    w = outer_weights(mask, a.gamma, a.discount_weight)
    G = episode_returns(batch.rewards, mask, a.gamma, a.return_type)  # [E, T] on-policy returns
    metrics: dict[str, Tensor] = {}
    if off_policy:
        rho = cumulative_weights(logp, batch.logp, mask, a.max_weight)  # [E, T] ρ̄_{0:t}
        R = reward_to_go(batch.rewards * rho, a.gamma)  # Σ_{t'≥t} γ^{t'−t} r_{t'} ρ̄_{0:t'}
        last = (mask.sum(-1).long() - 1).clamp(min=0)
        metrics["rho_episode_mean"] = rho.gather(-1, last[:, None]).mean()
        if a.max_weight is not None:
            metrics["rho_clipped_frac"] = masked_mean((rho >= a.max_weight * (1 - 1e-6)).float(), mask)
    else:
        rho, R = mask, G
    if a.baseline == "mean":
        b = leave_one_out_mean(G, mask, per_step=a.return_type == "reward_to_go")
    elif a.baseline == "value":
        b = values.detach()
    elif a.baseline == "optimal":
        g, c = per_episode_gradients(logp, [w * R, w * rho], parts.policy)
        b = optimal_constant_baseline(g, c)[:, None].expand_as(R)
        metrics["baseline_optimal"] = b[:, 0].mean()
    else:
        b = torch.zeros_like(R)
    adv = torch.where(mask != 0, R - rho * b, torch.zeros_like(R))
    if a.normalize_returns:
        adv = masked_whiten(adv, mask)
    psi = (w * adv).detach()
    pl, _ = pg(logp, batch.logp, psi, mask)
    policy_loss = aggregate(pl, mask, a.loss_aggregation, max_len=1)
    if a.ent_coef > 0:
        policy_loss = policy_loss - a.ent_coef * masked_mean(entropy, mask)
    value_loss = token_mean(mse(values, values, G, mask), mask)
    metrics.update({"entropy": masked_mean(entropy.detach(), mask), "return_mean": G[:, 0].mean()})
    return policy_loss, value_loss, metrics


def value_loss_fn(model: ActorCritic, batch: Episodes, a: Any) -> Tensor:
    """MSE of the critic against the reward-to-go :math:`G_t`, mean over the batch's steps."""
    E, T = batch.mask.shape
    values = model.value(batch.obs.reshape(E * T, *batch.obs.shape[2:])).view(E, T)
    G = episode_returns(batch.rewards, batch.mask, a.gamma, "reward_to_go")
    return token_mean(mse(values, values, G, batch.mask), batch.mask)


def _step(opt: torch.optim.Optimizer, model: ActorCritic, loss: Tensor, max_grad_norm: float) -> None:
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if max_grad_norm > 0:
        optim.clip_grad_norm(model.parameters(), max_grad_norm)
    optim.step(opt)


# ----------------------------------------------------------------------------------------------------
# The loop


def train(cfg: ReinforceConfig, ctx: RunContext, off_policy: bool = False) -> None:
    a, t = cfg.algorithm, cfg.trainer
    setup_torch(t)
    env = make_vec_env(cfg.env, flatten_obs=flatten_observations(cfg))
    model = make_model(cfg, env.single_observation_space, env.single_action_space)
    parts = ReinforceModelParts(model)
    use_critic = a.baseline == "value"
    groups = [{"params": parts.policy, "lr": a.learning_rate}]
    if use_critic:
        groups.append({"params": parts.critic, "lr": a.value_learning_rate})
    opt = torch.optim.Adam(groups, eps=1e-5)
    learner = LearnerState({"model": model}, {"optim": opt})
    quotas = episode_quotas(cfg.env.num_envs, a.episodes_per_update)
    reuse = cast(ReinforceISAlgorithm, a).reuse if off_policy else 1  # off_policy: a ReinforceISConfig

    step = 0
    env.reset(seed=t.seed)  # seeds the environments' generators; every batch then resets afresh
    if ctx.restored is not None:
        ck, s = ctx.restored, ctx.restored.state["algo"]
        learner.load(ck.tensors, s, str(ck.path))
        step = ck.step
        restore_or_restart(env, s["env"], t.seed, step, ctx)  # each batch starts new episodes anyway

    def snapshot() -> Snapshot:
        tensors, meta = learner.save()
        policy = ActorCriticPolicy(model, ObsNormalizer(model.obs_shape, False, 1.0))
        return Snapshot(policy, tensors, {**meta, "env": env_state(env)})

    while step < t.total_steps:
        batch, step, discarded = collect_episodes(env, model, quotas, step, ctx)
        stats: dict[str, list[float]] = {}
        for k in range(reuse):
            pl, vl, m = loss_fn(model, parts, batch, a, off_policy=off_policy and k > 0)
            if not (
                math.isfinite(float(pl.detach())) and (not use_critic or math.isfinite(float(vl.detach())))
            ):
                raise NonFiniteError(  # before a NaN reaches the weights
                    f"step {step}: loss is NaN/inf (policy loss {float(pl.detach())}, value loss "
                    f"{float(vl.detach())}); weights not updated"
                )
            _step(opt, model, pl + vl if use_critic else pl, a.max_grad_norm)
            for key, v in {"policy_loss": pl, "value_loss": vl, **m}.items():
                stats.setdefault(key, []).append(float(v.detach()))
            for _ in range(a.value_steps - 1 if use_critic else 0):  # extra critic steps: policy untouched
                _step(opt, model, value_loss_fn(model, batch, a), a.max_grad_norm)
        row = {f"train/{k}": sum(v) / len(v) for k, v in stats.items()}
        row["train/discarded_steps"] = discarded
        row["train/batch_steps"] = int(batch.mask.sum())
        ctx.log(step, row)
        if ctx.tick(step, snapshot):
            break
    ctx.finish(step, snapshot())
    env.close()


def _policy(cfg: ReinforceConfig, env: gym.Env, tensors: Any) -> ActorCriticPolicy:
    model = make_model(cfg, env.observation_space, env.action_space)
    load_module("model", model, tensors)
    return ActorCriticPolicy(model, ObsNormalizer(model.obs_shape, False, 1.0))
