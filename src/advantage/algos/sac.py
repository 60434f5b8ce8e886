r"""Soft Actor-Critic (SPEC P7): Haarnoja et al. 2018a, "Soft Actor-Critic: Off-Policy Maximum Entropy Deep
Reinforcement Learning with a Stochastic Actor"; 2018b, "Soft Actor-Critic Algorithms and Applications"
(the learned temperature).

SAC learns a stochastic policy that maximizes return *plus entropy*,
:math:`\sum_t \mathbb E[r_t + \alpha \mathcal H(\pi(\cdot|s_t))]`, off-policy from a replay buffer. It
continues DQN's line to continuous actions (as DDPG): the critics regress on a bootstrapped target
from target networks, the actor climbs the critics.

Per gradient step, on a batch from the replay buffer (:func:`update`):

1. Critics, twin :math:`Q_{\theta_1}, Q_{\theta_2}`, regress on the soft target
   (:func:`advantage.math.q_targets.soft_q_target`)
   :math:`y = r + \gamma(1-d)\,(\min_k Q_{\bar\theta_k}(s', a') - \alpha\log\pi(a'|s'))`,
   :math:`a'\sim\pi(s')`,
   with loss :math:`\tfrac12\sum_k \text{MSE}(Q_{\theta_k}(s,a), y)`.
2. Actor: minimize :math:`\mathbb E[\alpha\log\pi(a|s) - \min_k Q_{\theta_k}(s, a)]` with the
   reparameterized sample :math:`a = \tanh(\mu + \sigma\varepsilon)`; its log-density carries the tanh
   change-of-variables correction (:func:`advantage.nn.continuous.squashed_gaussian_log_prob`).
3. Temperature: minimize :math:`-\log\alpha\,(\log\pi(a|s) + \bar{\mathcal H})` (automatic entropy tuning,
   Haarnoja et al. 2018b) towards the target entropy :math:`\bar{\mathcal H} = -|\mathcal A|`.
4. Target critics: Polyak average :math:`\bar\theta \leftarrow \tau\theta + (1-\tau)\bar\theta`.

Implementation details (with where they come from):

1. Actions are normalized to ``[-1, 1]`` and rescaled to the env's bounds (SB3); uniform random actions
   before ``learning_starts``.
2. ``log σ`` is clamped to ``[-20, 2]`` (SAC reference code, SB3).
3. The temperature is learned as ``log α`` (SB3, CleanRL: positive by construction), initial ``α = 1``
   (SB3's ``ent_coef="auto"``), with the same learning rate as the networks.
4. The actor's sample on ``s`` is drawn once and serves both the temperature loss and the actor loss, and
   the actor loss is taken after the critic step (the order of SB3's ``SAC.train``).
5. Both critics run in one batched pass (:class:`advantage.nn.continuous.EnsembleQ`); the actor loss
   uses detached critic weights, so its backward pass computes no critic weight gradients.
6. Target entropy ``-dim(A)`` (Haarnoja et al. 2018b, SB3, CleanRL).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from advantage import optim
from advantage.algos.offpolicy_common import ContinuousPolicy, load_policy, minimize, run, start
from advantage.configs.sac import SACAlgorithm, SACConfig, SACModel  # noqa: F401  (on this API page)
from advantage.context import RunContext
from advantage.math.q_targets import polyak_update, soft_q_target
from advantage.nn.continuous import EnsembleQ, SquashedGaussianActor, StateDependentActor
from advantage.torch_state import LearnerState


@dataclass
class SACNets:
    """The learner: actor, twin critics and their targets, the temperature and the two optimizers."""

    actor: SquashedGaussianActor | StateDependentActor
    critic: EnsembleQ
    critic_target: EnsembleQ
    log_alpha: torch.nn.Parameter
    critic_opt: torch.optim.Optimizer
    actor_opt: torch.optim.Optimizer  # actor parameters and log α: their losses touch disjoint parameters
    target_entropy: float
    learn_alpha: bool

    targets: list[torch.nn.Parameter] = field(init=False, repr=False)
    onlines: list[torch.nn.Parameter] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Parameter lists built once for the Polyak update (a module's .parameters() walks the tree).
        self.targets, self.onlines = list(self.critic_target.parameters()), list(self.critic.parameters())

    def learner(self) -> LearnerState:
        """Networks, optimizers and the torch RNG (the actor's samples), under their checkpoint names
        (``log_alpha``, a bare parameter, is saved beside them)."""
        modules: dict[str, torch.nn.Module] = {
            "actor": self.actor,
            "critic": self.critic,
            "critic_target": self.critic_target,
        }
        return LearnerState(modules, {"critic_optim": self.critic_opt, "actor_optim": self.actor_opt})


def make_nets(cfg: SACConfig, obs_dim: int, act_dim: int) -> SACNets:
    a, m = cfg.algorithm, cfg.model
    if a.use_sde:
        actor: SquashedGaussianActor | StateDependentActor = StateDependentActor(
            obs_dim, act_dim, list(m.actor_hidden), m.log_std_init, m.sde_learn_features
        )
    else:
        actor = SquashedGaussianActor(obs_dim, act_dim, list(m.actor_hidden))
    critic = EnsembleQ(obs_dim, act_dim, list(m.critic_hidden), n=2)
    critic_target = EnsembleQ(obs_dim, act_dim, list(m.critic_hidden), n=2)
    critic_target.load_state_dict(critic.state_dict())
    critic_target.requires_grad_(False)
    learn_alpha = a.ent_coef is None
    init = a.ent_coef_init if learn_alpha else max(float(a.ent_coef or 0.0), 1e-30)
    log_alpha = torch.nn.Parameter(torch.log(torch.full((1,), float(init))), requires_grad=learn_alpha)
    # fused Adam stepped by optim.step: one kernel updates every parameter.
    critic_opt = optim.adam(critic.parameters(), a.learning_rate)
    actor_params = [*actor.parameters(), *([log_alpha] if learn_alpha else [])]
    actor_opt = optim.adam(actor_params, a.learning_rate)
    target_entropy = float(-act_dim if a.target_entropy is None else a.target_entropy)
    return SACNets(
        actor, critic, critic_target, log_alpha, critic_opt, actor_opt, target_entropy, learn_alpha
    )


def update(
    nets: SACNets, batch: tuple[torch.Tensor, ...], tau: float, step: int, metrics: bool = False
) -> dict[str, torch.Tensor]:
    """One SAC gradient step (critics, then actor and temperature, then the target critics) on a batch
    ``(obs [B, O], actions [B, A], rewards [B], next_obs [B, O], terminated [B], discounts [B])``.
    With ``metrics``, returns detached metric tensors (only asked for when a log row is due)."""
    obs, actions, rewards, next_obs, terminated, discounts = batch
    alpha = nets.log_alpha.detach().exp()  # [1]; the value before this step's temperature update
    # gSDE: one exploration matrix per gradient step for both samples (SB3's reset_noise in SAC.train)
    noise = nets.actor.noise()
    pi, logp = nets.actor(obs, noise)  # [B, A], [B]: reused by the actor and the temperature losses
    with torch.no_grad():
        next_pi, next_logp = nets.actor(next_obs, noise)
        y = soft_q_target(
            rewards, nets.critic_target(next_obs, next_pi), next_logp, terminated, discounts, alpha
        )
    q = nets.critic(obs, actions)  # [2, B]
    critic_loss = 0.5 * ((q - y) ** 2).mean(-1).sum()  # ½ Σ_k MSE_k, as SB3
    minimize(nets.critic_opt, critic_loss, step, "critic loss")

    q_pi = nets.critic(obs, pi, detach=True).min(0).values  # [B], with the updated critics
    actor_loss = (alpha * logp - q_pi).mean()
    loss = actor_loss
    if nets.learn_alpha:
        alpha_loss = -(nets.log_alpha * (logp.detach() + nets.target_entropy)).mean()
        loss = actor_loss + alpha_loss  # disjoint parameters: one backward, one fused Adam step
    minimize(nets.actor_opt, loss, step, "actor loss")
    polyak_update(nets.targets, nets.onlines, tau)
    if not metrics:
        return {}
    return {
        "train/critic_loss": critic_loss.detach(),
        "train/actor_loss": actor_loss.detach(),
        "train/alpha": alpha,
        "train/entropy": -logp.detach().mean(),
        "train/q_mean": q.detach().mean(),
    }


def train(cfg: SACConfig, ctx: RunContext) -> None:
    """The shared off-policy loop (:func:`~advantage.algos.offpolicy_common.run`), acting with a sample of
    the policy and learning by :func:`update`; ``log_alpha``, a bare parameter, is checkpointed beside
    the learner."""
    a = cfg.algorithm
    exp = start(cfg)
    nets = make_nets(cfg, exp.obs_dim, exp.act_dim)
    if ctx.restored is not None:
        with torch.no_grad():
            nets.log_alpha.copy_(ctx.restored.tensors["log_alpha"])

    # gSDE: one exploration matrix per env, drawn anew every sde_sample_freq steps (-1: every train_freq
    # steps, SB3's draw at the start of each collection); kept in checkpoints so a resumed run acts alike
    act_noise: torch.Tensor | None = None
    next_noise = 0
    if a.use_sde and ctx.restored is not None and "sde_noise" in ctx.restored.tensors:
        act_noise = ctx.restored.tensors["sde_noise"].clone()
        next_noise = int(ctx.restored.state["algo"]["sde_next"])
    period = a.sde_sample_freq if a.sde_sample_freq > 0 else a.train_freq

    def explore(obs: torch.Tensor) -> np.ndarray:
        nonlocal act_noise, next_noise
        if a.use_sde and (act_noise is None or exp.step >= next_noise):
            with torch.inference_mode(False), torch.no_grad():  # a plain tensor: it is checkpointed
                act_noise = nets.actor.noise(exp.N)
            next_noise = exp.step + period
        return nets.actor(obs, act_noise)[0].numpy()

    def learn(log: bool) -> dict[str, torch.Tensor]:
        return update(nets, exp.sample(a.batch_size), a.tau, exp.step, log)

    def extra() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        tensors = {"log_alpha": nets.log_alpha.detach().clone()}
        if act_noise is None:
            return tensors, {}
        return tensors | {"sde_noise": act_noise.clone()}, {"sde_next": next_noise}

    run(cfg, ctx, exp, nets.learner(), nets.actor, explore, learn, extra)


def _policy(cfg: SACConfig, env: gym.Env, tensors: Any) -> ContinuousPolicy:
    return load_policy(
        StateDependentActor if cfg.algorithm.use_sde else SquashedGaussianActor, cfg, env, tensors
    )
