"""The synthetic RLHF pipeline of docs/algorithms/ppo_rlhf.md, run as documented.

    python -m benchmarks.ppo_rlhf_synthetic   # -> benchmarks/results/ppo_rlhf_synthetic.{md,json}

The page's commands, each in a fresh process with one torch thread, run folders in a temporary directory
(about 3 minutes on 2 CPU cores):

    advantage train sft --config examples/sft_preference.yaml
    advantage train reward_model --config examples/reward_model_synthetic.yaml
    advantage train ppo_rlhf --config examples/ppo_rlhf_synthetic.yaml
    advantage eval <each run> --json          # the test split, 500 prompts

The JSON keeps the three evaluations, every validation row the PPO run logged, its first and last
training rows and the wall times (start-up included).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.pipeline import ROOT, run_cli, versions, write_results

STAGES = {  # name -> (algorithm, config)
    "sft": ("sft", "examples/sft_preference.yaml"),
    "reward_model": ("reward_model", "examples/reward_model_synthetic.yaml"),
    "ppo_rlhf": ("ppo_rlhf", "examples/ppo_rlhf_synthetic.yaml"),
}


def metrics(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args()
    load = os.getloadavg()[0]
    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, (algo, config) in STAGES.items():
            # The example files name their run folders (runs/sft_preference, ...) and the later stages
            # read the earlier ones from there, so they run in `work` as written.
            _, seconds = run_cli("train", algo, "--config", str(ROOT / config), "--quiet", cwd=work)
            run = next(p for p in (work / "runs").iterdir() if p.name not in {r["run"] for r in res.values()})
            ev = json.loads(run_cli("eval", str(run), "--json", cwd=work)[0])
            rows = metrics(run)
            # A step's full training row (a few rows log only a rate or a count).
            train = [r for r in rows if sum(k.startswith("train/") for k in r) >= 5]
            res[name] = {
                "run": run.name,
                "train_seconds": seconds,
                "test": ev,
                "validation": [r for r in rows if any(k.startswith("eval/") for k in r)],
                "train_first": train[0] if train else {},
                "train_last": train[-1] if train else {},
            }
            print(name, f"{seconds:.0f} s", ev, flush=True)
    write_results(Path(args.out), "ppo_rlhf_synthetic", {**versions(load), **res}, table)


def table(res: dict[str, Any]) -> list[str]:
    """The table ``ppo_rlhf_synthetic.md`` of the results file's content ``res``."""
    t = res["ppo_rlhf"]["test"]
    rows = res["ppo_rlhf"]["validation"]
    lines = [
        "| | SFT policy (= reference) | after PPO-RLHF |",
        "|---|---|---|",
        f"| greedy hidden score | {t['reference_hidden_score']:.3f} | **{t['hidden_score']:.3f}** |",
        f"| reward-model score of greedy responses | {t['reference_rm_score']:.2f} | {t['rm_score']:.2f} |",
        f"| win rate vs the reference (hidden score, ties ½) | 0.5 | **{t['win_rate']:.3f}** "
        f"({t['wins']} wins, {t['ties']} ties, {t['losses']} losses) |",
        f"| KL to the reference, nats per response | 0 | {t['kl_ref']:.2f} |",
        "",
        "| validation at step | " + " | ".join(str(r["step"]) for r in rows) + " |",
        "|---|" + "---|" * len(rows),
    ]
    for key in ("eval/hidden_score", "eval/win_rate", "eval/kl_ref"):
        if all(key in r for r in rows):
            lines.append(f"| `{key}` | " + " | ".join(f"{r[key]:.3f}" for r in rows) + " |")
    rm = res["reward_model"]["test"]
    lines += [
        "",
        f"Test split, {t['n']} prompts. Reward model: pairwise test accuracy {rm['accuracy']:.3f}. Wall "
        f"time, start-up included: SFT {res['sft']['train_seconds']:.0f} s, reward model "
        f"{res['reward_model']['train_seconds']:.0f} s, PPO-RLHF {res['ppo_rlhf']['train_seconds']:.0f} s. "
        f"`python -m benchmarks.ppo_rlhf_synthetic`; torch {res['torch']}, transformers "
        f"{res['transformers']}, {res['machine']}, {res['cpus']} CPUs, shared with other jobs.",
    ]
    return lines


if __name__ == "__main__":
    main()
