"""The reward model's config, presets and registry record (the training loop is
:mod:`advantage.algos.llm.reward_model`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from advantage.config import Preset, option, section
from advantage.configs.llm import (
    PREFERENCE_TASK_NAMES,
    DataConfig,
    LMBatchAlgorithm,
    LMModelConfig,
    LMOptim,
    LMTrainerConfig,
    preference_task_options,
)
from advantage.registry import Algorithm, Entry, register


@dataclass
class RMDataConfig(DataConfig):
    """The ``data`` section of comparisons: keys other than those below are options of the preference task
    (``data.k=4``, ``data.label_noise=0.1``, ``data.path=prefs.jsonl``)."""

    task: str = option(
        "synthetic",
        "preference task: synthetic (a hidden scoring rule) or dataset (read from data.path)",
        choices=PREFERENCE_TASK_NAMES,
    )
    train_size: int | None = option(
        None,
        "training examples, a prompt with its ranked responses (unset: every train row of a data file; "
        "8000 generated)",
        lo=1,
    )
    max_response_length: int = option(32, "longest response in tokens with its EOS (longer: an error)", lo=1)

    GENERATED_SIZES: ClassVar[tuple[int, int, int]] = (8000, 200, 500)


@dataclass
class RMAlgorithm(LMBatchAlgorithm):
    warmup_steps: int = LMOptim.warmup_steps(10)
    batch_size: int = option(32, "comparisons per optimizer step: pairs (pairwise) or rankings (kwise)", lo=1)
    micro_batch_size: int = option(0, "comparisons per forward pass (0: the whole batch)", lo=0)
    loss: str = option(
        "pairwise",
        "pairwise: Bradley–Terry on pairs; kwise: InstructGPT, one prompt's C(K,2) pairs averaged",
        choices=("pairwise", "kwise"),
    )
    center_rewards_coef: float = option(0.0, "weight of the mean-reward² term per comparison", lo=0)


@dataclass
class RMConfig:
    data: RMDataConfig = section(RMDataConfig)
    algorithm: RMAlgorithm = section(RMAlgorithm)
    model: LMModelConfig = section(LMModelConfig)
    trainer: LMTrainerConfig = section(LMTrainerConfig)


PRESETS = {
    "synthetic": Preset(
        "a small reward model on the synthetic task, CPU (about 15 s; held-out accuracy 0.91-0.94)",
        {
            "data.task": "synthetic",
            "data.response_length": 4,
            "model.hidden_size": 64,
            "trainer.total_steps": 600,
            "trainer.eval_every": 200,
        },
    ),
    "instructgpt": Preset(
        "InstructGPT's K-wise ranking on the synthetic task: 4 responses per prompt, their 6 pairs averaged",
        {
            "data.task": "synthetic",
            "data.k": 4,
            "data.response_length": 4,
            "algorithm.loss": "kwise",
            "algorithm.batch_size": 16,
            "model.hidden_size": 64,
            "trainer.total_steps": 300,
            "trainer.eval_every": 100,
        },
    ),
}

register(
    Algorithm(
        name="reward_model",
        summary="a reward model (LM backbone + scalar head) from pairwise or K-wise comparisons",
        config=RMConfig,
        train=Entry("advantage.algos.llm.reward_model:train"),
        load_policy=Entry("advantage.algos.llm.reward_model:load_policy"),
        evaluate=Entry("advantage.algos.llm.reward_model:evaluate"),
        check=Entry("advantage.algos.llm.reward_model:check"),
        presets=PRESETS,
        task_options=preference_task_options,
    )
)
