r"""Small generated data files in every layout :func:`~advantage.envs.text.datasets.read_dataset` and
:func:`~advantage.envs.text.preference.load_preferences` read: the example files of ``examples/data/``
(``python examples/data/make_examples.py``) and the files of the tests.

The problems are two-number word problems (``"Ava has 12 apples and gets 7 more. How many apples does
Ava have now?"``), written in each format:

- ``plain``: ``{"prompt", "answer"}``;
- ``gsm8k``: ``{"question", "answer": "Ava has 12 + 7 = 19 apples.\n#### 19"}``;
- ``math``: ``{"problem", "solution": "... so the answer is $\boxed{19}$."}``;
- ``verl``: verl's parquet columns ``data_source``, ``prompt`` (chat messages), ``ability``,
  ``reward_model`` (``{"style": "rule", "ground_truth": "19"}``), ``extra_info`` (``{"split", "index"}``);
- ``prompt_completion``: TRL's ``{"prompt", "completion"}``;
- ``preference`` / ``preference_chat``: TRL's ``{"prompt", "chosen", "rejected"}``, as strings or as
  lists of chat messages.

Each row has a ``split`` column (every tenth row validation, the next test), so even a file of a few
dozen rows has every split. :func:`write_verl_files` writes verl's own layout instead: a train file and a
test file, the split only in ``extra_info.split`` (what verl's ``examples/data_preprocess`` scripts
write, and what ``data.train_files`` / ``data.val_files`` name).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["FILES", "VERL_FILES", "word_problems", "write_examples", "write_rows", "write_verl_files"]

_NAMES = ("Ava", "Ben", "Cleo", "Dan", "Eli", "Fay", "Gus", "Hana")
_THINGS = ("apples", "books", "coins", "marbles", "pens", "stamps")


def word_problems(n: int, seed: int = 0, max_number: int = 20) -> list[dict[str, Any]]:
    """``n`` problems ``{"question", "reasoning", "answer", "split"}``, deterministic given the seed:
    ``a + b`` (gets more) or ``a - b`` (gives away), ``0 <= b <= a <= max_number``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        name, thing = rng.choice(_NAMES), rng.choice(_THINGS)
        a = rng.randint(1, max_number)
        b = rng.randint(0, a)
        if rng.random() < 0.5:
            q = f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have now?"
            why, ans = f"{name} has {a} + {b} = {a + b} {thing}.", a + b
        else:
            q = f"{name} has {a} {thing} and gives away {b}. How many {thing} does {name} have left?"
            why, ans = f"{name} has {a} - {b} = {a - b} {thing} left.", a - b
        split = "validation" if i % 10 == 8 else "test" if i % 10 == 9 else "train"
        out.append({"question": q, "reasoning": why, "answer": str(ans), "split": split})
    return out


def _row(fmt: str, i: int, p: Mapping[str, Any]) -> dict[str, Any]:
    """Problem ``p`` (row ``i``) as a row of format ``fmt`` (see the module docstring)."""
    q, why, ans = p["question"], p["reasoning"], p["answer"]
    wrong = str(int(ans) + 1)
    layouts: dict[str, dict[str, Any]] = {
        "plain": {"prompt": q, "answer": ans},
        "gsm8k": {"question": q, "answer": f"{why}\n#### {ans}"},
        "math": {"problem": q, "solution": f"{why} So the answer is $\\boxed{{{ans}}}$."},
        "verl": {
            "data_source": "word_problems",
            "prompt": [{"role": "user", "content": f"{q} Put the final answer in \\boxed{{}}."}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": ans},
            "extra_info": {"split": p["split"], "index": i},
        },
        "prompt_completion": {"prompt": q, "completion": ans},
        "preference": {"prompt": q, "chosen": ans, "rejected": wrong},
        "preference_chat": {
            "prompt": [{"role": "user", "content": q}],
            "chosen": [{"role": "assistant", "content": ans}],
            "rejected": [{"role": "assistant", "content": wrong}],
        },
    }
    if fmt not in layouts:
        raise ValueError(f"unknown format {fmt!r}; allowed: {', '.join(FILES)}")
    return {**layouts[fmt], "split": p["split"]}


# format -> file name of the example files
FILES = {
    "plain": "plain.jsonl",
    "gsm8k": "gsm8k.jsonl",
    "math": "math.jsonl",
    "verl": "verl.parquet",
    "prompt_completion": "prompt_completion.jsonl",
    "preference": "preference.jsonl",
    "preference_chat": "preference_chat.jsonl",
}


def write_rows(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write ``rows`` as ``.jsonl`` or ``.parquet`` (by the suffix)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [dict(r) for r in rows]
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_examples(
    folder: str | Path, n: int = 40, seed: int = 0, formats: Iterable[str] | None = None
) -> dict[str, Path]:
    """Write the same ``n`` problems in each format of ``formats`` (default all of :data:`FILES`) to
    ``folder``; returns format → path."""
    problems = word_problems(n, seed)
    return {
        f: write_rows(Path(folder) / FILES[f], [_row(f, i, p) for i, p in enumerate(problems)])
        for f in (formats or FILES)
    }


# split -> file name of verl's own pair (write_verl_files)
VERL_FILES = {"train": "verl_train.parquet", "test": "verl_test.parquet"}


def write_verl_files(folder: str | Path, n: int = 40, seed: int = 0, test_every: int = 5) -> dict[str, Path]:
    """verl's layout as its preprocessing writes it: ``n`` problems, every ``test_every``-th in the test
    file, the rest in the train file; no ``split`` column, ``extra_info.split`` says ``train`` or ``test``
    (as verl's GSM8K script). Returns split → path (:data:`VERL_FILES`)."""
    rows: dict[str, list[dict[str, Any]]] = {"train": [], "test": []}
    for i, p in enumerate(word_problems(n, seed)):
        split = "test" if i % test_every == test_every - 1 else "train"
        row = _row("verl", i, {**p, "split": split})
        del row["split"]
        rows[split].append(row)
    return {split: write_rows(Path(folder) / VERL_FILES[split], rows[split]) for split in VERL_FILES}
