r"""Generated text tasks with exact verifiers: ``addition``, ``multiplication``, ``reverse``, ``sort``
(``countdown`` lives in :mod:`advantage.envs.text.countdown`).

Each is small enough for a character-level model trained from scratch, and its answer is checked by a
program (RLVR) under the rules of :mod:`advantage.envs.text.core` (stripping, the ``plain`` and ``tagged``
answer formats, ``format_reward``). Integers (addition, multiplication) must also be canonical: ``"0168"``
is rejected ("leading zeros") with ``format_ok`` True — a bare number, just not the canonical one.

Problems, prompts and targets:

- ``addition`` / ``multiplication`` (``digits``): each operand uniform in [0, 10^digits − 1], i.e. *up to*
  ``digits`` digits (90 % have exactly ``digits`` for digits ≥ 2); with ``mixed_lengths=true`` (addition)
  each operand's digit count is uniform in 1..digits instead. Prompt ``"123+45="`` / ``"12*34="``,
  target ``"168"``. Canonical form for the split: the unordered operand pair, so ``a+b`` and ``b+a``
  (the same fact) never land in different splits.
- ``reverse`` / ``sort`` (``length``, ``symbols`` = ``letters`` a–z or ``digits`` 0–9): a string of exactly
  ``length`` symbols, drawn uniformly. Prompt ``"reverse abcde="`` → ``"edcba"``, ``"sort 31415="`` →
  ``"11345"``. Sort's canonical form is the sorted string, so all orderings of one multiset (one answer)
  share a split.
"""

from __future__ import annotations

import itertools
import random
import re
import string
from collections.abc import Callable

from advantage.envs.text.core import (
    Example,
    Reward,
    alphabet_of,
    check_choice,
    check_int,
    format_options,
    prefix_steps,
    render_target,
    sample_problems,
    verify_exact,
)

__all__ = ["ArithmeticTask", "SequenceTask", "addition", "multiplication", "reverse", "sort"]

# Spaces this small are listed in full, so "n larger than the split holds" is an exact error.
_ENUMERATE_LIMIT = 20_000
_INTEGER = re.compile(r"\d+")
_SYMBOLS = {"letters": string.ascii_lowercase, "digits": string.digits}


def _leading_zeros(got: str) -> str | None:
    """Why a bare integer is not canonical, or None."""
    return f"non-canonical integer {got!r} (leading zeros)" if len(got) > 1 and got.startswith("0") else None


class _ExactTask:
    """What the generated tasks share (composition helper, not a public base class): the format options,
    exact-match :meth:`verify` and per-symbol :meth:`step_rewards`."""

    name: str
    answer_format: str
    format_reward: float
    _well_formed: re.Pattern[str]
    _check: Callable[[str], str | None] | None = None  # rejects a well-formed but non-canonical answer

    def verify(self, completion: str, example: Example) -> Reward:
        """Exact match under the module rules (integers: leading zeros rejected)."""
        return verify_exact(
            completion,
            example.answer,
            answer_format=self.answer_format,
            well_formed=self._well_formed,
            format_reward=self.format_reward,
            check=self._check,
        )

    def step_rewards(self, completion: str, example: Example) -> list[tuple[int, float]]:
        """Process-supervision steps ``[(end offset, reward)]``: one per answer symbol (digit), 1 while the
        symbols so far begin the answer, the last one scored as :meth:`verify`
        (:func:`~advantage.envs.text.core.prefix_steps`)."""
        outcome = self.verify(completion, example).score
        return prefix_steps(completion, example.answer, outcome, self.answer_format)


class ArithmeticTask(_ExactTask):
    """``a op b =`` for op ``+`` (addition) or ``*`` (multiplication); the answer is the exact integer."""

    def __init__(
        self,
        name: str,
        op: str,
        *,
        digits: int,
        answer_format: str,
        format_reward: float,
        mixed_lengths: bool = False,
    ):
        problems: list[str] = []
        check_int(problems, "digits", digits, 1, 18)
        if not isinstance(mixed_lengths, bool):
            problems.append(f"data.mixed_lengths must be true or false, got {mixed_lengths!r}")
        self.format_reward, self.special_tokens = format_options(problems, answer_format, format_reward)
        self.alphabet = alphabet_of([string.digits, op, "=", *self.special_tokens])
        self.name, self.op, self.digits = name, op, digits
        self.answer_format, self.mixed_lengths = answer_format, mixed_lengths
        self._well_formed, self._check = _INTEGER, _leading_zeros

    def _operand(self, rng: random.Random) -> int:
        if not self.mixed_lengths:
            return rng.randrange(10**self.digits)
        # Digit count uniform in 1..digits, then the value uniform among numbers of that length: short
        # problems are as common as long ones, a curriculum inside the data.
        d = rng.randint(1, self.digits)
        return rng.randrange(0 if d == 1 else 10 ** (d - 1), 10**d)

    def _key(self, p: tuple[int, int]) -> str:
        return f"{self.name}:{min(p)}{self.op}{max(p)}"  # unordered pair: a op b == b op a

    def _prompt(self, p: tuple[int, int]) -> str:
        return f"{p[0]}{self.op}{p[1]}="

    def examples(self, split: str, n: int, seed: int) -> list[Example]:
        """``n`` distinct problems of ``split``, deterministic given (split, n, seed)."""
        hi = 10**self.digits
        small = hi * hi <= _ENUMERATE_LIMIT and not self.mixed_lengths
        pairs = sample_problems(
            task=self.name,
            split=split,
            n=n,
            seed=seed,
            draw=lambda rng: (self._operand(rng), self._operand(rng)),
            key=self._key,
            prompt=self._prompt,
            enumerate_all=(lambda: itertools.product(range(hi), repeat=2)) if small else None,
        )
        out = []
        for a, b in pairs:
            answer = str(a + b if self.op == "+" else a * b)
            target = render_target(answer, self.answer_format)
            out.append(Example(self._prompt((a, b)), answer, target, {"a": a, "b": b, "op": self.op}))
        return out


