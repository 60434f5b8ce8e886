"""The data of a language-model run: the task its prompts come from, the sizes of its splits (measured from
a file when the config leaves them unset), the order of the training set epoch by epoch (:class:`DataCursor`,
all a checkpoint needs to continue with the same batches) and a policy's cached examples
(:class:`TaskExamples`).

The ``data`` config section is :class:`advantage.configs.llm.DataConfig`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from advantage.configs.grpo import PREFERENCE_TASKS  # tasks scored by a reward model (one definition)
from advantage.configs.llm import DataConfig
from advantage.errors import ConfigError

if TYPE_CHECKING:
    from advantage.config import LMRunConfig
    from advantage.envs.text.core import Task

SPLITS = ("train", "validation", "test")


# ----------------------------------------------------------------------------------------------------
# The task


def make_task(data: DataConfig) -> Task:
    """The task named by ``data.task`` with its options (:func:`advantage.envs.text.make_task`)."""
    from advantage.envs.text import make_task as _make

    return _make(data.task, **data.kwargs)


def preference_task(data: DataConfig) -> Any:
    """The preference task named by ``data.task`` with its options
    (:func:`advantage.envs.text.preference.make_preference_task`)."""
    from advantage.envs.text.preference import make_preference_task

    return make_preference_task(data.task, **data.kwargs)


def scored_task(d: DataConfig) -> Any:
    """A text task with a verifier (:func:`make_task`), or ``synthetic``: the
    prompts of the synthetic preference task, scored by ``worker.reward.model``."""
    if d.task in PREFERENCE_TASKS:
        return preference_task(d)
    return make_task(d)


# ----------------------------------------------------------------------------------------------------
# Split sizes


def split_size(d: DataConfig, split: str, task: Task) -> int:
    """``data.<split>_size``, or when unset: every row of the split for a task read from a file (it has
    ``split_sizes``), else the config's ``GENERATED_SIZES``."""
    size = getattr(d, f"{split}_size")
    if size is not None:
        return int(size)
    sizes = getattr(task, "split_sizes", None)
    if sizes is not None:
        return int(sizes[split])
    return type(d).GENERATED_SIZES[SPLITS.index(split)] if hasattr(type(d), "GENERATED_SIZES") else 0


# An evaluation split of a file with fewer rows than this is reported: its accuracy moves in steps of
# more than 5 points (2 test prompts of a 40-row GSM8K file: 0, 50 or 100 %).
SMALL_SPLIT = 20


def resolve_sizes(cfg: LMRunConfig, task: Any) -> None:  # a Task; a file task has split_sizes and path
    """Fill the unset ``data.*_size`` from the task (:func:`split_size`), so the saved config says what ran.
    Of a file: an empty train split is an error naming the file; an empty or small validation or test
    split is one warning line (``cfg._warnings``, printed by ``train``, see :func:`_evaluation_warning`):
    training goes on, without evaluations when there is no evaluation row at all (verl's own train file:
    every row ``extra_info.split == "train"``), and ``advantage eval`` of an empty split is the error. A
    validation split smaller than ``trainer.eval_episodes`` lowers it to the split's size."""
    d = cfg.data
    sizes = getattr(task, "split_sizes", None)
    unset = [split for split in SPLITS if getattr(d, f"{split}_size") is None]
    for split in unset:
        n = split_size(d, split, task)
        if n == 0 and split == "train":
            where = getattr(task, "where", f"data.path {str(task.path)!r}")
            origin = getattr(task, "split_origin", "the 'split' column, else 90/5/5 by a hash of the prompt")
            total = sum((sizes or {}).values())
            raise ConfigError(
                f"{where}: the train split is empty (0 of {total} rows; rows go to a split by {origin}): add "
                "a 'split' column or more rows"
            )
        if n == 0:
            continue  # left unset: the saved config reads the data again, as this run did
        setattr(d, f"{split}_size", n)
        if split == "validation" and cfg.trainer.eval_episodes > n:
            cfg.trainer.eval_episodes = n
    if sizes is not None:
        line = _evaluation_warning(task, [s for s in unset if s != "train"])
        if line:
            cfg.__dict__.setdefault("_warnings", []).append(line)


