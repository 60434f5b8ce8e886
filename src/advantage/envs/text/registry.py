"""The text-task registry: ``TASKS[name](**options) -> Task`` and :func:`make_task`, which checks the
name and the option names before building (each task's keyword arguments are its options)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from advantage.envs.text.code import CodeTask
from advantage.envs.text.core import Task, build_task, keyword_options
from advantage.envs.text.countdown import CountdownTask
from advantage.envs.text.file_tasks import DatasetTask, MathTask
from advantage.envs.text.tasks import addition, multiplication, reverse, sort

__all__ = ["TASKS", "make_task", "task_options"]

TASKS: dict[str, Callable[..., Task]] = {
    "addition": addition,
    "multiplication": multiplication,
    "countdown": CountdownTask,
    "reverse": reverse,
    "sort": sort,
    "dataset": DatasetTask,
    "math": MathTask,
    "code": CodeTask,
}


def task_options(name: str) -> dict[str, Any]:
    """The options of task ``name`` with their defaults (from its keyword arguments)."""
    return keyword_options(TASKS[name])


def make_task(name: str, **options: Any) -> Task:
    """Build the task ``name`` (``data.task``) with ``options`` (the other ``data.*`` keys).

    Raises ConfigError for an unknown name (with the closest name and the list) or unknown options (with
    the allowed ones); the task itself checks the option values."""
    return build_task(TASKS, name, options)
