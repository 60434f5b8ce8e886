"""Proximal Policy Optimization (Schulman et al. 2017), clipped and adaptive-KL-penalty objectives.

PPO-Clip (eq. 7) and PPO-Penalty (§4), and the study notes' inverted-pendulum walkthrough. The loop is
``collect → GAE → epochs × minibatches → step → log → checkpoint``; the math is the shared core:
:func:`advantage.math.gae`, :func:`advantage.math.ppo_clip` / :func:`advantage.math.ppo_penalty`,
:data:`advantage.math.VALUE_LOSSES`, :func:`advantage.math.masked_whiten`,
:class:`advantage.math.AdaptiveKLController`.

Implementation details (numbered as in "The 37 implementation details of PPO", Huang et al. 2022, where
they coincide):

1. Vectorized envs with Gymnasium's ``NEXT_STEP`` autoreset; the reset step that follows an episode end
   is masked out of the batch (``mask = 0``), so the batch is ``[N envs, T steps]`` plus a mask.
2. Orthogonal initialisation; separate actor and critic trunks; Adam (ε = 1e-5).
3. Learning rate and clip range optionally annealed linearly to 0.
4. GAE with ``terminated`` → bootstrap 0 and ``truncated`` / rollout end → bootstrap with V(final obs)
   (the final observation is the one the reset step received, so ``next_values[t] = values[t + 1]``).
5. Minibatch advantage normalisation; clipped surrogate; optional value clipping; entropy bonus;
   global gradient-norm clipping.
6. Early stop of the epochs when the approximate KL exceeds ``1.5 · target_kl`` (as Stable-Baselines3).
7. PPO-Penalty: loss ``−ρA + β·KL``; after each update β follows the paper's §4 rule
   (``d < d_targ/1.5 → β/2``, ``d > 1.5·d_targ → 2β``).
8. Optional observation normalisation and reward scaling by the std of the discounted return; their
   statistics are saved in checkpoints.
9. Logged losses, clip fraction and approximate KL are averages over the last epoch's minibatches
   (every epoch's when ``target_kl`` is set): measuring costs about 15% of a small network's step.
10. Discrete actions: categorical. Box actions: Gaussian with state-independent log-std, optionally
   tanh-squashed with the log-det correction (:mod:`advantage.nn.actor_critic`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any, cast

import gymnasium as gym
import torch

from advantage import optim
from advantage.configs.a2c import A2CConfig
from advantage.configs.ppo import PPOAlgorithm, PPOConfig
from advantage.configs.reinforce import ReinforceConfig
from advantage.configs.trpo import TRPOConfig
from advantage.context import RunContext, Snapshot
from advantage.envs import (
    describe_space,
    flatten_observations,
    make_vec_env,
    require_space,
    require_vector_observations,
)
from advantage.errors import EnvError, NonFiniteError
from advantage.math import VALUE_LOSSES, AdaptiveKLController, masked_whiten, ppo_clip, ppo_penalty
from advantage.math.kl import k3_from_ratio
from advantage.math.value_losses import explained_variance
from advantage.nn import ActorCritic
from advantage.rollout.collector import actor_critic_snapshot, make_collector, resume_or_reset
from advantage.rollout.envsteps import setup_torch
from advantage.rollout.onpolicy import Batch
from advantage.schedules import annealed, schedule_total
from advantage.torch_state import LearnerState

ACTIONS = (gym.spaces.Discrete, gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


def check_env(
    cfg: PPOConfig | TRPOConfig | A2CConfig | ReinforceConfig, env: gym.Env, algo: str = "ppo"
) -> None:
    """The spaces an :class:`~advantage.nn.ActorCritic` handles (PPO, TRPO, A2C, REINFORCE; ``env`` made
    with :func:`~advantage.envs.flatten_observations`): observations with a vector encoding (Box,
    Discrete, MultiDiscrete, MultiBinary, Dict, Tuple), Discrete, Box, MultiDiscrete or MultiBinary actions
    (:func:`~advantage.nn.actor_critic.make_head`); ``model.squash`` only with Box actions; then, for the
    algorithms with ``algorithm.n_steps``, a rollout that fits in memory."""
    raw_obs = env.unwrapped.observation_space
    require_vector_observations(algo, cfg.env.id, env.observation_space, env.action_space)
    require_space(algo, cfg.env.id, "action", env.action_space, ACTIONS, other=raw_obs)
    if cfg.model.squash and not isinstance(env.action_space, gym.spaces.Box):
        raise EnvError(
            f"model.squash=true needs a Box action space; {cfg.env.id} has {describe_space(env.action_space)}"
        )
    if hasattr(cfg.algorithm, "n_steps"):  # not REINFORCE: its batches are whole episodes
        from advantage.data.replay import check_rollout_memory

        check_rollout_memory(cast("PPOConfig | TRPOConfig | A2CConfig", cfg), env)


def train(cfg: PPOConfig, ctx: RunContext) -> None:
    a, t = cfg.algorithm, cfg.trainer
    setup_torch(t)
    env = make_vec_env(cfg.env, flatten_obs=flatten_observations(cfg))
    obs_space, act_space = env.single_observation_space, env.single_action_space
    model = cfg.model.build(obs_space, act_space)
    # The fused kernel updates every parameter in one call: a large share of a small network's step time.
    opt = optim.adam(model.parameters(), a.learning_rate, eps=1e-5)
    learner = LearnerState({"model": model}, {"optim": opt})
    kl_ctl = AdaptiveKLController(a.kl_beta, a.kl_target)
    rollout = make_collector(env, model, cfg, a.n_steps, ctx)

    step, state = resume_or_reset(rollout, learner, ctx, t.seed)
    kl_ctl.beta = state.get("beta", kl_ctl.beta)

    def checkpoint() -> Snapshot:
        return actor_critic_snapshot(model, rollout, learner, beta=kl_ctl.beta)

    # the hyperparameters the chosen loss takes (its registry entry's params), from the algorithm section
    value_loss = VALUE_LOSSES.bind(a.value_loss, clip=a.value_clip)
    while step < t.total_steps:
        total = schedule_total(t, step)
        lr = annealed(a.learning_rate, a.lr_schedule, step, total)
        for g in opt.param_groups:
            g["lr"] = lr
        clip, policy_loss = objective(a, step, total, kl_ctl.beta)
        batch, step = rollout.collect(step, a.gae_lambda)  # T steps of N envs, GAE
        row, epochs_run = learn(model, opt, batch, a, policy_loss, value_loss, step)
        row["train/explained_variance"] = explained_variance(batch.values, batch.returns)
        row.update({"train/learning_rate": lr, "train/clip_range": clip, "train/epochs": epochs_run})
        row.update(rollout.metrics())
        if a.objective == "penalty":
            d = penalty_kl(model, batch)
            row.update({"train/kl": d, "train/beta": kl_ctl.beta})
            kl_ctl.update(d)
        ctx.log(step, row)
        if ctx.tick(step, checkpoint):
            break
    ctx.finish(step, checkpoint())
    env.close()
    rollout.close()


def objective(a: PPOAlgorithm, step: int, total: int, beta: float) -> tuple[float, Callable[..., Any]]:
    """This update's clip range (annealed to 0 at ``total`` when ``clip_schedule`` is linear, detail 3)
    and policy loss: ``ppo_clip`` with it, or ``ppo_penalty`` with the controller's current ``beta``
    (detail 7)."""
    clip = annealed(a.clip_range, a.clip_schedule, step, total)
    if a.objective == "penalty":
        return clip, partial(ppo_penalty, beta=beta)
    high = a.clip_range_high if a.clip_range_high is not None else a.clip_range
    clip_high = annealed(high, a.clip_schedule, step, total)
    return clip, partial(ppo_clip, clip_low=clip, clip_high=clip_high, dual_clip=a.dual_clip)


def learn(
    model: ActorCritic,
    opt: torch.optim.Optimizer,
    batch: Batch,
    a: PPOAlgorithm,
    policy_loss: Callable[..., Any],
    value_loss: Callable[..., Any],
    step: int,
) -> tuple[dict[str, float], int]:
    """The learning phase: ``n_epochs`` × minibatches of Adam steps on one rollout (details 5, 6, 9);
    returns the averaged metrics row and the number of epochs run."""
    b_obs, b_act, b_logp, b_val = batch.obs, batch.actions, batch.logp, batch.values
    b_adv, b_ret = batch.advantages, batch.returns
    params = [p for g in opt.param_groups for p in g["params"]]
    n = b_adv.shape[0]
    # A minibatch that is the whole batch is normalised once here, not again in every epoch.
    whole_batch = a.minibatch_size >= n
    if a.normalize_advantage and whole_batch and n > 1:
        b_adv = masked_whiten(b_adv, None)  # None: every step of the batch is valid (no padding)
    stats: dict[str, list[float]] = {}
    for epoch in range(a.n_epochs):
        # Metrics cost about 15% of a small network's step: compute them in the last epoch only (or
        # in every epoch when the approximate KL decides an early stop).
        measure = epoch == a.n_epochs - 1 or a.target_kl is not None
        perm = torch.randperm(n)
        stop = False
        for start in range(0, n, a.minibatch_size):
            mb = perm[start : start + a.minibatch_size]
            logp, entropy, value = model.evaluate(b_obs[mb], b_act[mb])
            mb_adv = b_adv[mb]
            if a.normalize_advantage and not whole_batch and mb.shape[0] > 1:
                mb_adv = masked_whiten(mb_adv, None)
            pl, pm = policy_loss(logp, b_logp[mb], mb_adv, None, with_metrics=measure)
            vl = value_loss(value, b_val[mb], b_ret[mb], None)
            loss = pl.mean() + a.vf_coef * vl.mean()
            if a.ent_coef > 0:  # keep the entropy out of the graph when it has no weight
                loss = loss - a.ent_coef * entropy.mean()
            if not math.isfinite(float(loss.detach())):  # stop before a NaN reaches the weights
                parts = {"policy loss": pl, "value loss": vl, "entropy": entropy}
                raise NonFiniteError(
                    f"step {step}: loss is {float(loss.detach())} in epoch {epoch + 1}, minibatch "
                    f"{start // a.minibatch_size + 1} ("
                    + ", ".join(f"{k} {float(v.detach().mean())}" for k, v in parts.items())
                    + "); weights not updated"
                )
            optim.zero_grad(params)  # opt.zero_grad(set_to_none=True) without its profiler scope
            loss.backward()
            if a.max_grad_norm > 0:
                optim.clip_grad_norm(params, a.max_grad_norm)
            optim.step(opt)
            if not measure:
                continue
            measured = {"policy_loss": pl.mean(), "value_loss": vl.mean(), "entropy": entropy.mean(), **pm}
            for k, v in measured.items():
                stats.setdefault(k, []).append(float(v.detach()))
            if a.target_kl is not None and float(pm["approx_kl"]) > 1.5 * a.target_kl:
                stop = True
                break
        if stop:
            break
    return {f"train/{k}": sum(v) / len(v) for k, v in stats.items()}, epoch + 1


@torch.no_grad()
def penalty_kl(model: ActorCritic, batch: Batch) -> float:
    """The k3 estimate of KL(π_old ‖ π) over the batch after the update: PPO-Penalty's β follows it."""
    new_logp, _, _ = model.evaluate(batch.obs, batch.actions)
    log_r = new_logp - batch.logp
    return float(k3_from_ratio(log_r, log_r.exp()).mean())
