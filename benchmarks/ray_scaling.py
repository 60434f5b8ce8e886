"""Rollout workers on Ray: environment steps per second with 1 and with 2 workers, for an environment whose
step costs about 1 ms of CPU (CartPole plus a busy-wait, standing in for a simulator).

    pip install -e ".[ray]"
    python -m benchmarks.ray_scaling   # -> benchmarks/results/ray_scaling.{md,json}  (about 2 minutes)

PPO with the ``cartpole`` preset's 8 envs × 32 steps per rollout; ``trainer.num_workers`` 1 and 2 (the 8
envs split 8 or 4 + 4), each run in a fresh process, interleaved, 3 repeats. Steps per second are the
valid environment steps of the run divided by the wall time from the first to the last training row (so
Ray's start-up is excluded, learning is included). A local Ray instance with one CPU per worker plus one
for the learner; on a 2-core machine the learner waits while the workers step, so 2 workers can use both
cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

STEP_SECONDS = 0.001
TOTAL_STEPS = 8192


class SlowStep(gym.Wrapper):
    """Busy-waits ``STEP_SECONDS`` of CPU in every step."""

    def step(self, action):
        end = time.perf_counter() + STEP_SECONDS
        while time.perf_counter() < end:
            pass
        return self.env.step(action)


def make_slow_cartpole(**kwargs):
    return SlowStep(gym.make("CartPole-v1", **kwargs))


def worker(num_workers: int) -> dict:
    import advantage

    gym.register("SlowCartPole-v1", entry_point=make_slow_cartpole, max_episode_steps=500)
    with tempfile.TemporaryDirectory() as tmp:
        settings: dict[str, Any] = {
            "env.id": "SlowCartPole-v1",
            "env.vectorization": "sync",
            "trainer.num_workers": num_workers,
            "trainer.total_steps": TOTAL_STEPS,
            "trainer.eval_every": 0,
            "trainer.eval_episodes": 1,
            "trainer.tensorboard": False,
            "trainer.progress": "none",
            "trainer.run_dir": os.path.join(tmp, "run"),
        }
        run = advantage.train(
            "ppo",
            quiet=True,
            **settings,
        )
        rows = [r for r in run.metrics if "train/policy_loss" in r]
    steps = rows[-1]["step"] - rows[0]["step"]
    seconds = rows[-1]["time"] - rows[0]["time"]
    return {
        "num_workers": num_workers,
        "steps": steps,
        "seconds": seconds,
        "steps_per_second": steps / seconds,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker)))
        return
    results = []
    for _ in range(args.repeats):
        for n in (1, 2):
            out = subprocess.run(
                [sys.executable, __file__, "--worker", str(n)], capture_output=True, text=True, check=True
            )
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(results[-1], flush=True)
    med = {
        n: statistics.median(r["steps_per_second"] for r in results if r["num_workers"] == n) for n in (1, 2)
    }
    ratio = med[2] / med[1]
    load = os.getloadavg()[0]
    lines = [
        "### Ray rollout workers: steps/s of PPO on a CartPole whose step costs 1 ms of CPU",
        "",
        f"{TOTAL_STEPS} steps, 8 envs × 32 steps per rollout; {args.repeats} fresh processes per setting, "
        f"interleaved; {os.cpu_count()} CPUs; 1-minute load average at the end {load:.2f}.",
        "",
        "| workers | median steps/s | runs |",
        "|---|---|---|",
        *(
            f"| {n} | {med[n]:,.0f} | "
            + ", ".join(f"{r['steps_per_second']:,.0f}" for r in results if r["num_workers"] == n)
            + " |"
            for n in (1, 2)
        ),
        "",
        f"**2 workers / 1 worker: {ratio:.2f}×** (target ≥ 1.6×)",
    ]
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ray_scaling.md").write_text("\n".join(lines) + "\n")
    (out_dir / "ray_scaling.json").write_text(json.dumps({"results": results, "ratio": ratio}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
