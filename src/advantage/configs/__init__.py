"""Every algorithm's config: its dataclasses, presets and registry record, without its training code.

Importing this package registers every algorithm (:mod:`advantage.registry`) and imports neither torch
nor :mod:`advantage.algos`: ``advantage list``, ``advantage --help`` and config errors answer in a
fraction of a second. The training functions are :class:`~advantage.registry.Entry` names, imported when
a run starts.
"""

from advantage.configs import (  # noqa: F401
    a2c,
    ddpg,
    dpo,
    dqn,
    grpo,
    linear,
    ppo,
    ppo_rlhf,
    reinforce,
    reward_model,
    sac,
    sft,
    tabular,
    td3,
    trpo,
)
