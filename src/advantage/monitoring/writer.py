"""What a run writes as it trains: rows appended to ``metrics.jsonl`` (:mod:`advantage.monitoring.metrics`),
their numbers mirrored to TensorBoard and, when the run is over, the learning curve, here or in the
sidecar process (:mod:`advantage.monitoring.sidecar`)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from advantage.monitoring.metrics import METRICS_FILE, scalars
from advantage.safe_io.run_files import Folder


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf; keep the information readable
    return value


class MetricsWriter:
    """Appends rows to ``metrics.jsonl``, mirrors their numbers to TensorBoard and draws the learning curve
    when the run is over.

    With ``background=True`` (the command line) TensorBoard and the plot are the work of a sidecar process
    (:mod:`advantage.monitoring.sidecar`) that follows the file, so the training process neither imports their
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
        with Folder.open(self.run_dir) as run:
            self._file = run.open_file(METRICS_FILE, "a")  # closed in close()
        self._plot_metrics = plot_metrics
        self._tb: Any = None
        self.sidecar: Any = None
        if background and (tensorboard or plot_metrics):
            from advantage.monitoring.sidecar import Sidecar

            self.sidecar = Sidecar(
                self.run_dir, path, self._file.tell(), tensorboard, purge_step, plot_metrics
            )
        elif tensorboard:
            from advantage.monitoring.sidecar import TensorBoardWriter

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
        from advantage.monitoring.sidecar import draw_learning_curve

        return draw_learning_curve(self.run_dir, self._plot_metrics)