def _evaluation_warning(task: Any, splits: list[str]) -> str:
    """One line on the evaluation splits of a file task that are empty or small (under
    :data:`SMALL_SPLIT` rows) among ``splits`` (those the config leaves to the data), or ``""``: which
    one stands in for the other (``task.stand_ins``), what an empty one means for the run, how coarse a
    small one's accuracy is, and the keys that give more rows."""
    sizes, stand_ins = task.split_sizes, getattr(task, "stand_ins", {})
    parts, seen = [], set()
    for split in splits:
        n, other = sizes[split], stand_ins.get(split)
        if other is not None:
            parts.append(f"no {split} rows: the {other} rows stand in (as verl validates on its test files)")
        elif n == 0:
            use = "no evaluation during training" if split == "validation" else "advantage eval has no test"
            parts.append(f"no {split} rows: {use}")
        if 0 < n < SMALL_SPLIT and (other or split) not in seen:
            seen.add(other or split)
            parts.append(f"{other or split} has {n} rows, so its accuracy moves in steps of {100 / n:.3g} %")
    if not parts:
        return ""
    where = getattr(task, "where", f"data.path {str(task.path)!r}")
    return (
        f"warning: {where}: " + "; ".join(parts) + " (give data.validation_path or data.test_path files, as "
        "verl's data.val_files, a 'split' column or more rows)"
    )


def preference_responses(examples: list[Any]) -> list[tuple[Any, str]]:
    """Every ranked response of preference ``examples``, for
    :func:`~advantage.algos.llm.checks.check_lengths`."""
    return [(e, r) for e in examples for r in e.responses]


# ----------------------------------------------------------------------------------------------------
# The order of the training set


def data_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The training set's order in ``epoch``: a permutation seeded by (seed, epoch), so a resumed run
    continues with exactly the batches of an uninterrupted one."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


class DataCursor:
    """Where a trainer is in its training set: the epoch and the offset into that epoch's order
    (:func:`data_order`). :meth:`next` hands out indices and crosses into the next epoch when one ends;
    ``epoch`` and ``pos`` are all a checkpoint needs to continue with exactly the same batches."""

    def __init__(self, n: int, seed: int, epoch: int = 0, pos: int = 0):
        self.n, self.seed, self.epoch, self.pos = n, seed, epoch, pos
        self.order = data_order(n, seed, epoch)

    def next(self, k: int) -> list[int]:
        idx: list[int] = []
        while len(idx) < k:
            take = self.order[self.pos : self.pos + k - len(idx)].tolist()
            idx += take
            self.pos += len(take)
            if self.pos >= self.n:
                self.epoch, self.pos = self.epoch + 1, 0
                self.order = data_order(self.n, self.seed, self.epoch)
        return idx

    @property
    def progress(self) -> float:
        """Epochs done, fractional (for the ``train/epoch`` metric)."""
        return self.epoch + self.pos / self.n

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos}


class TaskExamples:
    """A policy's examples of its task, ``self.task`` with ``self.cfg.data`` (its ``_examples`` dict, the
    cache, is set by its ``__init__``)."""

    task: Any
    cfg: LMRunConfig
    _examples: dict[tuple[str, int], list[Any]]

    def examples(self, split: str, n: int | None = None) -> list[Any]:
        """The first ``n`` examples of ``split`` (cached; the same for every training seed)."""
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        d = self.cfg.data
        size = split_size(d, split, self.task)
        if (split, size) not in self._examples:
            self._examples[(split, size)] = self.task.examples(split, size, d.seed)
        return self._examples[(split, size)][: n or size]
