r"""Schedules: a hyperparameter (learning rate, ε, step size) as a function of the training step.

Pure functions of ``(step, total)`` returning floats, shared by the tabular methods (ε and α decay), the
classic trainers (:func:`annealed`: PPO, A2C and DQN anneal the learning rate, PPO its clip range, to 0)
and the language-model trainers (linear warm-up, then a cosine or linear decay). Plain Python, no torch: a
Q-table run and the configs use them without importing torch (:mod:`advantage.math`, which does,
re-exports them).
"""

from __future__ import annotations

import math
from typing import Protocol

__all__ = [
    "LR_SCHEDULES",
    "annealed",
    "linear_schedule",
    "remaining",
    "schedule_total",
    "warmup_decay",
]

LR_SCHEDULES = ("constant", "cosine", "linear")


class TrainerTotals(Protocol):
    """What :func:`schedule_total` reads of the ``trainer`` section
    (:class:`advantage.config.TrainerConfig`)."""

    @property
    def total_steps(self) -> int: ...

    @property
    def schedule_steps(self) -> list[list[int]]: ...


def linear_schedule(start: float, end: float, fraction: float, step: int, total: int) -> float:
    r"""Linear interpolation from ``start`` (step 0) to ``end`` (step ``fraction·total``), then ``end``.

    .. math::
        v(t) = v_0 + (v_1 - v_0)\,\min\!\big(1, t / \max(1, f\,T)\big)
    """
    horizon = max(1.0, fraction * total)
    return start + (end - start) * min(1.0, step / horizon)


def schedule_total(trainer: TrainerTotals, step: int, *, after_step: bool = False) -> int:
    """The total ``T`` the schedules run against at ``step``: ``trainer.total_steps``, except in the parts
    of a resumed run that ran against another total (``trainer.schedule_steps``, pairs
    ``[until_step, total]``: the steps that start before ``until_step`` used ``total``).

    ``after_step``: the value is computed once the step count has gone up to ``step`` (a tabular update,
    a DQN update after its environment step), so the step that ended at a resume's ``until_step`` still
    belongs to the part before it.

    Why: ``advantage resume RUN trainer.total_steps=N`` stretches every schedule from the resume on, while
    the steps before it ran against the old total. The run folder's ``config.yaml`` records both (resume
    appends the pair), so training from it reproduces the resumed run's schedules, step for step."""
    started = step - 1 if after_step else step
    for until, total in trainer.schedule_steps:
        if started < until:
            return int(total)
    return int(trainer.total_steps)


def remaining(step: int, total: int) -> float:
    r"""The fraction of training left, :math:`1 - t/T` (clipped at 0): the factor by which PPO and A2C
    anneal the learning rate (and PPO the clip range) linearly to 0 (Schulman et al. 2017)."""
    return linear_schedule(1.0, 0.0, 1.0, step, total)


def annealed(value: float, schedule: str, step: int, total: int) -> float:
    r"""``value`` at ``step`` under the classic trainers' ``constant`` or ``linear`` schedule (PPO's, A2C's
    and DQN's ``algorithm.lr_schedule``, PPO's ``clip_schedule``): ``value`` throughout, or
    ``value ·`` :func:`remaining`, annealed linearly to 0 at ``total``."""
    if schedule not in ("constant", "linear"):
        raise ValueError(f"schedule must be 'constant' or 'linear', got {schedule!r}")
    return value * (remaining(step, total) if schedule == "linear" else 1.0)


def warmup_decay(
    peak: float, step: int, total: int, warmup_steps: int, schedule: str, min_ratio: float
) -> float:
    r"""Linear warm-up over ``warmup_steps``, then ``schedule`` down to ``min_ratio`` × ``peak`` at ``total``.

    .. math::
        \eta(t) = \begin{cases} \eta_\max\,\frac{t + 1}{W}, & t < W \\
        \eta_\max\big(r + (1 - r)\,s(\phi)\big), & t \ge W \end{cases}
        \qquad \phi = \min\!\Big(1, \frac{t - W}{\max(1, T - W)}\Big)

    with :math:`s(\phi) = \tfrac12(1 + \cos\pi\phi)` (``cosine``, Loshchilov & Hutter 2017),
    :math:`1 - \phi` (``linear``), or :math:`\eta(t) = \eta_\max` after warm-up (``constant``).
    """
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    if schedule == "constant":
        return peak
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(LR_SCHEDULES)}, got {schedule!r}")
    frac = min(1.0, (step - warmup_steps) / max(1, total - warmup_steps))
    shape = 0.5 * (1 + math.cos(math.pi * frac)) if schedule == "cosine" else 1 - frac
    return peak * (min_ratio + (1 - min_ratio) * shape)
