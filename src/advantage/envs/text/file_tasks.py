r"""Tasks read from files (:mod:`advantage.envs.text.datasets`): the exact-match ``dataset`` task and the
``math`` task verified with Math-Verify (Hugging Face's ``math_verify``); ``examples(split, n, seed)``
shuffles that split's rows with the seed and takes the first ``n``.

Verification:

- ``dataset``: exact match after stripping, with the answer-tag rules of
  :mod:`advantage.envs.text.core` (``answer_format`` plain or tagged).
- ``math``: the completion must hold exactly one ``\boxed{…}`` (balanced braces): none → score 0
  ``"no \boxed answer"``, several → score 0 ``"N boxed answers"`` (``format_ok`` False in both). The boxed
  content is compared with the gold answer by ``math_verify.verify(parse(gold), parse(pred))``, each
  wrapped in ``\boxed{}`` so plain text like ``x+1`` is parsed too; ``\frac{1}{2}`` matches gold ``0.5``.
  An exception or timeout inside math_verify counts as wrong. Its timeouts use ``signal.alarm``, which
  only works in the main thread, so outside it they are switched off (``parsing_timeout=None``).
  The extracted answer (for majority voting) is the raw boxed text, so equal values written differently
  vote separately.
"""

from __future__ import annotations

import functools
import random
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from advantage.envs.text.core import (
    Example,
    Reward,
    alphabet_of,
    check_format_reward,
    check_n,
    check_split,
    format_options,
    make_reward,
    render_target,
    verify_exact,
)
from advantage.envs.text.datasets import BOXED, data_files, extract_boxed, load_examples, split_rows
from advantage.errors import ConfigError

__all__ = ["DatasetTask", "MathTask", "math_equal"]


class _DiskTask:
    """Shared state of the tasks read from files (composition helper, not a public base class).

    ``examples`` are ``path``'s rows; ``held_out`` maps ``validation`` / ``test`` to the rows of their own
    files when the user gave any (module docstring: then ``path``'s rows are all training rows)."""

    def __init__(
        self,
        name: str,
        path: Any,
        examples: list[Example],
        held_out: Mapping[str, list[Example]] | None = None,
    ):
        files = data_files(path)
        self.name, self.path = name, Path(files[0])
        more = f" (and {len(files) - 1} more files)" if len(files) > 1 else ""
        self.where = f"data.path {files[0]!r}{more}"  # how messages name the data
        if held_out:
            self._splits = {"train": list(examples), **{k: list(v) for k, v in held_out.items()}}
            self._splits.setdefault("validation", [])
            self._splits.setdefault("test", [])
            self.split_origin = "their own files (data.validation_path, data.test_path)"
        else:
            self._splits = split_rows(examples)
            self.split_origin = "the 'split' column or extra_info.split, else 90/5/5 by a hash of the prompt"
        # Validation and test stand in for each other when only one has rows, as verl validates on its
        # test files; ``stand_ins`` says which (reported when a run starts).
        self.stand_ins: dict[str, str] = {}
        for split, other in (("validation", "test"), ("test", "validation")):
            if not self._splits[split] and self._splits[other] and other not in self.stand_ins:
                self._splits[split], self.stand_ins[split] = self._splits[other], other
        self.split_sizes = {s: len(rows) for s, rows in self._splits.items()}

    def examples(self, split: str, n: int, seed: int) -> list[Example]:
        """``n`` rows of ``split``: the split shuffled with ``seed``, first ``n`` taken."""
        check_split(split)
        check_n(n)
        rows = list(self._splits[split])
        if n > len(rows):
            raise ConfigError(
                f"dataset {str(self.path)!r} has {len(rows)} {split} examples, asked for n={n} "
                f"(data.{split}_size; left unset, it is every row of the split)"
            )
        random.Random(f"{self.name}:{self.path.name}:{split}:{seed}").shuffle(rows)
        return rows[:n]


def _load(
    path: Any, prompt_key: str | None, answer_key: str | None, target_key: str | None, format: str
) -> list[Example]:
    if path is None:
        raise ConfigError("data.path is required for a dataset task (a .jsonl, .json or .parquet file)")
    return _load_files(data_files(path), prompt_key, answer_key, target_key, format)


def _load_files(
    files: list[str], prompt_key: str | None, answer_key: str | None, target_key: str | None, format: str
) -> list[Example]:
    """Every row of ``files``, in order (each file's layout found from its own columns)."""
    return [
        ex
        for f in files
        for ex in load_examples(
            f, prompt_key=prompt_key, answer_key=answer_key, target_key=target_key, format=format
        )
    ]


def _held_out(
    validation_path: Any,
    test_path: Any,
    prompt_key: str | None,
    answer_key: str | None,
    target_key: str | None,
    format: str,
) -> dict[str, list[Example]]:
    """The rows of ``data.validation_path`` and ``data.test_path`` by split (only those given)."""
    out = {}
    for split, value in (("validation", validation_path), ("test", test_path)):
        files = data_files(value, f"data.{split}_path")
        if files:
            out[split] = _load_files(files, prompt_key, answer_key, target_key, format)
    return out


