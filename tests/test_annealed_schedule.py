"""The classic trainers' ``constant`` / ``linear`` schedule (:func:`advantage.schedules.annealed`): the
learning rate of PPO, A2C and DQN and PPO's clip range, bit for bit the expression the trainers wrote out
before it."""

from __future__ import annotations

import pytest

from advantage.schedules import annealed, remaining


@pytest.mark.parametrize("total", [1, 7, 100, 12_345])
def test_annealed_is_the_written_out_expression_bit_for_bit(total):
    for value in (3e-4, 0.2, 1.0):
        for step in range(0, total + 3, max(1, total // 50)):
            for schedule in ("constant", "linear"):
                old = value * (remaining(step, total) if schedule == "linear" else 1.0)
                assert annealed(value, schedule, step, total) == old


def test_annealed_hand_values():
    assert annealed(1e-3, "constant", 90, 100) == 1e-3
    assert annealed(1e-3, "linear", 0, 100) == 1e-3
    assert annealed(1e-3, "linear", 25, 100) == pytest.approx(7.5e-4)
    assert annealed(1e-3, "linear", 100, 100) == 0.0
    assert annealed(1e-3, "linear", 150, 100) == 0.0  # past the end: stays at 0
    with pytest.raises(ValueError, match="schedule must be 'constant' or 'linear', got 'cosine'"):
        annealed(1e-3, "cosine", 0, 100)
