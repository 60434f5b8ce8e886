"""What the ddpg, td3 and sac configs share: the replay options of the ``algorithm`` section, the ``model``
section, the config's sections and checks, the Pendulum presets and the registry record (their training
code shares :mod:`advantage.algos.offpolicy_common`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from advantage.config import Preset, TrainerConfig, VecEnvConfig, option, section
from advantage.configs import VECTOR_OBSERVATIONS, register_algorithm
from advantage.configs.models import hidden_sizes_problems
from advantage.registry import Entry


@dataclass
class OffPolicyAlgorithm:
    """The ``algorithm`` options every off-policy actor-critic has, in this order. Each algorithm declares
    its ``learning_rate`` again (its default and source), then its own options, then ``normalize_obs`` and
    ``clip_obs`` (:func:`normalize_obs_option`, :func:`clip_obs_option`), so the observation options come
    last in ``advantage list`` as they always have."""

    gamma: float = option(0.99, "discount factor γ", lo=0, hi=1)
    learning_rate: float = option(1e-3, "Adam learning rate", lo=0, lo_open=True)
    buffer_size: int = option(1_000_000, "replay capacity (transitions)", lo=1)
    learning_starts: int = option(1000, "environment steps of uniform random actions before learning", lo=0)
    batch_size: int = option(256, "transitions per gradient step", lo=1)
    train_freq: int = option(1, "environment steps between updates", lo=1)
    gradient_steps: int = option(1, "gradient steps per update", lo=1)
    tau: float = option(0.005, "Polyak weight of the target update", lo=0, hi=1, lo_open=True)


def normalize_obs_option() -> Any:
    return option(False, "normalize observations by running mean/std")


def clip_obs_option() -> Any:
    return option(10.0, "clip normalized observations to ±clip_obs", lo=0, lo_open=True)


@dataclass
class OffPolicyModel:
    """The ``model`` section: actor and critic MLP sizes (Fujimoto et al. 2018's 400-300 by default)."""

    actor_hidden: list[int] = field(default_factory=lambda: [400, 300], metadata={"help": "actor MLP sizes"})
    critic_hidden: list[int] = field(
        default_factory=lambda: [400, 300], metadata={"help": "critic MLP sizes"}
    )


@dataclass
class OffPolicyConfig:
    """The sections of an off-policy config; each algorithm narrows ``algorithm`` (and ``model``)."""

    # Its networks are MLPs: every observation reaches them as one vector (envs.make.flatten_observations).
    flatten_obs: ClassVar[bool] = True

    env: VecEnvConfig = section(VecEnvConfig)
    algorithm: OffPolicyAlgorithm = section(OffPolicyAlgorithm)
    model: OffPolicyModel = section(OffPolicyModel)
    trainer: TrainerConfig = section(TrainerConfig)

    def problems(self) -> list[str]:
        """Cross-field checks shared by the ddpg, td3 and sac configs: the batch fits in the buffer and
        both network size lists are non-empty and positive."""
        from advantage.data.replay import replay_problems  # numpy: not for `advantage list`

        out = replay_problems(self.algorithm)
        for name in ("actor_hidden", "critic_hidden"):
            out += hidden_sizes_problems(getattr(self.model, name), f"model.{name}")
        return out


def pendulum_preset(summary: str, overrides: Mapping[str, Any]) -> Preset:
    """A Pendulum-v1 preset of 20k steps on one env with 10 evaluation episodes, plus ``overrides``."""
    return Preset(
        summary,
        {
            "env.id": "Pendulum-v1",
            "env.num_envs": 1,
            **overrides,
            "trainer.total_steps": 20_000,
            "trainer.eval_episodes": 10,
        },
    )


def td3_pendulum_presets(algo: str, summary: str, tuned: Mapping[str, Any]) -> dict[str, Preset]:
    """TD3's and DDPG's ``pendulum`` (our tuning for wall-clock time: γ 0.98, 64-64 networks, plus
    ``tuned``) and ``zoo_pendulum`` (rl-baselines3-zoo's settings for ``algo``)."""
    return {
        "pendulum": pendulum_preset(
            summary,
            {
                "algorithm.gamma": 0.98,
                "algorithm.learning_rate": 1e-3,
                "algorithm.learning_starts": 1000,
                **tuned,
                "model.actor_hidden": [64, 64],
                "model.critic_hidden": [64, 64],
            },
        ),
        "zoo_pendulum": pendulum_preset(
            f"rl-baselines3-zoo's Pendulum-v1 {algo} settings (400-300, γ 0.98, learning_starts 10k, 20k "
            "steps)",
            {
                "algorithm.gamma": 0.98,
                "algorithm.learning_rate": 1e-3,
                "algorithm.buffer_size": 200_000,
                "algorithm.learning_starts": 10_000,
                "model.actor_hidden": [400, 300],
                "model.critic_hidden": [400, 300],
            },
        ),
    }


def mujoco_presets(summary: str, learning_rate: float, hidden: list[int]) -> dict[str, Preset]:
    """``mujoco`` (HalfCheetah-v5) and ``hopper``, ``walker2d``, ``ant``: 1M steps on one env, 10k steps of
    warm-up, the given learning rate and network sizes."""
    settings = {
        "env.num_envs": 1,
        "algorithm.learning_rate": learning_rate,
        "algorithm.learning_starts": 10_000,
        "algorithm.buffer_size": 1_000_000,
        "model.actor_hidden": hidden,
        "model.critic_hidden": list(hidden),
        "trainer.total_steps": 1_000_000,
        "trainer.eval_every": 10_000,
        "trainer.eval_episodes": 10,
    }
    return {
        "mujoco": Preset(summary, {"env.id": "HalfCheetah-v5", **settings}),
        **{
            env.lower(): Preset(f"{env}-v5 with the mujoco settings", {"env.id": f"{env}-v5", **settings})
            for env in ("Hopper", "Walker2d", "Ant")
        },
    }


def register_offpolicy(
    name: str, summary: str, config: type, presets: Mapping[str, Preset], module: str | None = None
) -> None:
    """Register ``name``, trained by ``advantage.algos.<module>`` (default: ``name``)."""
    register_algorithm(
        name,
        summary,
        config,
        module or name,
        check_env=Entry("advantage.algos.offpolicy_common:check_env", algo=name),
        observation_spaces=VECTOR_OBSERVATIONS,
        action_spaces=("Box",),
        presets=presets,
        # General defaults: the dataclass's, one env; Pendulum-v1's values are its entry in
        # advantage/hyperparams/<name>.yml.
        defaults={"env.id": "Pendulum-v1", "env.num_envs": 1},
    )
