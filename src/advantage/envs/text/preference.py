r"""Preference data for reward models: :class:`PreferenceExample`, :func:`load_preferences`, the offline
``synthetic`` task with a hidden scoring rule, and the ``dataset`` task read from a file.

The study notes on RLHF (the reward model's data are triples *question, chosen, rejected*: "why not train on
question + answer + score? because people do not share one scale for how good an answer is") and
Ouyang et al. 2022 (InstructGPT ranks K responses, giving :math:`\binom K2` comparisons per prompt).

A :class:`PreferenceExample` is a prompt and its responses **ranked best first**; a pairwise example is
``(chosen, rejected)``. A task has the shape of the text tasks (:mod:`advantage.envs.text.core`):
``name``, ``alphabet``, ``special_tokens`` and ``examples(split, n, seed)``, but no verifier: the labels are
the ranking itself.

Files (:func:`load_preferences`): ``.jsonl``, ``.json`` (a list of objects) or ``.parquet``, one comparison
per row, either pairwise (``prompt``, ``chosen``, ``rejected``) or K-wise (``prompt``, ``responses``: a list
of K ≥ 2 strings ranked best first); the two kinds may be mixed. TRL's layouts are read as they are: the
prompt a string or a list of chat messages (a :class:`~advantage.envs.text.core.ChatPrompt`), ``chosen`` /
``rejected`` strings or lists of messages (their assistant turns are the responses), and the implicit-prompt
form without a ``prompt`` column (two whole conversations that share every message but the last). Keys may
be dotted for nested objects. Other columns go to ``meta``. Every problem is a
:class:`~advantage.errors.ConfigError` naming the file and the row or line.

The ``synthetic`` task (:class:`SyntheticPreferenceTask`):

* a prompt is ``prompt_length`` (< ``letters``) letters drawn uniformly from the first ``letters``
  lowercase letters, followed by ``=`` (``"cabbe="``); its split is a BLAKE2b hash of the prompt
  (90/5/5), so splits share no prompt;
* a candidate response is 1..``response_length`` letters (length uniform). Each candidate draws a rate
  :math:`q \sim U(0, 1)` and takes each letter from the prompt's letters with probability :math:`q`,
  else from the other letters, so the candidates of one prompt range from all-relevant to all-off;
* the hidden score :func:`hidden_score` is the fraction of the response's characters that occur in the
  prompt, :math:`h(x, y) = \frac{1}{|y|}\sum_t \mathbb 1[y_t \in x] \in [0, 1]` (an empty response
  scores 0). A match (does this letter occur in the prompt?) and an average over the response: a
  2-layer character transformer learns it to ~0.9 pairwise accuracy in 15 s on a CPU, and a policy
  optimised against it must learn to answer with the prompt's letters;
* the K candidates of a prompt are distinct strings with pairwise distinct hidden scores (a candidate
  repeating an earlier string or score is redrawn, so there are no ties), ranked by the hidden score;
  with ``label_noise = p`` each adjacent pair of the ranking is then swapped with probability p, in one
  pass from the top (for K = 2: the pair's order is flipped with probability p).
  The clean ranking stays in ``meta["hidden_scores"]`` (the scores in the order of ``responses``).

Everything is deterministic given (split, n, seed), and the first ``m`` examples of ``n`` equal ``n=m``'s
(:func:`advantage.envs.text.core.sample_problems`).
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from os import PathLike
from pathlib import Path
from typing import Any

from advantage.envs.text.core import (
    ChatPrompt,
    _short,
    alphabet_of,
    build_task,
    check_int,
    keyword_options,
    sample_problems,
)
from advantage.envs.text.datasets import _lookup, _prompt, _read_rows, _response, chat_messages, data_files
from advantage.envs.text.file_tasks import _DiskTask
from advantage.errors import ConfigError

_MAX_REDRAWS = 1000

__all__ = [
    "PREFERENCE_TASKS",
    "PreferenceDatasetTask",
    "PreferenceExample",
    "SyntheticPreferenceTask",
    "hidden_score",
    "load_preferences",
    "make_preference_task",
    "preference_task_options",
    "ranked_pairs",
]


@dataclass(frozen=True)
class PreferenceExample:
    """A prompt and its responses, ranked **best first** (K ≥ 2); ``meta`` holds the file's other
    columns, or the synthetic task's ``hidden_scores``; ``origin`` names the file and row it came from."""

    prompt: str
    responses: tuple[str, ...]
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False)
    origin: str = field(default="", compare=False)  # "<file> row <i>" for rows read from a file

    @property
    def chosen(self) -> str:
        """The best response."""
        return self.responses[0]

    @property
    def rejected(self) -> str:
        """The worst response (the second one of a pair)."""
        return self.responses[-1]

    def pairs(self) -> list[tuple[int, int]]:
        """The :math:`\\binom K2` comparisons ``(i, j)``, i ranked above j."""
        k = len(self.responses)
        return [(i, j) for i in range(k) for j in range(i + 1, k)]


