"""DPO's config and registry record (the training loop is :mod:`advantage.algos.llm.dpo`)."""

from __future__ import annotations

from dataclasses import dataclass

from advantage.config import option, section
from advantage.configs.llm import DataConfig, LMModelConfig, LMOptim, LMTrainerConfig, preference_task_options
from advantage.math.registry import choices, described
from advantage.registry import Algorithm, Entry, register


@dataclass
class DPOData(DataConfig):
    task: str = option("synthetic", "preference task: synthetic (built in), or dataset with data.path")


@dataclass
class DPOAlgorithm:
    beta: float = option(0.1, "β: strength of the implicit KL to the reference", lo=0, lo_open=True)
    loss_type: str = option(
        "sigmoid",
        described("preference:DPO_LOSSES", "preference loss"),
        choices=choices("preference:DPO_LOSSES"),
    )
    label_smoothing: float = option(0.0, "sigmoid: assumed label-flip probability (cDPO)", lo=0, hi=0.5)
    learning_rate: float = LMOptim.learning_rate(5e-4)
    lr_schedule: str = LMOptim.lr_schedule("constant")
    warmup_steps: int = LMOptim.warmup_steps(0)
    min_lr_ratio: float = LMOptim.min_lr_ratio(0.0)
    batch_size: int = option(32, "preference pairs per optimizer step", lo=1)
    micro_batch_size: int = option(0, "pairs per forward pass (0: the whole batch)", lo=0)
    weight_decay: float = LMOptim.weight_decay()
    max_grad_norm: float = LMOptim.max_grad_norm()
    precompute_ref: bool = option(True, "reference log-probs once for the whole training set")


@dataclass
class DPOConfig:
    data: DPOData = section(DPOData)
    algorithm: DPOAlgorithm = section(DPOAlgorithm)
    model: LMModelConfig = section(LMModelConfig)
    trainer: LMTrainerConfig = section(LMTrainerConfig)


register(
    Algorithm(
        name="dpo",
        summary="direct preference optimization (sigmoid, IPO, hinge) against a frozen reference "
        "(Rafailov et al. 2023)",
        config=DPOConfig,
        train=Entry("advantage.algos.llm.dpo:train"),
        load_policy=Entry("advantage.algos.llm.dpo:load_policy"),
        evaluate=Entry("advantage.algos.llm.dpo:evaluate"),
        check=Entry("advantage.algos.llm.dpo:check"),
        defaults={"trainer.total_steps": 200, "trainer.eval_every": 50},
        task_options=preference_task_options,
    )
)
