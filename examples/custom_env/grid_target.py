"""A complete environment of one's own, trained with advantage (docs: "Your own environment").

A square grid; the agent starts in one corner and must reach a target placed at random on each reset.
Observations are a Dict (the agent's position, the target's position, and a MultiBinary "walls around
me" vector), actions are Discrete(4). Everything random goes through ``self.np_random``, seeded by
``reset(seed=...)``: the Gymnasium API's contract, which is also what lets advantage resume a run exactly.

Use it from the command line (the folder holding this file must be importable)::

    PYTHONPATH=examples/custom_env advantage train ppo env.id=grid_target:GridTarget-v0
    PYTHONPATH=examples/custom_env advantage train ppo env.id=grid_target:GridTarget env.size=7

or from Python::

    import advantage
    from grid_target import GridTarget
    run = advantage.train("ppo", env=GridTarget)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

MOVES = np.array([[0, 1], [1, 0], [0, -1], [-1, 0]])  # right, down, left, up


class GridTarget(gym.Env):
    """Reach the target on a ``size`` x ``size`` grid: reward 1 on arrival (the episode ends), −0.01 per
    step otherwise."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, size: int = 5, render_mode: str | None = None):
        if size < 2:
            raise ValueError(f"size must be at least 2, got {size}")
        self.size, self.render_mode = size, render_mode
        self.observation_space = gym.spaces.Dict(
            {
                "agent": gym.spaces.MultiDiscrete([size, size]),
                "target": gym.spaces.MultiDiscrete([size, size]),
                "walls": gym.spaces.MultiBinary(4),
            }
        )
        self.action_space = gym.spaces.Discrete(4)
        self.agent = np.zeros(2, dtype=np.int64)
        self.target = np.zeros(2, dtype=np.int64)

    def _obs(self) -> dict[str, np.ndarray]:
        nxt = self.agent + MOVES
        walls = ((nxt < 0) | (nxt >= self.size)).any(axis=1).astype(np.int8)
        return {"agent": self.agent.copy(), "target": self.target.copy(), "walls": walls}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.agent = np.zeros(2, dtype=np.int64)
        while True:  # a target anywhere but the start
            self.target = self.np_random.integers(0, self.size, size=2)
            if self.target.any():
                return self._obs(), {}

    def step(self, action: Any):
        self.agent = np.clip(self.agent + MOVES[int(action)], 0, self.size - 1)
        reached = bool((self.agent == self.target).all())
        return self._obs(), 1.0 if reached else -0.01, reached, False, {"is_success": reached}

    def render(self) -> str:
        rows = [["."] * self.size for _ in range(self.size)]
        rows[self.target[0]][self.target[1]] = "T"
        rows[self.agent[0]][self.agent[1]] = "A"
        return "\n".join(" ".join(r) for r in rows)


# Importing the module registers the id: `env.id=grid_target:GridTarget-v0` imports it, as gymnasium.make
# does. The time limit keeps an untrained policy's episodes short.
gym.register("GridTarget-v0", entry_point=GridTarget, max_episode_steps=50)
