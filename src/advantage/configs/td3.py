"""TD3's config, presets and registry record (the training loop is :mod:`advantage.algos.td3`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from advantage.config import Preset, TrainerConfig, VecEnvConfig, option, section
from advantage.configs.offpolicy import config_problems
from advantage.registry import Algorithm, Entry, register


@dataclass
class TD3Algorithm:
    gamma: float = option(0.99, "discount factor γ", lo=0, hi=1)
    # General defaults: Fujimoto et al. 2018 and their reference code (lr 1e-3, 400-300 networks, τ 0.005,
    # exploration σ 0.1, target noise 0.2 clipped at 0.5, delay 2; batch 256 as their code and SB3).
    learning_rate: float = option(
        1e-3, "Adam learning rate (actor and critics; Fujimoto et al. 2018, SB3)", lo=0, lo_open=True
    )
    buffer_size: int = option(1_000_000, "replay capacity (transitions)", lo=1)
    learning_starts: int = option(1000, "environment steps of uniform random actions before learning", lo=1)
    batch_size: int = option(256, "transitions per gradient step", lo=1)
    train_freq: int = option(1, "environment steps between updates", lo=1)
    gradient_steps: int = option(1, "gradient steps per update", lo=1)
    tau: float = option(0.005, "Polyak weight of the target update", lo=0, hi=1, lo_open=True)
    exploration_noise: float = option(0.1, "std of the Gaussian exploration noise (normalized units)", lo=0)
    policy_noise: float = option(0.2, "std of the target policy smoothing noise (normalized units)", lo=0)
    noise_clip: float = option(0.5, "clip of the target policy smoothing noise", lo=0)
    policy_delay: int = option(2, "critic updates per actor (and target) update", lo=1)
    normalize_obs: bool = option(False, "normalize observations by running mean/std")
    clip_obs: float = option(10.0, "clip normalized observations to ±clip_obs", lo=0, lo_open=True)


@dataclass
class TD3Model:
    actor_hidden: list[int] = field(default_factory=lambda: [400, 300], metadata={"help": "actor MLP sizes"})
    critic_hidden: list[int] = field(
        default_factory=lambda: [400, 300], metadata={"help": "critic MLP sizes"}
    )


@dataclass
class TD3Config:
    env: VecEnvConfig = section(VecEnvConfig)
    algorithm: TD3Algorithm = section(TD3Algorithm)
    model: TD3Model = section(TD3Model)
    trainer: TrainerConfig = section(TrainerConfig)

    def problems(self) -> list[str]:
        return config_problems(self)


_MUJOCO = {
    "env.num_envs": 1,
    "algorithm.learning_rate": 1e-3,
    "algorithm.learning_starts": 10_000,
    "algorithm.buffer_size": 1_000_000,
    "model.actor_hidden": [400, 300],
    "model.critic_hidden": [400, 300],
    "trainer.total_steps": 1_000_000,
    "trainer.eval_every": 10_000,
    "trainer.eval_episodes": 10,
}
PRESETS = {
    "pendulum": Preset(
        "Pendulum-v1 in 20k steps, tuned for wall-clock time (64-64 networks, batch 128); the default",
        {
            "env.id": "Pendulum-v1",
            "env.num_envs": 1,
            "algorithm.gamma": 0.98,
            "algorithm.learning_rate": 1e-3,
            "algorithm.learning_starts": 1000,
            "algorithm.batch_size": 128,  # Fujimoto et al. 2018 use 100; half of 256's compute per update
            "model.actor_hidden": [64, 64],
            "model.critic_hidden": [64, 64],
            "trainer.total_steps": 20_000,
            "trainer.eval_episodes": 10,
        },
    ),
    "zoo_pendulum": Preset(
        "rl-baselines3-zoo's Pendulum-v1 TD3 settings (400-300, γ 0.98, learning_starts 10k, 20k steps)",
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
        "MuJoCo locomotion (HalfCheetah-v5; also Hopper-v5, Walker2d-v5, Ant-v5 via env.id; needs the "
        "mujoco extra): Fujimoto et al. 2018 / rl-baselines3-zoo settings, 1M steps",
        {"env.id": "HalfCheetah-v5", **_MUJOCO},
    ),
    "hopper": Preset("Hopper-v5 with the mujoco settings", {"env.id": "Hopper-v5", **_MUJOCO}),
    "walker2d": Preset("Walker2d-v5 with the mujoco settings", {"env.id": "Walker2d-v5", **_MUJOCO}),
    "ant": Preset("Ant-v5 with the mujoco settings", {"env.id": "Ant-v5", **_MUJOCO}),
}

register(
    Algorithm(
        name="td3",
        summary="TD3: DDPG + clipped double-Q, target policy smoothing, delayed actor updates (Box actions)",
        config=TD3Config,
        train=Entry("advantage.algos.td3:train"),
        policy=Entry("advantage.algos.td3:_policy"),
        check_env=Entry("advantage.algos.td3:check_env"),
        presets=PRESETS,
        # General defaults: the dataclass's, one env; Pendulum-v1's values are its entry in
        # advantage/hyperparams/td3.yml.
        defaults={"env.id": "Pendulum-v1", "env.num_envs": 1},
    )
)
