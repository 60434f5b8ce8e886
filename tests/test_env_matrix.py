"""CI's sample of the environment matrix (benchmarks/env_matrix.py): every environment algorithm at least
once, every space type of Gymnasium's registry (Box vectors, Box images, Discrete, Tuple observations;
Discrete and Box actions), through the command line: train, SIGINT after the first checkpoint, resume
past the budget, evaluate. Refusals are one line, exit 2. The whole matrix is `heavy`; its table is
committed (benchmarks/results/env_matrix.md). Dict, MultiDiscrete and MultiBinary spaces, which no
registry env has, are covered by tests/test_spaces.py and tests/test_user_env.py."""

from __future__ import annotations

import pytest
from benchmarks import env_matrix as matrix

from advantage.registry import all_algorithms

# (algorithm, env id, expected status)
SAMPLE = [
    ("ppo", "FrozenLake-v1", "pass"),  # Discrete observations, one-hot
    ("a2c", "Blackjack-v1", "pass"),  # Tuple observations
    ("trpo", "Acrobot-v1", "pass"),
    ("reinforce", "Taxi-v4", "pass"),
    ("reinforce_is", "CartPole-v1", "pass"),
    ("dqn", "Acrobot-v1", "pass"),  # the overestimation probe beside resume
    ("dqn", "CliffWalking-v1", "pass"),
    ("sac", "MountainCarContinuous-v0", "pass"),
    ("td3", "LunarLanderContinuous-v3", "pass"),  # Box2D: resumed by replaying the episode
    ("ddpg", "Pendulum-v1", "pass"),
    ("q_learning", "FrozenLake-v1", "pass"),
    ("sarsa", "CliffWalking-v1", "pass"),
    ("expected_sarsa", "Taxi-v4", "pass"),
    ("mc_control", "FrozenLake8x8-v1", "pass"),
    ("mc_prediction", "FrozenLake-v1", "pass"),
    ("value_iteration", "FrozenLake8x8-v1", "pass"),
    ("policy_iteration", "CliffWalking-v1", "pass"),
    ("policy_evaluation", "Taxi-v4", "pass"),
    ("semi_gradient_td", "FrozenLake-v1", "pass"),
    ("tdc", "FrozenLake-v1", "pass"),
    ("gtd2", "FrozenLake-v1", "pass"),
    ("semi_gradient_q_learning", "FrozenLake-v1", "pass"),
    ("semi_gradient_sarsa", "CliffWalking-v1", "pass"),
    ("dqn", "Pendulum-v1", "refused"),  # Box actions
    ("sac", "CartPole-v1", "refused"),  # Discrete actions
    ("q_learning", "CartPole-v1", "refused"),  # Box observations
]


def test_the_sample_names_every_environment_algorithm():
    env_algos = {name for name, a in all_algorithms().items() if a.uses_env}
    assert {a for a, _, _ in SAMPLE} == env_algos


IMAGES = [("ppo", "CarRacing-v3", "pass")]  # image observations into the MLP: minutes here, -m heavy


@pytest.mark.slow
@pytest.mark.parametrize(
    "algo, env_id, expected",
    [*SAMPLE, *(pytest.param(*c, marks=pytest.mark.heavy) for c in IMAGES)],
    ids=[f"{a}-{e}" for a, e, _ in [*SAMPLE, *IMAGES]],
)
def test_a_cell_trains_stops_resumes_and_evaluates(tmp_path, algo, env_id, expected):
    cell = matrix.run_cell(algo, env_id, tmp_path)
    assert cell["status"] == expected, cell
    if expected == "refused":
        assert "Traceback" not in cell["note"] and cell["note"].startswith("error: "), cell


@pytest.mark.heavy
def test_the_whole_matrix_has_no_failing_cell(tmp_path):
    """Every registry id of the four families x every environment algorithm (hours on two cores)."""
    ids, _ = matrix.env_ids()
    algos = matrix.algorithms()
    cells = [matrix.run_cell(a, i, tmp_path) for i in ids for a in algos]
    fails = [c for c in cells if c["status"] == "fail"]
    assert not fails, fails
