r"""The ``ppo_rlhf`` config: EasyR1 / verl-style sections ``data``, ``algorithm``, ``worker`` (``actor``,
``critic``, ``rollout``, ``ref``, ``reward``) and ``trainer``, as for ``grpo`` (see
:mod:`advantage.algos.llm.ppo_rlhf` for what each option does), its presets and registry record. The
checks made before any compute are :func:`advantage.algos.llm.ppo_rlhf.check`.

Defaults and why:

* ``algorithm.gamma = 1``: a response is a short episode that ends for sure; the reward model's score
  arrives on its last token and should reach the first token undiminished (discounting would make early
  tokens care less about the outcome they cause). InstructGPT, Stiennon et al. 2020 and TRL use γ = 1.
* ``algorithm.lam = 0.95``: with γ = 1, λ < 1 is the only thing that shortens the credit horizon; 0.95
  trades a little bias (through the critic) for much lower variance than Monte Carlo returns (λ = 1).
  It is the usual value (Schulman et al. 2015; Ziegler et al. 2019; TRL's ``lam``).
* ``algorithm.kl_coef = 0.05`` and ``kl_estimator = k1``: the per-token penalty
  :math:`-\beta\log\frac{\pi}{\pi_\text{ref}}` of Ziegler et al. 2019 / Stiennon et al. 2020 (TRL's
  ``init_kl_coef`` is 0.05); k1 as a detached reward has the KL gradient in expectation (see
  :mod:`advantage.math.kl`).
* ``worker.actor.ppo_epochs = 4``, ``clip_low = 0.2``, ``worker.critic.value_clip = 0.2``: the PPO
  defaults of Ziegler et al. 2019 and TRL (several epochs per rollout batch, ratio and value clipping).
"""

from __future__ import annotations

from dataclasses import dataclass

from advantage.config import Preset, option, section
from advantage.configs.llm import (
    DataConfig,
    LMModelConfig,
    LMOptim,
    LMTrainerConfig,
    RefConfig,
    SamplingConfig,
    SamplingTrainerConfig,
    preference_task_options,
)
from advantage.math.registry import choices, described
from advantage.registry import Algorithm, Entry, register


@dataclass
class PPOData(DataConfig):
    task: str = option(
        "synthetic", "preference task whose prompts are used: synthetic, or dataset (read from data.path)"
    )
    rollout_batch_size: int = option(32, "prompts per rollout (one sampled response each)", lo=1)


@dataclass
class PPORLHFAlgorithm:
    gamma: float = option(1.0, "γ: discount over response tokens (1: see the module docstring)", lo=0, hi=1)
    lam: float = option(0.95, "λ of GAE over tokens (bias-variance trade-off of the advantage)", lo=0, hi=1)
    kl_coef: float = option(0.05, "β: weight of the per-token KL penalty in the reward (initial β)", lo=0)
    kl_estimator: str = option(
        "k1",
        described("kl:KL_ESTIMATORS", "per-token KL estimate in the reward"),
        choices=choices("kl:KL_ESTIMATORS"),
    )
    adaptive_kl: bool = option(
        False, "adapt β once per rollout towards algorithm.kl_target (halve / double, PPO-Penalty's rule)"
    )
    kl_target: float | None = option(
        None,
        "KL budget to the reference in nats per response: the adaptive controller's target, and logged "
        "beside train/kl_ref",
        lo=0,
        lo_open=True,
    )
    whiten_advantages: bool = option(True, "normalise advantages over the valid tokens of the rollout")

    def problems(self) -> list[str]:
        out = []
        if self.adaptive_kl and self.kl_target is None:
            out.append("algorithm.adaptive_kl=true needs algorithm.kl_target (nats per response)")
        if self.adaptive_kl and self.kl_coef == 0:
            out.append("algorithm.adaptive_kl=true with algorithm.kl_coef=0: halving or doubling 0 stays 0")
        return out


