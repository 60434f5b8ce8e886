"""TD3's config, presets and registry record (the training loop is :mod:`advantage.algos.td3`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from advantage.config import option, section
from advantage.configs.offpolicy import (
    OffPolicyAlgorithm,
    OffPolicyConfig,
    OffPolicyModel,
    clip_obs_option,
    mujoco_presets,
    normalize_obs_option,
    register_offpolicy,
    td3_pendulum_presets,
)


@dataclass
class TD3Algorithm(OffPolicyAlgorithm):
    # General defaults: Fujimoto et al. 2018 and their reference code (lr 1e-3, 400-300 networks, τ 0.005,
    # exploration σ 0.1, target noise 0.2 clipped at 0.5, delay 2; batch 256 as their code and SB3).
    learning_rate: float = option(
        1e-3, "Adam learning rate (actor and critics; Fujimoto et al. 2018, SB3)", lo=0, lo_open=True
    )
    exploration_noise: float = option(0.1, "std of the Gaussian exploration noise (normalized units)", lo=0)
    policy_noise: float = option(0.2, "std of the target policy smoothing noise (normalized units)", lo=0)
    noise_clip: float = option(0.5, "clip of the target policy smoothing noise", lo=0)
    policy_delay: int = option(2, "critic updates per actor (and target) update", lo=1)
    normalize_obs: bool = normalize_obs_option()
    clip_obs: float = clip_obs_option()
    n_critics: ClassVar[int] = 2  # clipped double-Q (not an option: DDPG is the one-critic variant)


TD3Model = OffPolicyModel


@dataclass
class TD3Config(OffPolicyConfig):
    algorithm: TD3Algorithm = section(TD3Algorithm)


PRESETS = {
    **td3_pendulum_presets(
        "TD3",
        "Pendulum-v1 in 20k steps, tuned for wall-clock time (64-64 networks, batch 128); the default",
        {"algorithm.batch_size": 128},  # Fujimoto et al. 2018 use 100; half of 256's compute per update
    ),
    **mujoco_presets(
        "MuJoCo locomotion (HalfCheetah-v5; also Hopper-v5, Walker2d-v5, Ant-v5 via env.id; needs the "
        "mujoco extra): Fujimoto et al. 2018 / rl-baselines3-zoo settings, 1M steps",
        1e-3,
        [400, 300],
    ),
}

register_offpolicy(
    "td3",
    "TD3: DDPG + clipped double-Q, target policy smoothing, delayed actor updates (Box actions)",
    TD3Config,
    PRESETS,
)
