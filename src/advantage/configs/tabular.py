"""The tabular methods' configs, presets and registry records: TD control (:mod:`advantage.algos.tabular.td`),
Monte Carlo (:mod:`advantage.algos.tabular.monte_carlo`) and planning on known models
(:mod:`advantage.algos.tabular.planning`), with the sections they share."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from advantage.config import EnvConfig, Preset, TrainerConfig, option, section
from advantage.configs import DISCRETE, register_algorithm
from advantage.registry import Entry


@dataclass
class TableModel:
    """The ``model`` section of tabular methods: the table itself."""

    init_value: float = option(0.0, "initial value of every table entry (optimistic if > 0)")


@dataclass
class EpsilonSchedule:
    """The ε fields of the algorithm sections that explore ε-greedily (a base of those sections)."""

    epsilon_start: float = option(1.0, "ε at step 0", lo=0, hi=1)
    epsilon_end: float = option(0.05, "ε after the decay", lo=0, hi=1)
    epsilon_decay_fraction: float = option(
        0.5, "fraction of trainer.total_steps over which ε decays linearly", lo=0, hi=1, lo_open=True
    )

    def problems(self) -> list[str]:
        if self.epsilon_end > self.epsilon_start:
            return [
                f"algorithm.epsilon_end ({self.epsilon_end}) must be <= algorithm.epsilon_start "
                f"({self.epsilon_start})"
            ]
        return []


# ----------------------------------------------------------------------------------------------------
# TD control


@dataclass
class TDAlgorithm(EpsilonSchedule):
    gamma: float = option(0.99, "discount factor γ", lo=0, hi=1)
    alpha: float = option(0.1, "step size α", lo=0, hi=1, lo_open=True)
    alpha_end: float | None = option(
        0.01, "α decays linearly to this over the run (null: constant α)", lo=0, hi=1
    )

    def problems(self) -> list[str]:
        out = super().problems()
        if self.alpha_end is not None and self.alpha_end > self.alpha:
            out.append(f"algorithm.alpha_end ({self.alpha_end}) must be <= algorithm.alpha ({self.alpha})")
        return out


@dataclass
class TDConfig:
    """The sections of TD control; the Monte Carlo methods' configs are these with their own ``algorithm``."""

    env: EnvConfig = section(EnvConfig)
    algorithm: TDAlgorithm = section(TDAlgorithm)
    model: TableModel = section(TableModel)
    trainer: TrainerConfig = section(TrainerConfig)


TD_PRESETS = {
    "frozenlake": Preset(
        "deterministic FrozenLake 4x4",
        {"env.id": "FrozenLake-v1", "env.is_slippery": False, "trainer.total_steps": 20_000},
    ),
    "frozenlake_slippery": Preset(
        "slippery FrozenLake 4x4, tuned to match value iteration's success rate",
        {
            "env.id": "FrozenLake-v1",
            "env.is_slippery": True,
            "trainer.total_steps": 150_000,
            "algorithm.alpha": 0.1,
            "algorithm.alpha_end": 0.01,
            "trainer.eval_episodes": 1000,
        },
    ),
    "frozenlake8x8": Preset(
        "deterministic FrozenLake 8x8",
        {
            "env.id": "FrozenLake-v1",
            "env.map_name": "8x8",
            "env.is_slippery": False,
            "trainer.total_steps": 100_000,
        },
    ),
    "cliffwalking": Preset(
        "CliffWalking (γ=1: the classic Q-learning vs SARSA comparison)",
        {
            "env.id": "CliffWalking-v1",
            "algorithm.gamma": 1.0,
            "algorithm.alpha": 0.5,
            "algorithm.epsilon_start": 0.1,
            "algorithm.epsilon_end": 0.1,
            "trainer.total_steps": 50_000,
            "trainer.eval_episodes": 1,
        },
    ),
    "taxi": Preset("Taxi", {"env.id": "Taxi-v4", "trainer.total_steps": 300_000, "algorithm.alpha": 0.2}),
}

_TD_SUMMARIES = {
    "q_learning": "Q-learning: off-policy TD control with the max over next actions (Watkins 1989)",
    "sarsa": "SARSA: on-policy TD control with the next action actually taken",
    "expected_sarsa": "Expected SARSA: TD control with the expectation over the ε-greedy next action",
}

for _name, _summary in _TD_SUMMARIES.items():
    register_algorithm(
        _name,
        _summary,
        TDConfig,
        "tabular.td",
        train=Entry("advantage.algos.tabular.td:train", method=_name),
        check_env=Entry("advantage.algos.tabular.common:check_discrete", name=_name),
        observation_spaces=DISCRETE,
        action_spaces=DISCRETE,
        presets=TD_PRESETS,
        # The defaults learn slippery FrozenLake-v1 (the default env) to value iteration's success rate.
        defaults={"trainer.total_steps": 150_000},
    )

