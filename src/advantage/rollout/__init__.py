"""Rollouts of Gymnasium environments for the classic trainers.

* :mod:`~advantage.rollout.envsteps`: the bookkeeping of stepping vector envs (reset steps, episode
  returns and lengths, the NaN/inf check), shared by every trainer that steps one.
* :mod:`~advantage.rollout.collector`: the :class:`~advantage.rollout.collector.Collector` the
  actor-critic trainers (PPO, TRPO, A2C) call, the choice of one, a run's start and checkpoint through it.
* :mod:`~advantage.rollout.onpolicy`: the on-policy collector of one process, its batches and GAE.
* :mod:`~advantage.rollout.remote`: the same collector over Ray env workers (``trainer.num_workers``).

Sampling from a language model is :mod:`advantage.lm.generate`.
"""
