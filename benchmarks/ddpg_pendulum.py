"""DDPG on Pendulum-v1 with its defaults, three seeds: the final returns docs/algorithms/offpolicy.md quotes.

    python -m benchmarks.ddpg_pendulum   # -> benchmarks/results/ddpg_pendulum.{md,json}, a few minutes

DDPG is not in ``benchmarks/pendulum_offpolicy.py`` (SB3's DDPG is TD3 with its fixes switched off). Each
run is ``advantage train ddpg trainer.seed=S`` (the ``pendulum`` defaults: 20,000 steps, 64-64 networks,
10 evaluation episodes) in a fresh process with one torch thread, run folders in a temporary directory;
the final return is the run's last ``eval/return_mean`` and the wall time the whole command.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from advantage.monitoring.metrics import read_metrics
from benchmarks.pipeline import ROOT, run_cli, versions, write_results


def table(res: dict[str, Any]) -> list[str]:
    lines = ["| seed | steps | final return (mean ± std) | episodes | wall s |", "|---|---|---|---|---|"]
    for r in res["runs"]:
        lines.append(
            f"| {r['seed']} | {r['steps']:,} | {r['return_mean']:.1f} ± {r['return_std']:.1f} "
            f"| {r['episodes']} | {r['wall_s']:.1f} |"
        )
    lines += ["", f"Median final return {statistics.median(r['return_mean'] for r in res['runs']):.1f}."]
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args()
    res: dict[str, Any] = {**versions(os.getloadavg()[0]), "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for seed in range(args.seeds):
            run = work / f"s{seed}"
            _, wall = run_cli(
                "train", "ddpg", f"trainer.seed={seed}", f"trainer.run_dir={run}", "--quiet", cwd=work
            )
            final = [r for r in read_metrics(run) if "eval/return_mean" in r][-1]
            res["runs"].append(
                {
                    "seed": seed,
                    "steps": final["step"],
                    "return_mean": final["eval/return_mean"],
                    "return_std": final["eval/return_std"],
                    "episodes": final["eval/episodes"],
                    "wall_s": wall,
                }
            )
            print(res["runs"][-1], flush=True)
    write_results(Path(args.out), "ddpg_pendulum", res, table)


if __name__ == "__main__":
    main()