# ----------------------------------------------------------------------------------------------------
# Monte Carlo


@dataclass
class MCControlAlgorithm(EpsilonSchedule):
    gamma: float = option(0.99, "discount factor γ", lo=0, hi=1)
    visit: str = option(
        "first", "which visits of a state-action pair in an episode count", choices=("first", "every")
    )


@dataclass
class MCPredictionAlgorithm:
    gamma: float = option(0.99, "discount factor γ", lo=0, hi=1)
    visit: str = option("first", "which visits of a state in an episode count", choices=("first", "every"))
    policy: str = option("random", "policy to evaluate: 'random' (uniform) or the folder of a tabular run")

    def problems(self) -> list[str]:
        if self.policy != "random" and not (Path(self.policy) / "config.yaml").is_file():
            return [
                f"algorithm.policy must be 'random' or a run folder, got {self.policy!r} "
                "(no config.yaml there)"
            ]
        return []


@dataclass
class MCControlConfig(TDConfig):
    # the env, trainer and eval sections are TD's; the algorithm section is its own
    algorithm: MCControlAlgorithm = section(MCControlAlgorithm)  # type: ignore[assignment]


@dataclass
class MCPredictionConfig(TDConfig):
    algorithm: MCPredictionAlgorithm = section(MCPredictionAlgorithm)  # type: ignore[assignment]


register_algorithm(
    "mc_control",
    "Monte Carlo control: first-/every-visit returns, incremental mean, ε-soft policy "
    "(Sutton & Barto 2018, ch. 5)",
    MCControlConfig,
    "tabular.monte_carlo",
    train=Entry("advantage.algos.tabular.monte_carlo:train", control=True),
    policy=Entry("advantage.algos.tabular.monte_carlo:_control_policy"),
    check_env=Entry("advantage.algos.tabular.common:check_discrete", name="mc_control"),
    observation_spaces=DISCRETE,
    action_spaces=DISCRETE,
    presets={
        "frozenlake": Preset(
            "deterministic FrozenLake 4x4", {"env.is_slippery": False, "trainer.total_steps": 50_000}
        ),
        "every_visit": Preset("every-visit instead of first-visit", {"algorithm.visit": "every"}),
    },
)

register_algorithm(
    "mc_prediction",
    "Monte Carlo prediction of V^π for a fixed policy (uniform random, or a run's)",
    MCPredictionConfig,
    "tabular.monte_carlo",
    train=Entry("advantage.algos.tabular.monte_carlo:train", control=False),
    policy=Entry("advantage.algos.tabular.monte_carlo:_prediction_policy"),
    check_env=Entry("advantage.algos.tabular.common:check_discrete", name="mc_prediction"),
    observation_spaces=DISCRETE,
    action_spaces=DISCRETE,
    presets={"every_visit": Preset("every-visit instead of first-visit", {"algorithm.visit": "every"})},
)

# ----------------------------------------------------------------------------------------------------
# Planning on a known model


@dataclass
class PlanningAlgorithm:
    gamma: float = option(0.99, "discount factor γ", lo=0, hi=1)
    theta: float = option(
        1e-10, "value iteration stops when the largest value change is below θ", lo=0, lo_open=True
    )
    max_iterations: int = option(100_000, "iteration limit", lo=1)
    policy: str = option("random", "policy_evaluation only: 'random' (uniform) or a tabular run folder")


@dataclass
class PlanningConfig:
    env: EnvConfig = section(EnvConfig)
    algorithm: PlanningAlgorithm = section(PlanningAlgorithm)
    trainer: TrainerConfig = section(TrainerConfig)


_PLANNING_SUMMARIES = {
    "value_iteration": "value iteration on the known model of a toy-text env: Q*, V*, the optimal policy",
    "policy_iteration": "policy iteration (exact evaluation + greedy improvement) on a known model",
    "policy_evaluation": "exact V^π of a fixed policy by a linear solve on the known model",
}

for _name, _summary in _PLANNING_SUMMARIES.items():
    register_algorithm(
        _name,
        _summary,
        PlanningConfig,
        "tabular.planning",
        train=Entry("advantage.algos.tabular.planning:train", method=_name),
        check_env=Entry("advantage.algos.tabular.planning:check_env", name=_name),
        observation_spaces=DISCRETE,
        action_spaces=DISCRETE,
        defaults={"trainer.total_steps": 0, "trainer.eval_every": 0},
    )
