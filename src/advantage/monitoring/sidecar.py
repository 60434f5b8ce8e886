"""A run's TensorBoard events and end-of-run plot, written by a process of its own.

TensorBoard's writer (protobuf, 0.7 s to import) and matplotlib (about 1 s to import and draw) used to run
inside the training process: before its first step and after its last. The run now starts this sidecar
(``python -m advantage.monitoring.sidecar``) when its metrics writer opens. The sidecar follows
``metrics.jsonl`` from the byte where this session's rows begin, mirrors every numeric value to
TensorBoard as it appears (live, as before: ``tensorboard --logdir runs`` sees a running run), and when
the training process closes the pipe to it -- at the end of the run, on an error, on a signal, or because
the process died -- reads the last rows, closes the event file and draws ``plots/learning_curve.png``.

The command line uses it and does not wait for it (the shell gets its prompt back while the plot is drawn,
on another core when there is one). :func:`advantage.train` writes both in its own process by default, so
a notebook or script finds the plot when the call returns (``background=True`` uses the sidecar). The
sidecar's own errors (a plot that fails) go to ``RUN/sidecar.log``, which exists only when there was one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from advantage.errors import AdvantageError
from advantage.safe_io.run_files import Folder

LOG_FILE = "sidecar.log"
PLOT_FILE = Path("plots") / "learning_curve.png"
POLL_SECONDS = 0.5  # how often the sidecar looks for new rows (TensorBoard's own flush is every 120 s)


def draw_learning_curve(run_dir: Path, metrics: Sequence[str]) -> str | None:
    """Draw ``RUN/plots/learning_curve.png`` of ``metrics``; returns a warning instead of raising (a plot
    must never cost the user a finished run), or None. Used by the sidecar and by in-process runs."""
    from advantage.monitoring.plotting import plot_runs

    try:
        plot_runs([run_dir], run_dir / PLOT_FILE, metrics=metrics, inside=run_dir)
    except Exception as e:  # e.g. no metric logged yet: say so, no traceback
        return f"warning: could not plot learning curves: {e}"
    return None


class Sidecar:
    """The training process's handle: start the sidecar, close its pipe, optionally wait for it."""

    def __init__(
        self,
        run_dir: Path,
        metrics_file: Path,
        offset: int,
        tensorboard: bool,
        purge_step: int | None,
        plot_metrics: Sequence[str] | None,
    ):
        args = [sys.executable, "-m", "advantage.monitoring.sidecar"]
        args += [str(run_dir), str(metrics_file), str(offset)]
        if tensorboard:
            args.append("--tensorboard")
        if purge_step is not None:
            args += ["--purge-step", str(purge_step)]
        for m in plot_metrics or ():
            args += ["--plot", m]
        self._log, self._run_dir = run_dir / LOG_FILE, run_dir
        env = dict(os.environ)
        # the sidecar imports advantage from where this process did (an editable checkout, a test's src/)
        pkg_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join([pkg_root, *filter(None, [env.get("PYTHONPATH")])])
        with Folder.open(run_dir) as run, run.open_file(LOG_FILE, "ab") as log:
            self.proc = subprocess.Popen(
                args,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=log,  # never the terminal or a caller's pipe: it may outlive this process
                start_new_session=True,  # Ctrl-C in the terminal stops the run, not its wrap-up
                env=env,
                close_fds=True,
            )

    def close(self) -> None:
        """End of this session's rows: the sidecar writes what is left and the plot, then exits."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()

    def wait(self, timeout: float = 120.0) -> str | None:
        """Wait for the sidecar to finish; returns its warnings (the log's text), or None."""
        self.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return f"the plot and TensorBoard writer did not finish within {timeout:.0f} s"
        try:
            text = _tail(self._run_dir, LOG_FILE).decode(errors="replace").strip()
        except (OSError, AdvantageError):
            return None
        return text or None


def _tail(run_dir: Path, name: str, limit: int = 1 << 16) -> bytes:
    """The last ``limit`` bytes of ``RUN/name`` (a log read back for a message: bounded, and opened
    without following a link)."""
    with Folder.open(run_dir) as run:
        fd = run.open_fd(name, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, limit, max(0, size - limit))
    finally:
        os.close(fd)


class TensorBoardWriter:
    """Scalars into a TensorBoard event file with TensorBoard's own writer (no torch needed)."""

    def __init__(self, log_dir: Path, purge_step: int | None):
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary = Event, Summary
        self._writer = EventFileWriter(str(log_dir))
        if purge_step is not None:  # a resumed run: TensorBoard hides the older events after this step
            self._writer.add_event(Event(step=purge_step, file_version="brain.Event:2"))
            self._writer.add_event(Event(step=purge_step, session_log=SessionLog(status=SessionLog.START)))

    def add(self, step: int, wall_time: float, values: list[tuple[str, float]]) -> None:
        summary = self._summary(value=[self._summary.Value(tag=k, simple_value=v) for k, v in values])
        self._writer.add_event(self._event(wall_time=wall_time, step=step, summary=summary))

    def close(self) -> None:
        self._writer.close()


def follow(
    metrics_file: Path,
    offset: int,
    finished: threading.Event,
    on_row: Any,
    poll: float = POLL_SECONDS,
) -> None:
    """Call ``on_row(row)`` for every complete line appended to ``metrics_file`` after byte ``offset``,
    until ``finished`` is set; the lines present then are read too. A torn line is skipped."""
    import time

    with Folder.open(metrics_file.parent) as run, run.open_file(metrics_file.name, "rb") as f:
        f.seek(offset)
        pending = b""
        while True:
            done = finished.wait(poll)
            pending += f.read()
            *lines, pending = pending.split(b"\n")
            for line in lines:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and isinstance(row.get("step"), int):
                    on_row(row, time.time())
            if done:
                return


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m advantage.monitoring.sidecar", description=__doc__.split("\n")[0]
    )
    p.add_argument("run_dir", type=Path)
    p.add_argument("metrics_file", type=Path)
    p.add_argument("offset", type=int)
    p.add_argument("--tensorboard", action="store_true")
    p.add_argument("--purge-step", type=int)
    p.add_argument("--plot", action="append", default=[])
    ns = p.parse_args(argv)

    finished = threading.Event()

    def wait_for_eof() -> None:  # the training process closes the pipe (or dies): the run is over
        while sys.stdin.buffer.read(65536):
            pass
        finished.set()

    from advantage.monitoring.metrics import scalars

    threading.Thread(target=wait_for_eof, daemon=True).start()
    tb = TensorBoardWriter(ns.run_dir, ns.purge_step) if ns.tensorboard else None

    def on_row(row: dict[str, Any], wall_time: float) -> None:
        values = scalars(row)
        if tb is not None and values:
            tb.add(row["step"], wall_time, values)

    try:
        follow(ns.metrics_file, ns.offset, finished, on_row)
    finally:
        if tb is not None:
            tb.close()
    warning = draw_learning_curve(ns.run_dir, ns.plot) if ns.plot else None
    if warning:
        print(warning, file=sys.stderr)
    with contextlib.suppress(OSError, AdvantageError), Folder.open(ns.run_dir) as run:
        if run.size(LOG_FILE) == 0:
            run.unlink(LOG_FILE)
    return 1 if warning else 0


if __name__ == "__main__":
    sys.exit(main())
