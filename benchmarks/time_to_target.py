"""The time-to-target harness: advantage beside Stable-Baselines3 until a target return, one process per
(library, seed), interleaved, one torch thread each; both libraries are timed the same way and the report
gives medians and the ratio (``cartpole_ppo``, ``cartpole_dqn``; ``startup`` reuses the callback).

Training wall time excludes evaluation for both libraries. For Stable-Baselines3 the harness's callback
times its own evaluations and subtracts them; for advantage the run's ``eval/seconds`` are subtracted
from the ``time`` of the row where the target was first reached. Both clocks start just before the
environments and the model are built; one-time imports are paid before either clock starts.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.pipeline import ROOT
from benchmarks.side_by_side import main, warm_core


@dataclass(frozen=True)
class Protocol:
    env_id: str
    target: float
    eval_every: int
    eval_episodes: int
    max_steps: int


def sb3_callback(proto: Protocol, t0: float) -> Any:
    """An SB3 callback that evaluates ``eval_episodes`` deterministic episodes every ``eval_every`` steps,
    stops training at the target and records ``hit = (steps, train_seconds)``."""
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.callbacks import BaseCallback

    eval_env = gym.make(proto.env_id)

    class Harness(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.eval_seconds, self.next_eval = 0.0, proto.eval_every
            self.hit: tuple[int, float] | None = None

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += proto.eval_every
            start = time.perf_counter()
            returns = []
            for i in range(proto.eval_episodes):
                obs, _ = eval_env.reset(seed=10_000 + i)
                done, total = False, 0.0
                while not done:
                    action, _ = self.model.predict(obs, deterministic=True)
                    obs, r, term, trunc, _ = eval_env.step(int(action))
                    total += float(r)
                    done = term or trunc
                returns.append(total)
            now = time.perf_counter()
            if np.mean(returns) >= proto.target:
                self.hit = (self.num_timesteps, start - t0 - self.eval_seconds)
                return False
            self.eval_seconds += now - start
            return True

    return Harness()


def sb3_result(model: Any, harness: Any, t0: float) -> dict[str, Any]:
    steps, train_s = harness.hit or (model.num_timesteps, None)
    return {
        "steps": steps,
        "train_seconds": train_s,
        "total_seconds": time.perf_counter() - t0,
        "reached": harness.hit is not None,
    }


def run_advantage(algo: str, proto: Protocol, seed: int, overrides: dict[str, Any]) -> dict[str, Any]:
    import advantage

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        run = advantage.train(
            algo,
            quiet=True,
            **{
                "env.id": proto.env_id,
                "trainer.seed": seed,
                "trainer.total_steps": proto.max_steps,
                "trainer.eval_every": proto.eval_every,
                "trainer.eval_episodes": proto.eval_episodes,
                "trainer.stop_at_return": proto.target,
                "trainer.tensorboard": False,
                "trainer.progress": "none",
                "trainer.torch_threads": 1,
                "trainer.run_dir": os.path.join(tmp, "run"),
                **overrides,
            },
        )
        rows = run.metrics
    total = time.perf_counter() - t0
    evals = [r for r in rows if "eval/return_mean" in r]
    hit = next((r for r in evals if r["eval/return_mean"] >= proto.target), None)
    if hit is None:
        return {"steps": proto.max_steps, "train_seconds": None, "total_seconds": total, "reached": False}
    eval_seconds = sum(r["eval/seconds"] for r in evals if r["step"] <= hit["step"])
    return {
        "steps": hit["step"],
        "train_seconds": hit["time"] - eval_seconds,
        "total_seconds": total,
        "reached": True,
    }


def worker(run: Callable[[int], dict[str, Any]], lib: str, seed: int) -> None:
    """Body of one child process: print one JSON line with the result and the peak RSS."""
    # torch imports its compiler stack (about 2 s) the first time an optimizer is built: an import, not
    # training. Pay it here, for both libraries, before either clock starts.
    import torch
    import torch._dynamo

    torch.set_num_threads(1)
    # Warm the core (clock ramp-up, first-call kernel initialisation) the same way for both libraries, so
    # the first run after an idle period is not penalised.
    warm_core()
    result = run(seed)
    result.update(lib=lib, seed=seed, peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if result["train_seconds"]:
        result["steps_per_second"] = result["steps"] / result["train_seconds"]
    print(json.dumps(result))


def run_all(module: str, seeds: int, extra_args: list[str]) -> list[dict[str, Any]]:
    """Run ``python -m MODULE --worker LIB --seed S`` (from the repository root) for every seed, SB3 and
    advantage interleaved."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    results = []
    for seed in range(seeds):
        for lib in ("sb3", "advantage"):  # interleaved, so machine load affects both alike
            out = subprocess.run(
                [sys.executable, "-m", module, "--worker", lib, "--seed", str(seed), *extra_args],
                cwd=ROOT,
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
    return results


def report(
    results: list[dict[str, Any]], out: Path, name: str, title: str, proto: Protocol, notes: str = ""
) -> None:
    """Write ``out/name.md`` (table + medians + ratio), ``name.json`` and ``name.png``."""
    out.mkdir(parents=True, exist_ok=True)

    def med(lib: str, key: str) -> float | None:
        vals = [r[key] for r in results if r["lib"] == lib and r.get(key) is not None]
        return statistics.median(vals) if vals else None

    lines = [
        f"### {title}",
        "",
        f"Target: mean of {proto.eval_episodes} deterministic episodes ≥ {proto.target:g}, evaluated every "
        f"{proto.eval_every:,} steps, at most {proto.max_steps:,} steps; one torch thread; "
        "medians over seeds.",
        "",
        "| library | seed | reached | env steps | train s | total s | steps/s | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ts = f"{r['train_seconds']:.2f}" if r["train_seconds"] else "-"
        sps = f"{r['steps_per_second']:,.0f}" if r.get("steps_per_second") else "-"
        lines.append(
            f"| {r['lib']} | {r['seed']} | {r['reached']} | {r['steps']:,} | {ts} | "
            f"{r['total_seconds']:.2f} | {sps} | {r['peak_rss_mb']:.0f} |"
        )
    lines += [
        "",
        "| library | median env steps | median train s | median total s | median peak RSS MB |",
        "|---|---|---|---|---|",
    ]
    for lib in ("sb3", "advantage"):
        train_s = med(lib, "train_seconds")
        lines.append(
            f"| {lib} | {med(lib, 'steps'):,.0f} | {train_s:.2f} | {med(lib, 'total_seconds'):.2f} | "
            f"{med(lib, 'peak_rss_mb'):.0f} |"
            if train_s
            else f"| {lib} | - | - | - | - |"
        )
    ours, theirs = med("advantage", "train_seconds"), med("sb3", "train_seconds")
    ratio = ours / theirs if ours and theirs else None
    lines += [
        "",
        f"**Ratio of median training wall time, advantage / SB3: {ratio:.3f}**"
        if ratio
        else "**Ratio: n/a (a library did not reach the target)**",
    ]
    if notes:
        lines += ["", notes]
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    (out / f"{name}.json").write_text(
        json.dumps({"results": results, "ratio_train_seconds": ratio}, indent=1)
    )
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for lib, color in (("sb3", "tab:blue"), ("advantage", "tab:orange")):
        rs = [r for r in results if r["lib"] == lib and r["train_seconds"]]
        ax.scatter([r["train_seconds"] for r in rs], [r["steps"] for r in rs], label=lib, color=color)
    ax.set_xlabel(f"training wall seconds to {proto.target:g}")
    ax.set_ylabel(f"environment steps to {proto.target:g}")
    ax.set_title(f"{title} (each point a seed)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=110)


def sb3_main(
    doc: str,
    module: str,
    name: str,
    title: str,
    proto: Protocol,
    run_sb3: Callable[[int], dict[str, Any]],
    *,
    algo: str,
    overrides: dict[str, Any],
) -> None:
    """:func:`main` for advantage vs Stable-Baselines3 to a target return (:func:`run_all`,
    :func:`report`) in the script ``module`` (``benchmarks.NAME``, run again as each worker):
    ``run_sb3(seed)`` is SB3's run, ``advantage train ALGO OVERRIDES`` ours."""

    def work(args: argparse.Namespace) -> None:
        if args.worker == "sb3":
            worker(run_sb3, "sb3", args.seed)
        else:
            worker(lambda seed: run_advantage(algo, proto, seed, overrides), "advantage", args.seed)

    main(
        doc,
        libs=("sb3", "advantage"),
        work=work,
        collect=lambda args: run_all(module, args.seeds, []),
        report=lambda results, args, load: report(results, Path(args.out), name, title, proto),
    )
