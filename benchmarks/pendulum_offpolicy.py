"""SAC and TD3 on Pendulum-v1: advantage vs Stable-Baselines3, same budget (20,000 steps), one invocation.

    pip install -e ".[bench]"
    python -m benchmarks.pendulum_offpolicy            # 3 seeds -> benchmarks/results/pendulum_offpolicy.*
    python -m benchmarks.pendulum_offpolicy --matched  # also advantage with SB3's exact (zoo) settings

Stable-Baselines3 runs the rl-baselines3-zoo Pendulum-v1 hyperparameters (rl_zoo3 2.9 ``hyperparams/``):

* SAC: ``learning_rate=1e-3`` and SB3's defaults otherwise (256-256 networks, batch 256, buffer 1M,
  ``learning_starts=100``, τ 0.005, γ 0.99, one gradient step per environment step, learned temperature).
* TD3: γ 0.98, buffer 200k, ``learning_starts=10000``, Gaussian action noise σ 0.1, ``train_freq=1``,
  ``gradient_steps=1``, ``learning_rate=1e-3``, 400-300 networks (batch 256, policy delay 2, target noise
  0.2 clipped at 0.5: SB3's defaults).

advantage runs the defaults of ``advantage train sac`` / ``advantage train td3`` (preset ``pendulum``:
64-64 networks, ``learning_starts=1000``, otherwise the same algorithm settings; TD3 keeps γ 0.98 and
uses batch 128, near the paper's 100).
``--matched`` adds ``advantage-zoo``: advantage with preset ``zoo_pendulum``, SB3's network sizes and
schedule, to separate the per-step speed of the implementation from the choice of network size.

Protocol: every (library, algorithm, seed) is a fresh process with one torch thread (OMP/MKL too),
libraries interleaved and their order flipped every seed; the 1-minute load average before each worker is
recorded. The wall clock starts just before the environment and the model are built (imports and a 0.5 s
core warm-up are paid before it, for both) and stops when training returns; advantage's end-of-run
evaluation is subtracted, its checkpoint and learning-curve plot are not. The final return is then
measured the same way for both, outside the clock: 20 deterministic episodes on Pendulum-v1 with reset
seeds 10,000-10,019.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.pipeline import ROOT
from benchmarks.side_by_side import warm_core

ENV_ID, STEPS, EVAL_EPISODES = "Pendulum-v1", 20_000, 20
LIBS = ("sb3", "advantage")


def evaluate(act: Any) -> tuple[float, float]:
    """Mean and std of the return of ``EVAL_EPISODES`` deterministic episodes (reset seeds 10,000+i)."""
    import gymnasium as gym
    import numpy as np

    env = gym.make(ENV_ID)
    returns = []
    for i in range(EVAL_EPISODES):
        obs, _ = env.reset(seed=10_000 + i)
        done, total = False, 0.0
        while not done:
            obs, r, term, trunc, _ = env.step(act(obs))
            total += float(r)
            done = term or trunc
        returns.append(total)
    return float(np.mean(returns)), float(np.std(returns))


def run_sb3(algo: str, seed: int, steps: int) -> dict[str, Any]:
    import numpy as np
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise

    t0 = time.perf_counter()
    if algo == "sac":
        model = SAC("MlpPolicy", ENV_ID, learning_rate=1e-3, seed=seed, device="cpu", verbose=0)
    else:
        model = TD3(
            "MlpPolicy",
            ENV_ID,
            gamma=0.98,
            buffer_size=200_000,
            learning_starts=10_000,
            action_noise=NormalActionNoise(np.zeros(1), 0.1 * np.ones(1)),
            gradient_steps=1,
            train_freq=1,
            learning_rate=1e-3,
            policy_kwargs={"net_arch": [400, 300]},
            seed=seed,
            device="cpu",
            verbose=0,
        )
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - t0
    mean, std = evaluate(lambda obs: model.predict(obs, deterministic=True)[0])
    return {"wall_seconds": wall, "return_mean": mean, "return_std": std}


def run_advantage(algo: str, seed: int, steps: int, preset: str) -> dict[str, Any]:
    import advantage

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        settings: dict[str, Any] = {
            "preset": preset,
            "trainer.seed": seed,
            "trainer.total_steps": steps,
            "trainer.eval_every": 0,
            "trainer.eval_episodes": 1,
            "trainer.tensorboard": False,
            "trainer.progress": "none",
            "trainer.torch_threads": 1,
            "trainer.run_dir": os.path.join(tmp, "run"),
        }
        run = advantage.train(
            algo,
            quiet=True,
            **settings,
        )
        wall = time.perf_counter() - t0
        eval_seconds = sum(r["eval/seconds"] for r in run.metrics if "eval/seconds" in r)
        policy = run.policy
        mean, std = evaluate(lambda obs: policy.act(obs, deterministic=True))
    return {"wall_seconds": wall - eval_seconds, "return_mean": mean, "return_std": std}


def worker(lib: str, algo: str, seed: int, steps: int) -> None:
    import torch
    import torch._dynamo  # (torch's compiler stack import, paid before either clock)

    torch.set_num_threads(1)
    if lib == "sb3":
        import stable_baselines3  # noqa: F401
    else:
        from advantage.algos import sac, td3  # noqa: F401  (the training code, before the clock)
    warm_core()
    if lib == "sb3":
        out = run_sb3(algo, seed, steps)
    else:
        out = run_advantage(algo, seed, steps, "zoo_pendulum" if lib == "advantage-zoo" else "pendulum")
    out.update(
        lib=lib,
        algo=algo,
        seed=seed,
        steps=steps,
        steps_per_second=steps / out["wall_seconds"],
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        threads=torch.get_num_threads(),
    )
    print(json.dumps(out))


def run_all(libs: tuple[str, ...], algos: list[str], seeds: int, steps: int) -> list[dict[str, Any]]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    results = []
    for seed in range(seeds):
        for algo in algos:
            for lib in libs if seed % 2 == 0 else libs[::-1]:
                load = os.getloadavg()[0]
                cmd = [sys.executable, "-m", "benchmarks.pendulum_offpolicy", "--worker", lib, "--algo", algo]
                out = subprocess.run(
                    [*cmd, "--seed", str(seed), "--steps", str(steps)],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    env=env,
                    check=False,
                )
                if out.returncode != 0:
                    sys.stderr.write(out.stderr[-4000:])
                    raise SystemExit(f"worker {lib} {algo} seed {seed} failed")
                r = {**json.loads(out.stdout.strip().splitlines()[-1]), "load_before": load}
                results.append(r)
                print(
                    f"{algo} seed {seed} {lib}: {r['wall_seconds']:.1f} s, "
                    f"{r['steps_per_second']:.0f} steps/s, "
                    f"return {r['return_mean']:.1f} ± {r['return_std']:.1f}, load before {load:.2f}",
                    flush=True,
                )
    return results


def report(
    results: list[dict[str, Any]], out: Path, load_start: float, name: str = "pendulum_offpolicy"
) -> None:
    import stable_baselines3
    import torch

    out.mkdir(parents=True, exist_ok=True)
    med = statistics.median
    libs = [lib for lib in ("sb3", "advantage", "advantage-zoo") if any(r["lib"] == lib for r in results)]
    algos = [a for a in ("sac", "td3") if any(r["algo"] == a for r in results)]
    steps = results[0]["steps"]

    def pick(algo: str, lib: str) -> list[dict[str, Any]]:
        return [r for r in results if r["algo"] == algo and r["lib"] == lib]

    seeds = len({r["seed"] for r in results})
    lines = [
        "### SAC and TD3 on Pendulum-v1: advantage vs Stable-Baselines3, same budget",
        "",
        f"{steps:,} environment steps per run, {seeds} seeds, a fresh process with one torch thread per run, "
        "libraries interleaved. SB3: the rl-baselines3-zoo Pendulum-v1 hyperparameters; advantage: the "
        "defaults of `advantage train sac|td3` (preset `pendulum`: 64-64 networks; TD3 with batch 128)"
        + (
            "; advantage-zoo: preset `zoo_pendulum`, SB3's settings and network sizes"
            if "advantage-zoo" in libs
            else ""
        )
        + f". Final return: {EVAL_EPISODES} deterministic episodes (reset seeds 10,000+), outside the clock. "
        f"torch {torch.__version__}, SB3 {stable_baselines3.__version__}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; 1-minute load average "
        f"{load_start:.2f} at the start, at most {max(r['load_before'] for r in results):.2f} before any "
        "worker (other jobs shared the machine; the interleaving exposes both libraries to it alike).",
        "",
        "| algorithm | library | seed | final return | wall s | steps/s | peak RSS MB | load before |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['algo']} | {r['lib']} | {r['seed']} | {r['return_mean']:.1f} ± {r['return_std']:.1f} | "
            f"{r['wall_seconds']:.1f} | {r['steps_per_second']:.0f} | {r['peak_rss_mb']:.0f} | "
            f"{r['load_before']:.2f} |"
        )
    lines += [
        "",
        "| algorithm | library | median final return | seeds ≥ −200 | median wall s | median steps/s | "
        "wall / SB3 (medians) | return within 10% of SB3 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary: dict[str, dict[str, Any]] = {}
    for algo in algos:
        theirs = pick(algo, "sb3")
        t_wall = med(r["wall_seconds"] for r in theirs) if theirs else None
        t_ret = med(r["return_mean"] for r in theirs) if theirs else None
        for lib in libs:
            rs = pick(algo, lib)
            if not rs:
                continue
            wall, ret = med(r["wall_seconds"] for r in rs), med(r["return_mean"] for r in rs)
            ratio = wall / t_wall if t_wall else None
            ok = ret >= t_ret - 0.1 * abs(t_ret) if t_ret is not None else None
            solved = sum(r["return_mean"] >= -200 for r in rs)
            summary[f"{algo}/{lib}"] = {"median_wall": wall, "median_return": ret, "wall_ratio": ratio}
            lines.append(
                f"| {algo} | {lib} | {ret:.1f} | {solved}/{len(rs)} | {wall:.1f} | "
                f"{med(r['steps_per_second'] for r in rs):.0f} | "
                + (f"**{ratio:.3f}** |" if lib != "sb3" and ratio else "1 |")
                + (f" {'yes' if ok else 'no'} |" if lib != "sb3" else " - |")
            )
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    (out / f"{name}.json").write_text(
        json.dumps({"load_start": load_start, "summary": summary, "results": results}, indent=1)
    )
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"sb3": "tab:blue", "advantage": "tab:orange", "advantage-zoo": "tab:green"}
    fig, axes = plt.subplots(1, len(algos), figsize=(5.5 * len(algos), 4), squeeze=False)
    for ax, algo in zip(axes[0], algos, strict=True):
        for lib in libs:
            rs = pick(algo, lib)
            ax.scatter(
                [r["wall_seconds"] for r in rs], [r["return_mean"] for r in rs], label=lib, color=colors[lib]
            )
        ax.axhline(-200, color="gray", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_xlabel(f"wall seconds for {steps:,} steps (log scale)")
        ax.set_ylabel("final return (20 episodes)")
        ax.set_title(f"{algo.upper()} on {ENV_ID} (each point a seed)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=100)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--algos", default="sac,td3")
    p.add_argument("--matched", action="store_true", help="also run advantage with SB3's settings")
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    p.add_argument("--name", default="pendulum_offpolicy", help="basename of the result files")
    p.add_argument("--worker", choices=["sb3", "advantage", "advantage-zoo"], help=argparse.SUPPRESS)
    p.add_argument("--algo", choices=["sac", "td3"], default="sac", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.algo, args.seed, args.steps)
        return
    load_start = os.getloadavg()[0]
    libs = (*LIBS, "advantage-zoo") if args.matched else LIBS
    results = run_all(libs, args.algos.split(","), args.seeds, args.steps)
    report(results, Path(args.out), load_start, args.name)


if __name__ == "__main__":
    main()
