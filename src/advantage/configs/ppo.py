"""PPO's config, presets and registry record (the training loop is :mod:`advantage.algos.ppo`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from advantage.config import Preset, TrainerConfig, VecEnvConfig, option, section
from advantage.configs import register_actor_critic
from advantage.configs.models import ActorCriticModel
from advantage.math.registry import choices, described


@dataclass
class PPOAlgorithm:
    # General defaults: Schulman et al. 2017 (Table 3, MuJoCo: γ, λ, epochs, minibatch, lr; Table 5, Atari:
    # 8 actors × 128 steps), the same as Stable-Baselines3's and CleanRL's.
    gamma: float = option(0.99, "discount factor γ (PPO paper, SB3)", lo=0, hi=1)
    gae_lambda: float = option(0.95, "GAE λ (PPO paper, SB3)", lo=0, hi=1)
    n_steps: int = option(128, "steps per environment per rollout (PPO paper's Atari: 128 × 8 envs)", lo=1)
    n_epochs: int = option(10, "passes over each rollout (PPO paper, SB3)", lo=1)
    minibatch_size: int = option(64, "transitions per minibatch (PPO paper, SB3)", lo=1)
    learning_rate: float = option(3e-4, "Adam learning rate (PPO paper, SB3)", lo=0, lo_open=True)
    lr_schedule: str = option("constant", "learning-rate schedule", choices=("constant", "linear"))
    objective: str = option(
        "clip", "clip: PPO-Clip; penalty: PPO-Penalty with adaptive β", choices=("clip", "penalty")
    )
    clip_range: float = option(
        0.2, "ε of the clipped ratio (low side, and high side unless set)", lo=0, hi=1, lo_open=True
    )
    clip_range_high: float | None = option(
        None, "ε of the high side (clip-higher), default clip_range", lo=0, lo_open=True
    )
    clip_schedule: str = option("constant", "clip-range schedule", choices=("constant", "linear"))
    dual_clip: float | None = option(
        None, "dual-clip constant c > 1 for negative advantages", lo=1, lo_open=True
    )
    kl_beta: float = option(1.0, "PPO-Penalty: initial β", lo=0)
    kl_target: float = option(0.01, "PPO-Penalty: target KL d_targ", lo=0, lo_open=True)
    target_kl: float | None = option(
        None, "stop the epochs early when approx KL > 1.5·target_kl", lo=0, lo_open=True
    )
    vf_coef: float = option(0.5, "value-loss coefficient (SB3)", lo=0)
    value_loss: str = option(
        "mse",
        described("value_losses:VALUE_LOSSES", "value loss"),
        choices=choices("value_losses:VALUE_LOSSES"),
    )
    value_clip: float = option(0.2, "clipped value loss: clip range", lo=0, lo_open=True)
    ent_coef: float = option(0.0, "entropy bonus coefficient", lo=0)
    max_grad_norm: float = option(0.5, "global gradient-norm clip (0: none; SB3: 0.5)", lo=0)
    normalize_advantage: bool = option(True, "normalise advantages per minibatch")
    normalize_obs: bool = option(False, "normalise observations by running mean/std")
    normalize_reward: bool = option(False, "scale rewards by the running std of the discounted return")
    clip_obs: float = option(10.0, "clip normalised observations to ±clip_obs", lo=0, lo_open=True)


@dataclass
class PPOConfig:
    # Its networks are MLPs: every observation reaches them as one vector (envs.make.flatten_observations).
    flatten_obs: ClassVar[bool] = True
    env: VecEnvConfig = section(VecEnvConfig)
    algorithm: PPOAlgorithm = section(PPOAlgorithm)
    model: ActorCriticModel = section(ActorCriticModel)
    trainer: TrainerConfig = section(TrainerConfig)

    def problems(self) -> list[str]:
        rollout = self.env.num_envs * self.algorithm.n_steps
        if self.algorithm.minibatch_size > rollout:
            return [
                f"algorithm.minibatch_size ({self.algorithm.minibatch_size}) must be <= the rollout size "
                f"env.num_envs × algorithm.n_steps = {rollout}"
            ]
        return []


PRESETS = {
    "cartpole": Preset(
        "CartPole-v1, tuned for wall-clock time to 475 (shared ReLU trunk, 10 epochs)",
        {
            "env.id": "CartPole-v1",
            "env.num_envs": 8,
            "algorithm.n_steps": 32,
            "algorithm.minibatch_size": 256,
            "algorithm.n_epochs": 10,
            "algorithm.gamma": 0.98,
            "algorithm.gae_lambda": 0.8,
            "algorithm.learning_rate": 2e-3,
            "algorithm.lr_schedule": "linear",
            "algorithm.clip_schedule": "linear",
            "model.activation": "relu",
            "model.shared_trunk": True,
            "trainer.total_steps": 100_000,
        },
    ),
    "acrobot": Preset(
        "Acrobot-v1 (rl-baselines3-zoo settings)",
        {
            "env.id": "Acrobot-v1",
            "env.num_envs": 16,
            "algorithm.n_steps": 256,
            "algorithm.gae_lambda": 0.94,
            "algorithm.n_epochs": 4,
            "algorithm.ent_coef": 0.0,
            "algorithm.normalize_obs": True,
            "trainer.total_steps": 1_000_000,
        },
    ),
    "pendulum": Preset(
        "Pendulum-v1: ≥ −250 within 200k steps (measured −157, −186, −233 for seeds 0-2)",
        {
            "env.id": "Pendulum-v1",
            "model.activation": "tanh",
            "model.shared_trunk": False,
            "algorithm.lr_schedule": "linear",
            "algorithm.clip_schedule": "linear",
            "env.num_envs": 4,
            "algorithm.n_steps": 1024,
            "algorithm.gae_lambda": 0.95,
            "algorithm.gamma": 0.9,
            "algorithm.n_epochs": 10,
            "algorithm.learning_rate": 1e-3,
            "algorithm.clip_range": 0.2,
            "algorithm.minibatch_size": 64,
            "algorithm.ent_coef": 0.0,
            "model.log_std_init": -0.5,
            "trainer.total_steps": 200_000,
        },
    ),
    "mujoco": Preset(
        "MuJoCo locomotion (Hopper/HalfCheetah/Walker2d/Ant; needs the mujoco extra)",
        {
            "env.id": "HalfCheetah-v5",
            "env.num_envs": 1,
            "algorithm.n_steps": 2048,
            "algorithm.minibatch_size": 64,
            "algorithm.n_epochs": 10,
            "algorithm.learning_rate": 3e-4,
            "algorithm.lr_schedule": "linear",
            "algorithm.normalize_obs": True,
            "algorithm.normalize_reward": True,
            "trainer.total_steps": 1_000_000,
        },
    ),
}

register_actor_critic(
    "ppo",
    "PPO-Clip / PPO-Penalty with GAE over vectorized envs; Discrete and Box actions (Schulman et al. 2017)",
    PPOConfig,
    presets=PRESETS,
    # General defaults (the dataclass's); CartPole-v1's tuned values are its entry in
    # advantage/hyperparams/ppo.yml, applied because env.id has one.
    defaults={"env.id": "CartPole-v1"},
)
