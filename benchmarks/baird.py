"""The deadly triad on Baird's counterexample: ‖w‖ over steps and sweeps for each variant (SPEC T4).

    python -m benchmarks.baird   # -> docs/img/baird.{png,md}, benchmarks/results/baird.json; a few minutes

Trains, with the Python API, seed 0, in a temporary folder, on ``Baird-v0`` (γ = 0.99, Baird's features
and initial weights w = (1, 1, 1, 1, 1, 1, 10, 1), behaviour dashed 6/7, target always solid):

* prediction, each ``algorithm.update=sampled`` (10,000 environment steps) and ``expected`` (10,000
  expected updates, "sweeps"): off-policy semi-gradient TD(0) with all three legs of the triad; the same
  with one leg removed — ``preset=on_policy`` (behave with the target policy), ``preset=tabular`` (one-hot
  features, started from the same values), ``preset=monte_carlo`` (per-decision importance-sampled
  returns instead of bootstrapping); and ``tdc`` and ``gtd2`` with all three legs;
* control, expected updates (2,000 sweeps, α = 0.1): semi-gradient Q-learning and SARSA off-policy
  (behaviour dashed 6/7) and on-policy (ε-greedy in the current estimate).

Each prediction run uses the algorithm's defaults (α = 0.01 for semi-gradient TD, α = 0.005 and β = 0.05
for TDC and GTD2, as in Sutton & Barto's Figures 11.2 and 11.6), except the one-hot run (α = 0.1):
tabular off-policy TD contracts by only about α(1 − γ)/7 per step here, too slowly to see at α = 0.01.
The figure draws ``train/weight_norm`` ‖w‖ (top) and ``train/value_error`` √VE (bottom) on log axes;
the JSON holds every curve (logged every 100 steps) and, per variant, ‖w‖, √VE and the largest error
over the states, max_s |v(s) − v_π(s)| (the norm in which tabular TD contracts), at the start and at the
end, and the final √PBE; the table gives the same numbers.

The same curves from run folders: ``advantage plot RUN1 RUN2 ...`` (the default metrics of these
algorithms are ``train/weight_norm`` and ``train/value_error``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import advantage
from advantage.envs import baird_features
from advantage.math import expected_td_system, state_distribution

ROOT = Path(__file__).resolve().parents[1]
IMG = ROOT / "docs" / "img"
RESULTS = ROOT / "benchmarks" / "results"

PREDICTION: dict[str, tuple[str, dict[str, Any]]] = {
    "off-policy TD (all three legs)": ("semi_gradient_td", {}),
    "on-policy (no off-policy leg)": ("semi_gradient_td", {"preset": "on_policy"}),
    "one-hot features (no approximation leg)": (
        "semi_gradient_td",
        {"preset": "tabular", "algorithm.alpha": 0.1},
    ),
    "Monte Carlo (no bootstrapping leg)": ("semi_gradient_td", {"preset": "monte_carlo"}),
    "TDC (all three legs)": ("tdc", {}),
    "GTD2 (all three legs)": ("gtd2", {}),
}
CONTROL_ALPHA = {"algorithm.alpha": 0.1}
CONTROL: dict[str, tuple[str, dict[str, Any]]] = {
    "Q-learning, off-policy": ("semi_gradient_q_learning", CONTROL_ALPHA),
    "Q-learning, on-policy": ("semi_gradient_q_learning", {**CONTROL_ALPHA, "algorithm.behavior": "target"}),
    "SARSA, off-policy": ("semi_gradient_sarsa", CONTROL_ALPHA),
    "SARSA, on-policy": ("semi_gradient_sarsa", {**CONTROL_ALPHA, "algorithm.behavior": "target"}),
}


def eigenvalues(gamma: float = 0.99) -> dict[str, float]:
    """The largest real part of an eigenvalue of the expected TD matrix A = Φᵀ D (γ P_π − I) Φ on Baird-v0:
    positive means expected TD diverges for every small step size."""
    p_pi = torch.zeros(7, 7, dtype=torch.float64)
    p_pi[:, 6] = 1.0  # the target policy always goes to state 7
    uniform = torch.full((7,), 1 / 7, dtype=torch.float64)  # the behaviour policy's distribution
    on_policy = state_distribution(p_pi, uniform, horizon=100)  # Baird-v0 restarts every 100 steps
    phi, onehot, r = torch.from_numpy(baird_features()), torch.eye(7, dtype=torch.float64), torch.zeros(7)
    cases = {
        "off-policy, Baird's features": (phi, uniform),
        "on-policy, Baird's features": (phi, on_policy),
        "off-policy, one-hot features": (onehot, uniform),
    }
    out = {}
    for name, (x, d) in cases.items():
        a = expected_td_system(x, d, p_pi, r.double(), gamma).A
        out[name] = float(np.round(torch.linalg.eigvals(a).real.max().item(), 12)) + 0.0  # no -0.0
    return out


def run(algo: str, overrides: dict[str, Any], update: str, steps: int, seed: int, run_dir: Path) -> dict:
    start = time.perf_counter()
    settings: dict[str, Any] = {
        "algorithm.update": update,
        "trainer.total_steps": steps,
        "trainer.seed": seed,
        "trainer.tensorboard": False,
        "trainer.run_dir": str(run_dir),
    }
    r = advantage.train(
        algo,
        quiet=True,
        **overrides,
        **settings,
    )
    rows = [x for x in r.metrics if "train/weight_norm" in x]
    return {
        "algo": algo,
        "overrides": overrides,
        "update": update,
        "steps": [x["step"] for x in rows],
        "weight_norm": [x["train/weight_norm"] for x in rows],
        "value_error": [x["train/value_error"] for x in rows],
        "initial_weight_norm": rows[0]["train/weight_norm"],
        "final_weight_norm": rows[-1]["train/weight_norm"],
        "max_weight_norm": max(x["train/weight_norm"] for x in rows),
        "initial_value_error": rows[0]["train/value_error"],
        "final_value_error": rows[-1]["train/value_error"],
        "initial_value_error_max": rows[0]["train/value_error_max"],
        "final_value_error_max": rows[-1]["train/value_error_max"],
        "final_pbe": rows[-1].get("train/pbe"),
        "seconds": round(time.perf_counter() - start, 2),
    }


def fmt(x: float) -> str:
    """Three significant digits, exponents written plainly: 6.98e11, 1.24e-12."""
    text = f"{x:.3g}"
    if "e" in text:
        mant, exp = text.split("e")
        text = f"{mant}e{int(exp)}"
    return text


def table(results: dict) -> str:
    lines = [
        "Largest real part of an eigenvalue of the expected TD matrix A = Φᵀ D (γ P_π − I) Φ:",
        "",
        "| case | max Re λ(A) |",
        "|---|---:|",
    ]
    lines += [f"| {k} | {fmt(v)} |" for k, v in results["max_real_eigenvalue_of_A"].items()]
    lines.append("")
    for group, title in (
        ("sampled", f"Prediction, sampled: {results['config']['prediction_steps']:,} environment steps"),
        ("expected", f"Prediction, expected updates: {results['config']['prediction_steps']:,} sweeps"),
        ("control", f"Control, expected updates: {results['config']['control_steps']:,} sweeps"),
    ):
        lines += [
            f"{title} (seed {results['config']['seed']}):",
            "",
            "| variant | ‖w‖ start | ‖w‖ end | max ‖w‖ | √VE start | √VE end | max error start | "
            "max error end | √PBE end |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, r in results[group].items():
            cells = (
                r["initial_weight_norm"],
                r["final_weight_norm"],
                r["max_weight_norm"],
                r["initial_value_error"],
                r["final_value_error"],
                r["initial_value_error_max"],
                r["final_value_error_max"],
                r["final_pbe"],
            )
            lines.append(f"| {name} | " + " | ".join("–" if c is None else fmt(c) for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(17, 9), sharex="col")
    panels = (
        ("sampled", "prediction, sampled updates", "environment steps"),
        ("expected", "prediction, expected (DP) updates", "sweeps"),
        ("control", "control, expected (DP) updates", "sweeps"),
    )
    for col, (group, title, xlabel) in enumerate(panels):
        for i, (name, r) in enumerate(results[group].items()):
            # Dashed: one leg of the triad removed; solid: all three present.
            style = "--" if "no " in name or "on-policy" in name else "-"
            for row, key in enumerate(("weight_norm", "value_error")):
                axes[row, col].plot(r["steps"], r[key], style, color=f"C{i}", label=name)
        for row, what in enumerate(("‖w‖", "√VE (value error; v_π = 0)")):
            ax = axes[row, col]
            ax.set_yscale("log")
            ax.set_title(f"{what}: {title}", fontsize=10)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        axes[1, col].set_xlabel(xlabel)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10_000, help="prediction steps (and sweeps)")
    p.add_argument("--control-steps", type=int, default=2_000, help="control sweeps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--img", type=Path, default=IMG, help="folder for baird.png and baird.md")
    p.add_argument("--results", type=Path, default=RESULTS, help="folder for baird.json")
    args = p.parse_args()
    results: dict = {
        "config": {
            "env": "Baird-v0",
            "seed": args.seed,
            "prediction_steps": args.steps,
            "control_steps": args.control_steps,
        },
        "max_real_eigenvalue_of_A": eigenvalues(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for update in ("sampled", "expected"):
            results[update] = {
                name: run(algo, over, update, args.steps, args.seed, Path(tmp) / f"{update}-{i}")
                for i, (name, (algo, over)) in enumerate(PREDICTION.items())
            }
        results["control"] = {
            name: run(algo, over, "expected", args.control_steps, args.seed, Path(tmp) / f"control-{i}")
            for i, (name, (algo, over)) in enumerate(CONTROL.items())
        }
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "baird.json").write_text(json.dumps(results, indent=1) + "\n")
    plot(results, args.img / "baird.png")
    md = table(results)
    (args.img / "baird.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
