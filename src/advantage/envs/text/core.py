r"""The data model every text task shares: :class:`Example`, :class:`Reward`, the :class:`Task` protocol,
deterministic hash splits, answer-tag extraction and exact-match verification.

A task's reward is rule-based (RLVR: "reinforcement learning from verifiable rewards", as in
DeepSeek-R1 / TinyZero): a program checks the completion, no reward model. The rules every task follows:

1. The completion is the decoded response text; the caller has already cut it at EOS. Leading and trailing
   whitespace is stripped before anything else. An empty completion is wrong (``"empty completion"``).
2. ``plain`` format: the whole stripped completion must be the answer. Text before or after it makes it
   wrong with ``format_ok=False`` (reason starts ``"extra text"``); a well-formed but different answer is
   ``format_ok=True`` and ``"wrong answer X (expected Y)"``. "Well-formed" is the task's answer grammar
   (digits, letters, an arithmetic expression); a task without one (``dataset``) calls the text extra
   when it holds the answer as a separate word ("it is 42."), else a wrong answer ("42" for "4").
3. ``tagged`` format: exactly one ``<answer>…</answer>`` pair. Reasoning outside the pair is allowed; the
   answer must be inside it. No tag → ``format_ok=False``, score 0, ``"no <answer> tag"`` (even when the
   right answer is in the reasoning); two or more → score 0, ``"N answer tags"``; a missing or misplaced
   closing tag → ``"unbalanced answer tags"``. The content, stripped, must be exactly the answer.
4. ``format_reward = w`` (default 0) mixes in the format check so the score stays in [0, 1]:
   ``score = (1 - w) * correct + w * format_ok``.

Splits: a problem's split is a stable hash (BLAKE2b, not Python's salted ``hash``) of its canonical form,
so ``train``/``validation``/``test`` never share a problem, in any process, whatever ``n`` and ``seed``.
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from advantage.errors import ConfigError

__all__ = [
    "ANSWER_CLOSE",
    "ANSWER_FORMATS",
    "ANSWER_OPEN",
    "SPLITS",
    "ChatPrompt",
    "Example",
    "Reward",
    "Task",
    "alphabet_of",
    "build_task",
    "check_choice",
    "check_common",
    "check_format_reward",
    "check_int",
    "check_n",
    "check_split",
    "extract_tagged",
    "format_options",
    "keyword_options",
    "make_reward",
    "prefix_steps",
    "render_target",
    "sample_problems",
    "split_of",
    "tag_tokens",
    "verify_exact",
]

SPLITS = ("train", "validation", "test")
ANSWER_FORMATS = ("plain", "tagged")
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
# Bucket boundaries out of 100: train 90 %, validation 5 %, test 5 % (the usual held-out sizes).
_SPLIT_BUCKETS = {"train": (0, 90), "validation": (90, 95), "test": (95, 100)}


class ChatPrompt(str):
    """A prompt given as chat messages (verl's and TRL's conversational ``prompt`` column): a list of
    ``{"role": ..., "content": ...}``. The model always sees it rendered with the policy tokenizer's chat
    template (:func:`advantage.algos.llm.policy.prompt_text`); as a string it is the messages' contents
    joined by blank lines, which is what the hash split and a character tokenizer's alphabet read."""

    messages: tuple[dict[str, str], ...]

    def __new__(cls, messages: Iterable[Mapping[str, str]]) -> ChatPrompt:
        msgs = tuple({"role": str(m["role"]), "content": str(m["content"])} for m in messages)
        self = super().__new__(cls, "\n\n".join(m["content"] for m in msgs))
        self.messages = msgs
        return self

    def __reduce__(self) -> tuple[Any, ...]:  # pickles (Ray workers, deepcopy) keep the messages
        return (ChatPrompt, ([dict(m) for m in self.messages],))


