"""The checks ``ppo_rlhf`` makes before any compute (:func:`check`: the task, the policy's folder, and the
reward model: it exists, is one, and shares the policy's tokenizer). The config itself is
:mod:`advantage.configs.ppo_rlhf`."""

from __future__ import annotations

from advantage.algos.llm import common
from advantage.algos.llm.shared import preference_task, reward_model_problems
from advantage.configs.ppo_rlhf import PPORLHFConfig

make_task = preference_task  # the preference task whose prompts PPO answers


def check(cfg: PPORLHFConfig) -> list[str]:
    """:func:`advantage.algos.llm.common.check` with the preference task, plus the reward model: set,
    existing, a reward model, and on the policy's tokenizer — all before the run folder is created
    (:func:`advantage.algos.llm.shared.reward_model_problems`)."""
    return common.check(cfg, make_task) + reward_model_problems(cfg, make_task)
