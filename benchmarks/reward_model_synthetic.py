"""Reward models on the synthetic preference task: the runs of docs/algorithms/reward_models.md's table.

    python -m benchmarks.reward_model_synthetic   # -> benchmarks/results/reward_model_synthetic.{md,json}

Each row is ``advantage train reward_model OVERRIDES`` then ``advantage eval RUN --json`` (the test split,
500 prompts), each in a fresh process with one torch thread, run folders in a temporary directory; about
3 minutes on 2 CPU cores. *Accuracy* is on the (possibly noisy) labels, *hidden agreement* how often the
model orders two responses as the noise-free hidden score does.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.pipeline import ROOT, run_cli, versions, write_results

SHORT = "preset=synthetic trainer.total_steps=300"
RUNS = {  # name -> overrides
    "synthetic": "preset=synthetic",
    "synthetic_seed1": "preset=synthetic trainer.seed=1",
    "synthetic_seed2": "preset=synthetic trainer.seed=2",
    "steps300": SHORT,
    "label_noise": f"{SHORT} data.label_noise=0.2",
    "instructgpt": "preset=instructgpt",
    "centered": f"{SHORT} algorithm.center_rewards_coef=0.01",
}
KEYS = ("accuracy", "hidden_agreement", "reward_mean", "hidden_correlation", "pairs", "n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--report", metavar="JSON", help="only write the table again from a saved results file")
    args = p.parse_args()
    if args.report:
        write_results(
            Path(args.out), "reward_model_synthetic", json.loads(Path(args.report).read_text()), table
        )
        return
    load = os.getloadavg()[0]
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, overrides in RUNS.items():
            run = work / name
            _, seconds = run_cli(
                "train", "reward_model", *overrides.split(), f"trainer.run_dir={run}", "--quiet", cwd=work
            )
            ev = json.loads(run_cli("eval", str(run), "--json", cwd=work)[0])
            results[name] = {"overrides": overrides, "train_seconds": seconds, **{k: ev[k] for k in KEYS}}
            print(name, results[name], flush=True)
    write_results(Path(args.out), "reward_model_synthetic", {**versions(load), "runs": results}, table)


def table(payload: dict[str, Any]) -> list[str]:
    """The table ``reward_model_synthetic.md`` of the results file's content ``payload``."""
    results = payload["runs"]
    lines = [
        "| `advantage train reward_model …` | wall time | test accuracy (pairs) | hidden agreement | "
        "mean test reward | correlation with the hidden score |",
        "|---|---|---|---|---|---|",
    ]
    for r in results.values():
        lines.append(
            f"| `{r['overrides']}` | {r['train_seconds']:.0f} s | {r['accuracy']:.3f} ({r['pairs']}) | "
            f"{r['hidden_agreement']:.3f} | {r['reward_mean']:.2f} | {r['hidden_correlation']:.2f} |"
        )
    lines += [
        "",
        f"Test split, {results['synthetic']['n']} prompts. `python -m benchmarks.reward_model_synthetic`; "
        f"torch {payload['torch']}, transformers {payload['transformers']}, {payload['machine']}, "
        f"{payload['cpus']} CPUs shared with other jobs (wall time: the training command, start-up "
        "included).",
    ]
    return lines


if __name__ == "__main__":
    main()
