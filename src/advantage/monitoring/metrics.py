"""Metrics of a run: ``metrics.jsonl`` (one JSON object per log event), read back and checked row by row,
and the TensorBoard scalars of a row. The writer is :mod:`advantage.monitoring.writer`.

Every row has ``step`` (environment steps so far) and ``time`` (seconds since the run started, counting
earlier sessions of a resumed run); the rest are named ``group/name``, e.g. ``train/episode_return``,
``eval/return_mean``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from advantage.errors import RunDirError
from advantage.safe_io.run_files import Folder

METRICS_FILE = "metrics.jsonl"
LINE_MAX_BYTES = 1 << 20  # a row is a few hundred bytes; a longer line is not one this program wrote
_INT_RANGE = 2**63  # steps and integer values fit a signed 64-bit integer (and convert to a float)


def _check_row(row: Any, where: str) -> dict[str, Any]:
    """``row`` if it is a metrics row: a JSON object whose ``step`` is an integer >= 0 and whose integer
    values fit 64 bits; else one line naming ``where`` (``RUN/metrics.jsonl:LINE``). The readers (plots,
    the final line, resume) index rows by step and format their numbers, so a row of another shape
    must stop here, not as a traceback there."""
    if not isinstance(row, dict):
        raise RunDirError(
            f"{where}: not a metrics row (a JSON object with an integer step), got a JSON {_kind(row)}"
        )
    step = row.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < _INT_RANGE:
        got = (
            repr(step) if isinstance(step, int | float) and len(repr(step)) < 30 else f"a JSON {_kind(step)}"
        )
        raise RunDirError(f"{where}: step must be an integer >= 0, got {got}")
    for key, value in row.items():
        if isinstance(value, int) and not isinstance(value, bool) and not -_INT_RANGE <= value < _INT_RANGE:
            raise RunDirError(f"{where}: the value of {key[:60]!r} is an integer out of range")
    return row


def _kind(value: Any) -> str:
    """The JSON type of a parsed value, for a message that never echoes the file's content."""
    if value is None:
        return "null"
    return {
        bool: "boolean",
        int: "number",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
    }.get(type(value), type(value).__name__)


def metric_lines(run_dir: str | Path) -> Iterator[tuple[bytes, dict[str, Any]]]:
    """``(line, row)`` for every row of ``RUN/metrics.jsonl`` (none when it does not exist), read without
    following a link and one bounded line at a time. A line that is not JSON is a write cut short by a
    killed process and is skipped; a line that is JSON but not a metrics row (:func:`_check_row`), or a
    line over :data:`LINE_MAX_BYTES`, is an error naming the file and the line."""
    with Folder.open(run_dir) as run:
        if not run.exists(METRICS_FILE):
            return
        f = run.open_file(METRICS_FILE, "rb")
    path = Path(run_dir) / METRICS_FILE
    with f:
        number = 0
        while line := f.readline(LINE_MAX_BYTES + 1):
            number += 1
            if len(line) > LINE_MAX_BYTES:
                raise RunDirError(f"{path}:{number}: line over {LINE_MAX_BYTES} bytes; not a metrics row")
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
                continue
            yield line, _check_row(row, f"{path}:{number}")


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """All rows of ``RUN/metrics.jsonl`` (a torn line, from a killed process, is skipped; a row of
    another shape is an error naming the file and line: :func:`metric_lines`)."""
    return [row for _, row in metric_lines(run_dir)]


def truncate_metrics(run_dir: str | Path, step: int) -> None:
    """Drop rows logged after ``step`` (a resumed run replays them), atomically, a line at a time."""
    with Folder.open(run_dir) as run:
        if not run.exists(METRICS_FILE):
            return
        # every row is checked before the file is replaced: an error leaves it as it was
        keep = (line.rstrip(b"\n") + b"\n" for line, row in metric_lines(run_dir) if row["step"] <= step)
        run.write_atomic(METRICS_FILE, keep)


def scalars(row: Mapping[str, Any]) -> list[tuple[str, float]]:
    """The TensorBoard scalars of a metrics row: its numbers except ``step`` and ``time``."""
    return [
        (k, float(v))
        for k, v in row.items()
        if k not in ("step", "time") and isinstance(v, int | float) and not isinstance(v, bool)
    ]
