"""Algorithms: the training code, one module per algorithm, and modules of what several of them share.

* Actor-critic on-policy trainers: :mod:`~advantage.algos.ppo`, :mod:`~advantage.algos.a2c`,
  :mod:`~advantage.algos.trpo` (their rollouts are :mod:`advantage.rollout.onpolicy`), and the
  whole-episode policy gradient :mod:`~advantage.algos.reinforce`.
* Value-based: :mod:`~advantage.algos.dqn`, with its overestimation probe
  :mod:`~advantage.algos.dqn_probe`.
* Off-policy on ``Box`` actions: :mod:`~advantage.algos.ddpg`, :mod:`~advantage.algos.td3`,
  :mod:`~advantage.algos.sac`; :mod:`~advantage.algos.offpolicy_common` holds their environment side and
  loop.
* :mod:`advantage.algos.tabular`: tabular, linear and exact methods (TD, Monte Carlo, planning).
* :mod:`advantage.algos.llm`: language-model post-training (SFT, reward models, DPO, GRPO, PPO-RLHF).

Importing this package imports none of them: their configs, presets and registry records live in
:mod:`advantage.configs`, whose records name the training functions here
(:class:`~advantage.registry.Entry`), imported when a run starts.
"""
