"""Rollouts of Gymnasium environments: stepping vector envs (:mod:`~advantage.rollout.envsteps`), the
on-policy collector (:mod:`~advantage.rollout.onpolicy`) and Ray env workers
(:mod:`~advantage.rollout.remote`). Sampling from a language model is :mod:`advantage.lm.generate`."""
