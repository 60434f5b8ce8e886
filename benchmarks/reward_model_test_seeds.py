"""The reward-model learning test's run over several seeds: how far above its threshold it lands.

    python -m benchmarks.reward_model_test_seeds   # -> benchmarks/results/reward_model_test_seeds.{md,json}

``tests/test_reward_model.py::test_a_tiny_reward_model_learns_the_synthetic_task`` trains a small reward
model for 200 steps and requires a validation accuracy of at least 0.75 (one seed). This script runs the
same settings (the test module's ``TINY`` and ``LEARNS``, imported, not copied) through
``advantage train reward_model ... trainer.seed=S`` for seeds 0 .. --seeds - 1, each in a fresh process
with one torch thread, and records each run's last validation accuracy (200 pairs) and wall time (about
10-20 s each on CPU).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.pipeline import ROOT, run_cli, versions, write_results

THRESHOLD = 0.75  # the test's


def test_settings() -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location(
        "test_reward_model", ROOT / "tests" / "test_reward_model.py"
    )
    assert spec is not None and spec.loader is not None
    t = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t)
    return {**t.TINY, **t.LEARNS}


def as_override(key: str, value: Any) -> str:
    return f"{key}={str(value).lower() if isinstance(value, bool) else value}"


def table(res: dict[str, Any]) -> list[str]:
    lines = ["| seed | validation accuracy | wall s |", "|---|---|---|"]
    lines += [f"| {r['seed']} | {r['validation_accuracy']:.3f} | {r['wall_s']:.1f} |" for r in res["runs"]]
    accs = [r["validation_accuracy"] for r in res["runs"]]
    lines += [
        "",
        f"Threshold {res['threshold']}; range {min(accs):.3f}-{max(accs):.3f} over {len(accs)} seeds.",
    ]
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args()
    settings = test_settings()
    res: dict[str, Any] = {
        **versions(os.getloadavg()[0]),
        "settings": settings,
        "threshold": THRESHOLD,
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for seed in range(args.seeds):
            run = work / f"s{seed}"
            overrides = [as_override(k, v) for k, v in settings.items() if v is not None]
            _, wall = run_cli(
                "train", "reward_model", *overrides, f"trainer.seed={seed}", f"trainer.run_dir={run}",
                "--quiet", cwd=work,
            )  # fmt: skip
            rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
            final = [r for r in rows if "eval/accuracy" in r][-1]
            res["runs"].append({"seed": seed, "validation_accuracy": final["eval/accuracy"], "wall_s": wall})
            print(res["runs"][-1], flush=True)
    write_results(Path(args.out), "reward_model_test_seeds", res, table)


if __name__ == "__main__":
    main()
