"""Where the SFT example ends, seed by seed: ``examples/sft_addition.yaml`` trained with
``trainer.seed`` = 0 .. 4, each run evaluated on the 500 held-out test prompts (greedy accuracy).

    python -m benchmarks.sft_seeds                                      # -> results/sft_seeds.{md,json}
    python -m benchmarks.sft_seeds --set trainer.total_steps=1000 --name sft_seeds_1000

The example is the start point of the README's GRPO stage; a recipe whose end point moves by tens of
points between seeds gives GRPO a different problem each time. Each run is a fresh process with one torch
thread (``advantage train sft --config examples/sft_addition.yaml trainer.seed=S ...`` then
``advantage eval RUN --json``), ``--jobs`` of them at a time (2 on a 2-core machine: the wall times are
then those of a machine with both cores busy). ``--set KEY=VALUE`` (repeatable) adds overrides to every
run, e.g. a longer schedule; they are recorded in the results.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.pipeline import ROOT, evaluate_run, map_seeds, run_cli, versions, write_results

EXAMPLE = "examples/sft_addition.yaml"


def train(seed: int, run_dir: Path, sets: Sequence[str] = ()) -> float:
    """``advantage train sft --config examples/sft_addition.yaml trainer.seed=SEED`` (and ``sets``) into
    ``run_dir``; its wall seconds."""
    _, seconds = run_cli(
        "train",
        "sft",
        "--config",
        EXAMPLE,
        f"trainer.seed={seed}",
        f"trainer.run_dir={run_dir}",
        "trainer.tensorboard=false",
        "trainer.progress=none",
        *sets,
        cwd=ROOT,
    )
    return seconds


def sft_run(seed: int, folder: Path, reuse: Path | None) -> tuple[Path, float | None]:
    """The SFT example's run of ``seed``: ``reuse/seedS`` (``--runs-dir`` of an earlier call; no wall
    seconds) or trained now into ``folder/sft_seedS``."""
    if reuse is not None:
        return reuse / f"seed{seed}", None
    run_dir = folder / f"sft_seed{seed}"
    return run_dir, train(seed, run_dir)


def one_seed(seed: int, sets: list[str], folder: Path) -> dict[str, Any]:
    """Train and evaluate seed ``seed``; its test accuracy and wall seconds."""
    run_dir = folder / f"seed{seed}"
    train_s = train(seed, run_dir, sets)
    result = evaluate_run(run_dir)
    accuracy, n = float(result["accuracy"]), int(result["n"])
    return {"seed": seed, "test_accuracy": accuracy, "n": n, "wall_s": train_s, "steps": int(result["step"])}


def summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    accs = [r["test_accuracy"] for r in runs]
    return {
        "min": min(accs),
        "max": max(accs),
        "spread_points": 100 * (max(accs) - min(accs)),
        "mean": statistics.fmean(accs),
        "std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
    }


def table(res: dict[str, Any]) -> list[str]:
    s = res["summary"]
    extra = " ".join(res["overrides"]) or "none"
    lines = [
        "### The SFT example's end point over seeds",
        "",
        f"`{res['command']}`; `{EXAMPLE}` with overrides: {extra}. Test accuracy on "
        f"{res['runs'][0]['n']} held-out prompts (greedy); torch {res['torch']}, {res['cpus']} CPUs, "
        f"{res['jobs']} runs at a time (1-minute load {res['load_average_start']:.2f} at the start).",
        "",
        "| seed | test accuracy | steps trained | train wall s |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['seed']} | {r['test_accuracy']:.3f} | {r.get('steps', '–')} | {r['wall_s']:.0f} |"
        for r in res["runs"]
    ]
    lines += [
        "",
        f"Range {s['min']:.3f}-{s['max']:.3f} (spread {s['spread_points']:.1f} points), "
        f"mean {s['mean']:.3f}, std {s['std']:.3f} over {len(res['runs'])} seeds.",
    ]
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--name", default="sft_seeds")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--runs-dir", default=None, help="keep the run folders here (default: a temporary folder)")
    args = p.parse_args()
    bad = [s for s in args.sets if "=" not in s]
    if bad:
        p.error(f"--set takes KEY=VALUE, got {bad}")
    load = os.getloadavg()[0]
    runs = map_seeds(lambda s, folder: one_seed(s, args.sets, folder), args.seeds, args.jobs, args.runs_dir)
    command = "python -m benchmarks.sft_seeds" + "".join(f" --set {s}" for s in args.sets)
    if args.name != "sft_seeds":
        command += f" --name {args.name}"
    res: dict[str, Any] = {
        **versions(load),
        "command": command,
        "overrides": args.sets,
        "jobs": args.jobs,
        "runs": runs,
        "summary": summary(runs),
    }
    write_results(Path(args.out), args.name, res, table)


if __name__ == "__main__":
    main()
