r"""Advantage actor-critic, synchronous (A2C; Mnih et al. 2016, the synchronous variant of A3C).

Konda & Tsitsiklis 2000; CS285 lecture 6 (advantage :math:`\hat A = r + \gamma V(s') - V(s)`, a critic trained
towards a Monte Carlo or a bootstrapped TD target with stop-gradient, the surrogate
:math:`-\operatorname{sg}[\hat A]\log\pi`) and GAE (Schulman et al. 2016: the n-step
advantages and their λ-mix). One update per rollout of ``n_steps`` steps from each of N environments:

.. math::
    L = -\frac1{|D|}\sum_{D}\operatorname{sg}[\hat A_t]\log\pi_\theta(a_t|s_t)
        + c_v\,\frac1{|D|}\sum_{D}\tfrac12\big(V_\phi(s_t) - \operatorname{sg}[\hat R_t]\big)^2
        - c_e\,\frac1{|D|}\sum_{D}\mathcal H[\pi_\theta(\cdot|s_t)]

Implementation details (those of Stable-Baselines3's A2C unless stated):

1. Vectorized envs with Gymnasium's ``NEXT_STEP`` autoreset; the reset step after an episode end is
   masked out of the ``[N, T]`` batch. The rollout is PPO's
   (:class:`~advantage.rollout.onpolicy.OnPolicyCollector`, or Ray workers with
   ``trainer.num_workers > 0``); ``n_steps`` = 5 by default.
2. Advantages by :func:`advantage.math.gae` with ``gae_lambda`` (default 1): ``terminated`` bootstraps
   with 0, ``truncated`` and the rollout end with :math:`V` of the final observation. λ = 1 with the
   rollout-end bootstrap is the n-step advantage :math:`\sum_{l<k}\gamma^l r_{t+l} + \gamma^k V(s_{t+k}) -
   V(s_t)`; λ = 0 is the TD error.
3. ``critic_target``: ``td`` — :math:`\hat R_t = \hat A_t + V(s_t)`, the bootstrapped λ-return of the
   advantages (λ = 0: the one-step target :math:`r + \gamma V(s')`); ``mc`` — the discounted
   reward-to-go to the end of the rollout (:func:`advantage.math.reward_to_go`), bootstrapped with the
   critic only where it cannot see the end: at a time-limit truncation and at the rollout end; 0 at a
   termination. That is the λ = 1 return whatever ``gae_lambda`` is, so ``td`` and ``mc`` coincide at
   λ = 1 (the default) and differ for λ < 1. Either way the target is a constant (stop-gradient): the
   values entering it were computed at collection time without gradients.
4. One gradient step per rollout on the mean over the valid steps (no epochs, no minibatches).
   ``optimizer=rmsprop`` is ``torch.optim.RMSprop(alpha=0.99, eps=1e-5)`` as SB3 (whose own
   ``RMSpropTFLike`` puts ε inside the square root; TF-era results used that); ``adam`` uses ε = 1e-5.
5. The value loss is :math:`\tfrac12(V - \hat R)^2` (:func:`~advantage.math.value_losses.mse`, as CleanRL
   and the PPO here), so ``vf_coef = 0.5`` weighs the critic as SB3's ``vf_coef = 0.25`` (SB3 drops the ½).
6. Orthogonal init, separate actor and critic trunks (:class:`advantage.nn.ActorCritic`), global
   gradient-norm clipping (0.5), entropy bonus, optional linear learning-rate decay, optional advantage
   normalisation over the rollout (off by default, as SB3) and observation normalisation.
7. Exact resume: model, optimizer moments, torch RNG, observation statistics, the environments' state,
   the current observations and the running episode returns are all in the checkpoint.
"""

from __future__ import annotations

import math
from functools import partial

import torch
from torch import Tensor

from advantage import optim
from advantage.configs.a2c import A2CAlgorithm, A2CConfig
from advantage.context import RunContext
from advantage.envs import flatten_observations, make_vec_env
from advantage.errors import NonFiniteError
from advantage.math import masked_whiten, pg, reward_to_go
from advantage.math.masked import token_mean
from advantage.math.value_losses import mse
from advantage.nn import ActorCritic
from advantage.rollout.collector import actor_critic_snapshot, make_collector, resume_or_reset
from advantage.rollout.envsteps import setup_torch
from advantage.rollout.onpolicy import Batch
from advantage.schedules import annealed, schedule_total
from advantage.torch_state import LearnerState


