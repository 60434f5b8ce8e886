"""PPO on CartPole-v1: advantage vs Stable-Baselines3, side by side, same machine, one invocation.

    pip install -e ".[bench]"
    python benchmarks/cartpole_ppo.py   # 3 seeds each -> benchmarks/results/cartpole_ppo.{md,json,png}

Both libraries use the rl-baselines3-zoo CartPole-v1 hyperparameters (8 envs, n_steps 32, batch 256,
20 epochs, γ 0.98, λ 0.8, lr 1e-3 → 0 linearly, clip 0.2 → 0 linearly, no entropy bonus, 64-64 tanh MLPs),
one torch thread each, each run in its own process (so peak RSS is per run). The harness evaluates 10
deterministic episodes every 5,000 environment steps and stops a run the first time the mean reaches 475.

Training wall time excludes evaluation for both: for SB3 the harness's callback times its own evaluations
and subtracts them; for advantage the run's ``eval/seconds`` are subtracted from the ``time`` of the row
where the target was reached (the clock of both starts just before the environments and the model are
built). SB3 checks every 8 steps, so its evaluations fall on multiples of 5,000; advantage evaluates at the
first rollout boundary past each multiple (every 256 steps), which can only cost it extra steps.
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
from pathlib import Path

TARGET, EVAL_EVERY, EVAL_EPISODES = 475.0, 5_000, 10
ZOO = dict(n_envs=8, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98, gae_lambda=0.8, lr=1e-3, clip=0.2)


def run_sb3(seed: int, max_steps: int) -> dict:
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    eval_env = gym.make("CartPole-v1")

    class Harness(BaseCallback):
        def __init__(self):
            super().__init__()
            self.eval_seconds, self.next_eval, self.hit = 0.0, EVAL_EVERY, None

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += EVAL_EVERY
            start = time.perf_counter()
            returns = []
            for i in range(EVAL_EPISODES):
                obs, _ = eval_env.reset(seed=10_000 + i)
                done, total = False, 0.0
                while not done:
                    action, _ = self.model.predict(obs, deterministic=True)
                    obs, r, term, trunc, _ = eval_env.step(int(action))
                    total += r
                    done = term or trunc
                returns.append(total)
            now = time.perf_counter()
            self.eval_seconds += now - start
            if np.mean(returns) >= TARGET:
                self.hit = (self.num_timesteps, start - t0 - (self.eval_seconds - (now - start)))
                return False
            return True

    def linear(v):
        return lambda progress_remaining: progress_remaining * v

    env = make_vec_env("CartPole-v1", n_envs=ZOO["n_envs"], seed=seed)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=ZOO["n_steps"],
        batch_size=ZOO["batch_size"],
        n_epochs=ZOO["n_epochs"],
        gamma=ZOO["gamma"],
        gae_lambda=ZOO["gae_lambda"],
        learning_rate=linear(ZOO["lr"]),
        clip_range=linear(ZOO["clip"]),
        ent_coef=0.0,
        seed=seed,
        device="cpu",
        verbose=0,
    )
    harness = Harness()
    model.learn(total_timesteps=max_steps, callback=harness)
    total = time.perf_counter() - t0
    steps, train_s = harness.hit or (model.num_timesteps, None)
    return {
        "steps": steps,
        "train_seconds": train_s,
        "total_seconds": total,
        "reached": harness.hit is not None,
    }


def run_advantage(seed: int, max_steps: int) -> dict:
    import advantage

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        run = advantage.train(
            "ppo",
            quiet=True,
            **{
                "preset": "cartpole",
                "trainer.seed": seed,
                "trainer.total_steps": max_steps,
                "trainer.eval_every": EVAL_EVERY,
                "trainer.eval_episodes": EVAL_EPISODES,
                "trainer.stop_at_return": TARGET,
                "trainer.tensorboard": False,
                "trainer.progress": "none",
                "trainer.torch_threads": 1,
                "trainer.run_dir": os.path.join(tmp, "run"),
            },
        )
        rows = run.metrics
    total = time.perf_counter() - t0
    evals = [r for r in rows if "eval/return_mean" in r]
    hit = next((r for r in evals if r["eval/return_mean"] >= TARGET), None)
    if hit is None:
        return {"steps": max_steps, "train_seconds": None, "total_seconds": total, "reached": False}
    eval_before = sum(r["eval/seconds"] for r in evals if r["step"] <= hit["step"])
    return {
        "steps": hit["step"],
        "train_seconds": hit["time"] - eval_before,
        "total_seconds": total,
        "reached": True,
    }


def worker(lib: str, seed: int, max_steps: int) -> None:
    # One-time imports are not training: torch imports its compiler stack (about 2 s) lazily, the first
    # time an optimizer is built. Pay it here, for both libraries, before either clock starts.
    import torch._dynamo  # noqa: F401

    result = (run_sb3 if lib == "sb3" else run_advantage)(seed, max_steps)
    result.update(lib=lib, seed=seed, peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if result["train_seconds"]:
        result["steps_per_second"] = result["steps"] / result["train_seconds"]
    print(json.dumps(result))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--max-steps", type=int, default=100_000)
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    p.add_argument("--worker", choices=["sb3", "advantage"], help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.seed, args.max_steps)
        return
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    results = []
    for seed in range(args.seeds):
        for lib in ("sb3", "advantage"):  # interleaved, so machine load affects both alike
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    lib,
                    "--seed",
                    str(seed),
                    "--max-steps",
                    str(args.max_steps),
                ],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
    report(results, Path(args.out))


def report(results: list[dict], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)

    def med(lib: str, key: str) -> float | None:
        vals = [r[key] for r in results if r["lib"] == lib and r.get(key) is not None]
        return statistics.median(vals) if vals else None

    lines = [
        "# PPO on CartPole-v1: advantage vs Stable-Baselines3",
        "",
        f"Target: mean of {EVAL_EPISODES} deterministic episodes ≥ {TARGET:g}, evaluated every "
        f"{EVAL_EVERY:,} steps; one torch thread; medians over seeds.",
        "",
        "| library | seed | reached | env steps | train s | total s | steps/s | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ts = f"{r['train_seconds']:.2f}" if r["train_seconds"] else "-"
        sps = f"{r.get('steps_per_second', 0):,.0f}" if r.get("steps_per_second") else "-"
        lines.append(
            f"| {r['lib']} | {r['seed']} | {r['reached']} | {r['steps']:,} | {ts} | "
            f"{r['total_seconds']:.2f} | {sps} | {r['peak_rss_mb']:.0f} |"
        )
    ours, theirs = med("advantage", "train_seconds"), med("sb3", "train_seconds")
    lines += [
        "",
        "| library | median env steps | median train s | median total s | median peak RSS MB |",
        "|---|---|---|---|---|",
    ]
    for lib in ("sb3", "advantage"):
        ts = med(lib, "train_seconds")
        lines.append(
            f"| {lib} | {med(lib, 'steps'):,.0f} | {ts:.2f} | {med(lib, 'total_seconds'):.2f} | "
            f"{med(lib, 'peak_rss_mb'):.0f} |"
            if ts
            else f"| {lib} | - | - | - | - |"
        )
    ratio = ours / theirs if ours and theirs else None
    lines += [
        "",
        f"**Ratio of median training wall time, advantage / SB3: {ratio:.3f}**"
        if ratio
        else "**Ratio: n/a (a library did not reach the target)**",
    ]
    (out / "cartpole_ppo.md").write_text("\n".join(lines) + "\n")
    (out / "cartpole_ppo.json").write_text(
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
    ax.set_xlabel("training wall seconds to 475")
    ax.set_ylabel("environment steps to 475")
    ax.set_title("PPO CartPole-v1 (each point a seed)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "cartpole_ppo.png", dpi=110)


if __name__ == "__main__":
    main()
