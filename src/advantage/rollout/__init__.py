"""Rollouts of Gymnasium environments for the classic trainers.

* :mod:`~advantage.rollout.envsteps`: the bookkeeping of stepping vector envs (reset steps, episode
  returns and lengths, the NaN/inf check), shared by every trainer that steps one.
* :mod:`~advantage.rollout.onpolicy`: the on-policy :class:`~advantage.rollout.onpolicy.Collector` of the
  actor-critic trainers (PPO, TRPO, A2C), its batches and GAE.
* :mod:`~advantage.rollout.remote`: the same collector over Ray env workers (``trainer.num_workers``).

Sampling from a language model is :mod:`advantage.lm.generate`.
"""
