"""Metrics of a run: ``metrics.jsonl`` (one JSON object per log event) and TensorBoard event files.

Every row has ``step`` (environment steps so far) and ``time`` (seconds since the run started, counting
earlier sessions of a resumed run); the rest are named ``group/name``, e.g. ``train/episode_return``,
``eval/return_mean``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
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
    """Appends rows to ``metrics.jsonl``, mirrors their numbers to TensorBoard and draws the learning curve
    when the run is over.

    With ``background=True`` (the command line) TensorBoard and the plot are the work of a sidecar process
    (:mod:`advantage.sidecar`) that follows the file, so the training process neither imports their
    libraries nor waits for the plot. Otherwise (the Python API) they are written in this process and
    :meth:`wait` draws the plot.

    Args:
        run_dir: the run folder.
        tensorboard: also write TensorBoard events (into the run folder, so ``tensorboard --logdir runs``
            lists every run by name).
        elapsed: seconds already spent by earlier sessions of this run (resume).
        purge_step: on resume, TensorBoard drops events after this step.
        plot_metrics: draw ``plots/learning_curve.png`` of these metrics at the end (None: no plot).
        background: hand TensorBoard and the plot to a sidecar process.
    """

    def __init__(
        self,
        run_dir: str | Path,
        tensorboard: bool = True,
        elapsed: float = 0.0,
        purge_step: int | None = None,
        plot_metrics: Sequence[str] | None = None,
        background: bool = False,
    ):
        self.run_dir = Path(run_dir)
        self._start = time.perf_counter() - elapsed
        path = self.run_dir / METRICS_FILE
        self._file = open(path, "a")  # noqa: SIM115  (closed in close())
        self._plot_metrics = plot_metrics
        self._tb: Any = None
        self.sidecar: Any = None
        if background and (tensorboard or plot_metrics):
            from advantage.sidecar import Sidecar

            self.sidecar = Sidecar(
                self.run_dir, path, self._file.tell(), tensorboard, purge_step, plot_metrics
            )
        elif tensorboard:
            from advantage.sidecar import TensorBoardWriter

            self._tb = TensorBoardWriter(self.run_dir, purge_step)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._start

    def log(self, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        row = {"step": int(step), "time": round(self.elapsed, 4)}
        row.update({k: _clean(v) for k, v in metrics.items()})
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        if self._tb is not None:
            self._tb.add(int(step), time.time(), scalars(metrics))
        return row

    def close(self) -> None:
        """Close the file (and this process's TensorBoard writer), or tell the sidecar that this session's
        rows are complete."""
        if not self._file.closed:
            self._file.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self.sidecar is not None:
            self.sidecar.close()

    def wait(self) -> str | None:
        """The end-of-run outputs, complete: the sidecar finished, or the plot drawn here. Returns a
        warning (a plot that could not be drawn never costs the user a finished run), or None."""
        self.close()
        if self.sidecar is not None:
            return self.sidecar.wait()
        if not self._plot_metrics:
            return None
        from advantage.sidecar import draw_learning_curve

        return draw_learning_curve(self.run_dir, self._plot_metrics)


def scalars(row: Mapping[str, Any]) -> list[tuple[str, float]]:
    """The TensorBoard scalars of a metrics row: its numbers except ``step`` and ``time``."""
    return [
        (k, float(v))
        for k, v in row.items()
        if k not in ("step", "time") and isinstance(v, int | float) and not isinstance(v, bool)
    ]
