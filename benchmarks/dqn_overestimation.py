"""Does DQN's max target overestimate, and does Double DQN fix it? DQN vs Double DQN on CartPole-v1.

    python benchmarks/dqn_overestimation.py   # -> docs/img/dqn_overestimation.{png,md}, about a minute

Trains ``dqn`` twice with the Python API, ``preset=dqn`` (max target) and ``preset=double_dqn`` (online
argmax, target value), everything else equal: the algorithm's CartPole defaults, 30,000 environment steps,
seed 0, no evaluation during training, no TensorBoard, in a temporary folder. Both runs log, at every update,
the mean predicted ``max_a Q(s, a)`` over the states of the last 10 terminated training episodes
(``train/q_predicted``) next to the discounted return that actually followed those states
(``train/q_realized``). The figure draws both against environment steps; the table gives their means, and
the mean overestimation (predicted − realized), over the second half of each run.

The same figure from two run folders: ``advantage plot RUN1 RUN2 --metric train/q_predicted
--metric train/q_realized``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import advantage

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img"
PRESETS = {"dqn": "DQN (max target)", "double_dqn": "Double DQN"}
METRICS = ("train/q_predicted", "train/q_realized", "train/overestimation")


def train(preset: str, steps: int, seed: int, run_dir: Path) -> list[dict]:
    run = advantage.train(
        "dqn",
        quiet=True,
        preset=preset,
        **{
            "trainer.total_steps": steps,
            "trainer.seed": seed,
            "trainer.eval_every": 0,
            "trainer.tensorboard": False,
            "trainer.run_dir": str(run_dir),
        },
    )
    return run.metrics


def series(rows: list[dict], metric: str) -> tuple[list[int], list[float]]:
    pairs = [(r["step"], float(r[metric])) for r in rows if isinstance(r.get(metric), int | float)]
    return [s for s, _ in pairs], [v for _, v in pairs]


def second_half_mean(rows: list[dict], metric: str, steps: int) -> float:
    xs, ys = series(rows, metric)
    late = [y for x, y in zip(xs, ys, strict=True) if x > steps / 2]
    return sum(late) / len(late)


def plot(results: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax_gap) = plt.subplots(1, 2, figsize=(12, 4.2))
    for i, (preset, rows) in enumerate(results.items()):
        color = f"C{i}"
        for metric, style, what in (
            ("train/q_predicted", "-", "predicted"),
            ("train/q_realized", "--", "realized"),
        ):
            ax.plot(*series(rows, metric), style, color=color, label=f"{PRESETS[preset]}: {what}")
        ax_gap.plot(*series(rows, "train/overestimation"), color=color, label=PRESETS[preset])
    ax.set_title("max_a Q(s, a) predicted vs discounted return realized")
    ax_gap.set_title("overestimation = predicted − realized")
    ax_gap.axhline(0.0, color="gray", lw=0.8)
    for a in (ax, ax_gap):
        a.set_xlabel("environment steps")
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(results: dict[str, list[dict]], steps: int, seed: int) -> str:
    lines = [
        f"Means over the second half of each run (steps {steps // 2:,}–{steps:,}, seed {seed}):",
        "",
        "| preset | Q predicted | return realized | overestimation | final eval return |",
        "|---|---:|---:|---:|---:|",
    ]
    for preset, rows in results.items():
        pred, real, gap = (second_half_mean(rows, m, steps) for m in METRICS)
        final = series(rows, "eval/return_mean")[1]
        final_txt = f"{final[-1]:.1f}" if final else "–"
        lines.append(f"| `{preset}` | {pred:.1f} | {real:.1f} | {gap:+.1f} | {final_txt} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=OUT, help="folder for the .png and .md")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {preset: train(preset, args.steps, args.seed, Path(tmp) / preset) for preset in PRESETS}
    plot(results, args.out / "dqn_overestimation.png")
    md = table(results, args.steps, args.seed)
    (args.out / "dqn_overestimation.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
