"""The linear-function-approximation methods' configs, presets and registry records (SPEC T4): semi-gradient
TD, TDC and GTD2 (:mod:`advantage.algos.tabular.linear_td`) and semi-gradient Q-learning and SARSA
(:mod:`advantage.algos.tabular.linear_control`), with the options they share
(:mod:`advantage.algos.tabular.linear_common` explains the features)."""

from __future__ import annotations

from dataclasses import dataclass

from advantage.config import EnvConfig, Preset, TrainerConfig, option, section
from advantage.configs import DISCRETE, register_algorithm
from advantage.registry import Entry

FEATURES_HELP = (
    "feature map x(s): auto (baird on Baird-v0, onehot on any other env), onehot (tabular), baird "
    "(Sutton & Barto §11.2, Baird-v0 only), or a function 'module:function' mapping a state index to a "
    "list of floats"
)
BEHAVIOR_HELP = (
    "behaviour policy μ: env (the env's own: Baird's dashed 6/7, solid 1/7), uniform, target "
    "(follow the target policy: on-policy, which removes the off-policy leg), or auto (the env's own "
    "where it defines one, else uniform)"
)
UPDATE_HELP = (
    "sampled: one update per environment step (importance-weighted); expected: one expected (DP) "
    "update per step, over the behaviour policy's state distribution and the known model"
)

PLOT_METRICS = ("train/weight_norm", "train/value_error")

DEFAULTS = {
    "env.id": "Baird-v0",
    "trainer.total_steps": 10_000,
    "trainer.log_every": 100,
    "trainer.eval_every": 0,
    "trainer.eval_episodes": 10,
}


@dataclass
class LinearAlgorithm:
    """The options every linear method has (each adds its own after them)."""

    gamma: float = option(0.99, "discount factor γ", lo=0, hi=1, hi_open=True)
    alpha: float = option(0.01, "step size α of w", lo=0, lo_open=True)
    features: str = option("auto", FEATURES_HELP)
    behavior: str = option("auto", BEHAVIOR_HELP, choices=("auto", "env", "uniform", "target"))

    def problems(self) -> list[str]:
        """Problems with the *form* of ``features`` (the function itself is checked against the
        environment by :func:`advantage.algos.tabular.linear_common.feature_matrix`)."""
        spec = self.features
        module, sep, name = spec.partition(":")
        if spec in ("auto", "onehot", "baird") or (sep and module and name):
            return []
        hint = "; did you mean onehot?" if spec.lower().startswith("one") else ""
        return [f"algorithm.features must be auto, onehot, baird or 'module:function', got {spec!r}{hint}"]


@dataclass
class LinearModel:
    """The ``model`` section: the initial weights."""

    init_weights: list[float] | None = option(
        None,
        "initial w (null: Baird's (1,1,1,1,1,1,10,1) with Baird's features, repeated per action for "
        "action values; zeros otherwise)",
    )


@dataclass
class LinearConfig:
    """The sections every linear method's config has; each narrows ``algorithm`` to its own."""

    env: EnvConfig = section(EnvConfig)
    algorithm: LinearAlgorithm = section(LinearAlgorithm)
    model: LinearModel = section(LinearModel)
    trainer: TrainerConfig = section(TrainerConfig)


# ----------------------------------------------------------------------------------------------------
# Prediction: semi-gradient TD, TDC, GTD2


@dataclass
class LinearPredictionAlgorithm(LinearAlgorithm):
    target: str = option(
        "auto",
        "target policy π: env (the env's own: Baird's always solid), uniform, or auto (the env's own where "
        "it defines one, else uniform)",
        choices=("auto", "env", "uniform"),
    )
    update: str = option("sampled", UPDATE_HELP, choices=("sampled", "expected"))


@dataclass
class SemiGradientTDAlgorithm(LinearPredictionAlgorithm):
    bootstrap: bool = option(
        True, "true: TD(0) targets r + γ w·x'; false: Monte Carlo returns (removes the bootstrapping leg)"
    )


