r"""Datasets on disk read into examples: :func:`read_dataset` / :func:`load_examples`, the layouts
(:data:`FORMATS`), the splits, and the ``\boxed{…}`` answers of math solutions (:func:`extract_boxed`). The
tasks that train on them, ``dataset`` and ``math``, are in :mod:`advantage.envs.text.file_tasks`.

Files: ``.jsonl`` (one object per line, blank lines skipped), ``.json`` (a list of objects) and
``.parquet`` (read with pyarrow). The layout (:data:`FORMATS`) is found from the first row's columns
(``format="auto"``) or named:

- ``plain``: ``prompt``, ``answer``;
- ``verl`` (verl's parquet): ``prompt`` a list of chat messages, the gold answer in
  ``reward_model.ground_truth``; ``data_source``, ``extra_info`` and the rest kept in ``meta``;
- ``gsm8k``: ``question``, ``answer`` ending ``#### N``: the gold answer is N (commas removed), the worked
  solution the reasoning followed by ``\boxed{N}``;
- ``math`` (MATH): ``problem``, ``solution``: the gold answer is the last ``\boxed{…}``'s content (a
  solution without a box is the answer itself), the worked solution the solution;
- ``prompt_completion`` (TRL): ``prompt``, ``completion``.

``prompt_key`` / ``answer_key`` replace the layout's columns; a dotted key (``reward_model.ground_truth``)
reaches into nested objects. A prompt may be a string or a list of ``{"role", "content"}`` messages (a
:class:`~advantage.envs.text.core.ChatPrompt`, always rendered with the tokenizer's chat template); a
response column may be TRL's list of messages (its assistant turns). Answers that are ints or floats
become strings; the other top-level columns go to :attr:`Example.meta`, and :attr:`Example.origin` names
the file and row. Every problem raises :class:`~advantage.errors.ConfigError` naming the file, the row and
the column or key (and the columns present).

Splits: a column named ``split`` (values ``train``/``validation``/``test``; ``val``, ``valid`` and ``dev``
mean ``validation``), else verl's ``extra_info.split``, is used as given — its disjointness is the file's
business. Without either a row's split is a BLAKE2b hash of its prompt, 90/5/5, so identical prompts
always share a split. ``path`` may be one file or a list of files (read in order, as verl's
``data.train_files``). Separate files per split, as verl keeps them (``data.train_files``,
``data.val_files``): with ``validation_path`` or ``test_path`` (each a file or a list) every row of
``path`` is a training row, the validation rows are ``validation_path``'s and the test rows
``test_path``'s. Either way, when only one of validation and test has rows it stands in for the other
(verl validates on its test files); the run says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

from advantage.envs.text.core import (
    SPLITS,
    ChatPrompt,
    Example,
    split_of,
)
from advantage.errors import ConfigError

__all__ = [
    "FORMATS",
    "DataFormat",
    "chat_messages",
    "data_files",
    "detect_format",
    "extract_boxed",
    "last_boxed",
    "load_examples",
    "read_dataset",
    "split_rows",
]

SUFFIXES = (".jsonl", ".json", ".parquet")
_SPLIT_ALIASES = {"val": "validation", "valid": "validation", "dev": "validation"}
BOXED = "\\boxed"
MAX_ROW_BYTES = 1 << 20  # one JSONL line, or one text field of any row: checked before anything tokenizes it
MAX_JSON_BYTES = 1 << 29  # a whole .json dataset, parsed at once (a .jsonl file is read a row at a time)


def _loads(text: str | bytes, where: str, line: bool = False) -> Any:
    """``json.loads`` whose every failure is a :class:`ConfigError` naming ``where``: malformed JSON, a
    number of thousands of digits (Python's int limit), nesting deeper than
    :data:`~advantage.safe_io.read.MAX_DEPTH` levels (counted before the parser recurses)."""
    from advantage.safe_io.read import parse_json

    return parse_json(text, where, line=line)


def _read_rows(file: str | PathLike[str], what: str) -> tuple[Path, list[Any]]:
    """The path and raw rows (not yet checked to be objects) of a dataset file with a known suffix, that
    exists and has rows; ``what`` names the file in errors (``dataset``, ``preference dataset``)."""
    path = Path(file)
    if path.suffix not in SUFFIXES:
        raise ConfigError(
            f"{what} {str(path)!r} has unsupported suffix {path.suffix!r}; allowed: {', '.join(SUFFIXES)}"
        )
    if not path.is_file():
        raise ConfigError(f"{what} file {str(path)!r} not found")
    rows = _parse_rows(path)
    if not rows:
        raise ConfigError(f"{what} {str(path)!r} is empty (no rows)")
    return path, rows


def _parse_rows(path: Path) -> list[Any]:
    """The raw rows of a dataset file, every read bounded (:mod:`advantage.safe_io.read`): a JSONL line over
    :data:`MAX_ROW_BYTES` is refused before it is read whole, a ``.json`` file over
    :data:`MAX_JSON_BYTES` before a byte is read, a Parquet file whose values decode to more than
    :data:`~advantage.safe_io.parquet.PARQUET_MAX_DECODED` bytes (by its footer, then by every batch
    decoded) or hold a value over 4 x :data:`MAX_ROW_BYTES` bytes (more than :data:`MAX_ROW_BYTES`
    characters) before it becomes Python objects."""
    from advantage.safe_io.parquet import read_parquet_rows
    from advantage.safe_io.read import iter_jsonl, read_bytes

    if path.suffix == ".jsonl":
        return [row for _, row in iter_jsonl(path, MAX_ROW_BYTES, str(path))]
    if path.suffix == ".json":
        hint = "; a larger dataset can be a .jsonl file, read a row at a time"
        data = _loads(read_bytes(path, MAX_JSON_BYTES, str(path), hint=hint), str(path))
        if not isinstance(data, list):
            raise ConfigError(f"{path}: a .json dataset must be a list of objects, got {type(data).__name__}")
        return data
    return read_parquet_rows(path, str(path), max_value_bytes=4 * MAX_ROW_BYTES)


def _lookup(path: Path, i: int, row: Mapping[str, Any], key: str) -> Any:
    """``row[key]``; a dotted ``key`` (``reward_model.ground_truth``) walks nested objects, unless the row
    has a column of that exact name. A missing column or key is an error naming the file, row and key."""
    if key in row:
        return row[key]
    parts = key.split(".")
    value: Any = row
    for depth, part in enumerate(parts):
        if not isinstance(value, Mapping) or part not in value:
            if depth == 0:
                cols = ", ".join(str(c)[:40] for c in row) or "none"
                raise ConfigError(f"{path}: row {i} has no column {key!r} (columns present: {cols})")
            outer = ".".join(parts[:depth])
            has = (
                f"has keys: {', '.join(map(str, value)) or 'none'}"
                if isinstance(value, Mapping)
                else f"is {type(value).__name__} {_short(value)}, not an object"
            )
            raise ConfigError(f"{path}: row {i} has no key {key!r} (column {outer!r} {has})")
        value = value[part]
    return value


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def chat_messages(value: Any) -> list[dict[str, str]] | None:
    """``value`` as a list of chat messages (dicts with string ``role`` and ``content``), or None when it
    is not one (verl's and TRL's conversational columns hold such lists)."""
    if not isinstance(value, list | tuple) or not value:
        return None
    if not all(
        isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in value
    ):
        return None
    return [{"role": m["role"], "content": m["content"]} for m in value]


def _what(key: str) -> str:
    """How messages name ``key``: ``column 'x'``, or ``key 'a.b'`` for a nested one."""
    return f"key {key!r}" if "." in key else f"column {key!r}"


def _check_length(path: Path, i: int, key: str, n: int) -> None:
    """A text field over :data:`MAX_ROW_BYTES` characters is an error (before any tokenizer sees it)."""
    if n > MAX_ROW_BYTES:
        raise ConfigError(f"{path}: row {i} {_what(key)} is over {MAX_ROW_BYTES} characters")


def _as_text(path: Path, i: int, key: str, value: Any, numbers_ok: bool) -> str:
    """``value`` (the row's ``key``) as a string; ints/floats become strings when ``numbers_ok``."""
    if isinstance(value, str):
        _check_length(path, i, key, len(value))
        return value
    if numbers_ok and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    allowed = "a string or a number" if numbers_ok else "a string"
    raise ConfigError(f"{path}: row {i} {_what(key)} must be {allowed}, got {_short(value)}")


def _text(path: Path, i: int, row: Mapping[str, Any], key: str, numbers_ok: bool) -> str:
    """``row[key]`` (dotted keys reach nested objects) as a string; ints/floats become strings when
    ``numbers_ok``. Over :data:`MAX_ROW_BYTES` characters is an error (before any tokenizer sees it)."""
    return _as_text(path, i, key, _lookup(path, i, row, key), numbers_ok)


def _response(path: Path, i: int, row: Mapping[str, Any], key: str, numbers_ok: bool) -> str:
    """A response column: a string (or number), or TRL's conversational form, a list of messages whose
    assistant turns are the response (their contents joined by blank lines)."""
    value = _lookup(path, i, row, key)
    messages = chat_messages(value)
    if messages is None:
        return _as_text(path, i, key, value, numbers_ok)
    turns = [m["content"] for m in messages if m["role"] == "assistant"]
    if not turns:
        raise ConfigError(f"{path}: row {i} {_what(key)} is a list of messages with no assistant message")
    response = "\n\n".join(turns)
    _check_length(path, i, key, len(response))
    return response


def _prompt(path: Path, i: int, row: Mapping[str, Any], key: str) -> str:
    """The prompt of a row: a string, or a list of chat messages (a :class:`ChatPrompt`)."""
    value = _lookup(path, i, row, key)
    if isinstance(value, str):
        return _as_text(path, i, key, value, numbers_ok=False)
    messages = chat_messages(value)
    if messages is None:
        raise ConfigError(
            f"{path}: row {i} {_what(key)} must be a string or a list of chat messages "
            f'[{{"role": ..., "content": ...}}], got {_short(value)}'
        )
    _check_length(path, i, key, sum(len(m["content"]) for m in messages))
    return ChatPrompt(messages)


# ----------------------------------------------------------------------------------------------------
# Formats: which columns hold the prompt and the answer, and how the gold answer is read from them


def _gsm8k_gold(text: str) -> tuple[str | None, str | None, str]:
    """GSM8K's ``answer``: reasoning, then ``#### N``. Gold: N without thousands commas; solution: the
    reasoning with ``\boxed{N}`` (for the math task's SFT target)."""
    if "####" not in text:
        return None, None, "has no '#### N' final answer"
    reasoning, _, final = text.rpartition("####")
    gold = final.strip().replace(",", "")
    if not gold:
        return None, None, "has nothing after '####'"
    return gold, f"{reasoning.strip()}\n{BOXED}{{{gold}}}".strip(), "ok"


def _math_gold(text: str) -> tuple[str | None, str | None, str]:
    """MATH's ``solution``: gold is the content of its last ``\boxed{…}`` and the solution is the target;
    a solution without a box is the gold answer itself."""
    gold = last_boxed(text)
    return (text, None, "ok") if gold is None else (gold, text, "ok")


@dataclass(frozen=True)
class DataFormat:
    """A dataset layout: its default ``prompt_key``/``answer_key``, how to tell it from a row's columns,
    and how the gold answer (and a worked solution, when the format has one) comes from the answer."""

    name: str
    prompt_key: str
    answer_key: str
    gold: Callable[[str], tuple[str | None, str | None, str]] | None = None


FORMATS: dict[str, DataFormat] = {  # the layouts of the module docstring
    f.name: f
    for f in (
        DataFormat("plain", "prompt", "answer"),
        DataFormat("verl", "prompt", "reward_model.ground_truth"),
        DataFormat("gsm8k", "question", "answer", _gsm8k_gold),
        DataFormat("math", "problem", "solution", _math_gold),
        DataFormat("prompt_completion", "prompt", "completion"),
    )
}
FORMAT_NAMES = ("auto", *FORMATS)


def detect_format(row: Mapping[str, Any]) -> str | None:
    """The format a row's columns look like (see :data:`FORMATS`), or None."""
    rm = row.get("reward_model")
    if "prompt" in row and isinstance(rm, Mapping) and "ground_truth" in rm:
        return "verl"
    for name in ("prompt_completion", "plain", "gsm8k", "math"):
        f = FORMATS[name]
        if f.prompt_key in row and f.answer_key in row:
            return name
    return None


def _resolve_format(
    path: Path, row: Mapping[str, Any], fmt: str, prompt_key: str | None, answer_key: str | None
) -> tuple[DataFormat, str, str]:
    """The format of a file (from its first row when ``fmt`` is auto) and the keys to read."""
    if fmt not in FORMAT_NAMES:
        raise ConfigError(f"data.format must be one of {', '.join(FORMAT_NAMES)}, got {fmt!r}")
    name = fmt if fmt != "auto" else detect_format(row)
    if name is None:  # plain, unless nothing in the row says so: then list what is known
        if prompt_key is None and answer_key is None and "prompt" not in row:
            cols = ", ".join(str(c)[:40] for c in row) or "none"
            known = "; ".join(f"{f.name} ({f.prompt_key}, {f.answer_key})" for f in FORMATS.values())
            raise ConfigError(
                f"{path}: row 0 has columns {cols}, which match no known format ({known}); name the "
                "columns with data.prompt_key and data.answer_key (dotted for nested keys)"
            )
        name = "plain"
    f = FORMATS[name]
    return f, prompt_key or f.prompt_key, answer_key or f.answer_key


def read_dataset(
    path: str | PathLike[str],
    *,
    prompt_key: str | None = None,
    answer_key: str | None = None,
    target_key: str | None = None,
    format: str = "auto",
) -> tuple[DataFormat, list[Example]]:
    """The format of a ``.jsonl``/``.json``/``.parquet`` dataset and its rows as :class:`Example` s, in file
    order. ``answer`` is the gold answer (by the format's rule); ``target`` the ``target_key`` column, else
    the format's worked solution (GSM8K, MATH), else the gold answer. Top-level columns not read go to
    ``meta``; ``origin`` is ``"<file> row <i>"``."""
    p, rows = _read_rows(path, "dataset")
    if not isinstance(rows[0], Mapping):
        raise ConfigError(f"{p}: row 0 must be an object, got {type(rows[0]).__name__}")
    fmt, prompt_key, answer_key = _resolve_format(p, rows[0], format, prompt_key, answer_key)
    used = {k.split(".")[0] for k in (prompt_key, answer_key, target_key) if k}
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ConfigError(f"{p}: row {i} must be an object, got {type(row).__name__}")
        prompt = _prompt(p, i, row, prompt_key)
        answer = _response(p, i, row, answer_key, numbers_ok=True)
        if not answer.strip():
            raise ConfigError(f"{p}: row {i} {_what(answer_key)} is empty; every row needs an answer")
        solution = None
        if fmt.gold is not None:
            gold, solution, why = fmt.gold(answer)
            if gold is None:
                raise ConfigError(
                    f"{p}: row {i} {_what(answer_key)} {why} (the {fmt.name} format; set data.format=plain "
                    "to use the column as it is)"
                )
            answer = gold
        target = _text(p, i, row, target_key, numbers_ok=True) if target_key else (solution or answer)
        meta = {k: v for k, v in row.items() if k not in used}
        out.append(Example(prompt=prompt, answer=answer, target=target, meta=meta, origin=f"{p} row {i}"))
    return fmt, out


def load_examples(
    path: str | PathLike[str],
    *,
    prompt_key: str | None = None,
    answer_key: str | None = None,
    target_key: str | None = None,
    format: str = "auto",
) -> list[Example]:
    """:func:`read_dataset`'s rows (the format detected from the columns unless given)."""
    return read_dataset(
        path, prompt_key=prompt_key, answer_key=answer_key, target_key=target_key, format=format
    )[1]


def _row_split(meta: Mapping[str, Any]) -> tuple[str, Any] | None:
    """``(column, value)`` naming a row's split: its ``split`` column, else verl's ``extra_info.split``."""
    if "split" in meta:
        return "split", meta["split"]
    extra = meta.get("extra_info")
    if isinstance(extra, Mapping) and "split" in extra:
        return "extra_info.split", extra["split"]
    return None


def split_rows(rows: list[Example]) -> dict[str, list[Example]]:
    """Rows by split: the ``split`` column or ``extra_info.split`` when present (aliases allowed), else a
    hash of the prompt. A bad value names its file and row (``Example.origin``)."""
    out: dict[str, list[Example]] = {s: [] for s in SPLITS}
    for ex in rows:
        named = _row_split(ex.meta)
        if named is not None:
            column, raw = named
            split = _SPLIT_ALIASES.get(raw, raw) if isinstance(raw, str) else raw
            if split not in out:
                allowed = ", ".join([*SPLITS, *_SPLIT_ALIASES])
                raise ConfigError(f"{ex.origin} column {column!r} must be one of {allowed}, got {raw!r}")
        else:
            split = split_of(ex.prompt)
        out[split].append(ex)
    return out


def data_files(value: Any, key: str = "data.path") -> list[str]:
    """The files of ``data.path`` / ``data.validation_path`` / ``data.test_path``: one file or a non-empty
    list of files (verl's ``data.train_files`` and ``data.val_files`` take both); ``[]`` for None."""
    if value is None:
        return []
    if isinstance(value, str | PathLike):
        return [str(value)]
    if isinstance(value, list | tuple) and value and all(isinstance(v, str | PathLike) for v in value):
        return [str(v) for v in value]
    raise ConfigError(f"{key} must be a file or a non-empty list of files, got {value!r}")


def extract_boxed(text: str) -> tuple[str | None, str]:
    r"""The content of the one ``\boxed{…}`` in ``text`` (braces balanced, stripped), or
    ``(None, reason)``: ``"no \boxed answer"``, ``"N boxed answers"``, or an unclosed/brace-less box."""
    count = text.count(BOXED)
    if count == 0:
        return None, "no \\boxed answer"
    if count > 1:
        return None, f"{count} boxed answers"
    start = text.index(BOXED) + len(BOXED)
    while start < len(text) and text[start] == " ":
        start += 1
    if start >= len(text) or text[start] != "{":
        return None, "\\boxed without {"
    depth = 0
    for j in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[start + 1 : j].strip(), "ok"
    return None, "unclosed \\boxed{"


def last_boxed(text: str) -> str | None:
    r"""The content of the last ``\boxed{…}`` in ``text`` (braces balanced, stripped), or None (a MATH
    solution's gold answer)."""
    at = text.rfind(BOXED)
    while at >= 0:
        got, _ = extract_boxed(text[at:])
        if got is not None:
            return got
        at = text.rfind(BOXED, 0, at)
    return None