class SequenceTask(_ExactTask):
    """``reverse s=`` → s reversed, or ``sort s=`` → the symbols of s in ascending order."""

    def __init__(self, name: str, *, length: int, symbols: str, answer_format: str, format_reward: float):
        problems: list[str] = []
        check_int(problems, "length", length, 1, 64)
        check_choice(problems, "symbols", symbols, tuple(_SYMBOLS))
        self.format_reward, self.special_tokens = format_options(problems, answer_format, format_reward)
        self.name, self.length, self.symbols = name, length, _SYMBOLS[symbols]
        self.answer_format = answer_format
        self.alphabet = alphabet_of([self.symbols, f"{name} =", *self.special_tokens])
        self._well_formed = re.compile(f"[{re.escape(self.symbols)}]+")

    def _solve(self, s: str) -> str:
        return s[::-1] if self.name == "reverse" else "".join(sorted(s))

    def _key(self, s: str) -> str:
        # sort: every ordering of one multiset has the same answer, so they share a split
        return f"{self.name}:{s if self.name == 'reverse' else ''.join(sorted(s))}"

    def _prompt(self, s: str) -> str:
        return f"{self.name} {s}="

    def examples(self, split: str, n: int, seed: int) -> list[Example]:
        """``n`` distinct problems of ``split``, deterministic given (split, n, seed)."""
        small = len(self.symbols) ** self.length <= _ENUMERATE_LIMIT
        strings = sample_problems(
            task=self.name,
            split=split,
            n=n,
            seed=seed,
            draw=lambda rng: "".join(rng.choice(self.symbols) for _ in range(self.length)),
            key=self._key,
            prompt=self._prompt,
            enumerate_all=(
                (lambda: ("".join(t) for t in itertools.product(self.symbols, repeat=self.length)))
                if small
                else None
            ),
        )
        out = []
        for s in strings:
            answer = self._solve(s)
            out.append(
                Example(self._prompt(s), answer, render_target(answer, self.answer_format), {"input": s})
            )
        return out


def addition(
    *,
    digits: int = 3,
    answer_format: str = "plain",
    format_reward: float = 0.0,
    mixed_lengths: bool = False,
) -> ArithmeticTask:
    """``"123+45="`` → ``"168"``; operands up to ``digits`` digits (``mixed_lengths``: each operand's
    digit count uniform in 1..digits)."""
    return ArithmeticTask(
        "addition",
        "+",
        digits=digits,
        answer_format=answer_format,
        format_reward=format_reward,
        mixed_lengths=mixed_lengths,
    )


def multiplication(
    *, digits: int = 2, answer_format: str = "plain", format_reward: float = 0.0
) -> ArithmeticTask:
    """``"12*34="`` → ``"408"``; operands up to ``digits`` digits."""
    return ArithmeticTask(
        "multiplication", "*", digits=digits, answer_format=answer_format, format_reward=format_reward
    )


def reverse(
    *, length: int = 5, symbols: str = "letters", answer_format: str = "plain", format_reward: float = 0.0
) -> SequenceTask:
    """``"reverse abcde="`` → ``"edcba"``; strings of exactly ``length`` symbols."""
    return SequenceTask(
        "reverse", length=length, symbols=symbols, answer_format=answer_format, format_reward=format_reward
    )


def sort(
    *, length: int = 5, symbols: str = "digits", answer_format: str = "plain", format_reward: float = 0.0
) -> SequenceTask:
    """``"sort 31415="`` → ``"11345"``; strings of exactly ``length`` symbols."""
    return SequenceTask(
        "sort", length=length, symbols=symbols, answer_format=answer_format, format_reward=format_reward
    )
