r"""Countdown (the TinyZero / "Countdown game" RLVR task): combine the given numbers with + − × ÷ and
parentheses to reach the target.

Generation is solvable by construction: draw ``numbers`` integers uniformly in [1, ``max_number``], then
repeatedly combine two random items of the pool with a random operation whose result is a positive
integer (``-`` only when the result is > 0, ``/`` only when it divides exactly), until one remains. Its
value is the target and its expression (minimal parentheses) the SFT target. Prompt:
``"use 3 5 7 to make 22:"``; target ``"3*5+7"``. Split key: the sorted numbers and the target, so a
reordering of the same numbers never crosses splits.

Verification — each given number used **exactly once** (the standard game and TinyZero's reward), the
multiset compared so a number given twice may be used twice:

1. The expression is the whole stripped completion (``plain``) or the content of the one answer tag
   (``tagged``; tag rules as in :mod:`advantage.envs.text.core`). Nothing else is accepted, not even a
   trailing ``= 22``.
2. Characters must be digits, ``+ - * / ( )`` and spaces (in ``plain`` anything else is "extra text"), and
   at most 200 characters; then ``ast.parse(mode="eval")`` — parsing only, nothing is executed — and every
   node must be ``BinOp`` with ``Add``/``Sub``/``Mult``/``Div`` or an ``int`` constant. A call, name,
   attribute, unary minus, ``**``, ``//`` … is rejected with its node type in the reason.
3. The constants must equal the given numbers as multisets: ``"number 8 not given"``, ``"number 5 used 2
   times (given 1)"``, ``"number 3 not used"``.
4. Evaluated with exact :class:`fractions.Fraction` arithmetic (intermediate fractions and negatives are
   allowed; only the value counts); division by zero → wrong. Correct iff the value equals the target.

The extracted ``answer`` (for majority voting) is the expression with spaces removed: two different
correct expressions count as different answers.
"""

from __future__ import annotations

import ast
import random
import re
from collections import Counter
from fractions import Fraction
from typing import Any, cast

from advantage.envs.text.core import (
    Example,
    Reward,
    alphabet_of,
    check_int,
    extract_tagged,
    format_options,
    make_reward,
    render_target,
    sample_problems,
)

__all__ = ["CountdownTask", "evaluate_expression"]

_EXPRESSION_CHARS = re.compile(r"[0-9+\-*/() ]+")
_MAX_LENGTH = 200  # bounds the parse depth and the size of every intermediate Fraction
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
_ATOM = 3


class _Rejected(Exception):
    """An expression that breaks a rule; the message is the reward's reason."""


def _constants(node: ast.AST, out: list[int]) -> None:
    """Check ``node`` against the whitelist and collect its integer constants in ``out``."""
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        _constants(node.left, out)
        _constants(node.right, out)
    elif isinstance(node, ast.Constant) and type(node.value) is int:  # not bool, float or str
        out.append(node.value)
    else:
        what = type(node.op).__name__ if isinstance(node, ast.BinOp | ast.UnaryOp) else type(node).__name__
        raise _Rejected(f"disallowed syntax {what}")


def _value(node: ast.AST) -> Fraction:
    """Exact value of a whitelisted tree (checked by :func:`_constants` first)."""
    if isinstance(node, ast.Constant):
        return Fraction(cast(int, node.value))  # an int: checked by _constants
    assert isinstance(node, ast.BinOp)
    a, b = _value(node.left), _value(node.right)
    op = _OPS[type(node.op)]
    if op == "/":
        if b == 0:
            raise _Rejected("division by zero")
        return a / b
    return a + b if op == "+" else a - b if op == "-" else a * b


def evaluate_expression(expr: str, numbers: tuple[int, ...] | list[int]) -> tuple[Fraction | None, str]:
    """``(value, "ok")`` for an expression that uses each of ``numbers`` exactly once, else
    ``(None, reason)``. Safe on any input: the text is parsed with :mod:`ast`, never evaluated."""
    expr = expr.strip()
    if not expr:
        return None, "empty expression"
    if len(expr) > _MAX_LENGTH:
        return None, f"expression longer than {_MAX_LENGTH} characters"
    if _EXPRESSION_CHARS.fullmatch(expr) is None:
        bad = sorted(set(re.sub(r"[0-9+\-*/() ]", "", expr)))
        return None, f"characters {''.join(bad)!r} not allowed (digits, + - * / ( ) only)"
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None, "not a valid expression"
    used: list[int] = []
    try:
        _constants(tree.body, used)
        problem = _usage_problem(Counter(used), Counter(numbers))
        if problem:
            return None, problem
        return _value(tree.body), "ok"
    except _Rejected as e:
        return None, str(e)
    except RecursionError:
        return None, "expression nested too deeply"


