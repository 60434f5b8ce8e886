"""Tabular methods against exact answers: Q* from value iteration, V^π from a linear solve."""

import signal

import numpy as np
import pytest
import torch

import advantage
from advantage.algos.tabular.dynamic_programming import (
    policy_evaluation,
    policy_iteration,
    q_from_v,
    value_iteration,
)
from advantage.config import EnvConfig
from advantage.context import RunContext
from advantage.envs import make_env, tabular_model


def _model(**kwargs):
    env = make_env(EnvConfig(id="FrozenLake-v1", kwargs=kwargs))
    return tabular_model(env)


def test_value_iteration_equals_policy_iteration_and_satisfies_bellman():
    m = _model(is_slippery=True)
    v_vi, q_vi, _ = value_iteration(m, 0.95, theta=1e-13)
    v_pi, q_pi, actions, _ = policy_iteration(m, 0.95)
    np.testing.assert_allclose(v_vi, v_pi, atol=1e-10)
    np.testing.assert_allclose(q_vi, q_pi, atol=1e-10)
    np.testing.assert_allclose(v_vi, q_from_v(m, v_vi, 0.95).max(axis=1), atol=1e-12)
    assert np.all(q_pi[np.arange(16), actions] >= q_pi.max(axis=1) - 1e-12)


def test_deterministic_frozenlake_optimal_values_by_hand():
    # Shortest path from the start is 6 steps, reward 1 at the goal: V*(0) = γ^5.
    v, _, _ = value_iteration(_model(is_slippery=False), 0.9)
    assert v[0] == pytest.approx(0.9**5, abs=1e-12)
    assert v[14] == pytest.approx(1.0)  # next to the goal
    assert v[5] == 0.0 and v[15] == 0.0  # hole and goal are terminal


def test_policy_evaluation_matches_iterative_bellman_expectation():
    m = _model(is_slippery=True)
    pi = np.full((16, 4), 0.25)
    exact = policy_evaluation(m, pi, 0.9)
    v = np.zeros(16)
    for _ in range(2000):
        v = (pi * q_from_v(m, v, 0.9)).sum(axis=1)
    np.testing.assert_allclose(exact, v, atol=1e-12)


def test_q_learning_converges_to_q_star_on_deterministic_frozenlake():
    run = advantage.train(
        "q_learning",
        quiet=True,
        **{
            "env.is_slippery": False,
            "algorithm.gamma": 0.9,
            "algorithm.alpha": 0.5,
            "algorithm.alpha_end": None,
            "algorithm.epsilon_start": 1.0,  # uniform behaviour: Q-learning is off-policy
            "algorithm.epsilon_end": 1.0,
            "trainer.total_steps": 30_000,
            "trainer.eval_every": 0,
            "trainer.tensorboard": False,
        },
    )
    _, q_star, _ = value_iteration(_model(is_slippery=False), 0.9, theta=1e-14)
    q = run.checkpoint.tensors["q"].numpy()
    assert np.max(np.abs(q - q_star)) < 1e-6
    assert run.evaluate(episodes=10)["return_mean"] == 1.0


def test_mc_prediction_matches_exact_policy_evaluation():
    run = advantage.train(
        "mc_prediction",
        quiet=True,
        **{
            "algorithm.gamma": 0.9,
            "trainer.total_steps": 100_000,
            "trainer.eval_every": 0,
            "trainer.tensorboard": False,
        },
    )
    exact = policy_evaluation(_model(is_slippery=True), np.full((16, 4), 0.25), 0.9)
    ck = run.checkpoint
    est, counts = ck.tensors["estimate"].numpy(), ck.tensors["counts"].numpy()
    visited = counts > 200
    assert visited.sum() >= 8
    # Returns lie in [0, 1], so each mean's standard error is at most 0.5/sqrt(N): allow 4 of them.
    tolerance = 4 * 0.5 / np.sqrt(counts[visited])
    assert np.all(np.abs(est[visited] - exact[visited]) < tolerance), (
        est[visited],
        exact[visited],
        tolerance,
    )


def test_policy_evaluation_run_and_value_iteration_run():
    run = advantage.train(
        "policy_evaluation", quiet=True, **{"algorithm.gamma": 0.9, "trainer.tensorboard": False}
    )
    exact = policy_evaluation(_model(is_slippery=True), np.full((16, 4), 0.25), 0.9)
    np.testing.assert_allclose(run.checkpoint.tensors["v"].numpy(), exact)
    vi = advantage.train(
        "value_iteration", quiet=True, **{"env.is_slippery": False, "trainer.tensorboard": False}
    )
    assert vi.evaluate(episodes=5)["return_mean"] == 1.0
    assert vi.act(14) == 2  # right, into the goal