class DatasetTask(_DiskTask):
    """Exact-match answers from a ``.jsonl``/``.json``/``.parquet`` file (``data.path``); see the module
    docstring."""

    def __init__(
        self,
        *,
        path: str | list[str] | None = None,
        validation_path: str | list[str] | None = None,
        test_path: str | list[str] | None = None,
        format: str = "auto",
        prompt_key: str | None = None,
        answer_key: str | None = None,
        target_key: str | None = None,
        answer_format: str = "plain",
        format_reward: float = 0.0,
    ):
        self.format_reward, self.special_tokens = format_options([], answer_format, format_reward)
        rows = _load(path, prompt_key, answer_key, target_key, format)
        held = _held_out(validation_path, test_path, prompt_key, answer_key, target_key, format)

        def as_targets(exs: list[Example]) -> list[Example]:  # the SFT target follows the answer format
            if target_key is not None:
                return exs
            return [
                replace(ex, answer=ex.answer.strip(), target=render_target(ex.answer.strip(), answer_format))
                for ex in exs
            ]

        rows, held = as_targets(rows), {k: as_targets(v) for k, v in held.items()}
        super().__init__("dataset", path, rows, held)
        self.answer_format = answer_format
        every = [ex for part in (rows, *held.values()) for ex in part]
        self.alphabet = alphabet_of([*(ex.prompt + ex.target for ex in every), *self.special_tokens])

    def verify(self, completion: str, example: Example) -> Reward:
        """Exact match after stripping; no answer grammar (see :func:`.core.verify_exact`)."""
        return verify_exact(
            completion,
            example.answer.strip(),
            answer_format=self.answer_format,
            format_reward=self.format_reward,
        )


@functools.lru_cache(maxsize=65536)
def _parse_boxed(expr: str, timeout: int | None) -> Any:
    """``math_verify.parse`` of ``\boxed{expr}`` (cached: the gold answers repeat for every sample)."""
    from math_verify import parse

    return parse(f"{BOXED}{{{expr}}}", parsing_timeout=timeout)  # type: ignore[arg-type]


def math_equal(gold: str, pred: str, timeout_seconds: int = 5) -> tuple[bool, str]:
    """``(equal, reason)`` by math_verify; exceptions and timeouts are ``(False, reason)``. Timeouts are
    off outside the main thread (math_verify's ``signal.alarm`` raises there)."""
    from math_verify import verify
    from math_verify.errors import TimeoutException

    timeout = timeout_seconds if threading.current_thread() is threading.main_thread() else None
    try:
        ok = bool(verify(_parse_boxed(gold, timeout), _parse_boxed(pred, timeout), timeout_seconds=timeout))
    except TimeoutException:  # a BaseException, so listed on its own
        return False, "math_verify timed out"
    except Exception as e:
        return False, f"math_verify failed ({type(e).__name__})"
    return ok, "correct" if ok else f"wrong answer {pred[:40]!r} (expected {gold[:40]})"


class MathTask(_DiskTask):
    r"""Math problems from a file (``data.path``), free-form answers in ``\boxed{}`` checked with
    math_verify; see the module docstring."""

    def __init__(
        self,
        *,
        path: str | list[str] | None = None,
        validation_path: str | list[str] | None = None,
        test_path: str | list[str] | None = None,
        format: str = "auto",
        prompt_key: str | None = None,
        answer_key: str | None = None,
        target_key: str | None = None,
        format_reward: float = 0.0,
        timeout_seconds: int = 5,
    ):
        problems: list[str] = []
        check_format_reward(problems, format_reward)
        if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, int) or timeout_seconds < 1:
            problems.append(f"data.timeout_seconds must be an int >= 1, got {timeout_seconds!r}")
        if problems:
            raise ConfigError(problems)
        try:
            import math_verify  # noqa: F401  (fail at construction, not at the first reward)
        except ImportError as e:
            raise ImportError("the math task needs math-verify: pip install 'advantage[llm]'") from e
        rows = _load(path, prompt_key, answer_key, target_key, format)
        held = _held_out(validation_path, test_path, prompt_key, answer_key, target_key, format)

        def as_targets(exs: list[Example]) -> list[Example]:  # a worked solution (GSM8K, MATH) stays
            if target_key is not None:  # the target, else \boxed{answer}
                return exs
            return [
                ex if ex.target != ex.answer else replace(ex, target=f"{BOXED}{{{ex.answer}}}") for ex in exs
            ]

        rows, held = as_targets(rows), {k: as_targets(v) for k, v in held.items()}
        super().__init__("math", path, rows, held)
        self.format_reward, self.timeout_seconds = float(format_reward), timeout_seconds
        self.special_tokens: tuple[str, ...] = ()
        every = [ex for part in (rows, *held.values()) for ex in part]
        self.alphabet = alphabet_of([*(ex.prompt + ex.target for ex in every), BOXED + "{}"])

    def verify(self, completion: str, example: Example) -> Reward:
        r"""Exactly one ``\boxed{}``, its content equal to the gold answer by math_verify."""
        w = self.format_reward
        text = completion.strip()
        if not text:
            return make_reward(False, False, None, "empty completion", w)
        got, why = extract_boxed(text)
        if got is None:
            return make_reward(False, False, None, why, w)
        if not got:
            return make_reward(False, True, got, "empty \\boxed{}", w)
        gold = example.answer.strip()
        if got == gold:  # math_verify agrees; skipping it saves sympy work on the common case
            return make_reward(True, True, got, "correct", w)
        ok, reason = math_equal(gold, got, self.timeout_seconds)
        return make_reward(ok, True, got, reason, w)
