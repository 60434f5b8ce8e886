"""Progress display: a live bar on a terminal (rich), plain periodic lines otherwise (logs, CI)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Shows steps, steps/s, the recent episode return and the ETA.

    Args:
        total: steps to reach.
        start: steps already done (resume).
        mode: ``auto`` (bar on a TTY, lines otherwise), ``bar``, ``lines`` or ``none``.
        stream: where to write (stderr by default, so stdout stays machine-readable).
    """

    def __init__(
        self,
        total: int,
        start: int = 0,
        mode: str = "auto",
        stream: TextIO | None = None,
        description: str = "train",
    ):
        self.total, self.start, self.step = max(total, 1), start, start
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if self.stream.isatty() else "lines"
        self.mode = mode
        self.recent: float | None = None
        self._t0 = time.perf_counter()
        self._next_line = start + self.total // 10
        self._bar = None
        self._last_draw = 0.0
        if mode == "bar":
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]} steps/s"),
                TextColumn("return {task.fields[ret]}"),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self._task = self._bar.add_task(description, total=self.total, completed=start, rate="-", ret="-")
            self._bar.start()

    @property
    def rate(self) -> float:
        dt = time.perf_counter() - self._t0
        return (self.step - self.start) / dt if dt > 0 else 0.0

    def update(self, step: int, recent_return: float | None = None) -> None:
        """Called every step: cheap unless a redraw (at most 10 per second) or a line is due."""
        self.step = step
        if recent_return is not None:
            self.recent = recent_return
        if self._bar is not None:
            now = time.perf_counter()
            if now - self._last_draw >= 0.1 or step >= self.total:
                self._last_draw = now
                self._bar.update(self._task, completed=step, rate=f"{self.rate:,.0f}", ret=self._ret())
        elif self.mode == "lines" and step >= self._next_line:
            self._next_line = step + self.total // 10
            self._line(self._ret())

    def _ret(self) -> str:
        return "-" if self.recent is None else f"{self.recent:.3g}"

    def _line(self, ret: str) -> None:
        eta = (self.total - self.step) / self.rate if self.rate > 0 else float("nan")
        pct = 100 * self.step / self.total
        self.stream.write(
            f"[{pct:3.0f}%] step {self.step}/{self.total} | {self.rate:,.0f} steps/s | "
            f"return {ret} | eta {eta:.0f}s\n"
        )
        self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