@pytest.mark.parametrize("algo", ["sarsa", "expected_sarsa", "mc_control"])
def test_control_methods_solve_deterministic_frozenlake(algo):
    run = advantage.train(
        algo,
        quiet=True,
        **{
            "env.is_slippery": False,
            "trainer.total_steps": 30_000,
            "trainer.eval_every": 0,
            "trainer.tensorboard": False,
        },
    )
    assert run.evaluate(episodes=20)["return_mean"] == 1.0


@pytest.mark.parametrize("algo", ["q_learning", "sarsa", "mc_control", "mc_prediction"])
def test_resume_is_exact(algo, tmp_path, monkeypatch):
    """N steps straight == stopped by SIGTERM at N/2, then resumed to N: identical tables, RNG and env
    state (the stop lands mid-episode, so the environment's own state must be restored too)."""
    common = {
        "env.is_slippery": True,
        "trainer.eval_every": 0,
        "trainer.tensorboard": False,
        "trainer.log_every": 500,
        "trainer.total_steps": 3001,
    }
    straight = advantage.train(algo, quiet=True, **common, **{"trainer.run_dir": str(tmp_path / "a")})

    original_tick = RunContext.tick

    def tick(self, step, snapshot):
        if step == 1500:
            signal.raise_signal(signal.SIGTERM)  # delivered to the run's own handler
        return original_tick(self, step, snapshot)

    monkeypatch.setattr(RunContext, "tick", tick)
    half = advantage.train(algo, quiet=True, **common, **{"trainer.run_dir": str(tmp_path / "b")})
    monkeypatch.setattr(RunContext, "tick", original_tick)
    assert half.step == 1500
    assert any(r.get("run/stopped_by") == "SIGTERM" for r in half.metrics)
    resumed = advantage.resume(half.dir, quiet=True)
    a, b = straight.checkpoint, resumed.checkpoint
    assert a.step == b.step == 3001
    assert a.tensors.keys() == b.tensors.keys()
    for k in a.tensors:
        assert torch.equal(a.tensors[k], b.tensors[k]), k
    assert a.state["algo"] == b.state["algo"]
    assert a.state["run"]["episodes"] == b.state["run"]["episodes"]

    # the training curve is the same too (times aside)
    def strip(rows):
        drop = ("time", "train/steps_per_second", "eval/seconds")
        return [{k: v for k, v in r.items() if k not in drop} for r in rows if "run/stopped_by" not in r]

    assert strip(straight.metrics) == strip(resumed.metrics)


def test_resume_drops_metrics_logged_after_the_checkpoint(tmp_path):
    run = advantage.train(
        "q_learning",
        quiet=True,
        **{"trainer.total_steps": 2000, "trainer.tensorboard": False, "trainer.run_dir": str(tmp_path / "r")},
    )
    with open(run.dir / "metrics.jsonl", "a") as f:
        f.write('{"step": 99999, "time": 1.0, "train/episode_return": 5.0}\n{"torn')
    advantage.resume(run.dir, quiet=True, **{"trainer.total_steps": 3000})
    steps = [r["step"] for r in advantage.Run(run.dir).metrics]
    assert max(steps) == 3000 and 99999 not in steps


@pytest.mark.slow
def test_slippery_q_learning_matches_value_iteration_success_rate():
    """SPEC T1 acceptance: within 0.05 of value iteration's success rate over 1000 episodes."""
    vi = advantage.train("value_iteration", quiet=True, **{"trainer.tensorboard": False})
    target = vi.evaluate(episodes=1000)["success_rate"]
    for seed in (0, 1):
        run = advantage.train(
            "q_learning",
            quiet=True,
            **{"trainer.seed": seed, "trainer.eval_every": 0, "trainer.tensorboard": False},
        )
        got = run.evaluate(episodes=1000)["success_rate"]
        assert abs(got - target) <= 0.05, (seed, got, target)


@pytest.mark.slow
@pytest.mark.torch_versions
def test_q_learning_vs_sarsa_on_cliffwalking():
    """The classic contrast (Sutton & Barto, Example 6.6): Q-learning's greedy policy walks the cliff edge
    (return −13, optimal); SARSA, learning the ε-greedy policy it follows, keeps a safer distance."""
    common = {
        "preset": "cliffwalking",
        "trainer.eval_every": 0,
        "trainer.tensorboard": False,
        "algorithm.alpha_end": None,
    }
    q = advantage.train("q_learning", quiet=True, **common).evaluate(episodes=1)["return_mean"]
    s = advantage.train("sarsa", quiet=True, **common).evaluate(episodes=1)["return_mean"]
    assert q == -13.0
    assert -30 < s < -13.0
