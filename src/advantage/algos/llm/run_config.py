"""What the shared language-model code reads of a run's config, as :class:`typing.Protocol` s: every LM
config (``sft``, ``reward_model``, ``dpo``, ``grpo``, ``ppo_rlhf``) has a ``data``, a ``model`` and a
``trainer`` section (:class:`advantage.config.LMRunConfig`); the trainers that sample and score
(``grpo``, ``ppo_rlhf``) also a ``worker`` with ``rollout`` and ``reward`` sections
(:class:`SampledRunConfig`); every optimizer section has a learning-rate schedule (:class:`LRSchedule`).
The config dataclasses themselves are in :mod:`advantage.configs`.
"""

from __future__ import annotations

from typing import Protocol

from advantage.config import LMRunConfig
from advantage.configs.llm import SamplingConfig


class RewardSection(Protocol):
    """``worker.reward``: the reward model's run or checkpoint (None: the task's verifier) and how many
    responses it scores together."""

    @property
    def model(self) -> str | None: ...

    @property
    def batch_size(self) -> int: ...


class SamplingWorker(Protocol):
    """``worker`` of a trainer that samples: the sampling options and the reward."""

    @property
    def rollout(self) -> SamplingConfig: ...

    @property
    def reward(self) -> RewardSection: ...


class SampledRunConfig(LMRunConfig, Protocol):
    """A run that samples responses and scores them (``grpo``, ``ppo_rlhf``)."""

    @property
    def worker(self) -> SamplingWorker: ...


class LRSchedule(Protocol):
    """An optimizer section's learning-rate schedule (:func:`advantage.schedules.warmup_decay`)."""

    @property
    def learning_rate(self) -> float: ...

    @property
    def warmup_steps(self) -> int: ...

    @property
    def lr_schedule(self) -> str: ...

    @property
    def min_lr_ratio(self) -> float: ...
