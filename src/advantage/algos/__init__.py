"""Algorithms. Importing this package registers every algorithm (see :mod:`advantage.registry`)."""

from advantage.algos import a2c, ddpg, dqn, llm, ppo, reinforce, sac, td3, trpo  # noqa: F401
from advantage.algos.tabular import linear_control, linear_td, monte_carlo, planning, td  # noqa: F401
