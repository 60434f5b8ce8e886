"""The deadly triad on Baird's counterexample (SPEC T4): linear TD math against hand values and brute force,
divergence of off-policy semi-gradient TD, convergence when one leg is removed, gradient-TD, the runs."""

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import advantage
from advantage.algos.tabular.linear_common import action_features
from advantage.cli import main
from advantage.config import EnvConfig
from advantage.envs import baird_features, make_env, tabular_model
from advantage.errors import ConfigError
from advantage.math import (
    expected_gradient_td_update,
    expected_td_system,
    expected_td_update,
    gradient_td_step,
    linear_td_error,
    per_decision_returns,
    projected_bellman_error,
    semi_gradient_td_step,
    state_distribution,
)

GAMMA = 0.99
W0 = torch.tensor([1.0, 1, 1, 1, 1, 1, 10, 1], dtype=torch.float64)
QUIET = {"trainer.tensorboard": False}


def _baird():
    """Baird's features, the uniform behaviour distribution, P_π (always solid: every state to state 7)."""
    phi = torch.from_numpy(baird_features())
    d = torch.full((7,), 1 / 7, dtype=torch.float64)
    p_pi = torch.zeros(7, 7, dtype=torch.float64)
    p_pi[:, 6] = 1.0
    return phi, d, p_pi, torch.zeros(7, dtype=torch.float64)


# ----------------------------------------------------------------------------------------------------
# The math