@dataclass(frozen=True)
class Example:
    """One problem. ``prompt`` is the text the model sees (no chat template applied; a
    :class:`ChatPrompt` is always rendered with one); ``answer`` the canonical reference answer;
    ``target`` the SFT response a perfect model writes after the prompt (without EOS); ``meta`` task data
    such as countdown numbers, or a dataset row's other columns; ``origin`` where a row read from a file
    came from (``"gsm.jsonl row 17"``; empty for generated problems), for error messages."""

    prompt: str
    answer: str
    target: str
    # hash=False: a dict is unhashable, and examples equal in the other fields are the same problem
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False)
    origin: str = field(default="", compare=False)


@dataclass(frozen=True)
class Reward:
    """A verified completion. ``score`` in [0, 1] is the task reward; ``answer`` the answer extracted from
    the completion (None when none could be), used for majority voting; ``reason`` says why, briefly."""

    score: float
    correct: bool
    format_ok: bool
    answer: str | None
    reason: str


@runtime_checkable
class Task(Protocol):
    """What trainers and evaluators use. ``alphabet`` holds every character a prompt or target can contain
    (to build a character-level tokenizer); ``special_tokens`` the strings such a tokenizer should keep
    whole (e.g. the answer tags)."""

    name: str
    alphabet: str
    special_tokens: tuple[str, ...]

    def examples(self, split: str, n: int, seed: int) -> list[Example]: ...

    def verify(self, completion: str, example: Example) -> Reward: ...


def check_split(split: str) -> None:
    """Raise ConfigError unless ``split`` is one of :data:`SPLITS`."""
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")


def check_n(n: Any) -> None:
    """Raise ConfigError unless ``n`` (a number of examples) is a non-negative int."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ConfigError(f"n must be a non-negative int, got {n!r}")


def check_format_reward(problems: list[str], value: Any) -> None:
    """Append a problem unless ``value`` (``data.format_reward``) is a number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        problems.append(f"data.format_reward must be a number in [0, 1], got {value!r}")


def split_of(key: str) -> str:
    """The split of a problem from its canonical form ``key``: BLAKE2b(key) mod 100 in buckets 90/5/5."""
    bucket = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") % 100
    return next(s for s, (lo, hi) in _SPLIT_BUCKETS.items() if lo <= bucket < hi)


def make_reward(
    correct: bool, format_ok: bool, answer: str | None, reason: str, w: float, credit: float | None = None
) -> Reward:
    """``score = (1 - w)·c + w·format_ok`` (w = format_reward; w = 0 gives score = c) with ``c`` the
    ``credit`` in [0, 1] when given (partial credit), else ``correct``."""
    c = float(correct) if credit is None else credit
    score = (1.0 - w) * c + w * float(format_ok)
    return Reward(score=score, correct=correct, format_ok=format_ok, answer=answer, reason=reason)


def extract_tagged(text: str) -> tuple[str | None, str]:
    """The content of the one ``<answer>…</answer>`` pair in ``text`` (stripped), or ``(None, reason)``
    when there is no pair, several, or the tags are unbalanced (rule 3 of the module docstring)."""
    n_open, n_close = text.count(ANSWER_OPEN), text.count(ANSWER_CLOSE)
    if n_open == 0 and n_close == 0:
        return None, "no <answer> tag"
    if n_open == n_close and n_open > 1:
        return None, f"{n_open} answer tags"
    if n_open != 1 or n_close != 1:
        return None, f"unbalanced answer tags ({n_open} {ANSWER_OPEN}, {n_close} {ANSWER_CLOSE})"
    start = text.index(ANSWER_OPEN) + len(ANSWER_OPEN)
    end = text.find(ANSWER_CLOSE, start)
    if end < 0:
        return None, f"unbalanced answer tags ({ANSWER_CLOSE} before {ANSWER_OPEN})"
    return text[start:end].strip(), "ok"


