"""The README's language-model pipeline, seed by seed: ``examples/sft_addition.yaml`` then
``examples/grpo_addition.yaml`` from it, with ``trainer.seed`` = 0 .. 4, each model scored on the 500
held-out test prompts (greedy accuracy).

    python -m benchmarks.addition_example_seeds          # -> results/addition_example_seeds.{md,json}
    python -m benchmarks.addition_example_seeds --sft-runs DIR  # DIR/seedS: sft_seeds --runs-dir DIR

Per seed S: ``advantage train sft --config examples/sft_addition.yaml trainer.seed=S`` (or the run
``DIR/seedS``), ``advantage eval RUN --json`` (test), then ``advantage train grpo --config
examples/grpo_addition.yaml worker.actor.model.path=RUN trainer.seed=S`` and its ``advantage eval``.
Each command is a fresh process with one torch thread, ``--jobs`` seeds at a time (2 on a 2-core machine:
the wall times are those of a machine with both cores busy). The report gives, per seed, the SFT and GRPO
test accuracies, the gain, the GRPO run's wall time, and its validation curve against the SFT checkpoint's
own validation accuracy (the same 200 prompts), whose lowest point is the early *dip*.
``--grpo-set KEY=VALUE`` (repeatable) adds overrides to every GRPO run; they are recorded.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path
from typing import Any

from advantage.monitoring.metrics import read_metrics
from benchmarks.pipeline import ROOT, evaluate_run, map_seeds, run_cli, versions, write_results
from benchmarks.sft_seeds import EXAMPLE as SFT
from benchmarks.sft_seeds import sft_run

GRPO = "examples/grpo_addition.yaml"


def curve(run_dir: Path) -> list[tuple[int, float]]:
    """The run's ``(step, eval/accuracy)`` pairs."""
    return [(r["step"], r["eval/accuracy"]) for r in read_metrics(run_dir) if "eval/accuracy" in r]


def one_seed(seed: int, folder: Path, sft_runs: Path | None, grpo_sets: list[str]) -> dict[str, Any]:
    sft_dir, sft_s = sft_run(seed, folder, sft_runs)
    sft_test = evaluate_run(sft_dir)
    sft_curve = curve(sft_dir)
    grpo_dir = folder / f"grpo_seed{seed}"
    _, grpo_s = run_cli(
        "train", "grpo", "--config", GRPO, f"worker.actor.model.path={sft_dir}", f"trainer.seed={seed}",
        f"trainer.run_dir={grpo_dir}", "trainer.tensorboard=false", "trainer.progress=none", *grpo_sets,
        cwd=ROOT,
    )  # fmt: skip
    grpo_test = evaluate_run(grpo_dir)
    grpo_curve = curve(grpo_dir)
    start_val = sft_curve[-1][1]  # the SFT run's last evaluation: the checkpoint GRPO starts from
    low = min(a for _, a in grpo_curve)
    r = {
        "seed": seed,
        "n": int(grpo_test["n"]),
        "sft_steps": int(sft_test["step"]),
        "sft_wall_s": sft_s,
        "sft_test": float(sft_test["accuracy"]),
        "sft_validation": start_val,
        "grpo_steps": int(grpo_test["step"]),
        "grpo_wall_s": grpo_s,
        "grpo_test": float(grpo_test["accuracy"]),
        "gain_points": 100 * (float(grpo_test["accuracy"]) - float(sft_test["accuracy"])),
        "dip_points": 100 * max(0.0, start_val - low),
        "grpo_curve": grpo_curve,
    }
    print(f"seed {seed}: SFT {r['sft_test']:.3f} -> GRPO {r['grpo_test']:.3f} in {grpo_s:.0f}s", flush=True)
    return r


def summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    sft = [r["sft_test"] for r in runs]
    return {
        "sft_min": min(sft),
        "sft_max": max(sft),
        "sft_spread_points": 100 * (max(sft) - min(sft)),
        "sft_mean": statistics.fmean(sft),
        "grpo_mean": statistics.fmean(r["grpo_test"] for r in runs),
        "gain_min_points": min(r["gain_points"] for r in runs),
        "gain_mean_points": statistics.fmean(r["gain_points"] for r in runs),
        "dip_max_points": max(r["dip_points"] for r in runs),
        "grpo_wall_max_s": max(r["grpo_wall_s"] for r in runs),
    }


def table(res: dict[str, Any]) -> list[str]:
    s = res["summary"]
    extra = " ".join(res["grpo_overrides"]) or "none"
    lines = [
        "### The README's SFT → GRPO pipeline over seeds",
        "",
        f"`{res['command']}`: `{SFT}` then `{GRPO}` (overrides: {extra}) with `trainer.seed` = seed; test "
        f"accuracy on {res['runs'][0]['n']} held-out prompts (greedy); torch {res['torch']}, {res['cpus']} "
        f"CPUs, {res['jobs']} seeds at a time (1-minute load {res['load_average_start']:.2f} at the start).",
        "",
        "| seed | SFT steps | SFT test | GRPO test | gain (points) | GRPO wall s | early dip (points) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in res["runs"]:
        lines.append(
            f"| {r['seed']} | {r['sft_steps']} | {r['sft_test']:.3f} | {r['grpo_test']:.3f} | "
            f"{r['gain_points']:+.1f} | {r['grpo_wall_s']:.0f} | {r['dip_points']:.1f} |"
        )
    lines += [
        "",
        f"SFT test accuracy {s['sft_min']:.3f}-{s['sft_max']:.3f} (spread {s['sft_spread_points']:.1f} "
        f"points); GRPO gain at least {s['gain_min_points']:+.1f} points "
        f"(mean {s['gain_mean_points']:+.1f}); "
        f"longest GRPO run {s['grpo_wall_max_s']:.0f} s. *Early dip*: how far the GRPO run's validation "
        "accuracy fell below the SFT checkpoint's (its last evaluation, the same 200 prompts) at its lowest "
        f"(0 when it never did); at most {s['dip_max_points']:.1f} points.",
    ]
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--sft-runs", default=None, help="reuse the SFT runs DIR/seedS instead of training them")
    p.add_argument("--grpo-set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--name", default="addition_example_seeds")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--runs-dir", default=None, help="keep the run folders here (default: a temporary folder)")
    args = p.parse_args()
    bad = [s for s in args.sets if "=" not in s]
    if bad:
        p.error(f"--grpo-set takes KEY=VALUE, got {bad}")
    load = os.getloadavg()[0]
    sft_runs = Path(args.sft_runs) if args.sft_runs else None
    runs = map_seeds(
        lambda s, folder: one_seed(s, folder, sft_runs, args.sets), args.seeds, args.jobs, args.runs_dir
    )
    command = "python -m benchmarks.addition_example_seeds"
    if args.seeds != [0, 1, 2, 3, 4]:
        command += " --seeds " + " ".join(map(str, args.seeds))
    command += "".join(f" --grpo-set {s}" for s in args.sets)
    if args.name != "addition_example_seeds":
        command += f" --name {args.name}"
    res: dict[str, Any] = {
        **versions(load),
        "command": command,
        "sft_reused": sft_runs is not None,
        "grpo_overrides": args.sets,
        "jobs": args.jobs,
        "runs": runs,
        "summary": summary(runs),
    }
    write_results(Path(args.out), args.name, res, table)


if __name__ == "__main__":
    main()
