"""REINFORCE's and off-policy REINFORCE's configs, presets and registry records (the training loop is
:mod:`advantage.algos.reinforce`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from advantage.config import Preset, TrainerConfig, VecEnvConfig, option, section
from advantage.configs import ACTOR_CRITIC_ACTIONS, VECTOR_OBSERVATIONS, register_algorithm
from advantage.configs.models import hidden_sizes_problems
from advantage.math.registry import choices, described
from advantage.registry import Entry


@dataclass
class ReinforceAlgorithm:
    # General defaults: Williams 1992 with reward-to-go and a learned value baseline (Sutton & Barto 2018
    # §13.4), Adam 1e-3 for both networks (Spinning Up's VPG value rate), 8 episodes per update.
    gamma: float = option(0.99, "discount factor γ", lo=0, hi=1)
    episodes_per_update: int = option(8, "complete episodes per batch (one gradient step)", lo=1)
    return_type: str = option(
        "reward_to_go",
        "weight of log π(a_t|s_t): whole (G_0) or reward_to_go (G_t)",
        choices=("whole", "reward_to_go"),
    )
    baseline: str = option(
        "value",
        "none, mean (leave-one-out batch mean), value (learned V(s)), optimal (variance-optimal b)",
        choices=("none", "mean", "value", "optimal"),
    )
    discount_weight: bool = option(False, "multiply the term at step t by γ^t (unbiased for ∇J)")
    normalize_returns: bool = option(False, "whiten R_t − b_t over the batch")
    loss_aggregation: str = option(
        "seq_mean_token_sum_norm",
        described(
            "masked:LOSS_AGGREGATIONS", "loss aggregation over episodes (max_len = 1: Σ_t per episode)"
        ),
        choices=choices("masked:LOSS_AGGREGATIONS"),
    )
    learning_rate: float = option(1e-3, "policy Adam learning rate", lo=0, lo_open=True)
    value_learning_rate: float = option(
        1e-3, "critic Adam learning rate (baseline=value)", lo=0, lo_open=True
    )
    value_steps: int = option(1, "critic gradient steps per batch (baseline=value)", lo=1)
    ent_coef: float = option(0.0, "entropy bonus coefficient", lo=0)
    max_grad_norm: float = option(0.0, "global gradient-norm clip (0: none)", lo=0)


@dataclass
class ReinforceISAlgorithm(ReinforceAlgorithm):
    reuse: int = option(4, "updates per batch; all but the first are importance-weighted", lo=1)
    max_weight: float | None = option(
        10.0, "clip the cumulative weight ρ_{0:t} at this value (null: no clip)", lo=1
    )


@dataclass
class ReinforceModel:
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64], metadata={"help": "MLP hidden sizes"})
    activation: str = option("tanh", "hidden activation", choices=("tanh", "relu"))
    log_std_init: float = option(0.0, "Box actions: initial log σ")
    squash: bool = option(False, "Box actions: tanh-squash to the bounds (with log-det correction)")

    def problems(self) -> list[str]:
        return hidden_sizes_problems(self.hidden_sizes)


@dataclass
class ReinforceConfig:
    # Its networks are MLPs: every observation reaches them as one vector (envs.make.flatten_observations).
    flatten_obs: ClassVar[bool] = True
    env: VecEnvConfig = section(VecEnvConfig)
    algorithm: ReinforceAlgorithm = section(ReinforceAlgorithm)
    model: ReinforceModel = section(ReinforceModel)
    trainer: TrainerConfig = section(TrainerConfig)

    def problems(self) -> list[str]:
        env, a = self.env, self.algorithm
        out = []
        if env.num_envs > a.episodes_per_update:
            out.append(
                f"env.num_envs ({env.num_envs}) must be <= algorithm.episodes_per_update "
                f"({a.episodes_per_update}): every environment plays at least one episode of each batch"
            )
        if a.baseline == "value" and a.return_type != "reward_to_go":
            out.append(
                "algorithm.baseline=value needs algorithm.return_type=reward_to_go (V(s_t) estimates the "
                f"return from t, not the whole return), got return_type={a.return_type}"
            )
        if a.discount_weight and a.return_type != "reward_to_go":
            out.append(
                "algorithm.discount_weight=true needs algorithm.return_type=reward_to_go: the whole return "
                "G_0 already carries γ^t (with both, step t would be weighed by γ^2t, a biased estimator), "
                f"got return_type={a.return_type}"
            )
        if isinstance(a, ReinforceISAlgorithm) and a.return_type != "reward_to_go":
            out.append(
                "reinforce_is needs algorithm.return_type=reward_to_go (per-decision importance weights), "
                f"got {a.return_type}"
            )
        return out


@dataclass
class ReinforceISConfig(ReinforceConfig):
    algorithm: ReinforceISAlgorithm = section(ReinforceISAlgorithm)


PRESETS = {
    "cartpole": Preset(
        "CartPole-v1: reward-to-go with a learned value baseline",
        {
            "env.id": "CartPole-v1",
            "env.num_envs": 8,
            "algorithm.episodes_per_update": 8,
            "algorithm.baseline": "value",
            "trainer.total_steps": 500_000,
        },
    ),
}

PRESETS_IS = {
    "cartpole": Preset(
        "CartPole-v1: each batch reused for 4 importance-weighted updates",
        {**PRESETS["cartpole"].overrides, "algorithm.reuse": 4},
    ),
}

register_algorithm(
    "reinforce",
    "REINFORCE over whole episodes: reward-to-go, baselines (mean/value/optimal), γ^t weight",
    ReinforceConfig,
    "reinforce",
    check_env=Entry("advantage.algos.ppo:check_env", algo="reinforce"),
    observation_spaces=VECTOR_OBSERVATIONS,
    action_spaces=ACTOR_CRITIC_ACTIONS,
    presets=PRESETS,
    defaults=dict(PRESETS["cartpole"].overrides),
)

register_algorithm(
    "reinforce_is",
    "off-policy REINFORCE: batches reused with per-decision importance weights (Precup et al. 2000)",
    ReinforceISConfig,
    "reinforce",
    train=Entry("advantage.algos.reinforce:train", off_policy=True),
    check_env=Entry("advantage.algos.ppo:check_env", algo="reinforce_is"),
    observation_spaces=VECTOR_OBSERVATIONS,
    action_spaces=ACTOR_CRITIC_ACTIONS,
    presets=PRESETS_IS,
    defaults=dict(PRESETS_IS["cartpole"].overrides),
)
