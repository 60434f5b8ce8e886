"""Baird's counterexample (Baird 1995; Sutton & Barto 2018, §11.2, Figure 11.1) as a Gymnasium env.

Seven states and two actions. The *dashed* action (0) goes to one of the six upper states (1–6 in the
book, observations 0–5 here) with equal probability; the *solid* action (1) goes to the seventh state
(observation 6). Every reward is 0, so the true value of every policy is 0 in every state. The task never
terminates; ``Baird-v0`` is registered with a time limit of 100 steps, after which it restarts from a
uniformly drawn state, so that evaluation episodes end (the restart distribution is the behaviour
policy's stationary distribution, so the stream of visited states is distributed exactly as in the
continuing task).

The env carries what the triad needs, as plain arrays:

* ``P`` (toy-text layout, ``P[s][a] = [(prob, s', r, terminated), ...]``) and ``initial_state_distrib``,
  so :func:`advantage.envs.tabular_model` reads its model as for FrozenLake;
* ``behavior_policy [7, 2]``: dashed with probability 6/7, solid with 1/7;
* ``target_policy [7, 2]``: always solid.

:func:`baird_features` gives the book's linear features.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

DASHED, SOLID = 0, 1
NUM_STATES = 7
# The book's initial weights w = (1, 1, 1, 1, 1, 1, 10, 1).
INITIAL_WEIGHTS = (1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 10.0, 1.0)


def baird_features() -> np.ndarray:
    """The features ``x(s) [7, 8]`` of Sutton & Barto §11.2: upper state i (0–5) has
    :math:`2 e_i + e_8`, the lower state :math:`e_7 + 2 e_8`. There are more features (8) than states (7),
    and the 7 feature vectors are linearly independent, so every value function is representable."""
    phi = np.zeros((NUM_STATES, 8))
    for i in range(6):
        phi[i, i], phi[i, 7] = 2.0, 1.0
    phi[6, 6], phi[6, 7] = 1.0, 2.0
    return phi


class BairdEnv(gym.Env):
    """Baird's seven-state star MDP. Observations ``Discrete(7)``, actions ``Discrete(2)`` (0: dashed,
    1: solid); reward 0; never terminates."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}  # type: ignore[misc]  # gym.Env declares it per instance; a class constant here

    def __init__(self, render_mode: str | None = None):
        self.observation_space = gym.spaces.Discrete(NUM_STATES)
        self.action_space = gym.spaces.Discrete(2)
        upper = [(1.0 / 6.0, i, 0.0, False) for i in range(6)]
        self.P = {s: {DASHED: list(upper), SOLID: [(1.0, 6, 0.0, False)]} for s in range(NUM_STATES)}
        self.initial_state_distrib = np.full(NUM_STATES, 1.0 / NUM_STATES)
        self.behavior_policy = np.tile([6.0 / 7.0, 1.0 / 7.0], (NUM_STATES, 1))
        self.target_policy = np.tile([0.0, 1.0], (NUM_STATES, 1))
        self.render_mode = render_mode
        self.s = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.s = int(self.np_random.integers(NUM_STATES))
        return self.s, {}

    def step(self, action: Any):
        a = int(action)
        if a not in (DASHED, SOLID):
            raise ValueError(f"Baird-v0 actions are 0 (dashed) and 1 (solid), got {action!r}")
        self.s = int(self.np_random.integers(6)) if a == DASHED else 6
        return self.s, 0.0, False, False, {}


def register_baird() -> None:
    if "Baird-v0" not in gym.registry:
        gym.register(id="Baird-v0", entry_point=BairdEnv, max_episode_steps=100)  # type: ignore[arg-type]  # a class is an entry point
