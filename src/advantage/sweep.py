"""Hyperparameter sweeps: every combination of a grid, times ``seeds`` seeds, one run folder per trial.

    advantage sweep ppo --grid algorithm.learning_rate=1e-3,3e-4 --grid algorithm.n_epochs=4,10 --seeds 3
    advantage sweep ppo --grid algorithm.gamma=0.98,0.99 --workers 2 trainer.total_steps=50000

Each trial is an ordinary run (``advantage.train``) with the grid point's overrides, ``trainer.seed`` set
to 0..seeds-1 and ``trainer.run_dir = OUT/trial-NNN``, so every trial can be evaluated, plotted or resumed
like any other run. ``summary.md`` and ``summary.json`` in ``OUT`` list each trial's final evaluation and,
per grid point, the mean and standard deviation over seeds, best first; they are rewritten after every
trial, so they are a live summary of the trials done so far. With ``progress``, a line per trial started
and finished, with the best grid point so far, goes to stderr.

The default sweep folder is ``runs/sweep-ALGO``, or ``runs/sweep-ALGO-1``, ``-2``, ... when that one is
taken (as ``train`` picks run folders); an explicit ``--out`` must be new or empty.

Where the trials run: one after another in this process (``--workers 0``, the default), or as Ray tasks,
``--workers N`` at a time, on a local Ray instance or on the cluster of ``--ray-address``. This is the
documented equivalent of Ray Tune's grid search: trials are independent runs, so plain Ray tasks are all
it takes, and a trial's folder is written by the trial itself. Every trial's config is validated before
any trial starts, so a typo fails the sweep at once rather than after hours.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from advantage.config_sources import flatten, parse_overrides
from advantage.errors import ConfigError
from advantage.safe_io.run_files import Folder


def parse_grid(specs: Sequence[str]) -> dict[str, list[Any]]:
    """``["a.b=1,2", "c=x,y"]`` → ``{"a.b": [1, 2], "c": ["x", "y"]}`` (values parsed like overrides)."""
    grid: dict[str, list[Any]] = {}
    problems = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        if not sep or not key or not values:
            problems.append(f"--grid {spec!r}: expected key=v1,v2,...")
            continue
        if key in grid:
            problems.append(f"--grid {key} is given twice")
            continue
        grid[key] = [flatten(parse_overrides([f"{key}={v}"]))[key] for v in values.split(",")]
    if problems:
        raise ConfigError(problems)
    return grid


def trials(grid: dict[str, list[Any]], seeds: int) -> list[dict[str, Any]]:
    """The cartesian product of the grid, each point repeated for seeds 0..seeds-1 (point-major order)."""
    points = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    return [{"point": point, "seed": seed} for point in points for seed in range(seeds)]


def _run_trial(algo: str | None, config: str | None, overrides: dict[str, Any]) -> dict[str, Any]:
    from advantage.runs import train

    run = train(algo, config, quiet=True, **overrides)
    evals = [r for r in run.metrics if "eval/return_mean" in r]
    last = evals[-1] if evals else {}
    out = {"step": run.step, "return_mean": last.get("eval/return_mean"), "run_dir": str(run.dir)}
    if run.stopped_by:  # Ctrl-C or SIGTERM: the trial checkpointed; the sweep stops after it
        out["stopped_by"] = run.stopped_by
    return out


def sweep(
    algo: str | None,
    grid: dict[str, list[Any]],
    *,
    seeds: int = 1,
    config: str | None = None,
    overrides: dict[str, Any] | None = None,
    out: str | Path | None = None,
    workers: int = 0,
    ray_address: str | None = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Run every trial (module docstring); returns one row per trial and writes ``OUT/summary.{md,json}``.
    ``progress``: a line per trial started and finished on stderr, with the best grid point so far."""
    from advantage.resolve import resolve_config

    if seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {seeds}")
    if not grid:
        raise ConfigError("a sweep needs at least one --grid key=v1,v2,...")
    overrides = dict(overrides or {})
    fixed = set(grid) & set(overrides)
    if fixed:
        raise ConfigError(f"{', '.join(sorted(fixed))} is both swept (--grid) and fixed (key=value)")
    plan = trials(grid, seeds)
    out_dir = Path(out) if out else _fresh(Path("runs") / f"sweep-{algo or 'config'}")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ConfigError(f"sweep folder {str(out_dir)!r} exists and is not empty; pass --out for a new one")
    per_trial = []
    problems: list[str] = []
    for i, t in enumerate(plan):
        over = {
            **overrides,
            **t["point"],
            "trainer.seed": t["seed"],
            "trainer.run_dir": str(out_dir / f"trial-{i:03d}"),
        }
        try:
            resolve_config(algo, config, over)  # every trial checked before any runs
        except ConfigError as e:
            problems.extend(f"trial {i} {t['point']}: {p}" for p in e.problems)
        per_trial.append(over)
    if problems:
        raise ConfigError(sorted(set(problems)))
    out_dir.mkdir(parents=True, exist_ok=True)
    n = len(plan)

    def say(message: str) -> None:
        if progress:
            print(message, file=sys.stderr, flush=True)

    say(f"sweep folder: {out_dir} ({n} trials: {n // seeds} grid points x {seeds} seeds)")
    rows: list[dict[str, Any] | None] = [None] * n
    started = [time.perf_counter()] * n

    def finished(i: int, result: dict[str, Any]) -> None:
        rows[i] = {"trial": i, **plan[i], **result}
        done = [r for r in rows if r is not None]
        best = _write_summary(out_dir, done, list(grid))
        ret = result["return_mean"]
        say(
            f"trial {i + 1}/{n} {_point(plan[i])} done: eval/return_mean "
            f"{'-' if ret is None else f'{ret:.4g}'} at step {result['step']} "
            f"({time.perf_counter() - started[i]:.0f}s); {len(done)}/{n} done, best so far {best}"
        )

    if workers > 0:
        from advantage.rollout.remote import import_ray

        ray = import_ray(ray_address, workers)
        task = ray.remote(num_cpus=1)(_run_trial)
        pending = {}
        for i, over in enumerate(per_trial):
            pending[task.remote(algo, config, over)] = i
            started[i] = time.perf_counter()  # queued now; Ray runs --workers of them at a time
        say(f"{n} trials queued on Ray, {workers} at a time")
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                finished(pending.pop(ref), ray.get(ref))
    else:
        for i, over in enumerate(per_trial):
            say(f"trial {i + 1}/{n} {_point(plan[i])} started: {over['trainer.run_dir']}")
            started[i] = time.perf_counter()
            finished(i, _run_trial(algo, config, over))
            if (row := rows[i]) and row.get("stopped_by"):
                break  # the remaining trials are not started
    return [r for r in rows if r is not None]


