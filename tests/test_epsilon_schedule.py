"""SPEC T1 / V1: the ε schedule of tabular control and of DQN against hand values, as the algorithms use it:
ε decays linearly from ``epsilon_start`` to ``epsilon_end`` over a fraction of the run, then stays; the
action of transition k + 1 is chosen with ε(k)."""

from __future__ import annotations

import pytest

import advantage
from advantage.algos.tabular import td
from advantage.schedules import linear_schedule


def test_linear_schedule_hand_values():
    # 1 -> 0.05 over half of 1000 steps: slope 0.95 / 500 per step
    assert [linear_schedule(1.0, 0.05, 0.5, s, 1000) for s in (0, 100, 250, 499, 500, 501, 1000, 5000)] == (
        pytest.approx([1.0, 0.81, 0.525, 0.0519, 0.05, 0.05, 0.05, 0.05], abs=1e-12)
    )
    assert linear_schedule(0.5, 0.5, 0.3, 123, 1000) == 0.5  # flat
    # A horizon below one step is one step (no division by zero): ε(0) = start, ε(1) = end.
    assert linear_schedule(1.0, 0.0, 0.1, 0, 5) == 1.0 and linear_schedule(1.0, 0.0, 0.1, 1, 5) == 0.0


@pytest.mark.parametrize("algo", ["q_learning", "expected_sarsa"])
def test_tabular_control_explores_with_the_scheduled_epsilon(monkeypatch, algo):
    """Every ε-greedy choice of a 3,000-step run, in order: ε(0) for the first action, then ε(k) for the
    action after transition k; and the logged train/epsilon at steps 1000, 2000, 3000."""
    used = []
    greedy = td.epsilon_greedy

    def spy(q_row, epsilon, rng):
        used.append(epsilon)
        return greedy(q_row, epsilon, rng)

    monkeypatch.setattr(td, "epsilon_greedy", spy)
    run = advantage.train(
        algo,
        quiet=True,
        **{
            "trainer.total_steps": 3000,
            "trainer.eval_every": 0,
            "trainer.tensorboard": False,
            "algorithm.epsilon_start": 0.9,
            "algorithm.epsilon_end": 0.1,
            "algorithm.epsilon_decay_fraction": 0.4,  # over 1,200 steps: -0.8 / 1200 per step
        },
    )
    hand = [0.9 - 0.8 * min(k, 1200) / 1200 for k in range(3001)]
    assert len(used) == 3001
    assert used == pytest.approx(hand, abs=1e-12)
    logged = {r["step"]: r["train/epsilon"] for r in run.metrics if "train/epsilon" in r}
    assert logged == pytest.approx({1000: 0.9 - 0.8 * 1000 / 1200, 2000: 0.1, 3000: 0.1}, abs=1e-12)


def test_dqn_logs_the_epsilon_of_its_last_action():
    """One env: the update row at step s (a valid transition) carries the ε its action was chosen with,
    ε(s − 1) = 1 − 0.9·min(s − 1, 300)/300 (exploration over half of 600 steps to 0.1)."""
    run = advantage.train(
        "dqn",
        quiet=True,
        **{
            "env.num_envs": 1,
            "trainer.total_steps": 600,
            "trainer.eval_every": 0,
            "trainer.eval_episodes": 1,
            "trainer.tensorboard": False,
            "algorithm.learning_starts": 100,
            "algorithm.batch_size": 32,
            "algorithm.train_freq": 100,
            "algorithm.gradient_steps": 1,
            "algorithm.exploration_fraction": 0.5,
            "algorithm.epsilon_end": 0.1,
        },
    )
    logged = {r["step"]: r["train/epsilon"] for r in run.metrics if "train/epsilon" in r}
    assert sorted(logged) == list(range(200, 601, 100))
    hand = {s: 1.0 - 0.9 * min(s - 1, 300) / 300 for s in logged}
    assert logged == pytest.approx(hand, abs=1e-12)
    assert logged[200] == pytest.approx(0.403) and logged[400] == pytest.approx(0.1)
