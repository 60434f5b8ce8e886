"""GRPO on 3-digit addition from the SFT checkpoint, once with the example and once per preset.

    python -m benchmarks.grpo_presets   # -> benchmarks/results/grpo_presets.{md,json}, an hour or more on CPU
    python -m benchmarks.grpo_presets --steps 300   # a shorter budget for every GRPO run

The commands of docs/algorithms/grpo.md, each in a fresh process with one torch thread (the trainer's
default), one run at a time, run folders under ``--out-dir``:

    advantage train sft --config examples/sft_addition.yaml
    advantage eval <sft run> --split test --json                                       # 500 test prompts
    advantage train grpo --config examples/grpo_addition.yaml worker.actor.model.path=<sft run> [preset=NAME]
    advantage eval <grpo run> --split test --json

*Validation* is the run's last ``eval/accuracy`` (greedy completions of the first 200 validation prompts,
the same prompts for the SFT run and every GRPO run); *test* is ``advantage eval RUN --split test``.
``--steps`` sets ``trainer.total_steps`` of every GRPO run (the cosine schedule ends with the run); the
default is the example's. *wall* is the whole training command, start-up included; *load* the 1-minute
load average when it ended. The JSON is written again after each run, so an interrupted benchmark keeps
its finished rows (``--resume`` skips them on the next call).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from advantage.monitoring.metrics import read_metrics
from benchmarks.pipeline import ROOT, run_cli, versions, write_results

SFT_CONFIG = "examples/sft_addition.yaml"
GRPO_CONFIG = "examples/grpo_addition.yaml"
PRESETS = ("none", "grpo", "dapo", "gspo", "dr_grpo", "lite_ppo")  # "none": the example as it is
NAME = "grpo_presets"


def curve(run: Path) -> dict[str, float]:
    """``{step: eval/accuracy}`` of each evaluation of a run (JSON keys: the steps as strings)."""
    return {str(r["step"]): r["eval/accuracy"] for r in read_metrics(run) if "eval/accuracy" in r}


def test_accuracy(run: Path, work: Path) -> tuple[float, int]:
    out, _ = run_cli("eval", str(run), "--split", "test", "--json", cwd=work)
    ev = json.loads(out)
    return ev["accuracy"], ev["n"]


def kl_setting(run: Path) -> dict[str, Any]:
    """The KL term the run trained with (from its saved config)."""
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    actor = cfg["worker"]["actor"]
    return {
        "kl_coef": actor["kl_coef"],
        "kl_estimator": actor["kl_estimator"],
        "kl_reward_coef": cfg["algorithm"].get("kl_reward_coef", 0.0),
    }


def sft(work: Path) -> dict[str, Any]:
    run = work / "sft_addition"
    stamp = work / "sft_wall_s.json"
    if not stamp.is_file():  # else reused from an earlier call with the same --out-dir
        _, wall = run_cli(
            "train", "sft", "--config", str(ROOT / SFT_CONFIG), f"trainer.run_dir={run}", "--quiet", cwd=work
        )  # fmt: skip
        stamp.write_text(json.dumps(wall))
    wall = json.loads(stamp.read_text())
    acc, n = test_accuracy(run, work)
    c = curve(run)
    return {
        "run_dir": str(run),
        "validation": list(c.values())[-1],
        "test": acc,
        "test_prompts": n,
        "curve": c,
        "wall_s": wall,
    }


def grpo(work: Path, sft_run: str, preset: str, steps: int | None) -> dict[str, Any]:
    run = work / f"grpo_{preset}"
    args = ["train", "grpo", "--config", str(ROOT / GRPO_CONFIG), f"worker.actor.model.path={sft_run}"]
    args += [f"trainer.run_dir={run}", "--quiet"]
    if preset != "none":
        args.append(f"preset={preset}")
    if steps is not None:
        args.append(f"trainer.total_steps={steps}")
    _, wall = run_cli(*args, cwd=work)
    load = os.getloadavg()[0]
    acc, n = test_accuracy(run, work)
    c = curve(run)
    return {
        "preset": preset,
        "steps": int(list(c)[-1]),
        "validation": list(c.values())[-1],
        "test": acc,
        "test_prompts": n,
        "curve": c,
        "wall_s": wall,
        "load_end": load,
        **kl_setting(run),
    }


def kl_text(r: dict[str, Any]) -> str:
    if r["kl_coef"] > 0:
        return f"β = {r['kl_coef']:g}, {r['kl_estimator']} in the loss"
    if r["kl_reward_coef"] > 0:
        return f"β = {r['kl_reward_coef']:g} in the reward"
    return "none"


def table(res: dict[str, Any]) -> list[str]:
    s = res["sft"]
    lines = [
        f"SFT start (`{SFT_CONFIG}`): validation {s['validation']:.3f}, test {s['test']:.3f}.",
        "",
        "| run | KL | validation | test | steps | wall (min) | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in res["runs"]:
        name = "no preset (the example)" if r["preset"] == "none" else f"`preset={r['preset']}`"
        dv, dt = 100 * (r["validation"] - s["validation"]), 100 * (r["test"] - s["test"])
        lines.append(
            f"| {name} | {kl_text(r)} | {s['validation']:.3f} → {r['validation']:.3f} ({dv:+.1f}) "
            f"| {s['test']:.3f} → {r['test']:.3f} ({dt:+.1f}) | {r['steps']} | {r['wall_s'] / 60:.1f} "
            f"| {r['load_end']:.1f} |"
        )
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, help="trainer.total_steps of every GRPO run (default: the example's)")
    p.add_argument("--presets", nargs="+", default=list(PRESETS), choices=PRESETS, help="rows to run")
    p.add_argument("--out-dir", help="folder for the run folders (default: a temporary one)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="folder for the results")
    p.add_argument("--resume", action="store_true", help="keep the rows of the results file; run the others")
    p.add_argument("--report", metavar="JSON", help="only write the table again from a saved results file")
    args = p.parse_args()
    out = Path(args.out)
    if args.report:
        write_results(out, NAME, json.loads(Path(args.report).read_text()), table)
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.out_dir or tmp).resolve()
        work.mkdir(parents=True, exist_ok=True)
        res: dict[str, Any] = {}
        if args.resume and (out / f"{NAME}.json").is_file():
            res = json.loads((out / f"{NAME}.json").read_text())
        if not res:
            res = {**versions(os.getloadavg()[0]), "steps_option": args.steps, "sft": sft(work), "runs": []}
        done = {r["preset"] for r in res["runs"]}
        for preset in args.presets:
            if preset in done:
                continue
            res["runs"].append(grpo(work, res["sft"]["run_dir"], preset, args.steps))
            write_results(out, NAME, res, table)


if __name__ == "__main__":
    main()
