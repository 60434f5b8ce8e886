r"""Twin Delayed DDPG, TD3 (Fujimoto, van Hoof & Meger 2018, "Addressing Function Approximation Error in
Actor-Critic Methods"), and DDPG as its special case (SPEC P7).

TD3 is DDPG (:mod:`advantage.algos.ddpg`) with three changes, each aimed at the overestimation that an actor
climbing a single critic's errors builds up — the continuous-action cousin of the max bias of Q-learning
(Thrun & Schwartz 1993; van Hasselt 2010) in DQN:

1. **Clipped double-Q**: twin critics, and the target takes their minimum
   (:func:`advantage.math.q_targets.clipped_double_q_target`):
   :math:`y = r + \gamma(1-d)\min_{k=1,2} Q_{\bar\theta_k}(s', \tilde a')`.
2. **Target policy smoothing**: :math:`\tilde a' = \operatorname{clip}(\mu_{\bar\phi}(s') +
   \operatorname{clip}(\varepsilon, -c, c), -1, 1)`, :math:`\varepsilon \sim N(0, \tilde\sigma^2)` with
   :math:`\tilde\sigma = 0.2`, :math:`c = 0.5` (in normalized action units): the target averages the
   critic over a small neighbourhood of the action, so a narrow peak of critic error is not exploited.
3. **Delayed actor updates**: the actor and all target networks are updated once every
   ``policy_delay = 2`` critic updates, so the actor climbs a critic whose error has had time to shrink.

Losses per gradient step (:func:`update`): critics :math:`\sum_k \text{MSE}(Q_{\theta_k}(s, a), y)` (SB3's
sum over critics); actor, on delayed steps, :math:`-\frac1B\sum Q_{\theta_1}(s, \mu_\phi(s))` (the first
critic only, as the paper); then Polyak averaging of the actor and critic targets with ``tau``.

The code here trains both: the ``algorithm`` section says how many critics (``n_critics``), the delay and
the target noise, and DDPG's section (:class:`advantage.configs.ddpg.DDPGAlgorithm`) fixes them at one
critic, no delay and no noise (no noise is drawn then, so DDPG's random stream is its own).

Implementation details: actions normalized to ``[-1, 1]`` (SB3); uniform random actions before
``learning_starts``; Gaussian exploration noise ``exploration_noise`` (0.1, the paper's) added to the
actor's action and clipped; both critics in one batched pass (:class:`advantage.nn.continuous.EnsembleQ`);
the actor loss uses detached critic weights (no critic weight gradients computed for it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from advantage import optim
from advantage.algos.offpolicy_common import ContinuousPolicy, load_policy, minimize, run, start
from advantage.configs.ddpg import DDPGAlgorithm, DDPGConfig
from advantage.configs.td3 import TD3Algorithm, TD3Config, TD3Model  # noqa: F401  (on this API page)
from advantage.context import RunContext
from advantage.math.q_targets import clipped_double_q_target, polyak_update
from advantage.nn.continuous import DeterministicActor, EnsembleQ
from advantage.torch_state import LearnerState


@dataclass
class TD3Nets:
    actor: DeterministicActor
    actor_target: DeterministicActor
    critic: EnsembleQ  # n_critics members: 2 for TD3, 1 for DDPG
    critic_target: EnsembleQ
    actor_opt: torch.optim.Optimizer
    critic_opt: torch.optim.Optimizer
    updates: int = 0  # critic updates so far; the actor moves on every policy_delay-th

    targets: list[torch.nn.Parameter] = field(init=False, repr=False)
    onlines: list[torch.nn.Parameter] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Parameter lists built once for the Polyak update (a module's .parameters() walks the tree).
        self.targets = [*self.critic_target.parameters(), *self.actor_target.parameters()]
        self.onlines = [*self.critic.parameters(), *self.actor.parameters()]

    def learner(self) -> LearnerState:
        """Networks, optimizers and the torch RNG (the target noise's), under their checkpoint names."""
        modules = {name: getattr(self, name) for name in ("actor", "actor_target", "critic", "critic_target")}
        return LearnerState(modules, {"actor_optim": self.actor_opt, "critic_optim": self.critic_opt})


def make_nets(cfg: TD3Config | DDPGConfig, obs_dim: int, act_dim: int) -> TD3Nets:
    a, m = cfg.algorithm, cfg.model
    actor = DeterministicActor(obs_dim, act_dim, list(m.actor_hidden))
    actor_target = DeterministicActor(obs_dim, act_dim, list(m.actor_hidden))
    critic = EnsembleQ(obs_dim, act_dim, list(m.critic_hidden), n=a.n_critics)
    critic_target = EnsembleQ(obs_dim, act_dim, list(m.critic_hidden), n=a.n_critics)
    for online, target in ((actor, actor_target), (critic, critic_target)):
        target.load_state_dict(online.state_dict())
        target.requires_grad_(False)
    return TD3Nets(
        actor,
        actor_target,
        critic,
        critic_target,
        optim.adam(actor.parameters(), a.learning_rate),
        optim.adam(critic.parameters(), a.learning_rate),
    )


def update(
    nets: TD3Nets,
    batch: tuple[torch.Tensor, ...],
    a: TD3Algorithm | DDPGAlgorithm,
    step: int,
    metrics: bool = False,
) -> dict[str, torch.Tensor]:
    """One TD3 (or DDPG) gradient step on ``(obs [B, O], actions [B, A], rewards [B], next_obs [B, O],
    terminated [B], discounts [B])``: the critics always; the actor and the targets every
    ``policy_delay``-th call (every call for DDPG)."""
    obs, actions, rewards, next_obs, terminated, discounts = batch
    with torch.no_grad():
        next_actions = nets.actor_target(next_obs)
        if a.policy_noise > 0:  # target policy smoothing; DDPG draws no noise
            noise = (torch.randn_like(actions) * a.policy_noise).clamp_(-a.noise_clip, a.noise_clip)
            next_actions = (next_actions + noise).clamp_(-1.0, 1.0)
        y = clipped_double_q_target(
            rewards, nets.critic_target(next_obs, next_actions), terminated, discounts
        )  # K = 1 (DDPG): r + γ(1-d) Q̄(s', μ̄(s'))
    q = nets.critic(obs, actions)  # [K, B]
    critic_loss = ((q - y) ** 2).mean(-1).sum()  # Σ_k MSE_k, as SB3
    minimize(nets.critic_opt, critic_loss, step, "critic loss")
    nets.updates += 1
    out = {"train/critic_loss": critic_loss.detach(), "train/q_mean": q.detach().mean()} if metrics else {}
    if nets.updates % a.policy_delay == 0:
        # deterministic policy gradient through the first critic
        actor_loss = -nets.critic(obs, nets.actor(obs), first_only=True, detach=True).mean()
        minimize(nets.actor_opt, actor_loss, step, "actor loss")
        polyak_update(nets.targets, nets.onlines, a.tau)  # critic and actor targets in one call
        if metrics:
            out["train/actor_loss"] = actor_loss.detach()
    return out


def train(cfg: TD3Config | DDPGConfig, ctx: RunContext) -> None:
    """The shared off-policy loop (:func:`~advantage.algos.offpolicy_common.run`), acting with the actor's
    action plus Gaussian noise and learning by :func:`update`; the update count is checkpointed."""
    a = cfg.algorithm
    exp = start(cfg)
    nets = make_nets(cfg, exp.obs_dim, exp.act_dim)
    if ctx.restored is not None:
        # DDPG checkpoints written before DDPG ran on this code have no count (no delay: it does not matter)
        nets.updates = ctx.restored.state["algo"].get("updates", 0)

    def explore(obs: torch.Tensor) -> np.ndarray:
        return exp.gaussian_noise(nets.actor(obs).numpy(), a.exploration_noise)

    def learn(log: bool) -> dict[str, torch.Tensor]:
        return update(nets, exp.sample(a.batch_size), a, exp.step, log)

    def extra() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return {}, {"updates": nets.updates}

    run(cfg, ctx, exp, nets.learner(), nets.actor, explore, learn, extra)


def _policy(cfg: TD3Config | DDPGConfig, env: gym.Env, tensors: Any) -> ContinuousPolicy:
    return load_policy(DeterministicActor, cfg, env, tensors)
