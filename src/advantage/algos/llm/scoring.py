"""The rewards of sampled completions, for GRPO's rollout and its Ray workers: the run's reward model when it
has one (correctness still from the task's verifier, if any), else the task's verifier (in parallel
sandboxes for a task that runs code)."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor

from advantage.errors import NonFiniteError

if TYPE_CHECKING:
    from advantage.algos.llm.policy import LMPolicy
    from advantage.algos.llm.run_config import SampledRunConfig


def score(policy: LMPolicy, examples: list[Any], texts: list[str], G: int) -> tuple[Tensor, Tensor]:
    """Verifier rewards ``[B]`` and correctness for completions grouped G per example. A reward that is
    not a finite number stops the run, naming the prompt and completion. A task that verifies by running
    code (``code``: one sandboxed process per completion) scores the batch in parallel, one sandbox per
    CPU core, through its ``verify_many``."""
    rewards, correct = [], []
    per_text = [examples[i // G] for i in range(len(texts))]
    rm = getattr(policy, "reward_model", None)
    if rm is not None:  # rewards from the reward model; correctness from the verifier, if the task has one
        scores = rm.score(
            [e.prompt for e in per_text],
            texts,
            batch_size=cast("SampledRunConfig", policy.cfg).worker.reward.batch_size,
        )
        for text, ex, value in zip(texts, per_text, scores.tolist(), strict=True):
            if not math.isfinite(value):
                raise NonFiniteError(
                    f"the reward model's score of completion {text!r} for prompt {ex.prompt!r} is {value}"
                )
        verify = getattr(policy.task, "verify", None)
        ok = [bool(verify(x, e).correct) if verify else False for x, e in zip(texts, per_text, strict=True)]
        return scores.float().cpu(), torch.tensor(ok)
    if hasattr(policy.task, "verify_many"):
        results = policy.task.verify_many(texts, per_text, max_workers=os.cpu_count() or 1)
    else:
        results = [policy.task.verify(text, ex) for text, ex in zip(texts, per_text, strict=True)]
    for text, ex, r in zip(texts, per_text, results, strict=True):
        value = r.score
        if value is None or not isinstance(value, int | float) or not math.isfinite(value):
            raise NonFiniteError(
                f"the reward of completion {text!r} for prompt {ex.prompt!r} is {value!r}; rewards must be "
                "finite numbers"
            )
        rewards.append(float(value))
        correct.append(bool(r.correct))
    return torch.tensor(rewards), torch.tensor(correct)