def _point(trial: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in trial["point"].items()) + f" seed={trial['seed']}"


def _fresh(base: Path) -> Path:
    """``base`` if it is free (missing or empty), else the first free ``base-1``, ``base-2``, ..."""
    path, i = base, 1
    while path.exists() and any(path.iterdir()):
        path, i = base.with_name(f"{base.name}-{i}"), i + 1
    return path


def _write_summary(out_dir: Path, rows: list[dict[str, Any]], keys: list[str]) -> str:
    """Write ``summary.{md,json}`` for ``rows`` (the trials done so far); returns the best grid point as
    ``key=value ...: mean ± std (n seeds)``."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(json.dumps(r["point"], sort_keys=True), []).append(r)
    points = []
    for members in groups.values():
        vals = [m["return_mean"] for m in members if m["return_mean"] is not None]
        mean = statistics.fmean(vals) if vals else math.nan
        std = statistics.stdev(vals) if len(vals) > 1 else 0.0
        points.append({"point": members[0]["point"], "mean": mean, "std": std, "n": len(vals)})
    points.sort(key=lambda p: -p["mean"] if not math.isnan(p["mean"]) else math.inf)
    lines = [
        "### Sweep summary",
        "",
        "| " + " | ".join(keys) + " | eval/return_mean (mean ± std over seeds) | seeds |",
        "|" + "---|" * (len(keys) + 2),
        *(
            "| "
            + " | ".join(str(p["point"][k]) for k in keys)
            + f" | {p['mean']:.4g} ± {p['std']:.3g} | {p['n']} |"
            for p in points
        ),
        "",
        "| trial | " + " | ".join(keys) + " | seed | step | eval/return_mean | run folder |",
        "|" + "---|" * (len(keys) + 5),
        *(
            f"| {r['trial']} | "
            + " | ".join(str(r["point"][k]) for k in keys)
            + f" | {r['seed']} | {r['step']} | {r['return_mean']} | {r['run_dir']} |"
            for r in rows
        ),
    ]
    # opened in the sweep folder without following a link, written atomically (advantage.safe_io.run_files)
    with Folder.open(out_dir, create=True) as folder:
        folder.write_atomic("summary.md", "\n".join(lines) + "\n")
        folder.write_atomic("summary.json", json.dumps({"points": points, "trials": rows}, indent=1))
    top = points[0]
    where = " ".join(f"{k}={top['point'][k]}" for k in keys)
    return f"{where}: {top['mean']:.4g} ± {top['std']:.3g} ({top['n']} seed{'' if top['n'] == 1 else 's'})"
