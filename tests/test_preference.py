"""Preference losses against hand values, brute force and their defining properties."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from advantage.math.preference import (
    DPO_LOSSES,
    bradley_terry_loss,
    dpo_implicit_reward,
    dpo_metrics,
    kwise_ranking_loss,
)


def _sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_bradley_terry_values_and_stability():
    loss = bradley_terry_loss(torch.tensor([2.0, 0.0, -1.0]), torch.tensor([1.0, 0.0, 3.0]))
    expected = [-math.log(_sig(1.0)), math.log(2.0), -math.log(_sig(-4.0))]
    torch.testing.assert_close(loss, torch.tensor(expected))
    big = bradley_terry_loss(torch.tensor([0.0]), torch.tensor([1000.0]))
    assert float(big) == pytest.approx(1000.0)  # softplus, no overflow to inf
    # d/d r_w = -(1 - σ(r_w - r_l)): the logistic-regression gradient
    rw = torch.tensor([0.3], requires_grad=True)
    bradley_terry_loss(rw, torch.tensor([-0.2])).sum().backward()
    assert float(rw.grad) == pytest.approx(-(1 - _sig(0.5)))


def test_kwise_is_the_mean_over_all_pairs():
    torch.manual_seed(0)
    scores = torch.randn(5, 4)
    brute = torch.stack(
        [
            torch.stack(
                [
                    -torch.log(torch.sigmoid(scores[n, i] - scores[n, j]))
                    for i, j in itertools.combinations(range(4), 2)
                ]
            ).mean()
            for n in range(5)
        ]
    )
    torch.testing.assert_close(kwise_ranking_loss(scores), brute)
    # K = 2 is Bradley-Terry
    torch.testing.assert_close(
        kwise_ranking_loss(scores[:, :2]), bradley_terry_loss(scores[:, 0], scores[:, 1])
    )
    # A missing response: only pairs among the valid ones count
    valid = torch.tensor([[True, True, True, False]] * 5)
    torch.testing.assert_close(kwise_ranking_loss(scores, valid), kwise_ranking_loss(scores[:, :3]))
    with pytest.raises(ValueError, match="at least 2 responses"):
        kwise_ranking_loss(scores[:, :1])


def test_dpo_sigmoid_values_gradient_and_label_smoothing():
    pc, pr = torch.tensor([-3.0], requires_grad=True), torch.tensor([-5.0], requires_grad=True)
    rc, rr = torch.tensor([-4.0]), torch.tensor([-4.0])
    beta = 0.5
    loss = DPO_LOSSES["sigmoid"](pc, pr, rc, rr, beta=beta)
    h = (-3 + 4) - (-5 + 4)  # 2
    assert float(loss.detach()) == pytest.approx(-math.log(_sig(beta * h)))
    loss.sum().backward()
    # dL/d logπ(y_w) = -β σ(-βh); dL/d logπ(y_l) = +β σ(-βh)
    assert float(pc.grad) == pytest.approx(-beta * _sig(-beta * h))
    assert float(pr.grad) == pytest.approx(beta * _sig(-beta * h))
    # policy = reference: log 2, whatever β
    same = DPO_LOSSES["sigmoid"](rc, rr, rc, rr, beta=3.0)
    assert float(same) == pytest.approx(math.log(2))
    smooth = DPO_LOSSES["sigmoid"](pc.detach(), pr.detach(), rc, rr, beta=beta, label_smoothing=0.1)
    assert float(smooth) == pytest.approx(-0.9 * math.log(_sig(1.0)) - 0.1 * math.log(_sig(-1.0)))


def test_ipo_and_hinge_values():
    pc, pr, rc, rr = (torch.tensor([v]) for v in (-3.0, -5.0, -4.0, -4.0))  # h = 2
    assert float(DPO_LOSSES["ipo"](pc, pr, rc, rr, beta=0.1)) == pytest.approx((2 - 5.0) ** 2)
    assert float(DPO_LOSSES["ipo"](pc, pr, rc, rr, beta=0.25)) == pytest.approx(0.0)  # margin at 1/(2β)
    assert float(DPO_LOSSES["hinge"](pc, pr, rc, rr, beta=0.1)) == pytest.approx(0.8)
    assert float(DPO_LOSSES["hinge"](pc, pr, rc, rr, beta=1.0)) == 0.0


def test_implicit_reward_and_metrics():
    logp, ref = torch.tensor([-2.0, -1.0]), torch.tensor([-3.0, -1.0])
    torch.testing.assert_close(dpo_implicit_reward(logp, ref, 0.5), torch.tensor([0.5, 0.0]))
    m = dpo_metrics(
        torch.tensor([-1.0, -2.0]),
        torch.tensor([-3.0, -1.0]),
        torch.tensor([-2.0, -2.0]),
        torch.tensor([-2.0, -2.0]),
        1.0,
    )
    assert float(m["rewards_chosen"]) == pytest.approx(0.5)
    assert float(m["rewards_rejected"]) == pytest.approx(0.0)
    assert float(m["reward_margin"]) == pytest.approx(0.5)
    assert float(m["reward_accuracy"]) == pytest.approx(0.5)
