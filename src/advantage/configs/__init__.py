"""Every algorithm's config: its dataclasses, presets and registry record, without its training code.

Each module here registers its algorithms (:mod:`advantage.registry`) and imports neither torch nor
:mod:`advantage.algos`; the training functions are :class:`~advantage.registry.Entry` names, imported when
a run starts. :data:`MODULES` says which module registers which algorithm, so a run or a config error
loads one config module (``load("ppo")``) and ``advantage list`` loads them all (:func:`load_all`): both
answer in a fraction of a second.
"""

from __future__ import annotations

import importlib
from typing import Any

from advantage.registry import Algorithm, Entry, register

# algorithm name -> the module that registers it (tests/test_startup.py checks this against the modules)
MODULES: dict[str, str] = {
    "a2c": "a2c",
    "ddpg": "ddpg",
    "dpo": "dpo",
    "dqn": "dqn",
    "grpo": "grpo",
    "ppo": "ppo",
    "ppo_rlhf": "ppo_rlhf",
    "reinforce": "reinforce",
    "reinforce_is": "reinforce",
    "reward_model": "reward_model",
    "sac": "sac",
    "sft": "sft",
    "td3": "td3",
    "trpo": "trpo",
    **dict.fromkeys(("semi_gradient_td", "tdc", "gtd2", "semi_gradient_q_learning"), "linear"),
    "semi_gradient_sarsa": "linear",
    **dict.fromkeys(("q_learning", "sarsa", "expected_sarsa", "mc_control", "mc_prediction"), "tabular"),
    **dict.fromkeys(("value_iteration", "policy_iteration", "policy_evaluation"), "tabular"),
}


# The spaces of the registry records (Algorithm.observation_spaces / action_spaces): what an MLP takes once
# Gymnasium flattens the observation (envs.make.encode_observations), the action spaces of the
# actor-critic heads, and the raw Discrete spaces a table is indexed by.
VECTOR_OBSERVATIONS = ("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple")
ACTOR_CRITIC_ACTIONS = ("Discrete", "Box", "MultiDiscrete", "MultiBinary")
DISCRETE = ("Discrete",)


def register_algorithm(name: str, summary: str, config: type, module: str, **fields: Any) -> None:
    """Register ``name``, trained by ``advantage.algos.<module>:train`` and rebuilt by its ``_policy`` unless
    ``fields`` name other :class:`~advantage.registry.Entry` objects; the other ``fields`` are the
    :class:`~advantage.registry.Algorithm` record's as they are."""
    fields.setdefault("train", Entry(f"advantage.algos.{module}:train"))
    fields.setdefault("policy", Entry(f"advantage.algos.{module}:_policy"))
    register(Algorithm(name=name, summary=summary, config=config, **fields))


def register_actor_critic(name: str, summary: str, config: type, **fields: Any) -> None:
    """Register an actor-critic trainer, ``advantage.algos.<name>`` (PPO, TRPO, A2C): it can collect with
    Ray workers, and the shared functions check its env and rebuild its policy."""
    register_algorithm(
        name,
        summary,
        config,
        name,
        policy=Entry("advantage.rollout.onpolicy:actor_critic_policy"),
        check_env=Entry("advantage.algos.ppo:check_env", algo=name),
        workers=True,
        observation_spaces=VECTOR_OBSERVATIONS,
        action_spaces=ACTOR_CRITIC_ACTIONS,
        **fields,
    )


def load(name: str) -> None:
    """Register algorithm ``name`` by importing its config module (nothing for an unknown name)."""
    module = MODULES.get(name)
    if module is not None:
        importlib.import_module(f"{__name__}.{module}")


def load_all() -> None:
    """Register every algorithm."""
    for module in sorted(set(MODULES.values())):
        importlib.import_module(f"{__name__}.{module}")
