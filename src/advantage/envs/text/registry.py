"""The text-task registry: ``TASKS[name](**options) -> Task`` and :func:`make_task`, which checks the
name and the option names before building (each factory's keyword arguments are its options)."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from typing import Any

from advantage.envs.text.code import code
from advantage.envs.text.core import Task
from advantage.envs.text.countdown import countdown
from advantage.envs.text.datasets import dataset_task, math_task
from advantage.envs.text.tasks import addition, multiplication, reverse, sort
from advantage.errors import ConfigError

__all__ = ["TASKS", "make_task", "task_options"]

TASKS: dict[str, Callable[..., Task]] = {
    "addition": addition,
    "multiplication": multiplication,
    "countdown": countdown,
    "reverse": reverse,
    "sort": sort,
    "dataset": dataset_task,
    "math": math_task,
    "code": code,
}


def task_options(name: str) -> dict[str, Any]:
    """The options of task ``name`` with their defaults (from the factory's keyword arguments)."""
    params = inspect.signature(TASKS[name]).parameters.values()
    return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def make_task(name: str, **options: Any) -> Task:
    """Build the task ``name`` (``data.task``) with ``options`` (the other ``data.*`` keys).

    Raises ConfigError for an unknown name (with the closest name and the list) or unknown options (with
    the allowed ones); the task itself checks the option values."""
    if name not in TASKS:
        close = difflib.get_close_matches(str(name), list(TASKS), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"data.task must be one of {', '.join(TASKS)}, got {name!r}{hint}")
    allowed = task_options(name)
    problems = []
    for key in options:
        if key not in allowed:
            close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
            hint = f"; did you mean data.{close[0]}?" if close else ""
            problems.append(
                f"unknown option data.{key} for task {name!r}{hint} (allowed: {', '.join(allowed)})"
            )
    if problems:
        raise ConfigError(problems)
    return TASKS[name](**options)
