"""What the training loops of the language-model trainers share: the learning rate at a step (warm-up
then decay), where a run starts (step 0, or where a checkpoint stopped: :func:`resume`) and the checkpoint
of its state (:func:`snapshot`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from advantage.algos.llm.data import DataCursor
from advantage.algos.llm.models import adapter_tensors
from advantage.checkpoint import Checkpoint
from advantage.schedules import warmup_decay
from advantage.torch_state import LearnerState

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from advantage.algos.llm.run_config import LRSchedule
    from advantage.context import Snapshot


def learning_rate(a: LRSchedule, step: int, total: int) -> float:
    """:func:`advantage.schedules.warmup_decay` of an optimizer section (``learning_rate``,
    ``warmup_steps``, ``lr_schedule``, ``min_lr_ratio``)."""
    return warmup_decay(a.learning_rate, step, total, a.warmup_steps, a.lr_schedule, a.min_lr_ratio)


def set_learning_rate(opt: torch.optim.Optimizer, a: LRSchedule, step: int, total: int) -> float:
    """:func:`learning_rate` at ``step``, set on every parameter group of ``opt``; returned (to log)."""
    lr = learning_rate(a, step, total)
    for g in opt.param_groups:
        g["lr"] = lr
    return lr


def resume(learner: LearnerState, restored: Checkpoint | None, n: int, seed: int) -> tuple[int, DataCursor]:
    """Where a trainer over a fixed training set of ``n`` items starts: step 0 at the start of the first
    epoch, or where ``restored`` stopped, with ``learner`` (optimizer moments, torch RNG, any modules)
    loaded from it. The algorithm state holds the learner's JSON (``optim``) and the cursor's ``epoch``
    and ``pos`` (:func:`snapshot`)."""
    if restored is None:
        return 0, DataCursor(n, seed)
    s = restored.state["algo"]
    learner.load(restored.tensors, s)
    return restored.step, DataCursor(n, seed, s["epoch"], s["pos"])


def snapshot(
    policy: Any,
    learner: LearnerState,
    part: Any,
    files: Callable[[], dict[str, bytes]],
    lora: PreTrainedModel | None = None,
) -> Snapshot:
    """A checkpoint of a language-model trainer: the learner's tensors and JSON; the state of ``part``, the
    trainer's :class:`DataCursor` (as :func:`resume` reads it back) or its rollout, whose ``tensors()``
    join the learner's; with ``lora``, the adapter tensors of that model (:func:`policy_model` reads them
    back); and the model folder's ``files()``."""
    from advantage.context import Snapshot

    tensors, meta = learner.save()
    tensors.update(getattr(part, "tensors", dict)())
    if lora is not None:
        tensors.update(adapter_tensors(lora))
    return Snapshot(policy, tensors, {**meta, **part.state()}, files=files)