def verify_exact(
    completion: str,
    expected: str,
    *,
    answer_format: str,
    well_formed: re.Pattern[str] | None = None,
    format_reward: float = 0.0,
    check: Callable[[str], str | None] | None = None,
) -> Reward:
    """Exact-match verification under the module rules (after stripping, strings compare equal).

    ``well_formed`` is the answer grammar used in ``plain`` format to tell a wrong answer (format ok) from
    extra text (format not ok); with None, a completion that contains the answer as a separate word among
    other text is extra text and any other one a wrong answer. ``check(answer)`` may return a reason to
    reject an answer that matches the grammar but is not canonical (e.g. leading zeros)."""
    text = completion.strip()
    if not text:
        return make_reward(False, False, None, "empty completion", format_reward)
    if answer_format == "tagged":
        got, why = extract_tagged(text)
        if got is None:
            return make_reward(False, False, None, why, format_reward)
    else:
        # Without a grammar, text holding the answer as a separate word ("it is 42.") is extra text; any
        # other non-empty text is a well-formed wrong answer ("42" vs "4" is wrong, not extra text).
        if well_formed is not None:
            extra = well_formed.fullmatch(text) is None
        else:
            found = re.search(rf"(?<!\w){re.escape(expected)}(?!\w)", text)
            extra = text != expected and found is not None
        if extra:
            reason = f"extra text: {_short(text)} is not a bare answer"
            return make_reward(False, False, None, reason, format_reward)
        got = text
    if got == expected:
        return make_reward(True, True, got, "correct", format_reward)
    bad = check(got) if check is not None else None
    reason = bad or f"wrong answer {_short(got)} (expected {expected})"
    return make_reward(False, True, got, reason, format_reward)


def _short(text: str, limit: int = 40) -> str:
    """``repr`` of ``text`` cut to ``limit`` characters, for reasons that stay one short line."""
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def sample_problems(
    *,
    task: str,
    split: str,
    n: int,
    seed: int,
    draw: Callable[[random.Random], Any],
    key: Callable[[Any], str],
    prompt: Callable[[Any], str],
    enumerate_all: Callable[[], Iterable[Any]] | None = None,
) -> list[Any]:
    """``n`` problems with distinct prompts, all in ``split``, deterministic given (task, split, n, seed).

    With ``enumerate_all`` (small spaces) the split's problems are listed, shuffled with the seed and the
    first ``n`` taken, so asking for more than exist is an exact error. Otherwise problems are drawn with
    ``draw(rng)`` and rejected when their canonical ``key`` hashes to another split or their prompt was
    seen; 2,000 rejections in a row (about 1e-45 likely while a split still has 5 % of fresh problems) is
    taken to mean the split is exhausted. Either way the first ``m < n`` problems equal ``n=m``'s."""
    check_split(split)
    check_n(n)
    rng = random.Random(f"{task}:{split}:{seed}")  # str seeds are hashed with SHA-512: stable across runs
    if enumerate_all is not None:
        pool: dict[str, Any] = {}
        for p in enumerate_all():
            if split_of(key(p)) == split:
                pool.setdefault(prompt(p), p)
        problems = list(pool.values())
        if n > len(problems):
            raise ConfigError(
                f"task {task!r} has {len(problems)} distinct {split} problems with these options, asked for "
                f"n={n}; use larger problems (e.g. more digits) or a smaller n"
            )
        rng.shuffle(problems)
        return problems[:n]
    seen: set[str] = set()
    out: list[Any] = []
    misses = 0
    while len(out) < n:
        p = draw(rng)
        text = prompt(p)
        if text in seen or split_of(key(p)) != split:
            misses += 1
            if misses >= 2000:
                raise ConfigError(
                    f"task {task!r} found only {len(out)} distinct {split} problems with these options "
                    f"(2000 draws in a row gave none new), asked for n={n}; "
                    "use larger problems or a smaller n"
                )
            continue
        misses = 0
        seen.add(text)
        out.append(p)
    return out


def alphabet_of(texts: Iterable[str]) -> str:
    """The sorted set of characters in ``texts``."""
    return "".join(sorted(set[str]().union(*texts)))


