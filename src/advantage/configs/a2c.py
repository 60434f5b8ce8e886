"""A2C's config, presets and registry record (the training loop is :mod:`advantage.algos.a2c`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from advantage.config import Preset, TrainerConfig, VecEnvConfig, option, section
from advantage.configs import register_actor_critic
from advantage.configs.models import ActorCriticModel


@dataclass
class A2CAlgorithm:
    # General defaults: Stable-Baselines3's A2C, after Mnih et al. 2016 (5-step rollouts, RMSprop lr 7e-4,
    # α 0.99, vf 0.5, gradient-norm clip 0.5, no entropy bonus, no advantage normalisation).
    gamma: float = option(0.99, "discount factor γ", lo=0, hi=1)
    gae_lambda: float = option(1.0, "GAE λ (1: n-step returns)", lo=0, hi=1)
    n_steps: int = option(5, "steps per environment per rollout (one update each)", lo=1)
    critic_target: str = option(
        "td", "td: bootstrapped λ-return; mc: reward-to-go to the rollout end", choices=("td", "mc")
    )
    optimizer: str = option("rmsprop", "rmsprop (SB3's default) or adam", choices=("rmsprop", "adam"))
    learning_rate: float = option(7e-4, "learning rate", lo=0, lo_open=True)
    lr_schedule: str = option("constant", "learning-rate schedule", choices=("constant", "linear"))
    rmsprop_alpha: float = option(0.99, "RMSprop smoothing constant", lo=0, hi=1, hi_open=True)
    optimizer_eps: float = option(1e-5, "ε of RMSprop / Adam", lo=0, lo_open=True)
    vf_coef: float = option(0.5, "value-loss coefficient", lo=0)
    ent_coef: float = option(0.0, "entropy bonus coefficient", lo=0)
    max_grad_norm: float = option(0.5, "global gradient-norm clip (0: none)", lo=0)
    normalize_advantage: bool = option(False, "normalise advantages over each rollout")
    normalize_obs: bool = option(False, "normalise observations by running mean/std")
    clip_obs: float = option(10.0, "clip normalised observations to ±clip_obs", lo=0, lo_open=True)


@dataclass
class A2CConfig:
    # Its networks are MLPs: every observation reaches them as one vector (envs.make.flatten_observations).
    flatten_obs: ClassVar[bool] = True
    env: VecEnvConfig = section(VecEnvConfig)
    algorithm: A2CAlgorithm = section(A2CAlgorithm)
    model: ActorCriticModel = section(ActorCriticModel)
    trainer: TrainerConfig = section(TrainerConfig)


PRESETS = {
    "cartpole": Preset(
        "CartPole-v1 (rl-baselines3-zoo: 8 envs, n_steps 5, RMSprop 7e-4)",
        {
            "env.id": "CartPole-v1",
            "env.num_envs": 8,
            "algorithm.n_steps": 5,
            "trainer.total_steps": 500_000,
        },
    ),
}

register_actor_critic(
    "a2c",
    "synchronous advantage actor-critic: n-step rollouts, GAE, TD or MC critic target (Mnih et al. 2016)",
    A2CConfig,
    presets=PRESETS,
    # General defaults: the dataclass's (SB3's A2C, Mnih et al. 2016's RMSprop) and, as SB3's, one
    # environment: an update per 5 steps. At a fixed step budget more envs mean fewer updates: on
    # LunarLander-v3 at 200k steps, 8 envs ended at 18.9 and -195.1 on seeds 0/1, one env at -0.1, 146.9
    # and -29.4 on seeds 0-2 (benchmarks/zoo_suite.py's scoring). CartPole-v1's values are its entry in
    # advantage/hyperparams/a2c.yml.
    defaults={"env.id": "CartPole-v1", "env.num_envs": 1},
)
