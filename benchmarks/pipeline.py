"""What the pipeline benchmarks share (``dpo_synthetic``, ``ppo_rlhf_synthetic``, ``reward_model_synthetic``
and the other scripts that run the documented commands): the repository root, an ``advantage`` command in a
fresh process, and a results file (JSON and a markdown table) headed with the versions and the machine.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path) -> tuple[str, float]:
    """Run ``advantage ARGS`` in a fresh process (this checkout's sources, one thread); stdout, seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "advantage.cli", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"advantage {' '.join(args)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return out.stdout, time.perf_counter() - start


def evaluate_run(run_dir: Path, split: str = "test") -> dict[str, Any]:
    """``advantage eval RUN --json --split SPLIT`` in a fresh process: the latest checkpoint's result row."""
    out, _ = run_cli("eval", str(run_dir), "--json", "--split", split, cwd=ROOT)
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def map_seeds(
    one: Callable[[int, Path], dict[str, Any]], seeds: Sequence[int], jobs: int, runs_dir: str | None
) -> list[dict[str, Any]]:
    """``one(seed, folder)`` for every seed, ``jobs`` at a time, the run folders under ``runs_dir`` (kept)
    or a temporary folder (deleted afterwards)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(runs_dir or tmp)
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(lambda seed: one(seed, folder), seeds))


def versions(load: float) -> dict[str, Any]:
    """The torch and transformers versions, the machine, its CPU count and the 1-minute ``load`` average
    when the runs started: the header of a pipeline benchmark's results file."""
    import torch
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_start": load,
    }


def write_results(
    out: Path, name: str, payload: dict[str, Any], table: Callable[[dict[str, Any]], list[str]]
) -> None:
    """Write ``payload`` to ``out/NAME.json``, then ``table(payload)``'s lines to ``out/NAME.md`` (and print
    them): the JSON is saved first, so a table that fails to format loses no runs."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(payload, indent=1) + "\n")
    lines = table(payload)
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
