"""DDPG's config, presets and registry record (the training loop is :mod:`advantage.algos.ddpg`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from advantage.config import Preset, TrainerConfig, VecEnvConfig, option, section
from advantage.configs.offpolicy import config_problems
from advantage.registry import Algorithm, Entry, register


@dataclass
class DDPGAlgorithm:
    gamma: float = option(0.99, "discount factor γ", lo=0, hi=1)
    # General defaults: the "our DDPG" of Fujimoto et al. 2018 (lr 1e-3, 400-300, τ 0.005, Gaussian
    # exploration σ 0.1), the same as Stable-Baselines3's DDPG defaults (batch 256).
    learning_rate: float = option(
        1e-3, "Adam learning rate (actor and critic; Fujimoto et al. 2018, SB3)", lo=0, lo_open=True
    )
    buffer_size: int = option(1_000_000, "replay capacity (transitions)", lo=1)
    learning_starts: int = option(1000, "environment steps of uniform random actions before learning", lo=1)
    batch_size: int = option(256, "transitions per gradient step", lo=1)
    train_freq: int = option(1, "environment steps between updates", lo=1)
    gradient_steps: int = option(1, "gradient steps per update", lo=1)
    tau: float = option(0.005, "Polyak weight of the target update", lo=0, hi=1, lo_open=True)
    exploration_noise: float = option(0.1, "std of the Gaussian exploration noise (normalized units)", lo=0)
    normalize_obs: bool = option(False, "normalize observations by running mean/std")
    clip_obs: float = option(10.0, "clip normalized observations to ±clip_obs", lo=0, lo_open=True)


@dataclass
class DDPGModel:
    actor_hidden: list[int] = field(default_factory=lambda: [400, 300], metadata={"help": "actor MLP sizes"})
    critic_hidden: list[int] = field(
        default_factory=lambda: [400, 300], metadata={"help": "critic MLP sizes"}
    )


@dataclass
class DDPGConfig:
    env: VecEnvConfig = section(VecEnvConfig)
    algorithm: DDPGAlgorithm = section(DDPGAlgorithm)
    model: DDPGModel = section(DDPGModel)
    trainer: TrainerConfig = section(TrainerConfig)

    def problems(self) -> list[str]:
        return config_problems(self)


PRESETS = {
    "pendulum": Preset(
        "Pendulum-v1 in 20k steps, tuned for wall-clock time (64-64 networks); the default",
        {
            "env.id": "Pendulum-v1",
            "env.num_envs": 1,
            "algorithm.gamma": 0.98,
            "algorithm.learning_rate": 1e-3,
            "algorithm.learning_starts": 1000,
            "model.actor_hidden": [64, 64],
            "model.critic_hidden": [64, 64],
            "trainer.total_steps": 20_000,
            "trainer.eval_episodes": 10,
        },
    ),
    "zoo_pendulum": Preset(
        "rl-baselines3-zoo's Pendulum-v1 DDPG settings (400-300, γ 0.98, learning_starts 10k, 20k steps)",
        {
            "env.id": "Pendulum-v1",
            "env.num_envs": 1,
            "algorithm.gamma": 0.98,
            "algorithm.learning_rate": 1e-3,
            "algorithm.buffer_size": 200_000,
            "algorithm.learning_starts": 10_000,
            "model.actor_hidden": [400, 300],
            "model.critic_hidden": [400, 300],
            "trainer.total_steps": 20_000,
            "trainer.eval_episodes": 10,
        },
    ),
    "mujoco": Preset(
        "MuJoCo locomotion (HalfCheetah-v5; Hopper-v5, Walker2d-v5, Ant-v5 via env.id; needs the mujoco "
        "extra): Fujimoto et al. 2018's DDPG settings, 1M steps",
        {
            "env.id": "HalfCheetah-v5",
            "env.num_envs": 1,
            "algorithm.learning_starts": 10_000,
            "model.actor_hidden": [400, 300],
            "model.critic_hidden": [400, 300],
            "trainer.total_steps": 1_000_000,
            "trainer.eval_every": 10_000,
            "trainer.eval_episodes": 10,
        },
    ),
}

register(
    Algorithm(
        name="ddpg",
        summary="DDPG: deterministic actor, Q(s, a) critic, Polyak targets, Gaussian noise (Box actions)",
        config=DDPGConfig,
        train=Entry("advantage.algos.ddpg:train"),
        policy=Entry("advantage.algos.ddpg:_policy"),
        check_env=Entry("advantage.algos.ddpg:check_env"),
        presets=PRESETS,
        # General defaults: the dataclass's, one env; Pendulum-v1's values are its entry in
        # advantage/hyperparams/ddpg.yml.
        defaults={"env.id": "Pendulum-v1", "env.num_envs": 1},
    )
)
