"""Metrics of a run: ``metrics.jsonl`` (one JSON object per log event) and TensorBoard event files.

Every row has ``step`` (environment steps so far) and ``time`` (seconds since the run started, counting
earlier sessions of a resumed run); the rest are named ``group/name``, e.g. ``train/episode_return``,
``eval/return_mean``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from advantage.checkpoint import atomic_write

METRICS_FILE = "metrics.jsonl"


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """All rows of ``RUN/metrics.jsonl`` (a torn last line, from a killed process, is skipped)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def truncate_metrics(run_dir: str | Path, step: int) -> None:
    """Drop rows logged after ``step`` (a resumed run replays them), atomically."""
    path = Path(run_dir) / METRICS_FILE
    if path.is_file():
        keep = [json.dumps(r) + "\n" for r in read_metrics(run_dir) if r.get("step", 0) <= step]
        atomic_write(path, "".join(keep))


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf; keep the information readable
    return value


class MetricsWriter:
    """Appends rows to ``metrics.jsonl`` and mirrors scalars to TensorBoard.

    Args:
        run_dir: the run folder.
        tensorboard: also write TensorBoard events (into the run folder, so ``tensorboard --logdir runs``
            lists every run by name).
        elapsed: seconds already spent by earlier sessions of this run (resume).
        purge_step: on resume, TensorBoard drops events after this step.
    """

    def __init__(
        self,
        run_dir: str | Path,
        tensorboard: bool = True,
        elapsed: float = 0.0,
        purge_step: int | None = None,
    ):
        self.run_dir = Path(run_dir)
        self._start = time.perf_counter() - elapsed
        self._file = open(self.run_dir / METRICS_FILE, "a")  # noqa: SIM115  (closed in close())
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.run_dir), purge_step=purge_step)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._start

    def log(self, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        row = {"step": int(step), "time": round(self.elapsed, 4)}
        row.update({k: _clean(v) for k, v in metrics.items()})
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        if self._tb is not None:
            for k, v in metrics.items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    self._tb.add_scalar(k, v, global_step=int(step))
        return row

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
