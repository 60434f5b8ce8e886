"""advantage.schedules (re-exported by advantage.math): exact values, and bit for bit the expressions the
trainers used before."""

from __future__ import annotations

import math

import pytest

from advantage.schedules import linear_schedule, remaining, warmup_decay


def test_linear_schedule_exact_values():
    # ε from 1.0 to 0.1 over the first half of 100 steps, then 0.1.
    assert linear_schedule(1.0, 0.1, 0.5, 0, 100) == 1.0
    assert linear_schedule(1.0, 0.1, 0.5, 25, 100) == pytest.approx(0.55)
    assert linear_schedule(1.0, 0.1, 0.5, 50, 100) == pytest.approx(0.1)
    assert linear_schedule(1.0, 0.1, 0.5, 90, 100) == pytest.approx(0.1)
    assert linear_schedule(2.0, 4.0, 0.0, 0, 10) == 2.0  # a horizon below one step is one step
    assert linear_schedule(2.0, 4.0, 0.0, 1, 10) == 4.0


def test_remaining_is_the_old_linear_anneal_bit_for_bit():
    assert remaining(0, 8) == 1.0
    assert remaining(2, 8) == 0.75
    assert remaining(8, 8) == 0.0
    for total in (1, 3, 7, 10, 128, 1000, 2**20 + 1):
        for step in range(0, total, max(1, total // 97)):
            assert remaining(step, total) == 1.0 - step / max(total, 1)


def old_lm_learning_rate(peak, warmup, schedule, min_ratio, step, total):
    """The expression advantage.algos.llm.training.learning_rate had before it used warmup_decay."""
    if step < warmup:
        return peak * (step + 1) / warmup
    if schedule == "constant":
        return peak
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    shape = 0.5 * (1 + math.cos(math.pi * frac)) if schedule == "cosine" else 1 - frac
    return peak * (min_ratio + (1 - min_ratio) * shape)


def test_warmup_decay_exact_values():
    kw = {"warmup_steps": 10, "min_ratio": 0.1}
    assert warmup_decay(1e-3, 0, 110, schedule="cosine", **kw) == pytest.approx(1e-4)  # (0+1)/10 of peak
    assert warmup_decay(1e-3, 9, 110, schedule="cosine", **kw) == pytest.approx(1e-3)
    assert warmup_decay(1e-3, 10, 110, schedule="cosine", **kw) == pytest.approx(1e-3)  # φ = 0
    assert warmup_decay(1e-3, 60, 110, schedule="cosine", **kw) == pytest.approx(1e-3 * 0.55)  # φ = 1/2
    assert warmup_decay(1e-3, 110, 110, schedule="cosine", **kw) == pytest.approx(1e-4)  # φ = 1
    assert warmup_decay(1e-3, 35, 110, schedule="linear", **kw) == pytest.approx(1e-3 * (0.1 + 0.9 * 0.75))
    assert warmup_decay(1e-3, 500, 110, schedule="linear", **kw) == pytest.approx(1e-4)
    assert warmup_decay(1e-3, 50, 110, schedule="constant", **kw) == 1e-3
    with pytest.raises(ValueError, match="schedule must be one of constant, cosine, linear, got 'step'"):
        warmup_decay(1e-3, 50, 110, schedule="step", **kw)


@pytest.mark.parametrize("schedule", ["constant", "cosine", "linear"])
@pytest.mark.parametrize(("warmup", "min_ratio", "total"), [(0, 0.0, 100), (50, 0.1, 600), (7, 0.3, 13)])
def test_warmup_decay_is_the_old_lm_schedule_bit_for_bit(schedule, warmup, min_ratio, total):
    for step in range(total + 3):
        got = warmup_decay(2e-3, step, total, warmup_steps=warmup, schedule=schedule, min_ratio=min_ratio)
        assert got == old_lm_learning_rate(2e-3, warmup, schedule, min_ratio, step, total)