def test_baird_env_model_and_policies():
    env = make_env(EnvConfig(id="Baird-v0"))
    model = tabular_model(env)
    base = env.unwrapped
    np.testing.assert_allclose(model.transitions[:, 0], np.tile([1 / 6] * 6 + [0], (7, 1)))  # dashed
    np.testing.assert_allclose(model.transitions[:, 1], np.tile([0] * 6 + [1], (7, 1)))  # solid
    assert not model.rewards.any()
    np.testing.assert_allclose(base.behavior_policy, np.tile([6 / 7, 1 / 7], (7, 1)))
    np.testing.assert_allclose(base.target_policy, np.tile([0, 1], (7, 1)))
    phi = baird_features()
    assert phi.shape == (7, 8) and np.linalg.matrix_rank(phi) == 7
    np.testing.assert_array_equal(phi[0], [2, 0, 0, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(phi[6], [0, 0, 0, 0, 0, 0, 1, 2])
    np.testing.assert_array_equal(phi @ W0.numpy(), [3, 3, 3, 3, 3, 3, 12])
    env.reset(seed=0)
    assert env.step(1)[0] == 6 and env.step(0)[0] in range(6)


def test_expected_td_matrix_of_baird_by_hand():
    """A = Φᵀ D (γ P_π − I) Φ = (1/7) [γ (Σ_s x(s)) x(7)ᵀ − Σ_s x(s) x(s)ᵀ], entry by entry, and its
    eigenvalue with positive real part: the expected update w ← w + α(Aw + b) diverges."""
    phi, d, p_pi, r = _baird()
    a = expected_td_system(phi, d, p_pi, r, GAMMA).A
    # Σ_s x(s) = (2, 2, 2, 2, 2, 2, 1, 8) and x(7) = e_7 + 2 e_8.
    assert a[7, 7].item() == pytest.approx((GAMMA * 8 * 2 - (6 * 1 + 4)) / 7, abs=1e-14)
    assert a[6, 6].item() == pytest.approx((GAMMA - 1) / 7, abs=1e-14)
    assert a[0, 0].item() == pytest.approx(-4 / 7, abs=1e-14)
    assert a[0, 7].item() == pytest.approx((GAMMA * 2 * 2 - 2) / 7, abs=1e-14)
    assert a[0, 6].item() == pytest.approx(GAMMA * 2 / 7, abs=1e-14)
    assert a[0, 1].item() == 0.0
    assert torch.linalg.eigvals(a).real.max().item() > 0.2
    # Remove a leg: one-hot features, or the on-policy distribution (all mass on state 7).
    onehot = expected_td_system(torch.eye(7, dtype=torch.float64), d, p_pi, r, GAMMA).A
    assert torch.linalg.eigvals(onehot).real.max().item() < 0
    on_policy = state_distribution(p_pi, d)
    torch.testing.assert_close(on_policy, torch.eye(7, dtype=torch.float64)[6])
    a_on = expected_td_system(phi, on_policy, p_pi, r, GAMMA).A
    assert torch.linalg.eigvals(a_on).real.max().item() < 1e-12


def test_expected_updates_are_the_mean_of_the_sampled_updates():
    """Brute force over s ~ d, a ~ μ, s' ~ P: the mean of the sampled TD, TDC and GTD2 steps (importance
    weighted) equals the expected update, on a random 3-state, 2-action MDP with rewards."""
    g = torch.Generator().manual_seed(0)
    S, A, D = 3, 2, 2
    p = torch.rand(S, A, S, generator=g, dtype=torch.float64)
    p /= p.sum(-1, keepdim=True)
    rew = torch.randn(S, A, generator=g, dtype=torch.float64)
    pi = torch.softmax(torch.randn(S, A, generator=g, dtype=torch.float64), -1)
    mu = torch.softmax(torch.randn(S, A, generator=g, dtype=torch.float64), -1)
    phi = torch.randn(S, D, generator=g, dtype=torch.float64)
    d = torch.softmax(torch.randn(S, generator=g, dtype=torch.float64), -1)
    w, h = torch.randn(D, generator=g, dtype=torch.float64), torch.randn(D, generator=g, dtype=torch.float64)
    alpha, beta, gamma = 0.3, 0.7, 0.9
    means = {
        k: [torch.zeros(D, dtype=torch.float64), torch.zeros(D, dtype=torch.float64)]
        for k in ("td", "tdc", "gtd2")
    }
    for s in range(S):
        for a in range(A):
            for s2 in range(S):
                prob = d[s] * mu[s, a] * p[s, a, s2]
                rho = float(pi[s, a] / mu[s, a])
                args = (phi[s], phi[s2], float(rew[s, a]), gamma, rho)
                w_td, _ = semi_gradient_td_step(w, *args, alpha)
                w_c, h_c, _ = gradient_td_step("tdc", w, h, *args, alpha, beta)
                w_g, h_g, _ = gradient_td_step("gtd2", w, h, *args, alpha, beta)
                for key, (wn, hn) in {"td": (w_td, h), "tdc": (w_c, h_c), "gtd2": (w_g, h_g)}.items():
                    means[key][0] += prob * wn
                    means[key][1] += prob * hn
    p_pi, r_pi = torch.einsum("sa,sat->st", pi, p), (pi * rew).sum(-1)
    system = expected_td_system(phi, d, p_pi, r_pi, gamma)
    torch.testing.assert_close(means["td"][0], expected_td_update(w, system, alpha), rtol=0, atol=1e-13)
    for key in ("tdc", "gtd2"):
        w_e, h_e = expected_gradient_td_update(key, w, h, system, alpha, beta)
        torch.testing.assert_close(means[key][0], w_e, rtol=0, atol=1e-13)
        torch.testing.assert_close(means[key][1], h_e, rtol=0, atol=1e-13)
    # GTD2's expected w-step is −Aᵀh; the PBE is zero at the TD fixed point A w = −b.
    torch.testing.assert_close(
        expected_gradient_td_update("gtd2", w, h, system, 1.0, 0.0)[0] - w, -system.A.T @ h
    )
    w_fix = torch.linalg.solve(system.A, -system.b)
    assert projected_bellman_error(w_fix, system).item() < 1e-10
    with pytest.raises(ValueError, match=r"one of \('tdc', 'gtd2'\), got 'gtd'"):
        expected_gradient_td_update("gtd", w, h, system, alpha, beta)


def test_per_decision_returns_state_distribution_and_terminal_td_error_by_hand():
    # G_2 = 1·2 = 2;  G_1 = 0.5·(0 + 0.5·2) = 0.5;  G_0 = 2·(1 + 0.5·0.5) = 2.5
    g = per_decision_returns(torch.tensor([1.0, 0.0, 2.0]), torch.tensor([2.0, 0.5, 1.0]), 0.5)
    torch.testing.assert_close(g, torch.tensor([2.5, 0.5, 2.0], dtype=torch.float64))
    _, d, p_pi, _ = _baird()
    # Following the target policy with a 100-step time limit: the start state (uniform), then 99 steps in 7.
    d100 = state_distribution(p_pi, d, horizon=100)
    torch.testing.assert_close(d100, torch.tensor([1 / 700] * 6 + [1 / 700 + 0.99], dtype=torch.float64))
    p_mu = torch.full((7, 7), 1 / 7, dtype=torch.float64)
    torch.testing.assert_close(state_distribution(p_mu, torch.eye(7, dtype=torch.float64)[0]), d)
    # A terminated step bootstraps with 0, even when the next value is not finite.
    w = torch.tensor([1.0, 3.0], dtype=torch.float64)
    x = torch.tensor([2.0, 0.0], dtype=torch.float64)
    x_next = torch.tensor([float("nan"), 1.0], dtype=torch.float64)
    assert linear_td_error(w, x, x_next, 1.0, 0.9, terminated=True).item() == -1.0


def test_action_features_are_blocks_per_action():
    x = action_features(baird_features(), 2)
    assert x.shape == (7, 2, 16)
    np.testing.assert_array_equal(x[3, 0, :8], baird_features()[3])
    np.testing.assert_array_equal(x[3, 1, 8:], baird_features()[3])
    assert not x[3, 0, 8:].any() and not x[3, 1, :8].any()


# ----------------------------------------------------------------------------------------------------
# The triad, as runs


def _curve(run, key="train/weight_norm"):
    return [r[key] for r in run.metrics if key in r]


@pytest.mark.slow
@pytest.mark.parametrize("update, steps", [("sampled", 2000), ("expected", 3000)])
def test_off_policy_semi_gradient_td_diverges_on_baird(update, steps):
    run = advantage.train(
        "semi_gradient_td",
        quiet=True,
        **QUIET,
        **{"algorithm.update": update, "trainer.total_steps": steps, "trainer.seed": 0},
    )
    norms = _curve(run)
    assert norms[0] == pytest.approx(float(W0.norm()))
    assert norms[-1] > 100 * norms[0]  # more than two orders of magnitude
    assert _curve(run, "train/value_error")[-1] > 100 * _curve(run, "train/value_error")[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    "leg, overrides",
    [
        ("off-policy", {"preset": "on_policy", "trainer.total_steps": 3000}),
        ("bootstrapping", {"preset": "monte_carlo", "trainer.total_steps": 3000}),
        (
            "function approximation",
            {"preset": "tabular", "algorithm.alpha": 0.1, "trainer.total_steps": 5000},
        ),
        (
            "function approximation (expected)",
            {
                "preset": "tabular",
                "algorithm.update": "expected",
                "algorithm.alpha": 1.0,
                "trainer.total_steps": 3000,
            },
        ),
    ],
)
def test_removing_one_leg_converges(leg, overrides):
    run = advantage.train("semi_gradient_td", quiet=True, **QUIET, **{"trainer.seed": 0, **overrides})
    norms, errors = _curve(run), _curve(run, "train/value_error_max")
    assert max(norms) < 3 * norms[0], leg  # bounded (off-policy TD reaches 600x in 2000 steps)
    assert errors[-1] < 0.6 * errors[0], leg
    half = len(errors) // 2
    assert errors[-1] <= min(errors[:half]), leg  # still going down


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["tdc", "gtd2"])
@pytest.mark.parametrize("update", ["sampled", "expected"])
def test_gradient_td_converges_off_policy_with_baird_features(algo, update):
    run = advantage.train(
        algo,
        quiet=True,
        **QUIET,
        **{"algorithm.update": update, "trainer.total_steps": 2000, "trainer.seed": 0},
    )
    norms, errors = _curve(run), _curve(run, "train/value_error")
    assert max(norms) <= norms[0] + 1e-9
    assert errors[-1] < 0.4 * errors[0]
    assert _curve(run, "train/pbe")[-1] < 0.05
    if update == "expected":  # deterministic: the value error keeps decreasing
        late = errors[len(errors) // 2 :]
        assert all(b < a for a, b in itertools.pairwise(late))


@pytest.mark.slow
def test_semi_gradient_q_learning_diverges_off_policy_and_not_on_policy():
    common = {**QUIET, "preset": "expected", "algorithm.alpha": 0.1, "trainer.total_steps": 1000}
    off = advantage.train("semi_gradient_q_learning", quiet=True, **common)
    # On-policy the state distribution follows the ε-greedy policy, recomputed every sweep: fewer sweeps.
    on = advantage.train(
        "semi_gradient_q_learning",
        quiet=True,
        **{**common, "algorithm.behavior": "target", "trainer.total_steps": 300},
    )
    assert _curve(off)[-1] > 100 * _curve(off)[0]
    assert max(_curve(on)) < 1.2 * _curve(on)[0]
    sarsa = advantage.train("semi_gradient_sarsa", quiet=True, **QUIET, **{"trainer.total_steps": 300})
    assert sarsa.checkpoint.tensors["w"].shape == (16,) and sarsa.act(0) in (0, 1)


# ----------------------------------------------------------------------------------------------------
# Runs like any other


def test_cli_train_writes_config_metrics_and_a_log_scale_plot(capsys, monkeypatch):
    args = ["train", "semi_gradient_td", "env.id=Baird-v0", "trainer.total_steps=1500", "trainer.run_dir=b"]
    args += ["trainer.tensorboard=false", "trainer.progress=lines"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    # the run's own curves in the progress and the last line: the return of Baird-v0 is always 0
    assert "weight_norm" in err.splitlines()[-1] and "return" not in err.splitlines()[-1]
    assert "train/weight_norm" in out.splitlines()[-1]
    run = Path("b")
    for name in ("config.yaml", "metrics.jsonl", "checkpoints/latest", "plots/learning_curve.png"):
        assert (run / name).exists(), name
    assert "algo: semi_gradient_td" in (run / "config.yaml").read_text()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    norms = [r["train/weight_norm"] for r in rows if "train/weight_norm" in r]
    assert len(norms) == 16 and norms[-1] > 100 * norms[0]
    capsys.readouterr()
    assert main(["plot", "b", "--out", "p.png"]) == 0
    assert Path("p.png").stat().st_size > 1000

    # `advantage plot` picks the algorithm's metrics, and the diverging curves get a log axis.
    from matplotlib.figure import Figure

    seen, real_savefig = {}, Figure.savefig

    def savefig(fig, *a, **k):
        seen.update({ax.get_title(): ax.get_yscale() for ax in fig.axes})
        return real_savefig(fig, *a, **k)

    monkeypatch.setattr(Figure, "savefig", savefig)
    assert main(["plot", "b", "--out", "p2.png"]) == 0
    assert seen == {"train/weight_norm": "log", "train/value_error": "log"}


@pytest.mark.parametrize(
    "algo, extra",
    [("semi_gradient_td", {"preset": "monte_carlo"}), ("tdc", {}), ("semi_gradient_sarsa", {})],
)
def test_resume_is_exact(assert_resume_exact, algo, extra):
    """Stopped mid-episode (a Monte Carlo episode half collected) and resumed: bit-identical weights."""
    common = {**QUIET, "trainer.total_steps": 1001, "trainer.log_every": 100}
    assert_resume_exact(algo, {**common, **extra}, at=450)


def test_user_feature_function_and_bad_inputs(tmp_path, monkeypatch):
    (tmp_path / "myfeatures.py").write_text(
        "from advantage.envs import baird_features\n"
        "def baird(s):\n    return list(baird_features()[s])\n"
        "def ragged(s):\n    return [1.0] * (s + 1)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    common = {**QUIET, "trainer.total_steps": 300}
    mine = advantage.train(
        "semi_gradient_td",
        quiet=True,
        **common,
        **{"algorithm.features": "myfeatures:baird", "model.init_weights": W0.tolist()},
    )
    mine_w = mine.checkpoint.tensors["w"]
    builtin = advantage.train("semi_gradient_td", quiet=True, **common, **{"algorithm.features": "baird"})
    assert torch.equal(mine_w, builtin.checkpoint.tensors["w"])
    for over, message in (
        ({"algorithm.features": "myfeatures:ragged"}, "same non-zero number of floats"),
        ({"algorithm.features": "myfeatures:nope"}, "cannot import nope from myfeatures"),
        (
            {"algorithm.features": "tile"},
            "algorithm.features must be auto, onehot, baird or 'module:function'",
        ),
        ({"model.init_weights": [1.0, 2.0]}, "model.init_weights has 2 values"),
        (
            {"env.id": "FrozenLake-v1", "algorithm.features": "baird"},
            "features=baird needs Baird-v0's 7 states",
        ),
        (
            {"env.id": "FrozenLake-v1", "algorithm.behavior": "env"},
            "algorithm.behavior=env, but FrozenLake-v1 defines no behavior policy",
        ),
    ):
        with pytest.raises(ConfigError, match=message):
            advantage.train("semi_gradient_td", quiet=True, **common, **over)
    assert not Path("runs").exists() or len(list(Path("runs").iterdir())) == 2


@pytest.mark.parametrize(
    "algo", ["semi_gradient_td", "tdc", "gtd2", "semi_gradient_q_learning", "semi_gradient_sarsa"]
)
def test_the_defaults_train_on_any_discrete_env_with_a_model(tmp_path, algo):
    """features, behavior and target default to auto: Baird's features and policies on Baird-v0, one-hot
    features and uniform policies on any other env (FrozenLake-v1 here), which they used to refuse."""
    keys = {
        **QUIET,
        "trainer.total_steps": 300,
        "env.id": "FrozenLake-v1",
        "trainer.run_dir": str(tmp_path / "r"),
    }
    run = advantage.train(algo, quiet=True, **keys)
    assert run.step == 300 and torch.isfinite(run.checkpoint.tensors["w"]).all()


# ----------------------------------------------------------------------------------------------------
# The docs page quotes the results file


def test_deadly_triad_page_quotes_the_results_file():
    """Every number in the bold and prose claims of docs/algorithms/deadly_triad.md, and the table it
    includes, comes from benchmarks/results/baird.json (written by benchmarks/baird.py)."""
    from benchmarks import baird as bench

    root = Path(__file__).resolve().parents[1]
    res = json.loads((root / "benchmarks" / "results" / "baird.json").read_text())
    # The <!-- =PATH --> references after the numbers (tests/test_docs_numbers.py) are not page text.
    page = re.sub(
        r"<!--.*?-->", "", (root / "docs" / "algorithms" / "deadly_triad.md").read_text(), flags=re.S
    )
    assert (root / "docs" / "img" / "baird.md").read_text() == bench.table(res)

    eig = res["max_real_eigenvalue_of_A"]
    s, e, c = res["sampled"], res["expected"], res["control"]
    off, on, onehot, mc = (
        "off-policy TD (all three legs)",
        "on-policy (no off-policy leg)",
        "one-hot features (no approximation leg)",
        "Monte Carlo (no bootstrapping leg)",
    )
    f = bench.fmt
    eig_off, eig_on = eig["off-policy, Baird's features"], eig["on-policy, Baird's features"]
    tail = f(s[onehot]["final_value_error_max"])
    quoted = [
        f"largest real part is **{f(eig_off)}**",
        f"Its largest real part is **{f(eig_on)}**",
        f"The largest real part is **{f(eig['off-policy, one-hot features'])}**",
        f"grows from {f(s[off]['initial_weight_norm'])} to **{f(s[off]['final_weight_norm'])}**",
        f"to **{f(e[off]['final_weight_norm'])}** in {res['config']['prediction_steps']:,} sweeps",
        f"In {res['config']['prediction_steps']:,} environment\nsteps",
        f"‖w‖ ends at {f(s[on]['final_weight_norm'])}, and √VE falls from {f(s[on]['initial_value_error'])} "
        f"to **{f(s[on]['final_value_error'])}**",
        f"Monte Carlo: √VE falls to **{f(s[mc]['final_value_error'])}**",
        f"‖w‖ first rises to {f(s[onehot]['max_weight_norm'])}",
        f"falls from {f(s[onehot]['initial_value_error_max'])} to **{tail}**",
        f"end at ‖w‖ = {f(s['TDC (all three legs)']['final_weight_norm'])}",
        f"Their √PBE is **{f(s['TDC (all three legs)']['final_pbe'])}** and their √VE is\n"
        f"{f(s['TDC (all three legs)']['final_value_error'])}",
        f"grows ‖w‖ from {f(c['Q-learning, off-policy']['initial_weight_norm'])} to\n"
        f"**{f(c['Q-learning, off-policy']['final_weight_norm'])}** in {res['config']['control_steps']:,} "
        "expected sweeps",
        f"On-policy SARSA ends at √VE = **{f(c['SARSA, on-policy']['final_value_error'])}**",
    ]
    missing = [q for q in quoted if q not in page]
    assert not missing, missing
    # TDC and GTD2 end at the same quoted values.
    for key in ("final_weight_norm", "final_pbe", "final_value_error"):
        assert f(s["TDC (all three legs)"][key]) == f(s["GTD2 (all three legs)"][key]), key
    assert res["config"]["seed"] == 0 and "seed 0" in page