def _usage_problem(used: Counter[int], given: Counter[int]) -> str | None:
    """Why the numbers used are not exactly the numbers given, or None."""
    for x, k in used.items():
        if x not in given:
            return f"number {x} not given"
        if k > given[x]:
            return f"number {x} used {k} times (given {given[x]})"
    for x, k in given.items():
        if used[x] < k:
            return f"number {x} not used (each given number must be used exactly once)"
    return None


def _render(op: str, a: tuple[int, str, int], b: tuple[int, str, int]) -> str:
    """``a op b`` with only the parentheses precedence needs (a right operand of - or / of equal
    precedence needs them: a-(b+c) ≠ a-b+c)."""
    p = _PRECEDENCE[op]
    left = f"({a[1]})" if a[2] < p else a[1]
    right = f"({b[1]})" if b[2] < p or (b[2] == p and op in "-/") else b[1]
    return f"{left}{op}{right}"


def _draw(rng: random.Random, k: int, max_number: int) -> tuple[tuple[int, ...], int, str]:
    """Numbers, target and a generating expression whose every intermediate is a positive integer."""
    numbers = tuple(rng.randint(1, max_number) for _ in range(k))
    pool = [(x, str(x), _ATOM) for x in numbers]  # (value, text, precedence)
    while len(pool) > 1:
        i, j = rng.sample(range(len(pool)), 2)
        a, b = pool[i], pool[j]
        ops = ["+", "*"]
        if a[0] > b[0]:
            ops.append("-")
        if a[0] % b[0] == 0:
            ops.append("/")
        op = rng.choice(ops)
        x, y = a[0], b[0]  # both >= 1: every intermediate is a positive integer
        value = x + y if op == "+" else x - y if op == "-" else x * y if op == "*" else x // y
        pool = [q for t, q in enumerate(pool) if t not in (i, j)]
        pool.append((value, _render(op, a, b), _PRECEDENCE[op]))
    return numbers, pool[0][0], pool[0][1]


class CountdownTask:
    """Reach ``target`` from ``numbers`` (each used exactly once) with + − × ÷ and parentheses:
    ``"use 3 5 7 to make 22:"`` → ``"3*5+7"``."""

    name = "countdown"

    def __init__(
        self,
        *,
        numbers: int = 3,
        max_number: int = 20,
        answer_format: str = "plain",
        format_reward: float = 0.0,
    ):
        problems: list[str] = []
        check_int(problems, "numbers", numbers, 2, 6)
        check_int(problems, "max_number", max_number, 1, 10_000)
        self.format_reward, self.special_tokens = format_options(problems, answer_format, format_reward)
        self.numbers, self.max_number, self.answer_format = numbers, max_number, answer_format
        self.alphabet = alphabet_of(["0123456789+-*/()", "use to make :", *self.special_tokens])

    @staticmethod
    def _prompt(p: tuple[tuple[int, ...], int, str]) -> str:
        return f"use {' '.join(map(str, p[0]))} to make {p[1]}:"

    def examples(self, split: str, n: int, seed: int) -> list[Example]:
        """``n`` distinct solvable problems of ``split``, deterministic given (split, n, seed)."""
        drawn = sample_problems(
            task=self.name,
            split=split,
            n=n,
            seed=seed,
            draw=lambda rng: _draw(rng, self.numbers, self.max_number),
            key=lambda p: f"countdown:{sorted(p[0])}:{p[1]}",
            prompt=self._prompt,
        )
        out = []
        for p in drawn:
            numbers, target, expr = p
            meta = {"numbers": numbers, "target": target}
            out.append(Example(self._prompt(p), expr, render_target(expr, self.answer_format), meta))
        return out

    def verify(self, completion: str, example: Example) -> Reward:
        """The module's rules 1–4; ``example.meta`` supplies ``numbers`` and ``target``."""
        w = self.format_reward
        text = completion.strip()
        if not text:
            return make_reward(False, False, None, "empty completion", w)
        if self.answer_format == "tagged":
            expr, why = extract_tagged(text)
            if expr is None:
                return make_reward(False, False, None, why, w)
        elif _EXPRESSION_CHARS.fullmatch(text) is None:
            return make_reward(False, False, None, f"extra text: {text[:40]!r} is not a bare expression", w)
        else:
            expr = text
        meta: Any = example.meta
        value, reason = evaluate_expression(expr, tuple(meta["numbers"]))
        answer = expr.replace(" ", "")
        if value is None:
            return make_reward(False, True, answer, reason, w)
        if value != meta["target"]:
            shown = str(value.numerator) if value.denominator == 1 else str(value)
            return make_reward(False, True, answer, f"wrong value {shown} (expected {meta['target']})", w)
        return make_reward(True, True, answer, "correct", w)
