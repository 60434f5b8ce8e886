"""The ``grpo`` config: EasyR1 / verl-style sections ``data``, ``algorithm``, ``worker`` (``actor``,
``rollout``, ``ref``, ``reward``) and ``trainer``, the presets of the GRPO family and its registry record
(see :mod:`advantage.algos.llm.grpo` for what each option does)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from advantage.config import Preset, option, section
from advantage.configs.llm import (
    DataConfig,
    LMModelConfig,
    LMOptim,
    LMTrainerConfig,
    RefConfig,
    SamplingConfig,
    SamplingTrainerConfig,
    task_rows,
)
from advantage.math.registry import choices, described, static_specs
from advantage.registry import Algorithm, Entry, register

# The math registries the options pick from (read without importing torch: advantage.math.registry).
ADVANTAGES, POLICY_LOSSES = "advantages:GROUP_ADVANTAGES", "policy_losses:POLICY_LOSSES"
AGGREGATIONS, KL_ESTIMATORS = "masked:LOSS_AGGREGATIONS", "kl:KL_ESTIMATORS"


# Tasks with no verifier: prompts from the synthetic preference task, rewards from a reward model.
PREFERENCE_TASKS = ("synthetic",)

# ----------------------------------------------------------------------------------------------------
# Config: EasyR1-style sections data / algorithm / worker (actor, rollout, ref, reward) / trainer


@dataclass
class GRPOData(DataConfig):
    rollout_batch_size: int = option(16, "prompts per rollout (each sampled worker.rollout.n times)", lo=1)


@dataclass
class GRPOAlgorithm:
    advantage: str = option("grpo", described(ADVANTAGES, "group advantage"), choices=choices(ADVANTAGES))
    std_eps: float = option(1e-6, "ε added to the std in grpo / batch_std", lo=0)
    supervision: str = option(
        "outcome",
        "outcome: one reward per completion; process: a reward per step from the task's step_rewards, "
        "each token's advantage the sum of the normalised rewards of the steps from its own on",
        choices=("outcome", "process"),
    )
    kl_reward_coef: float = option(0.0, "β_r: KL to the reference subtracted from the reward", lo=0)
    dynamic_sampling: bool = option(
        False, "DAPO: drop the groups that carry no signal (see dynamic_sampling_on) and sample more prompts"
    )
    dynamic_sampling_on: str = option(
        "correctness",
        "what dynamic sampling compares within a group: correctness (the verifier's verdict before any "
        "reward shaping: drop groups all correct or all wrong, as DAPO does) or reward (drop groups whose "
        "shaped rewards, or with supervision=process whose step advantages, carry no signal)",
        choices=("correctness", "reward"),
    )
    max_sampling_rounds: int = option(4, "dynamic sampling: most generation rounds per step", lo=1)
    overlong_filter: bool = option(False, "DAPO: truncated responses are masked out of the loss")
    curriculum: str = option(
        "none",
        "none, or hard: sample prompts by 1 - pass rate (hard-example mining)",
        choices=("none", "hard"),
    )
    curriculum_floor: float = option(0.1, "curriculum=hard: weight added to every prompt", lo=0)
    adaptive_difficulty: bool = option(
        False,
        "a prompt's difficulty is the mean reward of its G samples: easy prompts (at or above the easy "
        "threshold) put only easy_samples of them in the loss, hard ones (at or below the hard threshold) "
        "get hard_samples samples in all",
    )
    easy_samples: int | None = option(
        None,
        "adaptive_difficulty: samples of an easy prompt in the loss, 2 to G (null: G/2, at least 2)",
        lo=2,
    )
    hard_samples: int | None = option(
        None,
        "adaptive_difficulty: samples of a hard prompt, its G and hard_samples - G more (null: 2G)",
        lo=2,
    )
    easy_quantile: float = option(
        0.75,
        "adaptive_difficulty: the easy threshold tracks this quantile of the group mean rewards",
        lo=0,
        hi=1,
    )
    hard_quantile: float = option(
        0.25,
        "adaptive_difficulty: the hard threshold tracks this quantile of the group mean rewards",
        lo=0,
        hi=1,
    )
    difficulty_rate: float = option(
        0.1,
        "adaptive_difficulty: EMA rate α of the thresholds, τ <- (1 - α) τ + α quantile (1: no memory)",
        lo=0,
        hi=1,
        lo_open=True,
    )

    def problems(self) -> list[str]:
        out = []
        if self.adaptive_difficulty and self.hard_quantile >= self.easy_quantile:
            out.append(
                f"algorithm.hard_quantile={self.hard_quantile} is not below algorithm.easy_quantile="
                f"{self.easy_quantile}; adaptive difficulty needs hard_quantile < easy_quantile"
            )
        return out


@dataclass
class ActorConfig:
    model: LMModelConfig = section(LMModelConfig, "the policy")
    learning_rate: float = LMOptim.learning_rate(1e-5)
    lr_schedule: str = LMOptim.lr_schedule("constant")
    warmup_steps: int = LMOptim.warmup_steps(0)
    min_lr_ratio: float = LMOptim.min_lr_ratio(0.0)
    weight_decay: float = LMOptim.weight_decay()
    max_grad_norm: float = LMOptim.max_grad_norm()
    ppo_epochs: int = option(1, "μ: passes over each rollout", lo=1)
    mini_batch_size: int = option(0, "prompts per optimizer step (0: the whole rollout)", lo=0)
    micro_batch_size: int = option(0, "completions per forward pass (0: the whole mini-batch)", lo=0)
    loss: str = option(
        "ppo_clip",
        described(POLICY_LOSSES, "policy loss", clipped=True),
        choices=choices(POLICY_LOSSES, clipped=True),
    )
    clip_low: float = option(0.2, "ε_low of the ratio clip", lo=0, hi=1, hi_open=True)
    clip_high: float | None = option(None, "ε_high (clip-higher); null: clip_low", lo=0)
    dual_clip: float | None = option(None, "dual-clip constant c > 1 (null: off)", lo=1, lo_open=True)
    loss_agg: str = option(
        "seq_mean_token_mean", described(AGGREGATIONS, "loss aggregation"), choices=choices(AGGREGATIONS)
    )
    kl_coef: float = option(0.0, "β: KL to the reference in the loss", lo=0)
    kl_estimator: str = option(
        "k3", described(KL_ESTIMATORS, "KL estimator in the loss"), choices=choices(KL_ESTIMATORS)
    )

    def problems(self) -> list[str]:
        out = []
        if self.clip_high is not None and self.clip_high < self.clip_low:
            out.append(
                f"worker.actor.clip_high={self.clip_high} is smaller than worker.actor.clip_low="
                f"{self.clip_low}; clip-higher needs clip_high >= clip_low"
            )
        return out


@dataclass
class RolloutConfig(SamplingConfig):
    n: int = option(8, "G: completions sampled per prompt", lo=1)


@dataclass
class RewardConfig:
    model: str | None = option(
        None,
        "a reward_model run or checkpoint: rewards are its scores instead of the task's verifier "
        "(needed for data.task=synthetic, which has none)",
    )
    batch_size: int = option(64, "reward model: responses scored together", lo=1)
    overlong_buffer: int = option(0, "DAPO soft overlong punishment: buffer length L_cache (0: off)", lo=0)
    overlong_penalty_factor: float = option(1.0, "scale of that punishment", lo=0)
    length_preference: float = option(0.0, "bonus for shorter answers among equally rewarded ones", lo=0)


@dataclass
class WorkerConfig:
    actor: ActorConfig = section(ActorConfig)
    rollout: RolloutConfig = section(RolloutConfig)
    ref: RefConfig = section(RefConfig)
    reward: RewardConfig = section(RewardConfig)


@dataclass
class GRPOConfig(SamplingTrainerConfig):
    data: GRPOData = section(GRPOData)
    algorithm: GRPOAlgorithm = section(GRPOAlgorithm)
    worker: WorkerConfig = section(WorkerConfig)
    trainer: LMTrainerConfig = section(LMTrainerConfig)

    def difficulty_samples(self) -> tuple[int, int]:
        """Adaptive difficulty's ``(easy_samples, hard_samples)`` with the nulls resolved: G/2 rounded up
        (at least 2) and 2G."""
        a, G = self.algorithm, self.worker.rollout.n
        easy = a.easy_samples if a.easy_samples is not None else max(2, (G + 1) // 2)
        return easy, a.hard_samples if a.hard_samples is not None else 2 * G

    def problems(self) -> list[str]:
        out = []
        G = self.worker.rollout.n
        if self.algorithm.adaptive_difficulty:
            easy, hard = self.difficulty_samples()
            if G < 2:
                out.append(
                    f"worker.rollout.n={G} with algorithm.adaptive_difficulty: a prompt's difficulty and "
                    "its easy samples compare the G samples of a prompt, so G must be >= 2"
                )
            elif easy > G:
                out.append(
                    f"algorithm.easy_samples={easy} is more than worker.rollout.n={G}: an easy prompt keeps "
                    f"easy_samples of its G samples in the loss; allowed: 2 to {G}"
                )
            if G >= 2 and hard < G:
                out.append(
                    f"algorithm.hard_samples={hard} is less than worker.rollout.n={G}: a hard prompt gets "
                    f"its G samples and hard_samples - G more; allowed: >= {G}"
                )
        estimator = static_specs(ADVANTAGES).get(self.algorithm.advantage)  # None: reported by its choices
        if self.worker.rollout.n < 2 and estimator is not None and estimator.get("groups"):
            out.append(
                f"worker.rollout.n=1 with algorithm.advantage={self.algorithm.advantage}: group advantages "
                "compare the G samples of a prompt, so G must be >= 2"
            )
        if self.algorithm.supervision == "process":
            if self.worker.rollout.n < 2:
                out.append(
                    "worker.rollout.n=1 with algorithm.supervision=process: step rewards are normalised "
                    "over the G samples of a prompt, so G must be >= 2"
                )
            if estimator is not None and estimator.get("process") is None:
                out.append(
                    f"algorithm.advantage={self.algorithm.advantage} with algorithm.supervision=process: "
                    "process supervision normalises step rewards as "
                    f"{', '.join(n for n, s in static_specs(ADVANTAGES).items() if s.get('process'))} do; "
                    "choose one of those"
                )
            if self.worker.reward.model:
                out.append(
                    "algorithm.supervision=process with worker.reward.model set: a reward model gives one "
                    "score per completion; process supervision needs the task's step rewards"
                )
        return out + self.rollout_problems(" prompts")


# ----------------------------------------------------------------------------------------------------
# Presets and registration

PRESETS = {
    "grpo": Preset(
        "GRPO as in DeepSeekMath: group mean/std, per-sequence token mean, β = 0.04 with k3 in the loss",
        {
            "algorithm.advantage": "grpo",
            "worker.actor.loss": "ppo_clip",
            "worker.actor.loss_agg": "seq_mean_token_mean",
            "worker.actor.kl_coef": 0.04,
            "worker.actor.kl_estimator": "k3",
        },
    ),
    "dapo": Preset(
        "DAPO: clip-higher (0.2 / 0.28), token-level loss, no KL, dynamic sampling, overlong filter + "
        "soft overlong punishment",
        {
            "algorithm.advantage": "grpo",
            "worker.actor.clip_low": 0.2,
            "worker.actor.clip_high": 0.28,
            "worker.actor.loss_agg": "token_mean",
            "worker.actor.kl_coef": 0.0,
            "algorithm.dynamic_sampling": True,
            "algorithm.overlong_filter": True,
            "worker.reward.overlong_buffer": 4,
        },
    ),
    "gspo": Preset(
        "GSPO: sequence-level ratio exp(mean log ρ) and sequence-level clipping (3e-4 / 4e-4)",
        {
            "worker.actor.loss": "gspo",
            "worker.actor.clip_low": 3e-4,
            "worker.actor.clip_high": 4e-4,
            "worker.actor.loss_agg": "seq_mean_token_mean",
            "worker.actor.kl_coef": 0.0,
        },
    ),
    "dr_grpo": Preset(
        "Dr.GRPO: no std normalisation, per-sequence token sums divided by the maximum length",
        {
            "algorithm.advantage": "dr_grpo",
            "worker.actor.loss_agg": "seq_mean_token_sum_norm",
            "worker.actor.kl_coef": 0.0,
        },
    ),
    "rloo": Preset(
        "RLOO (Ahmadian et al. 2024): leave-one-out baseline, KL to the reference in the reward (β_r = 0.05, "
        "TRL's RLOOTrainer default), none in the loss",
        {
            "algorithm.advantage": "rloo",
            "algorithm.kl_reward_coef": 0.05,
            "worker.actor.kl_coef": 0.0,
        },
    ),
    "reinforce_pp": Preset(
        "REINFORCE++ (Hu 2025): per-token returns whitened over the batch, no groups needed; the KL to the "
        "reference as a per-token reward (β_r = 0.01), none in the loss; token-level loss",
        {
            "algorithm.advantage": "reinforce_plus_plus",
            "algorithm.kl_reward_coef": 0.01,
            "worker.actor.kl_coef": 0.0,
            "worker.actor.loss_agg": "token_mean",
        },
    ),
    "lite_ppo": Preset(
        "Lite PPO: group-mean, batch-std advantages and the token-level loss",
        {
            "algorithm.advantage": "batch_std",
            "worker.actor.loss_agg": "token_mean",
            "worker.actor.kl_coef": 0.0,
        },
    ),
}


def task_options(name: str) -> list[tuple[str, Any, str]]:
    """The options of task ``name``: a text task with a verifier, or a preference task (scored by a reward
    model)."""
    return task_rows(name, text=name not in PREFERENCE_TASKS, preference=name in PREFERENCE_TASKS)


register(
    Algorithm(
        name="grpo",
        summary="GRPO and its family (DAPO, GSPO, Dr.GRPO, RLOO, REINFORCE++, Lite PPO) on verifiable "
        "rewards (Shao et al. 2024)",
        config=GRPOConfig,
        train=Entry("advantage.algos.llm.grpo:train"),
        load_policy=Entry("advantage.algos.llm.grpo:load_policy"),
        evaluate=Entry("advantage.algos.llm.grpo:evaluate"),
        check=Entry("advantage.algos.llm.grpo:check"),
        presets=PRESETS,
        workers=True,
        defaults={"trainer.eval_every": 10, "trainer.log_every": 1, "trainer.total_steps": 100},
        task_options=task_options,
    )
)
