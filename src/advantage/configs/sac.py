"""SAC's config, presets and registry record (the training loop is :mod:`advantage.algos.sac`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from advantage.config import option, section
from advantage.configs.offpolicy import (
    OffPolicyAlgorithm,
    OffPolicyConfig,
    OffPolicyModel,
    clip_obs_option,
    mujoco_presets,
    normalize_obs_option,
    pendulum_preset,
    register_offpolicy,
)


@dataclass
class SACAlgorithm(OffPolicyAlgorithm):
    # General defaults: Haarnoja et al. 2018 (Table 1: lr 3e-4, batch 256, τ 0.005, γ 0.99, 256-256
    # networks, one gradient step per env step, learned temperature), as Stable-Baselines3; the warm-up
    # of uniform actions is 1000 steps (SB3: 100, CleanRL: 5000).
    learning_rate: float = option(
        3e-4,
        "Adam learning rate (actor, critics, temperature; Haarnoja et al. 2018, SB3)",
        lo=0,
        lo_open=True,
    )
    ent_coef: float | None = option(None, "fixed temperature α (null: learn it towards target_entropy)", lo=0)
    ent_coef_init: float = option(1.0, "initial α when it is learned", lo=0, lo_open=True)
    target_entropy: float | None = option(None, "target entropy (null: −dim(A), Haarnoja et al. 2018b)")
    normalize_obs: bool = normalize_obs_option()
    clip_obs: float = clip_obs_option()
    use_sde: bool = option(
        False, "generalized state-dependent exploration (gSDE, Raffin et al. 2022; SB3's use_sde)"
    )
    sde_sample_freq: int = option(
        -1,
        "gSDE: environment steps between new exploration matrices while acting (-1: every train_freq "
        "steps, at each collection, as SB3)",
        lo=-1,
    )


@dataclass
class SACModel(OffPolicyModel):
    actor_hidden: list[int] = field(default_factory=lambda: [256, 256], metadata={"help": "actor MLP sizes"})
    critic_hidden: list[int] = field(
        default_factory=lambda: [256, 256], metadata={"help": "critic MLP sizes"}
    )
    log_std_init: float = option(-3.0, "gSDE: initial log σ of the exploration matrix (SB3's SAC default)")
    sde_learn_features: bool = option(
        True,
        "gSDE: the actor loss reaches the last hidden features through the noise and its variance too "
        "(SB3's SAC: learn_features=True); false detaches them there (gradients through the mean only)",
    )


@dataclass
class SACConfig(OffPolicyConfig):
    algorithm: SACAlgorithm = section(SACAlgorithm)
    model: SACModel = section(SACModel)

    def problems(self) -> list[str]:
        out = super().problems()
        if self.algorithm.sde_sample_freq == 0:
            out.append("algorithm.sde_sample_freq must be -1 (every train_freq steps) or >= 1, got 0")
        return out


PRESETS = {
    "pendulum": pendulum_preset(
        "Pendulum-v1 in 20k steps, tuned for wall-clock time (64-64 networks); the default",
        {
            "algorithm.learning_rate": 1e-3,
            "algorithm.learning_starts": 1000,
            "model.actor_hidden": [64, 64],
            "model.critic_hidden": [64, 64],
        },
    ),
    "zoo_pendulum": pendulum_preset(
        "rl-baselines3-zoo's Pendulum-v1 SAC settings (256-256, lr 1e-3, learning_starts 100, 20k steps)",
        {
            "algorithm.learning_rate": 1e-3,
            "algorithm.learning_starts": 100,  # the zoo's (SB3's default); first batches: with replacement
            "model.actor_hidden": [256, 256],
            "model.critic_hidden": [256, 256],
        },
    ),
    **mujoco_presets(
        "MuJoCo locomotion (HalfCheetah-v5; also Hopper-v5, Walker2d-v5, Ant-v5 via env.id; needs the "
        "mujoco extra): Haarnoja et al. 2018 / rl-baselines3-zoo settings, 1M steps",
        3e-4,
        [256, 256],
    ),
}

register_offpolicy(
    "sac",
    "Soft Actor-Critic: twin critics, learned temperature, tanh-Gaussian policy (Box actions)",
    SACConfig,
    PRESETS,
)
