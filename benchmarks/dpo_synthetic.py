"""DPO on the synthetic preference task: the documented pipeline, run as documented, over several seeds.

    python -m benchmarks.dpo_synthetic   # -> benchmarks/results/dpo_synthetic.{md,json}, about 5 minutes

The commands of docs/algorithms/dpo.md, each in a fresh process with one torch thread, run folders in a
temporary directory:

    advantage train sft --config examples/sft_preference.yaml
    advantage train dpo --config examples/dpo_synthetic.yaml trainer.seed=S     # S = 0 .. --seeds - 1
    advantage eval <dpo run> --json                                             # the test split, 500 prompts

and once more DPO with the default learning rate (``algorithm.learning_rate=5e-4``, seed 0), which the page
says does not move this small policy. The SFT run is the reference of every DPO run (seed 0, as in the
example). Seed 0 is the example itself; the other seeds show how far one run's outcome is from another's:
the greedy responses of the DPO policy run to the length limit, and which letters fill them changes from
one evaluation to the next, so the hidden score and the win rate of a single run are a draw, not a level.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from advantage.monitoring.metrics import read_metrics
from benchmarks.pipeline import ROOT, run_cli, versions, write_results

SFT_CONFIG = "examples/sft_preference.yaml"
DPO_CONFIG = "examples/dpo_synthetic.yaml"
DEFAULT_LR = 5e-4  # DPOAlgorithm.learning_rate's default
KEYS = ("accuracy", "hidden_score", "win_rate", "wins", "ties", "losses", "response_length")


def losses(run: Path) -> list[tuple[int, float]]:
    """``(step, train/loss)`` rows of a run's metrics.jsonl."""
    return [(r["step"], r["train/loss"]) for r in read_metrics(run) if "train/loss" in r]


def dpo_run(work: Path, sft: Path, seed: int, *overrides: str) -> dict[str, Any]:
    """One DPO run of the example from ``sft`` (with ``overrides``) and its test evaluation."""
    run = work / f"dpo_s{seed}_{len(list(work.glob('dpo_*')))}"
    _, train_s = run_cli(
        "train", "dpo", "--config", str(ROOT / DPO_CONFIG), f"model.path={sft}", f"trainer.seed={seed}",
        f"trainer.run_dir={run}", *overrides, "--quiet", cwd=work,
    )  # fmt: skip
    out, eval_s = run_cli("eval", str(run), "--json", cwd=work)
    ev = json.loads(out)
    curve = losses(run)
    return {
        "seed": seed,
        "overrides": list(overrides),
        **{k: ev[k] for k in KEYS},
        "reference_hidden_score": ev["reference_hidden_score"],
        "reference_response_length": ev["reference_response_length"],
        "test_prompts": ev["n"],
        "train_loss_last": curve[-1][1],
        "train_loss_max_deviation_from_log2": max(abs(v - math.log(2)) for _, v in curve),
        "train_seconds": train_s,
        "eval_seconds": eval_s,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=3, help="DPO seeds 0..N-1 (seed 0 is the example)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--report", metavar="JSON", help="only write the table again from a saved results file")
    args = p.parse_args()
    if args.report:
        write_results(Path(args.out), "dpo_synthetic", json.loads(Path(args.report).read_text()), table)
        return
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sft = work / "sft_preference"
        _, sft_s = run_cli(
            "train", "sft", "--config", str(ROOT / SFT_CONFIG), f"trainer.run_dir={sft}", "--quiet", cwd=work
        )
        runs = [dpo_run(work, sft, s) for s in range(args.seeds)]
        default_lr = dpo_run(work, sft, 0, f"algorithm.learning_rate={DEFAULT_LR}")
    write_results(Path(args.out), "dpo_synthetic", results(runs, default_lr, sft_s, load), table)


def spread(runs: list[dict[str, Any]], key: str) -> dict[str, float]:
    values = [r[key] for r in runs]
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def results(
    runs: list[dict[str, Any]], default_lr: dict[str, Any], sft_s: float, load: float
) -> dict[str, Any]:
    """The results file's content: the runs, their spread over seeds and the versions."""
    example = runs[0]
    return {
        "commands": [
            f"advantage train sft --config {SFT_CONFIG}",
            f"advantage train dpo --config {DPO_CONFIG} trainer.seed=S",
            "advantage eval RUN --json",
        ],
        **versions(load),
        "sft": {
            "hidden_score": example["reference_hidden_score"],
            "response_length": example["reference_response_length"],
            "train_seconds": sft_s,
        },
        "example": example,
        "seeds": runs,
        "spread": {k: spread(runs, k) for k in ("accuracy", "hidden_score", "win_rate", "response_length")},
        "default_learning_rate": {"learning_rate": DEFAULT_LR, **default_lr},
    }


def table(payload: dict[str, Any]) -> list[str]:
    """The table ``dpo_synthetic.md`` of the results file's content ``payload``."""
    example, sft = payload["example"], payload["sft"]
    lines = [
        "| | preference accuracy (test pairs) | greedy hidden score | win rate vs the reference "
        "(wins / ties / losses) | greedy response length (tokens) | wall time |",
        "|---|---|---|---|---|---|",
        f"| SFT policy (the reference) | 0.5 (by definition) | {sft['hidden_score']:.3f} | "
        f"0.5 | {sft['response_length']:.1f} | {sft['train_seconds']:.0f} s |",
    ]
    rows = [
        (r, "after DPO, the example (seed 0)" if r["seed"] == 0 else f"`trainer.seed={r['seed']}`")
        for r in payload["seeds"]
    ]
    d = payload["default_learning_rate"]
    rows.append((d, f"`algorithm.learning_rate={d['learning_rate']:g}` (the default), seed 0"))
    for r, name in rows:
        lines.append(
            f"| {name} | {r['accuracy']:.3f} | {r['hidden_score']:.3f} | {r['win_rate']:.3f} "
            f"({r['wins']} / {r['ties']} / {r['losses']}) | {r['response_length']:.1f} | "
            f"{r['train_seconds']:.0f} s |"
        )
    lines += [
        "",
        f"Test split, {example['test_prompts']} prompts; greedy responses of the policy and of the reference "
        "compared by the hidden rule, ties counting half. Wall time: the training command, start-up "
        "included, on a shared machine. `python -m benchmarks.dpo_synthetic`; torch "
        f"{payload['torch']}, transformers {payload['transformers']}, {payload['machine']}, "
        f"{payload['cpus']} CPUs.",
    ]
    return lines


if __name__ == "__main__":
    main()
