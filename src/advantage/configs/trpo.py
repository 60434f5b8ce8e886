"""TRPO's config, presets and registry record (the training loop is :mod:`advantage.algos.trpo`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from advantage.config import Preset, TrainerConfig, VecEnvConfig, option, section
from advantage.configs import register_actor_critic
from advantage.configs.models import ActorCriticModel


@dataclass
class TRPOAlgorithm:
    # General defaults: sb3-contrib's TRPO (n_steps 2048, critic lr 1e-3 with 10 passes of minibatches of
    # 128, CG 15 iterations with damping 0.1, line search 0.8 × 10) with Schulman et al. 2015's δ = 0.01.
    gamma: float = option(0.99, "discount factor γ", lo=0, hi=1)
    gae_lambda: float = option(0.95, "GAE λ", lo=0, hi=1)
    n_steps: int = option(2048, "steps per environment per rollout", lo=1)
    max_kl: float = option(0.01, "trust-region radius δ on the mean KL", lo=0, lo_open=True)
    cg_iters: int = option(15, "conjugate-gradient iterations", lo=1)
    cg_damping: float = option(0.1, "damping added to the Fisher matrix", lo=0)
    backtrack_coef: float = option(
        0.8, "line search: step shrink factor", lo=0, hi=1, lo_open=True, hi_open=True
    )
    max_backtracks: int = option(10, "line search: shrinks tried before the update is skipped", lo=0)
    vf_learning_rate: float = option(1e-3, "value function: Adam learning rate", lo=0, lo_open=True)
    vf_epochs: int = option(10, "value function: passes over each rollout", lo=1)
    vf_minibatch_size: int = option(128, "value function: transitions per minibatch", lo=1)
    normalize_advantage: bool = option(True, "whiten advantages over the batch")
    normalize_obs: bool = option(False, "normalise observations by running mean/std")
    normalize_reward: bool = option(False, "scale rewards by the running std of the discounted return")
    clip_obs: float = option(10.0, "clip normalised observations to ±clip_obs", lo=0, lo_open=True)


@dataclass
class TRPOConfig:
    # Its networks are MLPs: every observation reaches them as one vector (envs.make.flatten_observations).
    flatten_obs: ClassVar[bool] = True
    env: VecEnvConfig = section(VecEnvConfig)
    algorithm: TRPOAlgorithm = section(TRPOAlgorithm)
    model: ActorCriticModel = section(ActorCriticModel)
    trainer: TrainerConfig = section(TrainerConfig)

    def problems(self) -> list[str]:
        if self.model.shared_trunk:
            return [
                "model.shared_trunk=true is not allowed for trpo: the value regression would move the "
                "policy's features outside the trust region; use separate trunks (false)"
            ]
        return []


PRESETS = {
    "cartpole": Preset(
        "CartPole-v1 (rl-baselines3-zoo's TRPO settings: 2 envs × 512 steps, λ 0.98, 20 critic passes)",
        {
            "env.id": "CartPole-v1",
            "env.num_envs": 2,
            "algorithm.n_steps": 512,
            "algorithm.gae_lambda": 0.98,
            "algorithm.vf_epochs": 20,
            "algorithm.vf_minibatch_size": 512,
            "trainer.total_steps": 200_000,
        },
    ),
    "pendulum": Preset(
        "Pendulum-v1 (rl-baselines3-zoo's TRPO settings, normalised observations)",
        {
            "env.id": "Pendulum-v1",
            "env.num_envs": 2,
            "algorithm.n_steps": 1024,
            "algorithm.gamma": 0.9,
            "algorithm.gae_lambda": 0.95,
            "algorithm.max_kl": 0.01,
            "algorithm.normalize_obs": True,
            "model.log_std_init": -0.5,
            "trainer.total_steps": 200_000,
        },
    ),
}

register_actor_critic(
    "trpo",
    "TRPO: natural-gradient step in a mean-KL trust region, CG + line search (Schulman et al. 2015)",
    TRPOConfig,
    presets=PRESETS,
    # General defaults: the dataclass's (sb3-contrib's TRPO, one env); CartPole-v1's values are its entry
    # in advantage/hyperparams/trpo.yml.
    defaults={"env.id": "CartPole-v1", "env.num_envs": 1},
)
