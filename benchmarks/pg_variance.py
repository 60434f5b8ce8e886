"""How much variance does each REINFORCE estimator have? Measured on the exact-gradient tests' small MDP.

    python -m benchmarks.pg_variance   # about 30 seconds on CPU

writes benchmarks/results/pg_variance.{json,md} and the figure docs/img/pg_variance.png.

The MDP, the sampler, the per-episode gradients and the estimators are those of
``tests/test_policy_gradient_exact.py`` (imported from the test module, not copied): 4 states, 2 actions,
softmax-table policy, γ = 0.8, 160,000 episodes in batches of K = 8. For every estimator the script reports
the total variance per episode (K × the trace of the covariance of the batch means, so leave-one-out
baselines are measured with their within-batch correlation) and the largest |z| of the batch mean against
the exact ∇J of the 4 free components (the tests require < 4 for an unbiased estimator). The
importance-sampled estimators use episodes of a behaviour policy μ ≠ π and the test's per-decision weights.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from advantage.math import cumulative_weights, outer_weights, reward_to_go

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
FIGURE = ROOT / "docs" / "img" / "pg_variance.png"

# key in the tests' on-policy dict (or "is", "is_value" below) -> (label, Ψ_t, family)
ESTIMATORS = {
    "whole": ("whole return", r"$G_0$", "whole"),
    "whole_mean": ("whole + mean", r"$G_0 - \bar G_0^{(-i)}$", "whole"),
    "whole_optimal": ("whole + optimal b*", r"$G_0 - b^*$", "whole"),
    "rtg": ("reward-to-go", r"$\gamma^t G_t$", "rtg"),
    "rtg_mean": ("reward-to-go + mean", r"$\gamma^t (G_t - \bar G_t^{(-i)})$", "rtg"),
    "rtg_value": ("reward-to-go + V", r"$\gamma^t (G_t - V^\pi(s_t))$", "rtg"),
    "rtg_optimal": ("reward-to-go + optimal b*", r"$\gamma^t (G_t - b^*)$", "rtg"),
    "is": ("importance-sampled", r"$\gamma^t R^\rho_t$", "is"),
    "is_value": ("importance-sampled + V", r"$\gamma^t (R^\rho_t - \rho_{0:t} V^\pi(s_t))$", "is"),
    "rtg_no_outer_weight": (r"reward-to-go without $\gamma^t$ (biased)", r"$G_t$", "biased"),
}
COLORS = {"whole": "C0", "rtg": "C1", "is": "C2", "biased": "0.6"}


def load_test_module() -> ModuleType:
    path = ROOT / "tests" / "test_policy_gradient_exact.py"
    spec = importlib.util.spec_from_file_location("test_policy_gradient_exact", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def unwrap(fixture):
    """The plain function behind a ``pytest.fixture`` (calling a fixture directly is an error)."""
    return fixture.__wrapped__  # set by pytest's wrapper (functools.wraps) in every pytest >= 8


def importance_sampled(t, mdp) -> dict[str, torch.Tensor]:
    """Per-episode gradients of the tests' off-policy estimators: episodes of μ, per-decision weights."""
    th = mdp.theta
    th_mu = th + torch.as_tensor(np.random.default_rng(7).normal(0.0, 0.5, size=th.shape))
    ep = mdp.sample(th_mu, t.N_EPISODES, seed=2)
    m = ep["mask"]
    rho = cumulative_weights(t.log_probs(th, ep), t.log_probs(th_mu, ep), m, max_weight=None)
    R = reward_to_go(ep["rewards"] * rho, t.GAMMA)
    w = outer_weights(m, t.GAMMA, True)
    v = mdp.value(th)[ep["states"]] * m
    return {"is": t.per_episode(th, ep, w * R), "is_value": t.per_episode(th, ep, w * (R - rho * v))}


def measure() -> tuple[dict[str, dict[str, float]], ModuleType]:
    t = load_test_module()
    mdp = t.MDP(seed=0)
    grads = unwrap(t.on_policy)(mdp)
    grads |= importance_sampled(t, mdp)
    exact = mdp.grad_J(mdp.theta)
    out = {}
    for key in ESTIMATORS:
        est = t.Estimate(grads[key])
        out[key] = {"var": est.total_var, "z": float(est.z(exact).abs().max())}
    return out, t


def plot(res: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(ESTIMATORS)[::-1]  # first estimator on top
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    vals = [res[k]["var"] for k in keys]
    bars = ax.barh(
        [ESTIMATORS[k][0] for k in keys],
        vals,
        color=[COLORS[ESTIMATORS[k][2]] for k in keys],
        hatch=["//" if ESTIMATORS[k][2] == "biased" else "" for k in keys],
    )
    ax.bar_label(bars, labels=[f"{v:.3g}" for v in vals], padding=3, fontsize=8)
    ax.set_xscale("log")
    ax.set_xlim(min(vals) / 2, max(vals) * 3)
    ax.set_xlabel("total variance of the gradient estimate, per episode (log scale)")
    ax.set_title("REINFORCE gradient estimators on the 4-state test MDP (γ = 0.8)")
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(res: dict[str, dict[str, float]], t) -> str:
    base = res["whole"]["var"]
    lines = [
        f"{t.N_EPISODES:,} episodes per estimator in batches of K = {t.K}; γ = {t.GAMMA}. "
        "max |z|: the largest of the 4 free components' distances from the exact ∇J, in standard errors.",
        "",
        "| estimator | weight $\\Psi_t$ of $\\nabla\\log\\pi(a_t\\mid s_t)$ | variance per episode "
        "| vs whole return | max $\\lvert z\\rvert$ |",
        "|---|---|---:|---:|---:|",
    ]
    for key, (label, psi, _) in ESTIMATORS.items():
        r = res[key]
        lines.append(f"| {label} | {psi} | {r['var']:.3g} | {r['var'] / base:.2f}× | {r['z']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT, help="folder for pg_variance.json and pg_variance.md")
    p.add_argument("--figure", type=Path, default=FIGURE, help="the bar chart's path")
    args = p.parse_args()
    start = time.perf_counter()
    res, t = measure()
    plot(res, args.figure)
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "episodes": t.N_EPISODES,
        "batch": t.K,
        "gamma": t.GAMMA,
        # "var": total variance per episode; "z": largest |z| against the exact gradient; "ratio": var over
        # the whole-return estimator's
        "estimators": {k: {**r, "ratio": r["var"] / res["whole"]["var"]} for k, r in res.items()},
        "max_z_unbiased": max(r["z"] for k, r in res.items() if ESTIMATORS[k][2] != "biased"),
        # "A_over_B": how many times A's variance is B's (the page quotes these factors)
        "factors": {
            f"{a}_over_{b}": res[a]["var"] / res[b]["var"]
            for a, b in [
                ("whole", "rtg"),
                ("rtg", "rtg_mean"),
                ("rtg", "rtg_value"),
                ("rtg", "rtg_optimal"),
                ("whole", "whole_mean"),
                ("whole", "whole_optimal"),
            ]
        },
    }
    (args.out / "pg_variance.json").write_text(json.dumps(payload, indent=1) + "\n")
    md = table(res, t)
    (args.out / "pg_variance.md").write_text(md)
    print(md)
    print(f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