# ----------------------------------------------------------------------------------------------------
# Files


def load_preferences(
    path: str | PathLike[str],
    *,
    prompt_key: str = "prompt",
    chosen_key: str = "chosen",
    rejected_key: str = "rejected",
    responses_key: str = "responses",
) -> list[PreferenceExample]:
    """Read a ``.jsonl``/``.json``/``.parquet`` preference file into :class:`PreferenceExample` s, in file
    order. A row with the ``responses_key`` column is a K-wise ranking (best first), any other row needs
    ``chosen_key`` and ``rejected_key``; the remaining columns go to ``meta``."""
    p, rows = _read_rows(path, "preference dataset")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ConfigError(f"{p}: row {i} must be an object, got {type(row).__name__}")
        if responses_key in row:
            prompt = _prompt(p, i, row, prompt_key)
            used = {prompt_key, responses_key}
            value = row[responses_key]
            if not isinstance(value, list | tuple) or not all(isinstance(r, str) for r in value):
                raise ConfigError(
                    f"{p}: row {i} column {responses_key!r} must be a list of strings ranked best first, "
                    f"got {value!r}"
                )
            responses = tuple(value)
            if len(responses) < 2:
                raise ConfigError(
                    f"{p}: row {i} column {responses_key!r} has {len(responses)} response(s); "
                    "a ranking needs at least 2"
                )
        else:
            if chosen_key not in row and rejected_key not in row:
                cols = ", ".join(map(str, row)) or "none"
                raise ConfigError(
                    f"{p}: row {i} has neither a {responses_key!r} column nor {chosen_key!r} and "
                    f"{rejected_key!r} columns (columns present: {cols})"
                )
            used = {prompt_key, chosen_key, rejected_key}
            prompt, responses = _pair(p, i, row, prompt_key, chosen_key, rejected_key)
        seen: dict[str, int] = {}
        for k, r in enumerate(responses):
            if r in seen:
                what = (
                    f"chosen and rejected are identical ({_short(r)})"
                    if responses_key not in row
                    else f"responses {seen[r]} and {k} are identical ({_short(r)})"
                )
                raise ConfigError(f"{p}: row {i}: {what}; a comparison needs different responses")
            seen[r] = k
        meta = {k: v for k, v in row.items() if k not in used}
        out.append(PreferenceExample(prompt=prompt, responses=responses, meta=meta, origin=f"{p} row {i}"))
    return out


def _pair(
    p: Path, i: int, row: Mapping[str, Any], prompt_key: str, chosen_key: str, rejected_key: str
) -> tuple[str, tuple[str, str]]:
    """``(prompt, (chosen, rejected))`` of a pairwise row in TRL's formats: standard (strings) or
    conversational (lists of messages, the responses' assistant turns); with no prompt column, the
    implicit-prompt form: chosen and rejected are whole conversations sharing every message but the last
    (the prompt), whose last message is the response."""
    chosen, rejected = _lookup(p, i, row, chosen_key), _lookup(p, i, row, rejected_key)
    c, r = chat_messages(chosen), chat_messages(rejected)
    if prompt_key not in row and c is not None and r is not None:
        if len(c) < 2 or c[:-1] != r[:-1] or c[-1]["role"] != "assistant" or r[-1]["role"] != "assistant":
            raise ConfigError(
                f"{p}: row {i} has no column {prompt_key!r}, and {chosen_key!r} and {rejected_key!r} are "
                "not two conversations that share their prompt messages and end in an assistant message"
            )
        return ChatPrompt(c[:-1]), (c[-1]["content"], r[-1]["content"])
    prompt = _prompt(p, i, row, prompt_key)
    return prompt, (
        _response(p, i, row, chosen_key, numbers_ok=False),
        _response(p, i, row, rejected_key, numbers_ok=False),
    )


