"""Every algorithm's config: its dataclasses, presets and registry record, without its training code.

Importing this package registers every algorithm (:mod:`advantage.registry`) and imports neither torch
nor :mod:`advantage.algos`: ``advantage list``, ``advantage --help`` and config errors answer in a
fraction of a second. The training functions are :class:`~advantage.registry.Entry` names, imported when
a run starts.
"""

from advantage.algos.llm import dpo, grpo, ppo_rlhf, reward_model, sft  # noqa: F401
from advantage.configs import a2c, ddpg, dqn, linear, ppo, reinforce, sac, tabular, td3, trpo  # noqa: F401  # noqa: F401
