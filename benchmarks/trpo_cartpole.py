"""TRPO on CartPole-v1 with its defaults: steps to 475 per seed, and whether the trust region held.

    python -m benchmarks.trpo_cartpole                    # -> benchmarks/results/trpo_cartpole.{md,json}
    python -m benchmarks.trpo_cartpole --full-run 200000  # also the whole default budget of seed 0

The commands of docs/algorithms/trpo.md, each in a fresh process with one torch thread, run folders in a
temporary directory:

    advantage train trpo trainer.seed=S trainer.eval_every=5000 trainer.eval_episodes=10 \
        trainer.stop_at_return=475                                     # S = 0 .. --seeds - 1
    advantage train trpo trainer.seed=0 trainer.eval_every=5000 trainer.eval_episodes=10 \
        trainer.total_steps=N                                          # --full-run N

For each run, from its metrics.jsonl: the step of the first evaluation whose mean return reached 475, the
number of policy updates (rows with ``train/kl``), how many were accepted by the line search, the largest
KL of an accepted step (δ = 0.01 by default) and the wall time of the command (start-up included). The
full run (no early stop; off by default, a few minutes for the default budget of 200,000 steps) adds how
many of its evaluations were at 500. The three seeds take a few minutes on a busy 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.pipeline import ROOT, run_cli, versions, write_results

COMMON = ("trainer.eval_every=5000", "trainer.eval_episodes=10")
TARGET = 475.0


def summary(run: Path, wall: float) -> dict[str, Any]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    updates = [r for r in rows if "train/kl" in r]
    evals = [r for r in rows if "eval/return_mean" in r]
    hit = next((r["step"] for r in evals if r["eval/return_mean"] >= TARGET), None)
    accepted = [r for r in updates if r["train/accepted"] > 0]
    return {
        "steps_to_475": hit,
        "last_step": rows[-1]["step"],
        "updates": len(updates),
        "accepted": len(accepted),
        "max_accepted_kl": max(r["train/kl"] for r in accepted),
        "evaluations": len(evals),
        "evaluations_at_500": sum(r["eval/return_mean"] >= 500 for r in evals),
        "wall_s": wall,
    }


def table(res: dict[str, Any]) -> list[str]:
    lines = [
        "| seed | first evaluation ≥ 475 | updates | accepted | largest accepted KL | wall s |",
        "|---|---|---|---|---|---|",
    ]
    for r in res["runs"]:
        hit = f"{r['steps_to_475']:,} steps" if r["steps_to_475"] else "not reached"
        lines.append(
            f"| {r['seed']} | {hit} | {r['updates']} | {r['accepted']} | {r['max_accepted_kl']:.4f} "
            f"| {r['wall_s']:.1f} |"
        )
    f = res.get("full_run")
    if f:
        lines += [
            "",
            f"Full run, seed 0, {f['last_step']:,} steps: {f['evaluations_at_500']} of {f['evaluations']} "
            f"evaluations at 500; {f['accepted']} of {f['updates']} updates accepted, largest accepted KL "
            f"{f['max_accepted_kl']:.5f}; {f['wall_s']:.0f} s.",
        ]
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument(
        "--full-run", type=int, default=0, help="steps of a seed-0 run without early stop (0: none)"
    )
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args()
    res: dict[str, Any] = {**versions(os.getloadavg()[0]), "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for seed in range(args.seeds):
            run = work / f"s{seed}"
            _, wall = run_cli(
                "train", "trpo", f"trainer.seed={seed}", *COMMON, f"trainer.stop_at_return={TARGET:g}",
                f"trainer.run_dir={run}", "--quiet", cwd=work,
            )  # fmt: skip
            res["runs"].append({"seed": seed, **summary(run, wall)})
            print(res["runs"][-1], flush=True)
        if args.full_run:
            run = work / "full"
            _, wall = run_cli(
                "train", "trpo", "trainer.seed=0", *COMMON, f"trainer.total_steps={args.full_run}",
                f"trainer.run_dir={run}", "--quiet", cwd=work,
            )  # fmt: skip
            res["full_run"] = summary(run, wall)
    res["load_average_end"] = os.getloadavg()[0]
    write_results(Path(args.out), "trpo_cartpole", res, table)


if __name__ == "__main__":
    main()
