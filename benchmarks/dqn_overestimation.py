"""Does DQN's max target overestimate, and does Double DQN fix it? DQN vs Double DQN on CartPole-v1, 3 seeds.

    python -m benchmarks.dqn_overestimation
    # -> docs/img/dqn_overestimation.png, benchmarks/results/dqn_overestimation.{md,json}; ~10 min on 2 cores

Trains ``dqn`` with the Python API, ``preset=dqn`` (max target) and ``preset=double_dqn`` (online argmax,
target value), everything else equal: the algorithm's CartPole defaults, 30,000 environment steps, seeds
0, 1, 2, no evaluation during training, no TensorBoard, in a temporary folder. Every 1,000 environment
steps each run measures overestimation (SPEC V4, ``advantage.algos.dqn_probe.OverestimationProbe``): 32 states
sampled from episodes of its current ε-greedy policy, saved, and from each the *greedy* policy rolled out
to termination or to the horizon H = 688 where 0.99^H <= 1e-3 (the time limit does not cut it); the mean
predicted ``max_a Q(s, a)`` (``train/q_predicted``) against the mean discounted return of those rollouts
(``train/q_realized``). The figure draws both against environment steps (mean over seeds) and each seed's
overestimation; the table gives, per run, their means over the second half of the run and the final
greedy evaluation (100 episodes).

The same figure from run folders of your own: ``advantage plot RUN1 RUN2 --metric train/q_predicted
--metric train/q_realized``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import advantage

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FIGURE = ROOT / "docs" / "img" / "dqn_overestimation.png"
PRESETS = {"dqn": "DQN (max target)", "double_dqn": "Double DQN"}
METRICS = ("train/q_predicted", "train/q_realized", "train/overestimation")


def train(preset: str, steps: int, seed: int, every: int, states: int, run_dir: Path) -> list[dict]:
    settings: dict[str, Any] = {
        "trainer.total_steps": steps,
        "trainer.seed": seed,
        "trainer.eval_every": 0,
        "trainer.tensorboard": False,
        "trainer.torch_threads": 1,
        "trainer.run_dir": str(run_dir),
        "algorithm.overestimation_every": every,
        "algorithm.overestimation_states": states,
    }
    run = advantage.train(
        "dqn",
        quiet=True,
        preset=preset,
        **settings,
    )
    return run.metrics


def series(rows: list[dict], metric: str) -> tuple[list[int], list[float]]:
    pairs = [(r["step"], float(r[metric])) for r in rows if isinstance(r.get(metric), int | float)]
    return [s for s, _ in pairs], [v for _, v in pairs]


def second_half_mean(rows: list[dict], metric: str, steps: int) -> float:
    xs, ys = series(rows, metric)
    late = [y for x, y in zip(xs, ys, strict=True) if x > steps / 2]
    return sum(late) / len(late)


def summarize(runs: dict[str, dict[int, list[dict]]], steps: int) -> dict:
    out: dict = {"steps": steps, "runs": {}, "means": {}}
    for preset, by_seed in runs.items():
        out["runs"][preset] = {}
        for seed, rows in by_seed.items():
            pred, real, gap = (second_half_mean(rows, m, steps) for m in METRICS)
            final = series(rows, "eval/return_mean")[1]
            out["runs"][preset][str(seed)] = {
                "q_predicted": pred,
                "q_realized": real,
                "overestimation": gap,
                "final_eval_return": final[-1] if final else None,
            }
        per = out["runs"][preset].values()
        out["means"][preset] = {
            k: sum(r[k] for r in per) / len(per) for k in ("q_predicted", "q_realized", "overestimation")
        }
    seeds = sorted(runs["dqn"], key=int)
    out["dqn_above_double_every_seed"] = all(
        out["runs"]["dqn"][str(s)]["overestimation"] > out["runs"]["double_dqn"][str(s)]["overestimation"]
        for s in seeds
    )
    return out


def plot(runs: dict[str, dict[int, list[dict]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax, ax_gap) = plt.subplots(1, 2, figsize=(12, 4.2))
    for i, (preset, by_seed) in enumerate(runs.items()):
        color = f"C{i}"
        for metric, style, what in (
            ("train/q_predicted", "-", "predicted max Q"),
            ("train/q_realized", "--", "greedy return"),
        ):
            curves = [series(rows, metric) for rows in by_seed.values()]
            n = min(len(xs) for xs, _ in curves)
            mean = np.mean([ys[:n] for _, ys in curves], axis=0)
            ax.plot(curves[0][0][:n], mean, style, color=color, label=f"{PRESETS[preset]}: {what}")
        for j, rows in enumerate(by_seed.values()):
            label = PRESETS[preset] if j == 0 else None
            ax_gap.plot(*series(rows, "train/overestimation"), color=color, alpha=0.8, lw=1.2, label=label)
    ax.set_title(f"max_a Q(s, a) vs the greedy policy's discounted return (mean of {len(by_seed)} seeds)")
    ax_gap.set_title("overestimation = predicted − realized (each seed)")
    ax_gap.axhline(0.0, color="gray", lw=0.8)
    for a in (ax, ax_gap):
        a.set_xlabel("environment steps")
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(summary: dict, seeds: list[int]) -> str:
    steps = summary["steps"]
    lines = [
        f"Means over the second half of each run (steps {steps // 2:,}–{steps:,}), seeds "
        f"{', '.join(map(str, seeds))}:",
        "",
        "| preset | seed | Q predicted | greedy return | overestimation | final eval return |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for preset, by_seed in summary["runs"].items():
        for seed, r in by_seed.items():
            final = "–" if r["final_eval_return"] is None else f"{r['final_eval_return']:.1f}"
            lines.append(
                f"| `{preset}` | {seed} | {r['q_predicted']:.1f} | {r['q_realized']:.1f} | "
                f"{r['overestimation']:+.1f} | {final} |"
            )
    for preset, m in summary["means"].items():
        lines.append(
            f"| `{preset}` | mean | {m['q_predicted']:.1f} | {m['q_realized']:.1f} | "
            f"{m['overestimation']:+.1f} | |"
        )
    verdict = "on every seed" if summary["dqn_above_double_every_seed"] else "NOT on every seed"
    lines += ["", f"DQN's overestimation is above Double DQN's {verdict}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--every", type=int, default=1_000, help="environment steps between measurements")
    p.add_argument("--states", type=int, default=32, help="states per measurement")
    p.add_argument("--results", type=Path, default=RESULTS, help="folder for the .md and .json")
    p.add_argument("--figure", type=Path, default=FIGURE)
    args = p.parse_args()
    runs: dict[str, dict[int, list[dict]]] = {preset: {} for preset in PRESETS}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:  # interleaved: both presets of a seed under the same machine load
            for preset in PRESETS:
                runs[preset][seed] = train(
                    preset, args.steps, seed, args.every, args.states, Path(tmp) / f"{preset}-{seed}"
                )
                print(f"{preset} seed {seed} done at {time.perf_counter() - t0:.0f} s", flush=True)
    summary = summarize(runs, args.steps)
    summary.update({"every": args.every, "states": args.states, "seeds": args.seeds})
    plot(runs, args.figure)
    md = table(summary, args.seeds)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "dqn_overestimation.md").write_text(md)
    (args.results / "dqn_overestimation.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(md)


if __name__ == "__main__":
    main()