def check_int(problems: list[str], name: str, value: Any, lo: int, hi: int) -> None:
    """Append a problem unless ``value`` is an int (not a bool) in [lo, hi]; ``name`` is the option."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        problems.append(f"data.{name} must be an int in [{lo}, {hi}], got {value!r}")


def check_choice(problems: list[str], name: str, value: Any, choices: tuple[str, ...]) -> None:
    """Append a problem unless ``value`` is one of ``choices``."""
    if value not in choices:
        problems.append(f"data.{name} must be one of {', '.join(choices)}, got {value!r}")


def check_common(problems: list[str], answer_format: Any, format_reward: Any) -> None:
    """The options every task takes: ``answer_format`` and ``format_reward``."""
    check_choice(problems, "answer_format", answer_format, ANSWER_FORMATS)
    check_format_reward(problems, format_reward)


def format_options(
    problems: list[str], answer_format: Any, format_reward: Any
) -> tuple[float, tuple[str, ...]]:
    """``(format_reward, special tokens)`` of a task's format options, after raising ``problems`` and those
    of ``answer_format`` and ``format_reward`` (:func:`check_common`) as one ConfigError, if any."""
    check_common(problems, answer_format, format_reward)
    if problems:
        raise ConfigError(problems)
    return float(format_reward), tag_tokens(answer_format)


def render_target(answer: str, answer_format: str) -> str:
    """The SFT target for ``answer``: the bare answer, or ``<answer>answer</answer>``."""
    return f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}" if answer_format == "tagged" else answer


def tag_tokens(answer_format: str) -> tuple[str, ...]:
    """The special tokens of a format: the two answer tags when tagged, else none."""
    return (ANSWER_OPEN, ANSWER_CLOSE) if answer_format == "tagged" else ()


def prefix_steps(
    completion: str, expected: str, outcome: float, answer_format: str
) -> list[tuple[int, float]]:
    """Process-supervision steps of an answer written one character at a time: ``[(end, reward), ...]``
    with ``end`` the exclusive character offset in ``completion`` where each step ends.

    In ``plain`` format every character is a step, rewarded 1 while the completion so far is a prefix of
    the expected answer and 0 from the first wrong character on: for a task computed left to right (an
    addition, a reversal) that is exactly whether the step "can still lead to the answer", the label
    Math-Shepherd-style process reward models estimate, here known. The last step carries the outcome
    reward instead (a correct prefix that stops early, or runs on, is not a correct answer), so the whole
    completion is scored as :meth:`verify` scores it. Leading whitespace, which :meth:`verify` strips, is
    part of the first step. Other formats (tags, reasoning text) are one step with the outcome reward."""
    if answer_format != "plain" or not completion.strip():
        return [(len(completion), float(outcome))]
    lead = len(completion) - len(completion.lstrip())
    text = completion.strip()
    steps = []
    for k in range(len(text)):
        ok = text[: k + 1] == expected[: k + 1]
        steps.append((lead + k + 1, 1.0 if ok else 0.0))
    steps[-1] = (len(completion), float(outcome))
    return steps


def keyword_options(factory: Callable[..., Any]) -> dict[str, Any]:
    """The options of a task class or factory: its keyword-only arguments with their defaults."""
    params = inspect.signature(factory).parameters.values()
    return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def build_task(
    registry: Mapping[str, Callable[..., Any]], name: str, options: Mapping[str, Any], kind: str = "task"
) -> Any:
    """``registry[name](**options)`` (``data.task`` and the other ``data.*`` keys), after checking the name
    and the option names: ConfigError for an unknown name (with the closest name and the list) or unknown
    options (with the allowed ones); the task itself checks the option values."""
    if name not in registry:
        close = difflib.get_close_matches(str(name), list(registry), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"data.task must be one of {', '.join(registry)}, got {name!r}{hint}")
    allowed = keyword_options(registry[name])
    problems = []
    for key in options:
        if key not in allowed:
            close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
            hint = f"; did you mean data.{close[0]}?" if close else ""
            # another task's option (data.path on the default generated task): name the tasks that take it
            owners = sorted(
                (t for t in registry if key in keyword_options(registry[t])), key=lambda t: t != "math"
            )
            if owners and not close:
                hint = f"; set data.task={' or data.task='.join(owners)} to use data.{key}"
            problems.append(
                f"unknown option data.{key} for {kind} {name!r}{hint} (allowed: {', '.join(allowed)})"
            )
    if problems:
        raise ConfigError(problems)
    return registry[name](**options)