@dataclass
class GradientTDAlgorithm(LinearPredictionAlgorithm):
    alpha: float = option(0.005, "step size α of w (Sutton & Barto, Figure 11.6)", lo=0, lo_open=True)
    beta: float = option(0.05, "step size β of the secondary weights h", lo=0, lo_open=True)


@dataclass
class SemiGradientTDConfig(LinearConfig):
    algorithm: SemiGradientTDAlgorithm = section(SemiGradientTDAlgorithm)


@dataclass
class GradientTDConfig(LinearConfig):
    algorithm: GradientTDAlgorithm = section(GradientTDAlgorithm)


_LEGS = {
    "on_policy": Preset(
        "remove the off-policy leg: behave with the target policy", {"algorithm.behavior": "target"}
    ),
    "tabular": Preset(
        "remove the function-approximation leg: one-hot features, started from the same values as "
        "Baird's initial weights (3 in the upper states, 12 in the lower)",
        {"algorithm.features": "onehot", "model.init_weights": [3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 12.0]},
    ),
    "expected": Preset("the expected (DP) update instead of samples", {"algorithm.update": "expected"}),
}


def _register(
    name: str, summary: str, config: type, module: str, presets: dict, control: bool = False
) -> None:
    """Register a linear method: ``advantage.algos.tabular.<module>:train`` with ``method=name``."""
    register_algorithm(
        name,
        summary,
        config,
        f"tabular.{module}",
        train=Entry(f"advantage.algos.tabular.{module}:train", method=name),
        check_env=Entry("advantage.algos.tabular.linear_common:check_linear", name=name, control=control),
        observation_spaces=DISCRETE,
        action_spaces=DISCRETE,
        defaults=DEFAULTS,
        presets=presets,
        plot_metrics=PLOT_METRICS,
    )


_register(
    "semi_gradient_td",
    "semi-gradient TD(0), linear features, off-policy by importance weights (diverges on Baird)",
    SemiGradientTDConfig,
    "linear_td",
    {
        **_LEGS,
        "monte_carlo": Preset(
            "remove the bootstrapping leg: per-decision importance-sampled Monte Carlo returns",
            {"algorithm.bootstrap": False},
        ),
    },
)
for _name, _summary in {
    "tdc": "TDC (TD with gradient correction): linear gradient-TD that converges off-policy",
    "gtd2": "GTD2: linear gradient-TD on the projected Bellman error, converges off-policy",
}.items():
    _register(_name, _summary, GradientTDConfig, "linear_td", _LEGS)

# ----------------------------------------------------------------------------------------------------
# Control: semi-gradient Q-learning and SARSA


@dataclass
class LinearControlAlgorithm(LinearAlgorithm):
    epsilon: float = option(
        0.1,
        "ε of the ε-greedy policy in the current estimate (SARSA's target; behavior=target's)",
        lo=0,
        hi=1,
    )
    update: str = option("sampled", UPDATE_HELP, choices=("sampled", "expected"))


@dataclass
class LinearControlConfig(LinearConfig):
    algorithm: LinearControlAlgorithm = section(LinearControlAlgorithm)


_CONTROL_PRESETS = {
    "on_policy": Preset(
        "remove the off-policy leg: behave ε-greedily in the current estimate",
        {"algorithm.behavior": "target"},
    ),
    "tabular": Preset(
        "remove the function-approximation leg: one-hot features, started from the values Baird's initial "
        "weights give (3 in the upper states, 12 in the lower, for both actions)",
        {"algorithm.features": "onehot", "model.init_weights": ([3.0] * 6 + [12.0]) * 2},
    ),
    "expected": Preset("the expected (DP) update instead of samples", {"algorithm.update": "expected"}),
}

for _name, _summary in {
    "semi_gradient_q_learning": "semi-gradient Q-learning with linear features (control; the max target)",
    "semi_gradient_sarsa": "semi-gradient SARSA with linear features, off-policy by per-decision weights",
}.items():
    _register(_name, _summary, LinearControlConfig, "linear_control", _CONTROL_PRESETS, control=True)