class PreferenceDatasetTask:
    """Comparisons read from ``data.path`` (:func:`load_preferences`). Splits: the ``split`` column when
    present, else a BLAKE2b hash of the prompt (90/5/5), as for the ``dataset`` text task."""

    name = "dataset"

    def __init__(
        self,
        *,
        path: str | list[str] | None = None,
        validation_path: str | list[str] | None = None,
        test_path: str | list[str] | None = None,
        prompt_key: str = "prompt",
        chosen_key: str = "chosen",
        rejected_key: str = "rejected",
        responses_key: str = "responses",
    ):
        if path is None:
            raise ConfigError(
                "data.path is required for the preference dataset task (a .jsonl, .json or .parquet file)"
            )
        keys = {
            "prompt_key": prompt_key,
            "chosen_key": chosen_key,
            "rejected_key": rejected_key,
            "responses_key": responses_key,
        }

        def load(value: Any, key: str) -> list[PreferenceExample]:
            return [ex for f in data_files(value, key) for ex in load_preferences(f, **keys)]

        rows = load(path, "data.path")
        held = {
            split: load(value, f"data.{split}_path")
            for split, value in (("validation", validation_path), ("test", test_path))
            if value is not None
        }
        # _DiskTask only reads .prompt, .meta and .origin: the split logic is the text datasets' own.
        self._disk = _DiskTask("preference", path, rows, held)  # type: ignore[arg-type]
        self.path, self.split_sizes = self._disk.path, self._disk.split_sizes
        self.where, self.split_origin, self.stand_ins = (
            self._disk.where,
            self._disk.split_origin,
            self._disk.stand_ins,
        )
        self.special_tokens: tuple[str, ...] = ()
        every = [ex for part in (rows, *held.values()) for ex in part]
        self.alphabet = alphabet_of(ex.prompt + "".join(ex.responses) for ex in every)

    def examples(self, split: str, n: int, seed: int) -> list[PreferenceExample]:
        """``n`` rows of ``split``: the split shuffled with ``seed``, first ``n`` taken."""
        return self._disk.examples(split, n, seed)  # type: ignore[return-value]


# ----------------------------------------------------------------------------------------------------
# The synthetic task


def hidden_score(prompt: str, response: str) -> float:
    """The synthetic task's scoring rule: the fraction of ``response``'s characters that occur among the
    prompt's letters (the prompt without its trailing ``=``); 0 for an empty response."""
    if not response:
        return 0.0
    letters = set(prompt.removesuffix("="))
    return sum(c in letters for c in response) / len(response)


