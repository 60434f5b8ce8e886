"""Progress display: a live bar on a terminal (rich), plain periodic lines otherwise (logs, CI).

What a line shows depends on what the run logs (:data:`ENV_FIELDS` for environment runs, :data:`LM_FIELDS`
for language-model runs): the latest logged value of each field, never a stale one.

The percentage never passes 100 %: on-policy algorithms finish the rollout they are in, so a run can end
up to one rollout past ``trainer.total_steps``; from there on the display shows the real step as the
total. The ETA uses the speed since the previous line (or since the first step, for the first line), so
the setup before the first step (building models, loading data) does not inflate it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

# (label, metric keys in order of preference): the first key present in a logged row gives the value.
Fields = Sequence[tuple[str, Sequence[str]]]

ENV_FIELDS: Fields = (("return", ("train/episode_return",)),)
LM_FIELDS: Fields = (
    ("loss", ("train/loss", "train/policy_loss")),
    ("reward", ("train/reward/mean", "train/score/mean")),
    ("margin", ("train/reward_margin",)),
    ("acc", ("train/reward/accuracy", "train/accuracy", "train/reward_accuracy")),
    ("kl", ("train/kl", "train/kl_ref")),
    ("tok/s", ("train/tokens_per_second",)),
    ("eval acc", ("eval/accuracy",)),
)


def _fmt(label: str, value: Any) -> str:
    if not isinstance(value, int | float):
        return f"{label} {value}"
    if label == "tok/s" or abs(value) >= 1000:
        return f"{label} {value:,.0f}"
    return f"{label} {value:.3g}"


def format_rate(rate: float) -> str:
    """Steps per second: whole numbers when fast, three significant digits when slow (an LM's 0.25);
    ``-`` before there is a speed (the clock starts at the first step)."""
    if rate <= 0:
        return "-"
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


class Progress:
    """Shows steps, steps/s, the run's latest metrics (see ``fields``) and the ETA.

    Args:
        total: steps to reach (``trainer.total_steps``).
        start: steps already done (resume).
        mode: ``auto`` (bar on a TTY, lines otherwise), ``bar``, ``lines`` or ``none``.
        stream: where to write (stderr by default, so stdout stays machine-readable).
        description: the bar's label (the algorithm's name).
        fields: what to show besides steps and speed (default :data:`ENV_FIELDS`).
    """

    def __init__(
        self,
        total: int,
        start: int = 0,
        mode: str = "auto",
        stream: TextIO | None = None,
        description: str = "train",
        fields: Fields = ENV_FIELDS,
    ):
        self.total, self.start, self.step = max(total, 1), start, start
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if self.stream.isatty() else "lines"
        self.mode = mode
        self.fields = tuple(fields)
        self.values: dict[str, Any] = {}
        # The clock starts at the first update: setup before the first step is not training speed.
        self._t0: float | None = None
        self._s0 = start
        self._line_mark: tuple[float, int] | None = None  # (time, step) of the previous line
        self._next_line = start + self.total // 10
        self._last_line: tuple[int, str] | None = None  # (step, info) of the last line written
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
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self._task = self._bar.add_task(
                description, total=self.total, completed=start, rate="-", info=self.info()
            )
            self._bar.start()

    @property
    def rate(self) -> float:
        """Steps per second since the first update."""
        if self._t0 is None:
            return 0.0
        dt = time.perf_counter() - self._t0
        return (self.step - self._s0) / dt if dt > 0 else 0.0

    @property
    def shown_total(self) -> int:
        """The budget, or the real step once a run's last rollout carried it past the budget."""
        return max(self.total, self.step)

    def observe(self, metrics: Mapping[str, Any]) -> None:
        """Take the shown fields' latest values from a logged metrics row."""
        for label, keys in self.fields:
            for key in keys:
                if key in metrics:
                    self.values[label] = metrics[key]
                    break

    def info(self) -> str:
        """The fields' latest values, e.g. ``return 195 | eval return 500`` (``-`` before any)."""
        shown = [_fmt(label, self.values[label]) for label, _ in self.fields if label in self.values]
        return " | ".join(shown) if shown else f"{self.fields[0][0]} -" if self.fields else ""

    def at(self, step: int) -> None:
        """Record the step without drawing (so :attr:`rate` is current); the clock starts at the first."""
        if self._t0 is None:
            self._t0, self._s0 = time.perf_counter(), step
            self._line_mark = (self._t0, step)
        self.step = step

    def update(self, step: int) -> None:
        """Called every step: cheap unless a redraw (at most 10 per second) or a line is due."""
        self.at(step)
        if self._bar is not None:
            now = time.perf_counter()
            if now - self._last_draw >= 0.1 or step >= self.total:
                self._last_draw = now
                self._draw()
        elif self.mode == "lines" and step >= self._next_line and step < self.total:
            self._next_line = step + max(self.total // 10, 1)
            self._line()  # (the last line is written by close, with the final evaluation)

    def _draw(self) -> None:
        assert self._bar is not None  # drawn only in bar mode
        info = self.info()
        self._bar.update(
            self._task, total=self.shown_total, completed=self.step, rate=format_rate(self.rate), info=info
        )

    def eta(self) -> float:
        """Seconds left at the speed since the previous line (NaN before any progress)."""
        now = time.perf_counter()
        t_prev, s_prev = self._line_mark or (now, self.step)
        if self.step <= s_prev or now <= t_prev:
            t_prev, s_prev = self._t0 or now, self._s0
        speed = (self.step - s_prev) / (now - t_prev) if now > t_prev and self.step > s_prev else 0.0
        left = max(self.shown_total - self.step, 0)
        if left == 0:
            return 0.0
        return left / speed if speed > 0 else float("nan")

    def _line(self) -> None:
        eta = self.eta()
        self._line_mark = (time.perf_counter(), self.step)
        self._last_line = (self.step, self.info())
        total = self.shown_total
        pct = 100 * self.step / total
        eta_text = "-" if eta != eta else f"{eta:.0f}s"
        self.stream.write(
            f"[{pct:3.0f}%] step {self.step}/{total} | {format_rate(self.rate)} steps/s | "
            f"{self.info()} | eta {eta_text}\n"
        )
        self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._draw()
            self._bar.stop()
            self._bar = None
        elif self.mode == "lines" and self._t0 is not None and self._last_line != (self.step, self.info()):
            self._line()  # the last step, with the values logged at the end (the final evaluation)
