"""SAC's config, presets and registry record (the training loop is :mod:`advantage.algos.sac`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from advantage.config import Preset, TrainerConfig, VecEnvConfig, option, section
from advantage.configs.offpolicy import config_problems
from advantage.registry import Algorithm, Entry, register


@dataclass
class SACAlgorithm:
    gamma: float = option(0.99, "discount factor γ", lo=0, hi=1)
    # General defaults: Haarnoja et al. 2018 (Table 1: lr 3e-4, batch 256, τ 0.005, γ 0.99, 256-256
    # networks, one gradient step per env step, learned temperature), as Stable-Baselines3; the warm-up
    # of uniform actions is 1000 steps (SB3: 100, CleanRL: 5000).
    learning_rate: float = option(
        3e-4,
        "Adam learning rate (actor, critics, temperature; Haarnoja et al. 2018, SB3)",
        lo=0,
        lo_open=True,
    )
    buffer_size: int = option(1_000_000, "replay capacity (transitions)", lo=1)
    learning_starts: int = option(1000, "environment steps of uniform random actions before learning", lo=1)
    batch_size: int = option(256, "transitions per gradient step", lo=1)
    train_freq: int = option(1, "environment steps between updates", lo=1)
    gradient_steps: int = option(1, "gradient steps per update", lo=1)
    tau: float = option(0.005, "Polyak weight of the target update", lo=0, hi=1, lo_open=True)
    ent_coef: float | None = option(None, "fixed temperature α (null: learn it towards target_entropy)", lo=0)
    ent_coef_init: float = option(1.0, "initial α when it is learned", lo=0, lo_open=True)
    target_entropy: float | None = option(None, "target entropy (null: −dim(A), Haarnoja et al. 2018b)")
    normalize_obs: bool = option(False, "normalize observations by running mean/std")
    clip_obs: float = option(10.0, "clip normalized observations to ±clip_obs", lo=0, lo_open=True)


@dataclass
class SACModel:
    actor_hidden: list[int] = field(default_factory=lambda: [256, 256], metadata={"help": "actor MLP sizes"})
    critic_hidden: list[int] = field(
        default_factory=lambda: [256, 256], metadata={"help": "critic MLP sizes"}
    )


@dataclass
class SACConfig:
    env: VecEnvConfig = section(VecEnvConfig)
    algorithm: SACAlgorithm = section(SACAlgorithm)
    model: SACModel = section(SACModel)
    trainer: TrainerConfig = section(TrainerConfig)

    def problems(self) -> list[str]:
        return config_problems(self)


_MUJOCO = {
    "env.num_envs": 1,
    "algorithm.learning_rate": 3e-4,
    "algorithm.learning_starts": 10_000,
    "algorithm.buffer_size": 1_000_000,
    "model.actor_hidden": [256, 256],
    "model.critic_hidden": [256, 256],
    "trainer.total_steps": 1_000_000,
    "trainer.eval_every": 10_000,
    "trainer.eval_episodes": 10,
}
PRESETS = {
    "pendulum": Preset(
        "Pendulum-v1 in 20k steps, tuned for wall-clock time (64-64 networks); the default",
        {
            "env.id": "Pendulum-v1",
            "env.num_envs": 1,
            "algorithm.learning_rate": 1e-3,
            "algorithm.learning_starts": 1000,
            "model.actor_hidden": [64, 64],
            "model.critic_hidden": [64, 64],
            "trainer.total_steps": 20_000,
            "trainer.eval_episodes": 10,
        },
    ),
    "zoo_pendulum": Preset(
        "rl-baselines3-zoo's Pendulum-v1 SAC settings (256-256, lr 1e-3, learning_starts 100, 20k steps)",
        {
            "env.id": "Pendulum-v1",
            "env.num_envs": 1,
            "algorithm.learning_rate": 1e-3,
            "algorithm.learning_starts": 256,  # zoo: 100 (SB3 then waits for a batch); ours needs a batch
            "model.actor_hidden": [256, 256],
            "model.critic_hidden": [256, 256],
            "trainer.total_steps": 20_000,
            "trainer.eval_episodes": 10,
        },
    ),
    "mujoco": Preset(
        "MuJoCo locomotion (HalfCheetah-v5; also Hopper-v5, Walker2d-v5, Ant-v5 via env.id; needs the "
        "mujoco extra): Haarnoja et al. 2018 / rl-baselines3-zoo settings, 1M steps",
        {"env.id": "HalfCheetah-v5", **_MUJOCO},
    ),
    "hopper": Preset("Hopper-v5 with the mujoco settings", {"env.id": "Hopper-v5", **_MUJOCO}),
    "walker2d": Preset("Walker2d-v5 with the mujoco settings", {"env.id": "Walker2d-v5", **_MUJOCO}),
    "ant": Preset("Ant-v5 with the mujoco settings", {"env.id": "Ant-v5", **_MUJOCO}),
}

register(
    Algorithm(
        name="sac",
        summary="Soft Actor-Critic: twin critics, learned temperature, tanh-Gaussian policy (Box actions)",
        config=SACConfig,
        train=Entry("advantage.algos.sac:train"),
        policy=Entry("advantage.algos.sac:_policy"),
        check_env=Entry("advantage.algos.sac:check_env"),
        presets=PRESETS,
        # General defaults: the dataclass's, one env; Pendulum-v1's values are its entry in
        # advantage/hyperparams/sac.yml.
        defaults={"env.id": "Pendulum-v1", "env.num_envs": 1},
    )
)
