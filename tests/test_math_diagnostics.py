"""The small shared pieces of the math core: explained variance, k3 from a ratio at hand, and the one
gradient clip (advantage.optim.clip_grad_norm) on what each trainer passes it."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from advantage.math import explained_variance, k3_from_ratio, kl_k3, ppo_clip, ppo_penalty
from advantage.optim import clip_grad_norm


def test_explained_variance_exact_values():
    R = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(R, R) == 1.0
    # V = mean(R): Var(R - V) = Var(R), so EV = 0; V = R + 1: a constant offset explains all the spread.
    assert explained_variance(torch.full_like(R, 2.5), R) == 0.0
    assert explained_variance(R + 1.0, R) == 1.0
    # Var(R) = 5/3 (unbiased); R - V = [1, 0, 0, -1] has Var 2/3: EV = 1 - (2/3)/(5/3) = 0.6.
    assert explained_variance(torch.tensor([0.0, 2.0, 3.0, 5.0]), R) == pytest.approx(0.6)
    assert math.isnan(explained_variance(R, torch.ones(4)))  # returns that do not vary
    assert math.isnan(explained_variance(R[:1], R[:1]))  # fewer than two


def test_explained_variance_masked_counts_valid_elements_only():
    R = torch.tensor([[1.0, 2.0, 3.0, 4.0, 99.0]])
    V = torch.tensor([[0.0, 2.0, 3.0, 5.0, -50.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    assert explained_variance(V, R, mask) == pytest.approx(0.6)
    assert math.isnan(explained_variance(V, R, torch.tensor([[1, 0, 0, 0, 0]])))


def test_explained_variance_is_the_old_expressions_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    R, V = torch.randn(257, generator=g), torch.randn(257, generator=g)
    var_y = float(R.var())
    assert explained_variance(V, R) == 1 - float((R - V).var()) / var_y  # PPO's and TRPO's


def test_k3_from_ratio_exact_values_and_kl_k3():
    log_r = torch.tensor([0.0, math.log(2.0), math.log(0.5)], dtype=torch.float64)
    want = torch.tensor([0.0, 1.0 - math.log(2.0), -0.5 + math.log(2.0)], dtype=torch.float64)
    assert torch.allclose(k3_from_ratio(log_r, log_r.exp()), want, rtol=0, atol=1e-15)
    # The same estimator as kl_k3 with π_old in the role of π and π_θ in the role of π_ref.
    old, new = torch.randn(64, dtype=torch.float64), torch.randn(64, dtype=torch.float64)
    assert torch.allclose(k3_from_ratio(new - old, (new - old).exp()), kl_k3(old, new), rtol=0, atol=1e-12)


def test_ppo_losses_k3_is_the_old_expression_bit_for_bit():
    g = torch.Generator().manual_seed(1)
    logp, old = torch.randn(4, 9, generator=g) * 0.3, torch.randn(4, 9, generator=g) * 0.3
    adv, mask = torch.randn(4, 9, generator=g), torch.rand(4, 9, generator=g) > 0.2
    log_ratio = torch.where(mask, logp - old, torch.zeros_like(logp)).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    loss, metrics = ppo_penalty(logp, old, adv, mask, beta=0.7)
    want = torch.where(mask, -ratio * adv + 0.7 * ((ratio - 1.0) - log_ratio), torch.zeros_like(logp))
    assert torch.equal(loss, want)
    k3 = (ratio - 1.0) - log_ratio
    assert torch.equal(metrics["approx_kl"], (k3 * mask).sum() / mask.sum())
    _, clip_metrics = ppo_clip(logp, old, adv, mask)
    assert torch.equal(clip_metrics["approx_kl"], metrics["approx_kl"])


def test_clip_grad_norm_takes_a_generator_and_matches_torch():
    def grads(seed):
        torch.manual_seed(seed)
        net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 2))
        net(torch.randn(3, 5)).pow(2).sum().backward()
        return net

    ours, theirs = grads(0), grads(0)
    got = clip_grad_norm(ours.parameters(), 0.1)  # a generator, as A2C and REINFORCE pass
    want = nn.utils.clip_grad_norm_(theirs.parameters(), 0.1)
    assert torch.equal(got, want)
    pairs = zip(ours.parameters(), theirs.parameters(), strict=True)
    assert all(torch.equal(a.grad, b.grad) for a, b in pairs)
    assert float(got) > 0.1  # the clip was active


@pytest.mark.parametrize("max_norm", [0.0, -1.0])
def test_clip_grad_norm_off_leaves_gradients_alone(max_norm):
    """``max_grad_norm=0`` means no clip in every trainer: the helper must not scale by 0 / (n + 1e-6)."""
    torch.manual_seed(0)
    net = nn.Linear(4, 3)
    net(torch.randn(2, 4)).sum().backward()
    before = [p.grad.clone() for p in net.parameters()]
    assert float(clip_grad_norm(net.parameters(), max_norm)) == 0.0
    assert all(torch.equal(p.grad, b) for p, b in zip(net.parameters(), before, strict=True))
