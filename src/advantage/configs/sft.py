"""SFT's config, presets and registry record (the training loop is :mod:`advantage.algos.llm.sft`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from advantage.config import Preset, option, section
from advantage.configs.llm import DataConfig, LMBatchAlgorithm, LMModelConfig, LMTrainerConfig, task_rows
from advantage.registry import Algorithm, Entry, register


@dataclass
class SFTAlgorithm(LMBatchAlgorithm):
    packing: bool = option(False, "pack several sequences into each row (no padding compute)")
    pack_length: int = option(256, "tokens per packed row", lo=8)


@dataclass
class SFTData(DataConfig):
    targets: str = option(
        "auto",
        "what to imitate: target (a text task's reference answer), chosen (a preference task's best "
        "response), all (every ranked response of a preference task); auto: all for data.task=synthetic, "
        "else target",
        choices=("auto", "target", "chosen", "all"),
    )

    def problems(self) -> list[str]:
        from advantage.envs.text.preference import PREFERENCE_TASKS

        if self.targets in ("chosen", "all") and self.task not in PREFERENCE_TASKS:
            return [
                f"data.targets={self.targets} needs a preference task ({', '.join(PREFERENCE_TASKS)}), "
                f"got data.task={self.task!r}"
            ]
        if self.targets == "target" and self.task in PREFERENCE_ONLY:
            return [
                f"data.task={self.task!r} is a preference task without reference answers: set "
                "data.targets=all (every ranked response) or chosen (the best one)"
            ]
        return []


@dataclass
class SFTConfig:
    data: SFTData = section(SFTData)
    algorithm: SFTAlgorithm = section(SFTAlgorithm)
    model: LMModelConfig = section(LMModelConfig)
    trainer: LMTrainerConfig = section(LMTrainerConfig)


# Preference tasks that are not also text tasks ("dataset" is both: a text dataset unless data.targets asks
# for a preference file).
PREFERENCE_ONLY = ("synthetic",)


def task_options(name: str) -> list[tuple[str, Any, str]]:
    """A text task's options; ``synthetic`` (and ``dataset`` with ``data.targets=chosen|all``) are
    preference tasks."""
    if name in PREFERENCE_ONLY:
        return task_rows(name, text=False, preference=True)
    return task_rows(name)


# The defaults train a scratch model on 3-digit addition in about 2 minutes on 2 CPU cores, to a held-out
# greedy accuracy part-way up the curve (0.625 for seed 0): a starting point that RL can improve. Where the
# jump in accuracy falls is chaotic: other seeds end anywhere from 0.01 to 0.7 (docs/algorithms/grpo.md).
DEFAULTS = {
    "data.task": "addition",
    "model.hidden_size": 256,
    "model.heads": 8,
    "algorithm.learning_rate": 2e-3,
    "trainer.total_steps": 600,
}

PRESETS = {
    "addition": Preset(
        "3-digit addition from scratch on CPU: a starting point for RL (greedy accuracy part-way up)",
        dict(DEFAULTS),
    ),
    "addition_long": Preset(
        "the same, trained 1500 steps: a model that is mostly right (about 0.9)",
        {**DEFAULTS, "trainer.total_steps": 1500},
    ),
    "preference": Preset(
        "the start of the RLHF pipeline: every ranked response of the synthetic preference task, a small "
        "scratch model (about 30 s on CPU; a policy with varied answers of middling hidden score)",
        {
            "data.task": "synthetic",
            "data.targets": "all",
            "data.response_length": 4,
            "data.train_size": 4000,
            "data.max_response_length": 8,
            "model.hidden_size": 64,
            "model.heads": 4,
            "algorithm.learning_rate": 2e-3,
            "algorithm.warmup_steps": 20,
            "trainer.total_steps": 300,
            "trainer.eval_every": 100,
        },
    ),
}

register(
    Algorithm(
        name="sft",
        summary="supervised fine-tuning of a causal LM on response tokens (the start of RLHF / RLVR)",
        config=SFTConfig,
        train=Entry("advantage.algos.llm.sft:train"),
        load_policy=Entry("advantage.algos.llm.sft:load_policy"),
        evaluate=Entry("advantage.algos.llm.sft:evaluate"),
        check=Entry("advantage.algos.llm.sft:check"),
        presets=PRESETS,
        defaults=DEFAULTS,
        task_options=task_options,
    )
)
