"""Algorithms. Importing this package registers every algorithm (see :mod:`advantage.registry`)."""

from advantage.algos import a2c, dqn, llm, ppo, reinforce, trpo  # noqa: F401
from advantage.algos.tabular import monte_carlo, planning, td  # noqa: F401