@dataclass
class PPOActor:
    model: LMModelConfig = section(LMModelConfig, "the policy (the reference is a frozen copy of it)")
    learning_rate: float = LMOptim.learning_rate(1e-5)
    lr_schedule: str = LMOptim.lr_schedule("constant")
    warmup_steps: int = LMOptim.warmup_steps(0, help="linear warm-up steps (rollouts)")
    min_lr_ratio: float = LMOptim.min_lr_ratio(0.0)
    weight_decay: float = LMOptim.weight_decay()
    max_grad_norm: float = LMOptim.max_grad_norm(
        help="gradient-norm clip of the actor's parameters (0: none)"
    )
    ppo_epochs: int = option(4, "passes over each rollout", lo=1)
    mini_batch_size: int = option(0, "responses per optimizer step (0: the whole rollout)", lo=0)
    micro_batch_size: int = option(0, "responses per forward pass (0: the whole mini-batch)", lo=0)
    clip_low: float = option(0.2, "ε_low of the ratio clip", lo=0, hi=1, hi_open=True)
    clip_high: float | None = option(None, "ε_high of the ratio clip (null: clip_low)", lo=0)
    loss_agg: str = option(
        "token_mean",
        described("masked:LOSS_AGGREGATIONS", "policy-loss aggregation"),
        choices=choices("masked:LOSS_AGGREGATIONS"),
    )

    def problems(self) -> list[str]:
        out = []
        if self.clip_high is not None and self.clip_high < self.clip_low:
            out.append(
                f"worker.actor.clip_high={self.clip_high} is smaller than "
                f"worker.actor.clip_low={self.clip_low}"
            )
        if self.model.lora.rank > 0:
            out.append("ppo_rlhf does not support LoRA yet; set worker.actor.model.lora.rank=0")
        return out


@dataclass
class PPOCritic:
    shared: bool = option(
        False,
        "value head on the actor's own trunk (one model, loss = policy + vf_coef × value) instead of a "
        "separate copy of the starting policy",
    )
    learning_rate: float = LMOptim.learning_rate(1e-5, help="peak learning rate (the actor's schedule)")
    value_clip: float | None = option(
        0.2, "ε_v of the clipped value loss, in reward units (null: plain squared error)", lo=0
    )
    vf_coef: float = option(0.1, "weight of the value loss in a shared trunk's loss", lo=0)
    max_grad_norm: float = LMOptim.max_grad_norm(
        help="gradient-norm clip of the critic's parameters (0: none)"
    )


@dataclass
class PPOReward:
    model: str | None = option(
        None, "the reward model: a reward_model run folder (its latest checkpoint) or checkpoint folder"
    )
    batch_size: int = option(64, "responses scored together", lo=1)


@dataclass
class PPOWorker:
    actor: PPOActor = section(PPOActor)
    critic: PPOCritic = section(PPOCritic)
    rollout: SamplingConfig = section(SamplingConfig)
    ref: RefConfig = section(RefConfig)
    reward: PPOReward = section(PPOReward)


@dataclass
class PPORLHFConfig(SamplingTrainerConfig):
    data: PPOData = section(PPOData)
    algorithm: PPORLHFAlgorithm = section(PPORLHFAlgorithm)
    worker: PPOWorker = section(PPOWorker)
    trainer: LMTrainerConfig = section(LMTrainerConfig)

    def problems(self) -> list[str]:
        return self.rollout_problems()


# Steps are rollouts; a small scratch policy on the synthetic task needs a larger learning rate than the
# 1e-5 meant for pretrained models.
DEFAULTS = {"trainer.total_steps": 100, "trainer.eval_every": 10, "trainer.log_every": 1}

PRESETS = {
    "synthetic": Preset(
        "the synthetic pipeline's PPO stage on CPU (start from `sft preset=preference` and "
        "`reward_model preset=synthetic`; set worker.actor.model.path and worker.reward.model). Responses "
        "are one letter + EOS: the small reward model prefers longer answers whatever their letters, and "
        "longer responses let PPO exploit that instead of learning the rule (docs/algorithms/ppo_rlhf.md)",
        {
            "data.task": "synthetic",
            "data.response_length": 4,
            "data.max_response_length": 2,
            "data.rollout_batch_size": 64,
            "worker.actor.learning_rate": 3e-4,
            "worker.actor.mini_batch_size": 16,
            "worker.critic.learning_rate": 1e-3,
            "algorithm.kl_coef": 0.5,
            "algorithm.kl_target": 4.0,
            "trainer.total_steps": 60,
            "trainer.eval_every": 20,
        },
    ),
}

register(
    Algorithm(
        name="ppo_rlhf",
        summary="PPO from a reward model: actor, critic, frozen reference, per-token KL reward, GAE (RLHF)",
        config=PPORLHFConfig,
        train=Entry("advantage.algos.llm.ppo_rlhf:train"),
        load_policy=Entry("advantage.algos.llm.ppo_rlhf:load_policy"),
        evaluate=Entry("advantage.algos.llm.ppo_rlhf:evaluate"),
        check=Entry("advantage.algos.llm.ppo_rlhf:check"),
        presets=PRESETS,
        defaults=DEFAULTS,
        task_options=preference_task_options,
    )
)
