"""What each task option (``data.<option>``) means, for ``advantage list ALGO data.task=NAME``.

A task's options are its keyword arguments (:func:`advantage.envs.text.task_options`); their
meanings live here, one line each, keyed by option name (the same name means the same thing in every
task). ``tests/test_user_data.py`` checks that every option of every task has one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["OPTION_HELP", "describe_options"]

OPTION_HELP: dict[str, str] = {
    # generated tasks
    "digits": "operands have up to this many digits",
    "mixed_lengths": "each operand's digit count uniform in 1..digits (else exactly digits)",
    "length": "symbols per string",
    "symbols": "alphabet of the strings: letters or digits",
    "numbers": "numbers to combine",
    "max_number": "largest number drawn",
    "answer_format": "plain (the whole completion is the answer) or tagged (<answer>…</answer>)",
    "format_reward": "weight w of the format check: score = (1 - w)·correct + w·format_ok",
    "tests": "hidden tests per problem",
    "partial_credit": "reward the fraction of tests passed (else all or nothing)",
    "timeout": "wall seconds per completion's tests",
    "memory_mb": "address-space limit of the test process, MiB",
    "sandbox": "kernel: namespaces + seccomp, fails closed where unavailable; unsafe: run unconfined",
    # files
    "path": "the data file (or a list of files): .jsonl, .json (a list of objects) or .parquet; splits "
    "from a 'split' column or verl's extra_info.split, else 90/5/5 by a hash of the prompt; with "
    "validation_path or test_path, every row is a training row",
    "validation_path": "validation file(s), as verl's data.val_files (unset: the split of data.path)",
    "test_path": "test file(s) for advantage eval (unset: data.validation_path's rows, else data.path's)",
    "format": "auto (from the columns), plain (prompt, answer), verl (prompt messages, "
    "reward_model.ground_truth), gsm8k (question, answer with '#### N'), math (problem, solution with "
    "\\boxed{}), prompt_completion (TRL: prompt, completion)",
    "prompt_key": "column of the prompt (a string, or a list of chat messages rendered with the "
    "tokenizer's chat template); dotted for nested keys; unset: the format's",
    "answer_key": "column of the gold answer, dotted for nested keys (reward_model.ground_truth); "
    "unset: the format's",
    "target_key": "column of the SFT target (unset: the format's worked solution, else the answer)",
    "timeout_seconds": "math_verify's time limit per comparison",
    # preference tasks
    "chosen_key": "column of the preferred response (a string or TRL's list of messages)",
    "rejected_key": "column of the other response",
    "responses_key": "column of K >= 2 responses ranked best first (instead of chosen/rejected)",
    "k": "responses per prompt, ranked",
    "label_noise": "probability of swapping each adjacent pair of the ranking",
    "letters": "the first N lowercase letters make the prompts and responses",
    "prompt_length": "letters per prompt",
    "response_length": "most letters per response",
}


def describe_options(options: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    """``(data.<option>, default, meaning)`` for a task's options (``options``: name → default)."""
    return [(f"data.{k}", v, OPTION_HELP.get(k, "")) for k, v in options.items()]
