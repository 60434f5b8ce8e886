r"""Schedules: a hyperparameter (learning rate, ε, step size) as a function of the training step.

Pure functions of ``(step, total)`` returning floats, shared by the tabular methods (ε and α decay), the
classic policy-gradient trainers (PPO and A2C anneal the learning rate and clip range to 0) and the
language-model trainers (linear warm-up, then a cosine or linear decay). Plain Python, no torch: a Q-table
run and the configs use them without importing torch (:mod:`advantage.math`, which does, re-exports them).
"""

from __future__ import annotations

import math

__all__ = ["LR_SCHEDULES", "linear_schedule", "remaining", "warmup_decay"]

LR_SCHEDULES = ("constant", "cosine", "linear")


def linear_schedule(start: float, end: float, fraction: float, step: int, total: int) -> float:
    r"""Linear interpolation from ``start`` (step 0) to ``end`` (step ``fraction·total``), then ``end``.

    .. math::
        v(t) = v_0 + (v_1 - v_0)\,\min\!\big(1, t / \max(1, f\,T)\big)
    """
    horizon = max(1.0, fraction * total)
    return start + (end - start) * min(1.0, step / horizon)


def remaining(step: int, total: int) -> float:
    r"""The fraction of training left, :math:`1 - t/T` (clipped at 0): the factor by which PPO and A2C
    anneal the learning rate (and PPO the clip range) linearly to 0 (Schulman et al. 2017)."""
    return linear_schedule(1.0, 0.0, 1.0, step, total)


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
