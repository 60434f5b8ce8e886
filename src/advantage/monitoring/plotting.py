"""Learning curves from ``metrics.jsonl``: several runs on one figure, one panel per metric."""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Sequence
from pathlib import Path

from advantage.errors import RunDirError
from advantage.monitoring.metrics import METRICS_FILE, read_metrics
from advantage.safe_io.run_files import Folder, write_run_file

DEFAULT_METRICS = ("train/episode_return", "eval/return_mean")


def _series(rows: list[dict], metric: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in rows:
        v = r.get(metric)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            xs.append(r["step"])
            ys.append(float(v))
    return xs, ys


def _spans_decades(ax, decades: float = 2.0) -> bool:
    """True when every plotted value is positive and they span at least ``decades`` orders of magnitude."""
    ys = [y for line in ax.get_lines() for y in line.get_ydata()]
    return bool(ys) and min(ys) > 0 and max(ys) / min(ys) >= 10**decades


def plot_runs(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    metrics: Sequence[str] = DEFAULT_METRICS,
    labels: Sequence[str] | None = None,
    *,
    inside: str | Path | None = None,
) -> Path:
    """Plot ``metrics`` (x: environment steps) of every run into ``out`` (PNG). ``eval/return_mean`` is
    drawn with a ±1 std band when ``eval/return_std`` is logged; a panel whose values are all positive and
    span two orders of magnitude or more gets a log scale. Returns the written path.

    ``inside``: the run folder that holds ``out`` (``RUN/plots/learning_curve.png``): the folders between
    are opened without following a link, as every file in a run folder is
    (:mod:`advantage.safe_io.run_files`). The image is written atomically either way, and never through a
    link at ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [Path(d) for d in run_dirs]
    data = {}
    for d in runs:
        with Folder.open(d) if d.is_dir() else contextlib.nullcontext() as run:
            if run is None or not run.exists(METRICS_FILE):
                raise RunDirError(f"{d} is not a run folder (no {METRICS_FILE})")
        data[d] = read_metrics(d)
    shown = [m for m in metrics if any(_series(rows, m)[0] for rows in data.values())]
    if not shown:
        have = sorted({k for rows in data.values() for r in rows for k in r} - {"step", "time"})
        raise RunDirError(
            f"none of the metrics {list(metrics)} was logged; logged: {', '.join(have) or 'nothing'}"
        )
    fig, axes = plt.subplots(1, len(shown), figsize=(6 * len(shown), 4), squeeze=False)
    for ax, metric in zip(axes[0], shown, strict=True):
        for i, d in enumerate(runs):
            xs, ys = _series(data[d], metric)
            if not xs:
                continue
            label = labels[i] if labels else d.name
            line = ax.plot(xs, ys, label=label, marker="o" if len(xs) < 30 else None, markersize=3)[0]
            if metric.endswith("return_mean"):
                _, sd = _series(data[d], metric.replace("return_mean", "return_std"))
                if len(sd) == len(ys):
                    lo = [y - s for y, s in zip(ys, sd, strict=True)]
                    hi = [y + s for y, s in zip(ys, sd, strict=True)]
                    ax.fill_between(xs, lo, hi, alpha=0.15, color=line.get_color())
        if _spans_decades(ax):
            ax.set_yscale("log")  # a diverging quantity (‖w‖ on Baird's counterexample) reads on a log axis
        ax.set_title(metric)
        ax.set_xlabel("environment steps")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=110)
    plt.close(fig)
    out = Path(out)
    if inside is not None:
        return write_run_file(inside, out.relative_to(inside), image.getvalue())
    return write_run_file(out.parent, out.name, image.getvalue())
