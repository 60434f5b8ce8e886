"""DDPG's config, presets and registry record. DDPG is TD3 with one critic, no policy delay and no target
policy noise: :mod:`advantage.algos.td3` trains it, reading those three settings from
:class:`DDPGAlgorithm`'s class constants (not options: they are what makes it DDPG)."""

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
class DDPGAlgorithm(OffPolicyAlgorithm):
    # General defaults: the "our DDPG" of Fujimoto et al. 2018 (lr 1e-3, 400-300, τ 0.005, Gaussian
    # exploration σ 0.1), the same as Stable-Baselines3's DDPG defaults (batch 256).
    learning_rate: float = option(
        1e-3, "Adam learning rate (actor and critic; Fujimoto et al. 2018, SB3)", lo=0, lo_open=True
    )
    exploration_noise: float = option(0.1, "std of the Gaussian exploration noise (normalized units)", lo=0)
    normalize_obs: bool = normalize_obs_option()
    clip_obs: float = clip_obs_option()
    # TD3's three changes, switched off: one critic, the actor and targets move on every critic update,
    # the target action is the target actor's own (no smoothing noise is drawn).
    n_critics: ClassVar[int] = 1
    policy_delay: ClassVar[int] = 1
    policy_noise: ClassVar[float] = 0.0
    noise_clip: ClassVar[float] = 0.0


DDPGModel = OffPolicyModel


@dataclass
class DDPGConfig(OffPolicyConfig):
    algorithm: DDPGAlgorithm = section(DDPGAlgorithm)


PRESETS = {
    **td3_pendulum_presets(
        "DDPG",
        "Pendulum-v1 in 20k steps, tuned for wall-clock time (64-64 networks); the default",
        {},
    ),
    "mujoco": mujoco_presets(
        "MuJoCo locomotion (HalfCheetah-v5; Hopper-v5, Walker2d-v5, Ant-v5 via env.id; needs the mujoco "
        "extra): Fujimoto et al. 2018's DDPG settings, 1M steps",
        1e-3,  # the defaults' learning rate and buffer size: the mujoco settings set them explicitly
        [400, 300],
    )["mujoco"],
}

register_offpolicy(
    "ddpg",
    "DDPG: deterministic actor, Q(s, a) critic, Polyak targets, Gaussian noise (Box actions)",
    DDPGConfig,
    PRESETS,
    module="td3",
)