def critic_targets(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    advantages: Tensor,
    gamma: float,
    target: str,
) -> Tensor:
    """Regression targets of the critic, ``[N, T]`` (detail 3): ``td`` the λ-return ``advantages + values``;
    ``mc`` the reward-to-go with the critic's value added only at truncations and the rollout end."""
    if target == "td":
        return advantages + values
    # A truncated step's return is r + γ V(final obs): fold the bootstrap into its reward, then restart.
    boot = torch.where(truncated, gamma * next_values, torch.zeros_like(rewards))
    return reward_to_go(rewards + boot, gamma, terminated | truncated, bootstrap=next_values[..., -1])


def loss_fn(model: ActorCritic, batch: Batch, a: A2CAlgorithm) -> tuple[Tensor, dict[str, Tensor]]:
    """One A2C loss over the valid steps of a rollout (flat ``[n]`` tensors)."""
    logp, entropy, value = model.evaluate(batch.obs, batch.actions)
    adv = batch.advantages
    # mask None: the batch holds valid steps only (the math layer then skips its padding selects)
    if a.normalize_advantage and adv.shape[0] > 1:
        adv = masked_whiten(adv, None)
    pl, _ = pg(logp, batch.logp, adv, None)
    vl = mse(value, batch.values, batch.returns, None)
    policy_loss, value_loss = token_mean(pl, None), token_mean(vl, None)
    loss = policy_loss + a.vf_coef * value_loss
    if a.ent_coef != 0:  # keep the entropy out of the graph when it has no weight (the zoo's CartPole: 0)
        ent = entropy.mean()
        loss = loss - a.ent_coef * ent
    else:
        ent = entropy.detach().mean()
    return loss, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": ent}


def make_optimizer(model: ActorCritic, a: A2CAlgorithm) -> torch.optim.Optimizer:
    """RMSprop (SB3's α and ε) or Adam, detail 4."""
    if a.optimizer == "rmsprop":
        # foreach: one kernel per arithmetic step over all parameters (torch picks the per-tensor loop on
        # CPU by default); the same arithmetic, tested equal
        return torch.optim.RMSprop(
            model.parameters(), lr=a.learning_rate, alpha=a.rmsprop_alpha, eps=a.optimizer_eps, foreach=True
        )
    return torch.optim.Adam(model.parameters(), lr=a.learning_rate, eps=a.optimizer_eps)


def update(
    model: ActorCritic, opt: torch.optim.Optimizer, batch: Batch, a: A2CAlgorithm, step: int
) -> dict[str, Tensor]:
    """One gradient step on the rollout's loss (detail 4); returns its parts for the log."""
    loss, m = loss_fn(model, batch, a)
    if not math.isfinite(float(loss.detach())):  # stop before a NaN reaches the weights
        raise NonFiniteError(
            f"step {step}: loss is {float(loss.detach())} (policy loss {float(m['policy_loss'])}, "
            f"value loss {float(m['value_loss'])}); weights not updated"
        )
    params = opt.param_groups[0]["params"]
    optim.zero_grad(params)  # opt.zero_grad(set_to_none=True) without its profiler scope
    loss.backward()
    if a.max_grad_norm > 0:
        optim.clip_grad_norm(params, a.max_grad_norm)
    optim.step(opt)
    return m


def train(cfg: A2CConfig, ctx: RunContext) -> None:
    a, t = cfg.algorithm, cfg.trainer
    setup_torch(t)
    env = make_vec_env(cfg.env, flatten_obs=flatten_observations(cfg))
    model = cfg.model.build(env.single_observation_space, env.single_action_space)
    opt = make_optimizer(model, a)
    learner = LearnerState({"model": model}, {"optim": opt})
    rollout = make_collector(env, model, cfg, a.n_steps, ctx)
    targets = partial(critic_targets, gamma=a.gamma, target=a.critic_target)

    step, _ = resume_or_reset(rollout, learner, ctx, t.seed)
    checkpoint = partial(actor_critic_snapshot, model, rollout, learner)

    stats: dict[str, list[float]] = {}
    next_log = step - step % t.log_every + t.log_every
    while step < t.total_steps:
        lr = annealed(a.learning_rate, a.lr_schedule, step, schedule_total(t, step))
        for g in opt.param_groups:
            g["lr"] = lr
        batch, step = rollout.collect(step, a.gae_lambda, targets, env_major=True)
        for k, v in update(model, opt, batch, a, step).items():
            stats.setdefault(k, []).append(float(v.detach()))
        if step >= next_log:  # one row per trainer.log_every steps: an update is only N·T steps
            row = {f"train/{k}": sum(v) / len(v) for k, v in stats.items()}
            row["train/learning_rate"] = lr
            row.update(rollout.metrics())
            ctx.log(step, row)
            stats = {}
            next_log = step - step % t.log_every + t.log_every
        if ctx.tick(step, checkpoint):
            break
    ctx.finish(step, checkpoint())
    env.close()
    rollout.close()
