r"""Deep Deterministic Policy Gradient, DDPG (Lillicrap et al. 2016, "Continuous control with deep
reinforcement learning"; the deterministic policy gradient of Silver et al. 2014) (SPEC P7).

Study notes: "为了继续用DQN的off-policy，且能应对连续action的任务" — keep DQN's off-policy learning from a
replay buffer, but for continuous actions, where :math:`\max_{a'} Q(s', a')` can no longer be read off a
vector of outputs. Relative to DQN the changes are:

1. The critic takes the action as an *input*, :math:`Q_\theta(s, a)`, instead of outputting one value
   per action.
2. An actor :math:`\mu_\phi(s)` replaces the max: it is trained to output the action the critic rates
   highest, by gradient ascent through the critic, :math:`\nabla_\phi \frac1B\sum Q_\theta(s, \mu_\phi(s))`
   (the deterministic policy gradient), and the target uses it in place of the argmax:
   :math:`y = r + \gamma(1-d)\,Q_{\bar\theta}(s', \mu_{\bar\phi}(s'))`
   (:func:`advantage.math.q_targets.clipped_double_q_target` with one critic).
3. Target networks for both, updated softly every step by Polyak averaging,
   :math:`\bar\theta \leftarrow \tau\theta + (1-\tau)\bar\theta`
   (:func:`advantage.math.q_targets.polyak_update`),
   instead of DQN's periodic hard copy.
4. Exploration by adding noise to the deterministic action, in place of ε-greedy.

Implementation details: Gaussian exploration noise of std 0.1 in normalized action units (Fujimoto et al.
2018's re-tuned DDPG and SB3; the paper's Ornstein-Uhlenbeck noise brings no benefit on these tasks);
uniform random actions before ``learning_starts``; critic loss :math:`\text{MSE}(Q_\theta(s, a), y)`; no
batch normalization, no L2 weight decay on the critic (Fujimoto et al.'s "our DDPG", SB3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

from advantage.algos.offpolicy_common import (
    ContinuousPolicy,
    Experience,
    LeanAdam,
    check_continuous_env,
    check_finite,
    load_learner,
    load_policy,
    save_learner,
)
from advantage.configs.ddpg import (  # noqa: F401  (their old place)
    PRESETS,
    DDPGAlgorithm,
    DDPGConfig,
    DDPGModel,
)
from advantage.context import RunContext, Snapshot
from advantage.math.q_targets import clipped_double_q_target, polyak_update
from advantage.nn.continuous import DeterministicActor, EnsembleQ


@dataclass
class DDPGNets:
    actor: DeterministicActor
    actor_target: DeterministicActor
    critic: EnsembleQ  # one member
    critic_target: EnsembleQ
    actor_opt: LeanAdam
    critic_opt: LeanAdam

    targets: list[torch.nn.Parameter] = field(init=False, repr=False)
    onlines: list[torch.nn.Parameter] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Parameter lists built once for the Polyak update (a module's .parameters() walks the tree).
        self.targets = [*self.critic_target.parameters(), *self.actor_target.parameters()]
        self.onlines = [*self.critic.parameters(), *self.actor.parameters()]

    def modules(self) -> dict[str, torch.nn.Module]:
        return {
            "actor": self.actor,
            "actor_target": self.actor_target,
            "critic": self.critic,
            "critic_target": self.critic_target,
        }


def make_nets(cfg: DDPGConfig, obs_dim: int, act_dim: int) -> DDPGNets:
    a, m = cfg.algorithm, cfg.model
    actor = DeterministicActor(obs_dim, act_dim, list(m.actor_hidden))
    actor_target = DeterministicActor(obs_dim, act_dim, list(m.actor_hidden))
    critic = EnsembleQ(obs_dim, act_dim, list(m.critic_hidden), n=1)
    critic_target = EnsembleQ(obs_dim, act_dim, list(m.critic_hidden), n=1)
    for online, target in ((actor, actor_target), (critic, critic_target)):
        target.load_state_dict(online.state_dict())
        target.requires_grad_(False)
    return DDPGNets(
        actor,
        actor_target,
        critic,
        critic_target,
        LeanAdam(actor.parameters(), a.learning_rate),
        LeanAdam(critic.parameters(), a.learning_rate),
    )


def update(
    nets: DDPGNets, batch: tuple[torch.Tensor, ...], tau: float, step: int, metrics: bool = False
) -> dict[str, torch.Tensor]:
    """One DDPG gradient step (critic, actor, both targets) on ``(obs [B, O], actions [B, A], rewards [B],
    next_obs [B, O], terminated [B], discounts [B])``."""
    obs, actions, rewards, next_obs, terminated, discounts = batch
    with torch.no_grad():
        next_q = nets.critic_target(next_obs, nets.actor_target(next_obs))  # [1, B]
        y = clipped_double_q_target(rewards, next_q, terminated, discounts)  # K = 1: r + γ(1-d) Q̄(s', μ̄(s'))
    q = nets.critic(obs, actions)  # [1, B]
    critic_loss = ((q - y) ** 2).mean()
    check_finite(step, "critic loss", critic_loss)
    nets.critic_opt.zero_grad()
    critic_loss.backward()
    nets.critic_opt.step()

    actor_loss = -nets.critic(obs, nets.actor(obs), detach=True).mean()  # deterministic policy gradient
    check_finite(step, "actor loss", actor_loss)
    nets.actor_opt.zero_grad()
    actor_loss.backward()
    nets.actor_opt.step()
    polyak_update(nets.targets, nets.onlines, tau)  # critic and actor targets in one call
    if not metrics:
        return {}
    return {
        "train/critic_loss": critic_loss.detach(),
        "train/actor_loss": actor_loss.detach(),
        "train/q_mean": q.detach().mean(),
    }


def check_env(cfg: DDPGConfig, env: gym.Env) -> None:
    check_continuous_env("ddpg", cfg, env)


def train(cfg: DDPGConfig, ctx: RunContext) -> None:
    a, t = cfg.algorithm, cfg.trainer
    torch.set_num_threads(t.torch_threads)
    torch.set_flush_denormal(True)  # tiny Adam moments turn denormal and slow CPU math down several-fold
    torch.manual_seed(t.seed)
    exp = Experience(cfg.env, a.buffer_size, a.gamma, t.seed, a.normalize_obs, a.clip_obs)
    nets = make_nets(cfg, exp.obs_dim, exp.act_dim)
    optimizers = {"actor_optim": nets.actor_opt.opt, "critic_optim": nets.critic_opt.opt}
    modules = nets.modules()
    next_train = a.learning_starts
    if ctx.restored is not None:
        ck, s = ctx.restored, ctx.restored.state["algo"]
        load_learner(modules, optimizers, ck.tensors, s["learner"], str(ck.path))
        exp.restore(ck.step, ck.tensors, s["experience"])
        next_train = s["next_train"]

    def snapshot() -> Snapshot:
        tensors, meta = save_learner(modules, optimizers)
        state = {"learner": meta, "experience": exp.state(), "next_train": next_train}
        return Snapshot(
            ContinuousPolicy(nets.actor, exp.obs_norm, exp.action_space), tensors | exp.tensors(), state
        )

    metrics: dict[str, torch.Tensor] = {}
    next_log = exp.step - exp.step % t.log_every + t.log_every  # metrics are read on these steps only
    while exp.step < t.total_steps:
        # ---- act: uniform warm-up, then the actor's action plus Gaussian noise ------------------------
        if exp.step < a.learning_starts:
            actions = exp.random_actions()
        else:
            with torch.inference_mode():
                mu = nets.actor(exp.obs_tensor()).numpy()
            actions = exp.gaussian_noise(mu, a.exploration_noise)
        exp.env_step(actions, ctx)

        # ---- learn ---------------------------------------------------------------------------------
        while exp.step >= next_train:
            next_train += a.train_freq
            for _ in range(a.gradient_steps):
                metrics = update(nets, exp.sample(a.batch_size), a.tau, exp.step, exp.step >= next_log)
        if metrics and exp.step >= next_log:
            next_log = exp.step - exp.step % t.log_every + t.log_every
            ctx.log(exp.step, {k: float(v) for k, v in metrics.items()})
        if ctx.tick(exp.step, snapshot):
            break
    ctx.finish(exp.step, snapshot())
    exp.close()


def _policy(cfg: DDPGConfig, env: gym.Env, tensors: Any) -> ContinuousPolicy:
    obs_dim, act_dim = (
        int(np.prod(cast(tuple[int, ...], s.shape))) for s in (env.observation_space, env.action_space)
    )
    actor = DeterministicActor(obs_dim, act_dim, list(cfg.model.actor_hidden))
    return load_policy(actor, cfg.algorithm.normalize_obs, cfg.algorithm.clip_obs, env, tensors)
