r"""``code``: write a small Python function; the reward runs it on hidden tests in a sandbox.

This package holds the task (here), the sandbox that runs the candidate
(:mod:`advantage.envs.text.code.sandbox`) and the sandbox's own processes
(:mod:`advantage.envs.text.code._sandbox_child`, run as a script).

Problems. About 25,000 built-in problems from 23 families over integers, lists of integers and
lowercase strings, each family with a range of constants (``"3 * x - 5"``, ``"the sum of the elements of
x greater than 2"``, ``"x with each letter shifted 5 places later in the alphabet"`` …). A problem is
drawn by picking a family uniformly, then its constants, so the big families (affine, quadratic, clamp)
dominate only once the small ones are used up. The split key is the family and its constants, so
``train``/``validation``/``test`` never share a problem (hash split of :mod:`advantage.envs.text.core`:
about 22,800 / 1,240 / 1,300 problems). Every problem has ``tests`` fixed inputs (from a generator seeded
by the problem, biased towards its constants, edge cases such as ``0``, ``[]`` and ``""`` included); the
first is shown in the prompt, all are checked. Expected outputs come from the reference solution, run
here (it is our code), and live only in ``Example.meta``: the sandboxed process receives the inputs,
never the outputs.

Prompt ``"Write a Python function f(x) that takes a list of integers x and returns … .\nExample: f([3,
1]) == 4\n"``; target (and ``Example.answer``) the reference solution ``"def f(x):\n    return …"``.

Verification rules (on top of :mod:`advantage.envs.text.core`'s stripping and tag rules):

1. ``plain``: the completion is the code, or exactly one fenced block (```` ```python ````, ```` ```py ````
   or a bare ```` ``` ```` fence) with nothing outside it. Text around a block, two blocks, or another
   language → ``format_ok=False``, ``"extra text: …"``. ``tagged``: the same rule for the content of the one
   ``<answer>…</answer>`` pair. Code over 10,000 characters is rejected the same way.
2. Code that does not compile, or defines no callable ``f`` → ``format_ok=False``. Code that raises while
   loading, exits, times out or is killed → ``format_ok=True``, score 0, the sandbox's error as reason.
3. Each test compares ``f(*args)`` with the expected output as JSON values, so types count (``1``,
   ``1.0`` and ``True`` differ) but a tuple equals a list. A call that raises fails that test.
4. ``correct`` = every test passes. ``score`` = ``correct`` (all-or-nothing, the default: partial credit
   rewards programs that are right on easy inputs only) or, with ``partial_credit=True``, the fraction of
   tests passed; then ``score = (1 - w)·score + w·format_ok`` with ``w = format_reward``.
5. Reasons never repeat the program's return values (they could carry file contents into logs).

A sandbox that cannot start (no processes left, a broken interpreter) raises :class:`SandboxUnavailable`
(a :class:`RuntimeError`) instead of returning 0: an infrastructure failure must not read as a wrong
answer. Any other exception while one completion is run or judged is that completion's failure: it
scores 0 (``format_ok=False``, so a format reward does not apply either) and is logged, and the rest of the
batch, and the training run, go on. Where the kernel
refuses the sandbox's namespaces the task cannot be made (:class:`ConfigError` saying what is missing
and how to run): model-written code never runs unconfined unless ``sandbox="unsafe"`` is set explicitly
(``data.sandbox=unsafe``; see ``docs/reliability.md``).
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
import string
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from advantage.envs.text.code.sandbox import (
    Raised,
    SandboxLimits,
    SandboxResult,
    kernel_isolation_problem,
    run_sandboxed,
)
from advantage.envs.text.core import (
    Example,
    Reward,
    alphabet_of,
    check_common,
    check_int,
    extract_tagged,
    make_reward,
    render_target,
    sample_problems,
    tag_tokens,
)
from advantage.errors import ConfigError

__all__ = ["CodeTask", "SandboxUnavailable", "extract_code"]

log = logging.getLogger(__name__)

MAX_CODE_CHARS = 10_000
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)\n?[ \t]*```", re.DOTALL)
_LOWER = string.ascii_lowercase
_TYPES = {
    "int": "an integer",
    "nat": "a non-negative integer",
    "list": "a list of integers",
    "str": "a string of lowercase letters",
}


def _linear(var: str, *terms: tuple[int, str]) -> str:
    """``c1·t1 + c2·t2 …`` as Python with the signs folded in: ``_linear("x", (3, "x"), (-5, ""))`` is
    ``"3 * x - 5"``; zero terms are left out."""
    out = ""
    for coef, term in terms:
        if coef == 0:
            continue
        body = term if abs(coef) == 1 and term else f"{abs(coef)} * {term}" if term else str(abs(coef))
        out += (f" {'-' if coef < 0 else '+'} " if out else ("-" if coef < 0 else "")) + body
    return out or "0"


_NONZERO = [a for a in range(-20, 21) if a not in (0, 1)]
# (family, argument type, constants, what f returns, body of the reference solution); a constant that is
# an expression (affine, quadratic, map_affine) is pre-rendered so that "3 * x - 5" never reads "+ -5"
# fmt: off
_FAMILIES: list[tuple[str, str, list[tuple[Any, ...]], str, str]] = [
    ("affine", "int", [(a, b, _linear("x", (a, "x"), (b, ""))) for a in _NONZERO for b in range(-100, 101)],
     "{2}", "return {2}"),
    ("quadratic", "int",
     [(a, b, _linear("x", (1, "x * x"), (a, "x"), (b, ""))) for a in range(-30, 31) for b in range(-30, 31)],
     "{2}", "return {2}"),
    ("mod", "int", [(a, a - 1) for a in range(2, 101)],
     "the remainder of x divided by {0} (a number from 0 to {1})", "return x % {0}"),
    ("clamp", "int", [(lo, hi) for lo in range(-100, 1) for hi in range(1, 101)],
     "x clamped to the range [{0}, {1}] (the number in the range nearest to x)",
     "return min(max(x, {0}), {1})"),
    ("distance", "int", [(a,) for a in range(-100, 101)],
     "the absolute difference between x and {0}", "return abs(x - {0})"),
    ("digit_sum", "nat", [(a,) for a in range(101)],
     "the sum of the decimal digits of x, plus {0}", "return sum(int(d) for d in str(x)) + {0}"),
    ("multiples", "nat", [(a,) for a in range(2, 101)],
     "how many of the integers 1, 2, ..., x are divisible by {0}", "return x // {0}"),
    ("sum_greater", "list", [(a,) for a in range(-20, 21)],
     "the sum of the elements of x greater than {0}", "return sum(v for v in x if v > {0})"),
    ("count_equal", "list", [(a,) for a in range(-10, 21)],
     "how many elements of x are equal to {0}", "return x.count({0})"),
    ("count_range", "list", [(lo, hi) for lo in range(-10, 11) for hi in range(lo, lo + 21)],
     "how many elements of x are between {0} and {1} (both included)",
     "return sum(1 for v in x if {0} <= v <= {1})"),
    ("map_affine", "list",
     [(a, b, _linear("v", (a, "v"), (b, ""))) for a in _NONZERO if abs(a) <= 10 for b in range(-20, 21)],
     "a new list holding {2} for each element v of x, in order", "return [{2} for v in x]"),
    ("divisible", "list", [(a,) for a in range(2, 31)],
     "the list of the elements of x divisible by {0}, in their order in x",
     "return [v for v in x if v % {0} == 0]"),
    ("largest", "list", [(a,) for a in range(1, 11)],
     "the list of the {0} largest elements of x in descending order (all of them if x is shorter)",
     "return sorted(x, reverse=True)[:{0}]"),
    ("add_index", "list", [(a,) for a in range(-10, 11) if a],
     "a new list whose element at index i is x[i] + {0} * i",
     "return [v + {0} * i for i, v in enumerate(x)]"),
    ("max_or", "list", [(a,) for a in range(-50, 51)],
     "the largest element of x, or {0} if x is empty", "return max(x) if x else {0}"),
    ("repeat", "str", [(a,) for a in range(2, 11)], "x repeated {0} times", "return x * {0}"),
    ("remove", "str", [(c,) for c in _LOWER], "x with every {0!r} removed", "return x.replace({0!r}, '')"),
    ("shift", "str", [(a,) for a in range(1, 26)],
     "x with each letter shifted {0} places later in the alphabet, z wrapping around to a",
     "return ''.join(chr((ord(c) - 97 + {0}) % 26 + 97) for c in x)"),
    ("count_char", "str", [(c,) for c in _LOWER],
     "how many times {0!r} occurs in x", "return x.count({0!r})"),
    ("replace", "str", [(c, d) for c in _LOWER for d in _LOWER if c != d],
     "x with every {0!r} replaced by {1!r}", "return x.replace({0!r}, {1!r})"),
    ("pad", "str", [(c, n) for c in _LOWER for n in range(5, 16)],
     "x followed by as many {0!r} as needed to reach length {1} (x itself if it is that long already)",
     "return x + {0!r} * ({1} - len(x))"),
    ("surround", "str", [(c, d) for c in _LOWER for d in _LOWER],
     "x with {0!r} added at the start and {1!r} at the end", "return {0!r} + x + {1!r}"),
    ("every_kth", "str", [(a,) for a in range(2, 11)],
     "the characters of x at the indices divisible by {0}, in order", "return x[::{0}]"),
]
# fmt: on
_EDGES: dict[str, list[Any]] = {
    "int": [0, 1, -1, 1000],
    "nat": [0, 1, 9, 10],
    "list": [[], [0], [5, 5, 5]],
    "str": ["", "a", "zz"],
}


def _draw(kind: str, rng: random.Random, constants: tuple[Any, ...]) -> Any:
    """A typical input of the argument type ``kind``, biased towards the problem's ``constants`` (a list
    holding the value counted, a string holding the letter removed) so the tests tell programs apart."""
    if kind == "int":
        return rng.randint(-50, 50)
    if kind == "nat":
        return rng.randint(0, 10_000)
    if kind == "list":
        values = [c for c in constants if isinstance(c, int)] or [0]
        near = [-1, 0, 0, 1, 2]  # the constant itself and its neighbours: both sides of "> 20", "== 5"
        size = rng.randint(2, 8)
        return [
            rng.choice(values) + rng.choice(near) if rng.random() < 0.4 else rng.randint(-9, 20)
            for _ in range(size)
        ]
    pool = "".join(c for c in constants if isinstance(c, str)) * 2 + "".join(rng.sample(_LOWER, 4))
    return "".join(rng.choice(pool) for _ in range(rng.randint(2, 10)))


def _draw_problem(rng: random.Random) -> tuple[int, tuple[Any, ...]]:
    """A family uniformly, then its constants uniformly: the big families (affine, clamp …) do not crowd
    out the small ones until those run out."""
    family = rng.randrange(len(_FAMILIES))
    return family, rng.choice(_FAMILIES[family][2])


def extract_code(completion: str, answer_format: str) -> tuple[str | None, str]:
    """The code of a completion under rule 1 of the module docstring, or ``(None, reason)``."""
    text = completion.strip()
    if not text:
        return None, "empty completion"
    if answer_format == "tagged":
        got, why = extract_tagged(text)
        if got is None:
            return None, why
        text = got
    if "```" in text:
        match = _FENCE.fullmatch(text)
        if match is None or "```" in match.group(1):
            return None, "extra text: the completion must be only the code or one ```python block"
        text = match.group(1)
    if not text.strip():
        return None, "empty code"
    if len(text) > MAX_CODE_CHARS:
        return None, f"extra text: code longer than {MAX_CODE_CHARS} characters"
    return text, "ok"


class SandboxUnavailable(RuntimeError):
    """The sandbox could not run at all (stage ``setup``): a fault of the machine, not of the completion,
    so it stops the run instead of scoring 0."""


def _same(got: Any, expected: Any) -> bool:
    """Equal as JSON values (rule 3): ``1 != 1.0 != True``, a tuple equals a list."""
    if isinstance(got, Raised):
        return False
    return json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)


class CodeTask:
    """Write ``def f(x):`` for a generated problem; verified by running hidden tests in the sandbox:
    ``"Write a Python function f(x) that … returns 3 * x + 4."`` → ``"def f(x):\\n    return 3 * x + 4"``.

    ``tests`` hidden tests per problem, ``timeout`` wall seconds per completion (CPU limit the same,
    rounded up), ``memory_mb`` its address-space limit. ``sandbox``: ``kernel`` (namespaces and a minimal
    root; the task refuses to start where the kernel does not allow them) or ``unsafe`` (no isolation)."""

    name = "code"

    def __init__(
        self,
        *,
        tests: int = 10,
        answer_format: str = "plain",
        format_reward: float = 0.0,
        partial_credit: bool = False,
        timeout: float = 2.0,
        memory_mb: int = 512,
        sandbox: str = "kernel",
    ):
        problems: list[str] = []
        check_int(problems, "tests", tests, 2, 50)
        check_common(problems, answer_format, format_reward)
        check_int(problems, "memory_mb", memory_mb, 64, 65536)
        if not isinstance(partial_credit, bool):
            problems.append(f"data.partial_credit must be true or false, got {partial_credit!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 60:
            problems.append(f"data.timeout must be a number of seconds in (0, 60], got {timeout!r}")
        if sandbox not in ("kernel", "unsafe"):
            problems.append(f"data.sandbox must be kernel or unsafe, got {sandbox!r}")
        elif sandbox == "kernel" and (why := kernel_isolation_problem()) is not None:
            problems.append(f"data.task=code: {why}")
        if problems:
            raise ConfigError(problems)
        self.tests, self.partial_credit = tests, partial_credit
        self.answer_format, self.format_reward = answer_format, float(format_reward)
        self.limits = SandboxLimits(
            wall_seconds=float(timeout),
            cpu_seconds=max(1, math.ceil(timeout)),
            memory_bytes=memory_mb * 2**20,
            isolation=sandbox,
        )
        self.special_tokens = tag_tokens(answer_format)
        # a superset (printable ASCII, no \r \v \f): prompts and code use nearly all of it anyway
        self.alphabet = alphabet_of([string.printable.strip(), " \n", *self.special_tokens])

    @staticmethod
    def _key(problem: tuple[int, tuple[Any, ...]]) -> str:
        return f"code:{_FAMILIES[problem[0]][0]}:{problem[1]!r}"

    def _example(self, problem: tuple[int, tuple[Any, ...]]) -> Example:
        family, kind, _, what, body = _FAMILIES[problem[0]]
        constants = problem[1]
        answer = "def f(x):\n    " + body.format(*constants)
        namespace: dict[str, Any] = {}
        exec(answer, namespace)  # our own reference solution, never model output
        rng = random.Random(self._key(problem))
        inputs = [_draw(kind, rng, constants)]
        for x in [*_EDGES[kind], *(_draw(kind, rng, constants) for _ in range(self.tests * 4))]:
            if len(inputs) < self.tests and x not in inputs:
                inputs.append(x)
        tests = [[[x], namespace["f"](x)] for x in inputs]
        prompt = (
            f"Write a Python function f(x) that takes {_TYPES[kind]} x and returns "
            f"{what.format(*constants)}.\nExample: f({inputs[0]!r}) == {tests[0][1]!r}\n"
        )
        meta = {"family": family, "constants": list(constants), "entry": "f", "tests": tests}
        return Example(prompt, answer, render_target(answer, self.answer_format), meta)

    def examples(self, split: str, n: int, seed: int) -> list[Example]:
        """``n`` distinct problems of ``split``, deterministic given (split, n, seed)."""
        problems = sample_problems(
            task=self.name,
            split=split,
            n=n,
            seed=seed,
            draw=_draw_problem,
            key=self._key,
            prompt=self._key,  # the key identifies the problem; the prompt text is built afterwards
        )
        return [self._example(p) for p in problems]

    def verify(self, completion: str, example: Example) -> Reward:
        """Run the extracted code on ``example``'s tests in the sandbox and compare here (module rules)."""
        code, why = extract_code(completion, self.answer_format)
        if code is None:
            return make_reward(False, False, None, why, self.format_reward)
        tests = example.meta["tests"]
        try:
            result = run_sandboxed(code, [args for args, _ in tests], entry="f", limits=self.limits)
            return self._judge(code, result, [expected for _, expected in tests])
        except SandboxUnavailable:
            raise
        except Exception as e:  # whatever one completion makes happen, it must not end the run
            log.warning("code task: scoring a completion failed, it scores 0", exc_info=True)
            why = f"the sandbox run failed: {type(e).__name__}"  # not the message: it may hold the output
            return make_reward(False, False, code, why, self.format_reward)

    def verify_many(
        self, completions: Sequence[str], examples: Sequence[Example], max_workers: int = 2
    ) -> list[Reward]:
        """:meth:`verify` for each pair, ``max_workers`` sandboxes at a time (each is one process). One
        completion's failure is its score of 0 (:meth:`verify`); only :class:`SandboxUnavailable` raises."""
        if len(completions) != len(examples):
            raise ValueError(f"got {len(completions)} completions for {len(examples)} examples")
        if max_workers <= 1:
            return [self.verify(c, e) for c, e in zip(completions, examples, strict=True)]
        with ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="sandbox") as pool:
            return list(pool.map(self.verify, completions, examples))

    def _judge(self, code: str, result: SandboxResult, expected: list[Any]) -> Reward:
        """The reward of one sandbox run against the expected outputs, which only this process holds."""
        # isolation is unknown (empty) after a wall-time kill: the supervisor's report never came
        unsafe = "UNSAFE-no-isolation" in result.isolation
        note = " [no isolation: data.sandbox=unsafe]" if unsafe else ""
        if result.stage == "setup":
            raise SandboxUnavailable(f"the code sandbox could not run: {result.error}")
        if result.outputs is None:
            format_ok = result.stage not in ("syntax", "entry")
            return make_reward(False, format_ok, code, f"{result.error}{note}", self.format_reward)
        passed = [_same(got, want) for got, want in zip(result.outputs, expected, strict=True)]
        k, n = sum(passed), len(passed)
        if k == n:
            return make_reward(True, True, code, f"correct ({n}/{n} tests){note}", self.format_reward)
        first = passed.index(False)
        got = result.outputs[first]
        what = f"raised {got.error}" if isinstance(got, Raised) else "returned a wrong value"
        credit = k / n if self.partial_credit else 0.0
        reason = f"passed {k}/{n} tests; test {first} {what}{note}"
        return make_reward(False, True, code, reason, self.format_reward, credit)
