"""Text tasks with rule-based verifiable rewards (RLVR) for SFT, GRPO and PPO on language models.

Generated tasks (``addition``, ``multiplication``, ``countdown``, ``reverse``, ``sort``), tasks read
from disk (``dataset``: exact match; ``math``: ``\\boxed{}`` answers checked with math_verify;
:mod:`advantage.envs.text.file_tasks`, reading :mod:`advantage.envs.text.datasets`) and ``code`` (a Python
function run on hidden tests in a sandbox: the package :mod:`advantage.envs.text.code`), all built with
:func:`make_task` and verified with the rules of :mod:`advantage.envs.text.core`. Preference data for
reward models (pairwise and K-wise comparisons, a synthetic task with a hidden scoring rule) is in
:mod:`advantage.envs.text.preference`.
"""

from advantage.envs.text.code import CodeTask, extract_code
from advantage.envs.text.core import SPLITS, Example, Reward, Task, extract_tagged, split_of
from advantage.envs.text.countdown import CountdownTask, evaluate_expression
from advantage.envs.text.datasets import extract_boxed, load_examples
from advantage.envs.text.file_tasks import DatasetTask, MathTask, math_equal
from advantage.envs.text.preference import (
    PREFERENCE_TASKS,
    PreferenceExample,
    hidden_score,
    load_preferences,
    make_preference_task,
)
from advantage.envs.text.registry import TASKS, make_task, task_options
from advantage.envs.text.tasks import ArithmeticTask, SequenceTask

__all__ = [
    "PREFERENCE_TASKS",
    "SPLITS",
    "TASKS",
    "ArithmeticTask",
    "CodeTask",
    "CountdownTask",
    "DatasetTask",
    "Example",
    "MathTask",
    "PreferenceExample",
    "Reward",
    "SequenceTask",
    "Task",
    "evaluate_expression",
    "extract_boxed",
    "extract_code",
    "extract_tagged",
    "hidden_score",
    "load_examples",
    "load_preferences",
    "make_preference_task",
    "make_task",
    "math_equal",
    "split_of",
    "task_options",
]