class SyntheticPreferenceTask:
    """Prompts of random letters, candidate responses ranked by :func:`hidden_score`, optional label noise
    (see the module docstring)."""

    name = "synthetic"
    special_tokens: tuple[str, ...] = ()

    def __init__(
        self,
        *,
        k: int = 2,
        label_noise: float = 0.0,
        letters: int = 8,
        prompt_length: int = 5,
        response_length: int = 6,
    ):
        problems: list[str] = []
        check_int(problems, "k", k, 2, 8)
        check_int(problems, "letters", letters, 3, 26)
        check_int(problems, "prompt_length", prompt_length, 2, 32)
        check_int(problems, "response_length", response_length, 2, 32)
        if (
            isinstance(label_noise, bool)
            or not isinstance(label_noise, int | float)
            or not 0 <= label_noise < 0.5
        ):
            problems.append(f"data.label_noise must be a number in [0, 0.5), got {label_noise!r}")
        if not problems and prompt_length >= letters:
            problems.append(
                f"data.prompt_length={prompt_length} must be less than data.letters={letters}, so every "
                "prompt leaves some letters out"
            )
        if not problems:
            levels = len({Fraction(a, b) for b in range(1, response_length + 1) for a in range(b + 1)})
            if k > levels:
                problems.append(
                    f"data.k={k} responses need distinct hidden scores, but responses of at most "
                    f"data.response_length={response_length} letters have only {levels}; "
                    "raise data.response_length or lower data.k"
                )
        if problems:
            raise ConfigError(problems)
        self.k, self.label_noise = k, float(label_noise)
        self.letters = string.ascii_lowercase[:letters]
        self.prompt_length, self.response_length = prompt_length, response_length
        self.alphabet = self.letters + "="

    def hidden_score(self, prompt: str, response: str) -> float:
        """:func:`hidden_score` (the rule the labels come from, before noise)."""
        return hidden_score(prompt, response)

    def _draw(self, rng: Any) -> PreferenceExample:
        prompt = "".join(rng.choice(self.letters) for _ in range(self.prompt_length)) + "="
        inside = sorted(set(prompt[:-1]))
        outside = [c for c in self.letters if c not in inside]  # never empty: prompt_length < letters
        cands: list[str] = []
        scores: list[float] = []
        misses = 0
        while len(cands) < self.k:  # distinct candidates with distinct scores (no coin-flip labels)
            q = rng.random()
            pools = [
                inside if rng.random() < q else outside for _ in range(rng.randint(1, self.response_length))
            ]
            cand = "".join(rng.choice(pool) for pool in pools)
            score = hidden_score(prompt, cand)
            if cand in cands or any(abs(score - s) < 1e-9 for s in scores):
                misses += 1
                if misses >= _MAX_REDRAWS:
                    raise ConfigError(
                        f"the synthetic task drew {_MAX_REDRAWS} candidates for prompt {prompt!r} without "
                        f"{self.k} distinct scores; lower data.k or raise data.response_length"
                    )
                continue
            cands.append(cand)
            scores.append(score)
        ranked = sorted(zip(scores, cands, strict=True), reverse=True)
        for i in range(self.k - 1):  # label noise: one pass of random adjacent swaps from the top
            if rng.random() < self.label_noise:
                ranked[i], ranked[i + 1] = ranked[i + 1], ranked[i]
        return PreferenceExample(
            prompt, tuple(c for _, c in ranked), {"hidden_scores": tuple(s for s, _ in ranked)}
        )

    def examples(self, split: str, n: int, seed: int) -> list[PreferenceExample]:
        """``n`` examples with distinct prompts, all in ``split``, deterministic given (split, n, seed)."""
        return sample_problems(
            task=f"preference-{self.name}",
            split=split,
            n=n,
            seed=seed,
            draw=self._draw,
            key=lambda e: f"preference:{e.prompt}",
            prompt=lambda e: e.prompt,
        )


# ----------------------------------------------------------------------------------------------------
# Registry


PREFERENCE_TASKS: dict[str, Callable[..., Any]] = {
    "synthetic": SyntheticPreferenceTask,
    "dataset": PreferenceDatasetTask,
}


def preference_task_options(name: str) -> dict[str, Any]:
    """The options of preference task ``name`` with their defaults."""
    return keyword_options(PREFERENCE_TASKS[name])


def make_preference_task(name: str, **options: Any) -> Any:
    """Build preference task ``name`` (``data.task``) with ``options`` (the other ``data.*`` keys); unknown
    names and options are a :class:`ConfigError` with the allowed ones."""
    return build_task(PREFERENCE_TASKS, name, options, "preference task")


def ranked_pairs(examples: Sequence[PreferenceExample]) -> list[tuple[int, int, int]]:
    """Every comparison of ``examples`` as ``(example index, better, worse)``."""
    return [(e, i, j) for e, ex in enumerate(examples) for i, j in ex.pairs()]
