"""DPO on the synthetic preference task: the documented pipeline, run as documented, over several seeds.

    python benchmarks/dpo_synthetic.py   # -> benchmarks/results/dpo_synthetic.{md,json}, about 5 minutes

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
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SFT_CONFIG = "examples/sft_preference.yaml"
DPO_CONFIG = "examples/dpo_synthetic.yaml"
DEFAULT_LR = 5e-4  # DPOAlgorithm.learning_rate's default
KEYS = ("accuracy", "hidden_score", "win_rate", "wins", "ties", "losses", "response_length")


def advantage(*args: str, cwd: Path) -> tuple[str, float]:
    """Run ``advantage ARGS`` in a fresh process (this checkout's sources, one thread); stdout, seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "advantage.cli", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"advantage {' '.join(args)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return out.stdout, time.perf_counter() - start


def losses(run: Path) -> list[tuple[int, float]]:
    """``(step, train/loss)`` rows of a run's metrics.jsonl."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [(r["step"], r["train/loss"]) for r in rows if "train/loss" in r]


def dpo_run(work: Path, sft: Path, seed: int, *overrides: str) -> dict[str, Any]:
    """One DPO run of the example from ``sft`` (with ``overrides``) and its test evaluation."""
    run = work / f"dpo_s{seed}_{len(list(work.glob('dpo_*')))}"
    _, train_s = advantage(
        "train", "dpo", "--config", str(ROOT / DPO_CONFIG), f"model.path={sft}", f"trainer.seed={seed}",
        f"trainer.run_dir={run}", *overrides, "--quiet", cwd=work,
    )  # fmt: skip
    out, eval_s = advantage("eval", str(run), "--json", cwd=work)
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
    args = p.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sft = work / "sft_preference"
        _, sft_s = advantage(
            "train", "sft", "--config", str(ROOT / SFT_CONFIG), f"trainer.run_dir={sft}", "--quiet", cwd=work
        )
        runs = [dpo_run(work, sft, s) for s in range(args.seeds)]
        default_lr = dpo_run(work, sft, 0, f"algorithm.learning_rate={DEFAULT_LR}")
    report(runs, default_lr, sft_s, load, Path(args.out))


def spread(runs: list[dict[str, Any]], key: str) -> dict[str, float]:
    values = [r[key] for r in runs]
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def report(
    runs: list[dict[str, Any]], default_lr: dict[str, Any], sft_s: float, load: float, out: Path
) -> None:
    """Write ``out/dpo_synthetic.{json,md}``."""
    import torch
    import transformers

    example = runs[0]
    payload = {
        "commands": [
            f"advantage train sft --config {SFT_CONFIG}",
            f"advantage train dpo --config {DPO_CONFIG} trainer.seed=S",
            "advantage eval RUN --json",
        ],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_start": load,
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
    out.mkdir(parents=True, exist_ok=True)
    (out / "dpo_synthetic.json").write_text(json.dumps(payload, indent=1) + "\n")
    n = example["test_prompts"]
    lines = [
        "| | preference accuracy (test pairs) | greedy hidden score | win rate vs the reference "
        "(wins / ties / losses) | greedy response length (tokens) | DPO wall time |",
        "|---|---|---|---|---|---|",
        f"| SFT policy (the reference) | 0.5 (by definition) | {example['reference_hidden_score']:.3f} | "
        f"0.5 | {example['reference_response_length']:.1f} | (SFT: {sft_s:.0f} s) |",
    ]
    for r in runs:
        seed = r["seed"]
        name = "after DPO, the example (seed 0)" if seed == 0 else f"after DPO, `trainer.seed={seed}`"
        lines.append(
            f"| {name} | {r['accuracy']:.3f} | {r['hidden_score']:.3f} | {r['win_rate']:.3f} "
            f"({r['wins']} / {r['ties']} / {r['losses']}) | {r['response_length']:.1f} | "
            f"{r['train_seconds']:.0f} s |"
        )
    d = default_lr
    lines += [
        f"| after DPO at the default learning rate {DEFAULT_LR:g} (seed 0) | {d['accuracy']:.3f} | "
        f"{d['hidden_score']:.3f} | {d['win_rate']:.3f} ({d['wins']} / {d['ties']} / {d['losses']}) | "
        f"{d['response_length']:.1f} | {d['train_seconds']:.0f} s |",
        "",
        f"Test split, {n} prompts; greedy responses of the policy and of the reference compared by the "
        f"hidden rule, ties counting half. `python benchmarks/dpo_synthetic.py`; torch {torch.__version__}, "
        f"transformers {transformers.__version__}, {platform.machine()}, {os.cpu_count()} CPUs "
        f"(1-minute load average {load:.1f} at the start; wall times include start-up).",
    ]
    (out / "dpo_synthetic.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
