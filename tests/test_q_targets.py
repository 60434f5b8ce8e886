"""Tests for advantage.math.q_targets against hand-computed values (float64)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from advantage.math import double_q_target, dueling_combine, polyak_update, td_target

F64 = torch.float64


def t64(xs) -> torch.Tensor:
    return torch.tensor(xs, dtype=F64)


def close(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-12) -> None:
    assert a.shape == b.shape
    torch.testing.assert_close(a, b, atol=atol, rtol=0.0)


# Two transitions, three actions. Online and target networks disagree on the best next action of row 0.
REWARDS = t64([1.0, -0.5])
NEXT_Q_TARGET = t64([[1.0, 3.0, 2.0], [0.5, -1.0, 4.0]])
NEXT_Q_ONLINE = t64([[0.0, 1.0, 5.0], [0.0, 0.0, 9.0]])


def test_td_target_by_hand_and_terminal_masking():
    term = torch.tensor([False, False])
    # y = r + γ max_a Q': 1 + 0.9*3 = 3.7; -0.5 + 0.9*4 = 3.1
    close(td_target(REWARDS, NEXT_Q_TARGET, term, 0.9), t64([3.7, 3.1]))
    term = torch.tensor([False, True])
    close(td_target(REWARDS, NEXT_Q_TARGET, term, 0.9), t64([3.7, -0.5]))
    # 0/1 flags work like bools; a terminal row never reads its next value, even a NaN or inf one
    bad_next = NEXT_Q_TARGET.clone()
    bad_next[1] = torch.tensor([torch.nan, torch.inf, 0.0])
    close(td_target(REWARDS, bad_next, torch.tensor([0, 1]), 0.9), t64([3.7, -0.5]))
    close(double_q_target(REWARDS, bad_next, bad_next, torch.tensor([0, 1]), 0.9), t64([3.7, -0.5]))


def test_double_q_differs_from_max_where_networks_disagree():
    term = torch.tensor([False, False])
    # Row 0: online argmax = action 2, target values it at 2.0 -> 1 + 0.9*2 = 2.8 (max would give 3.7).
    # Row 1: both pick action 2 -> same as max: -0.5 + 0.9*4 = 3.1.
    y_double = double_q_target(REWARDS, NEXT_Q_ONLINE, NEXT_Q_TARGET, term, 0.9)
    y_max = td_target(REWARDS, NEXT_Q_TARGET, term, 0.9)
    close(y_double, t64([2.8, 3.1]))
    assert y_double[0] < y_max[0]
    close(y_double[1:], y_max[1:])
    # terminal masking
    y = double_q_target(REWARDS, NEXT_Q_ONLINE, NEXT_Q_TARGET, torch.tensor([True, False]), 0.9)
    close(y, t64([1.0, 3.1]))
    # with online == target, double Q is plain max
    close(double_q_target(REWARDS, NEXT_Q_TARGET, NEXT_Q_TARGET, term, 0.9), y_max)


def test_per_sample_gamma_for_n_step():
    term = torch.tensor([False, False])
    discounts = t64([0.9**3, 0.9**2])  # γ^k from the replay buffer
    expect = t64([1.0 + 0.729 * 3.0, -0.5 + 0.81 * 4.0])
    close(td_target(REWARDS, NEXT_Q_TARGET, term, discounts), expect)
    expect_double = t64([1.0 + 0.729 * 2.0, -0.5 + 0.81 * 4.0])
    close(double_q_target(REWARDS, NEXT_Q_ONLINE, NEXT_Q_TARGET, term, discounts), expect_double)
    # a per-sample discount of 0 gives the reward alone
    close(td_target(REWARDS, NEXT_Q_TARGET, term, t64([0.0, 1.0])), t64([1.0, 3.5]))


def test_targets_keep_float32_and_broadcast_scalar_tensor_gamma():
    r = REWARDS.float()
    y = td_target(r, NEXT_Q_TARGET.float(), torch.tensor([False, True]), torch.tensor(0.5))
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, torch.tensor([2.5, -0.5]))


def test_target_argument_errors():
    term = torch.tensor([False, False])
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\], got 1.5"):
        td_target(REWARDS, NEXT_Q_TARGET, term, 1.5)
    with pytest.raises(ValueError, match="next_q must be"):
        td_target(REWARDS, NEXT_Q_TARGET[:1], term, 0.9)
    with pytest.raises(ValueError, match="terminated must have the shape"):
        td_target(REWARDS, NEXT_Q_TARGET, torch.tensor([False]), 0.9)
    with pytest.raises(ValueError, match="gamma as a tensor"):
        td_target(REWARDS, NEXT_Q_TARGET, term, t64([0.9, 0.9, 0.9]))
    with pytest.raises(ValueError, match="same shape"):
        double_q_target(REWARDS, NEXT_Q_ONLINE[:, :2], NEXT_Q_TARGET, term, 0.9)


def test_polyak_soft_and_hard():
    torch.manual_seed(0)
    online, target = nn.Linear(3, 2).double(), nn.Linear(3, 2).double()
    before = [p.detach().clone() for p in target.parameters()]
    polyak_update(target.parameters(), online.parameters(), tau=0.005)
    for t, b, o in zip(target.parameters(), before, online.parameters(), strict=True):
        close(t.detach(), 0.005 * o.detach() + 0.995 * b, atol=1e-15)
        assert not t.requires_grad or t.grad is None

    # Hand values on plain tensors.
    tgt, onl = [t64([0.0, 10.0])], [t64([1.0, 0.0])]
    polyak_update(tgt, onl, 0.005)
    close(tgt[0], t64([0.005, 9.95]))

    # tau = 1: an exact copy, even of values the soft rule would mangle (inf in the old target).
    tgt = [t64([float("inf"), 2.0])]
    polyak_update(tgt, [t64([3.0, 4.0])], 1.0)
    assert torch.equal(tgt[0], t64([3.0, 4.0]))
    polyak_update(target.parameters(), online.parameters(), 1.0)
    for t, o in zip(target.parameters(), online.parameters(), strict=True):
        assert torch.equal(t, o)
        assert t.data_ptr() != o.data_ptr()  # copied, not aliased


def test_polyak_runs_under_no_grad_and_validates():
    online, target = nn.Linear(2, 2), nn.Linear(2, 2)
    polyak_update(target.parameters(), online.parameters(), 0.5)  # leaf params with grad: no autograd error
    with pytest.raises(ValueError, match=r"tau must be in \[0, 1\], got 1.5"):
        polyak_update(target.parameters(), online.parameters(), 1.5)
    with pytest.raises(ValueError, match="pair up"):
        polyak_update(list(target.parameters())[:1], online.parameters(), 0.5)
    with pytest.raises(ValueError, match="shape"):
        polyak_update([torch.zeros(2)], [torch.zeros(3)], 0.5)


def test_dueling_max_and_mean_by_hand():
    value = t64([[1.0], [-2.0]])  # [B, 1]
    adv = t64([[1.0, 3.0, 2.0], [0.0, 0.0, 3.0]])  # [B, A]
    q_max = dueling_combine(value, adv, "max")
    close(q_max, t64([[-1.0, 1.0, 0.0], [-5.0, -5.0, -2.0]]))
    q_mean = dueling_combine(value, adv, "mean")
    close(q_mean, t64([[0.0, 2.0, 1.0], [-3.0, -3.0, 0.0]]))
    # max variant: max_a Q = V; mean variant: mean_a Q = V; both keep the advantages' ordering
    close(q_max.max(dim=-1).values, value.squeeze(-1))
    close(q_mean.mean(dim=-1), value.squeeze(-1))
    assert torch.equal(q_max.argmax(-1), adv.argmax(-1))
    assert torch.equal(q_mean.argmax(-1), adv.argmax(-1))
    # shift invariance: V + C, A - C gives the same Q
    close(dueling_combine(value + 7.0, adv - 7.0, "mean"), q_mean + 7.0)


def test_dueling_gradients_and_errors():
    value = torch.zeros(2, 1, requires_grad=True)
    adv = torch.zeros(2, 3, requires_grad=True)
    dueling_combine(value, adv).sum().backward()
    assert value.grad is not None and adv.grad is not None
    with pytest.raises(ValueError, match="mode must be one of"):
        dueling_combine(value, adv, "sum")
    with pytest.raises(ValueError, match=r"value must be \[B, 1\]"):
        dueling_combine(torch.zeros(2, 3), adv)
