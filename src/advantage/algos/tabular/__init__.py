"""Tabular, linear and exact methods on small Discrete environments (SPEC T1–T4).

* :mod:`~advantage.algos.tabular.td`: TD control, Q-learning, SARSA and Expected SARSA (T1).
* :mod:`~advantage.algos.tabular.monte_carlo`: Monte Carlo prediction and control (T2).
* :mod:`~advantage.algos.tabular.planning`: value iteration, policy iteration and exact policy evaluation
  on a known model as runs (T3), with the solvers of :mod:`~advantage.algos.tabular.dynamic_programming`
  (the ground truth the learned methods are checked against).
* :mod:`~advantage.algos.tabular.linear_td` and :mod:`~advantage.algos.tabular.linear_control`: linear
  function approximation, prediction (semi-gradient TD, TDC, GTD2) and control (T4), with what they share
  in :mod:`~advantage.algos.tabular.linear_common`.
* :mod:`~advantage.algos.tabular.common`: what every tabular method shares (ε-greedy, the table policy,
  the fixed policy prediction evaluates, a sampling run's saved state).
"""
