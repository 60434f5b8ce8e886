"""The known model of a toy-text environment, as dense tensors for exact planning.

Gymnasium's toy-text environments expose their dynamics as ``env.unwrapped.P[s][a] = [(prob, s', r,
terminated), ...]``. We turn that into

* ``transitions[s, a, s'] = Σ prob · (1 − terminated)``: the probability of going on from ``s'``
  (terminating transitions carry no future value, so they contribute only reward), and
* ``rewards[s, a] = Σ prob · r``: the expected immediate reward,

so the Bellman backup is ``Q = rewards + γ · transitions @ V`` (Sutton & Barto 2018 §3.5's Q and V, with a
terminal state's value 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Discrete

from advantage.errors import EnvError


@dataclass(frozen=True)
class TabularModel:
    """Dense model of a finite MDP. ``transitions [S, A, S]`` (float64), ``rewards [S, A]`` (float64)."""

    transitions: np.ndarray
    rewards: np.ndarray

    @property
    def num_states(self) -> int:
        return self.rewards.shape[0]

    @property
    def num_actions(self) -> int:
        return self.rewards.shape[1]


def tabular_model(env: gym.Env, env_id: str = "") -> TabularModel:
    """Read the known model of a toy-text environment (FrozenLake, CliffWalking, Taxi, ...)."""
    base = env.unwrapped
    table = getattr(base, "P", None)
    if not isinstance(table, dict):
        raise EnvError(
            f"exact planning needs an environment with a known model (env.unwrapped.P, as in FrozenLake, "
            f"CliffWalking, Taxi); {env_id or type(base).__name__} has none"
        )
    S, A = int(cast(Discrete, env.observation_space).n), int(cast(Discrete, env.action_space).n)
    transitions = np.zeros((S, A, S))
    rewards = np.zeros((S, A))
    for s, by_action in table.items():
        for a, outcomes in by_action.items():
            for prob, s_next, reward, terminated in outcomes:
                rewards[s, a] += prob * reward
                if not terminated:
                    transitions[s, a, int(s_next)] += prob
    return TabularModel(transitions=transitions, rewards=rewards)
