"""Tests for advantage.math.{masked, policy_losses, value_losses, kl}: hand values and exact expectations.

KL claims are checked on a small categorical distribution by enumerating its categories (expectations
weighted by the probabilities, no sampling noise), with gradients from torch.autograd, in float64.
"""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from advantage.math import (
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    VALUE_LOSSES,
    AdaptiveKLController,
    adaptive_kl_beta,
    aggregate,
    kl_k1,
    kl_k2,
    kl_k3,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    pg,
    ppo_clip,
    ppo_penalty,
)
from advantage.math.value_losses import clipped, huber, mse

F64 = torch.float64
ATOL = 1e-12
NAN, INF = float("nan"), float("inf")


def t64(xs, requires_grad: bool = False) -> torch.Tensor:
    return torch.tensor(xs, dtype=F64, requires_grad=requires_grad)


def close(a: torch.Tensor, b, atol: float = ATOL) -> None:
    b = torch.as_tensor(b, dtype=a.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    torch.testing.assert_close(a, b, atol=atol, rtol=0.0)


# ============================================================================ masked helpers

# Row 0: 1, 2 valid; row 1: 5, 6 valid; row 2 all masked. Padding holds inf / NaN on purpose.
X = [[1.0, 2.0, INF], [NAN, 5.0, 6.0], [NAN, -INF, 9.0]]
M = [[1, 1, 0], [0, 1, 1], [0, 0, 0]]


@pytest.mark.parametrize("mask_dtype", [torch.bool, F64, torch.float32])
def test_masked_sum_and_mean_hand_values(mask_dtype):
    x, m = t64(X), torch.tensor(M).to(mask_dtype)
    close(masked_sum(x, m), 14.0)
    close(masked_sum(x, m, dim=-1), [3.0, 11.0, 0.0])
    close(masked_mean(x, m), 3.5)
    close(masked_mean(x, m, dim=-1), [1.5, 5.5, 0.0])  # the all-masked row gives 0, not NaN
    close(masked_mean(x, m, dim=1), [1.5, 5.5, 0.0])
    close(masked_sum(x, m, dim=0), [1.0, 7.0, 6.0])


def test_masked_mean_all_masked_is_zero_with_finite_gradient():
    x = t64([[NAN, 1.0], [2.0, 3.0]], requires_grad=True)
    m = torch.zeros(2, 2, dtype=torch.bool)
    out = masked_mean(x, m)
    close(out, 0.0)
    out.backward()
    assert torch.isfinite(x.grad).all()
    close(x.grad, torch.zeros(2, 2, dtype=F64))


def test_masked_mean_gradient_ignores_padding():
    x = t64(X, requires_grad=True)
    masked_mean(x, torch.tensor(M)).backward()
    close(x.grad, torch.tensor(M, dtype=F64) / 4)


def test_masked_mean_float_mask_is_a_weight():
    close(masked_mean(t64([1.0, 3.0]), t64([0.5, 1.0])), 7.0 / 3.0)


def test_masked_var_hand_values():
    x, m = t64(X), torch.tensor(M)
    # valid values 1, 2, 5, 6: mean 3.5, squared deviations 6.25 + 2.25 + 2.25 + 6.25 = 17
    close(masked_var(x, m), 17.0 / 3.0)
    close(masked_var(x, m, unbiased=False), 17.0 / 4.0)
    valid = torch.tensor([1.0, 2.0, 5.0, 6.0], dtype=F64)
    close(masked_var(x, m), valid.var())
    # Too few elements: 0, not NaN.
    one = torch.tensor([[0, 1, 0], [0, 0, 0], [0, 0, 0]])
    close(masked_var(x, one), 0.0)
    close(masked_var(x, one, unbiased=False), 0.0)
    close(masked_var(x, torch.zeros(3, 3)), 0.0)


def test_masked_whiten_hand_values_and_padding_zero():
    x, m = t64(X), torch.tensor(M)
    w = masked_whiten(x, m, eps=0.0)
    s = math.sqrt(17.0 / 3.0)
    expected = [[(1 - 3.5) / s, (2 - 3.5) / s, 0.0], [0.0, (5 - 3.5) / s, (6 - 3.5) / s], [0.0, 0.0, 0.0]]
    close(w, expected)


def test_masked_whiten_mean_zero_std_one_over_valid_entries():
    g = torch.Generator().manual_seed(0)
    x = 3.0 + 5.0 * torch.randn(6, 9, generator=g, dtype=F64)
    m = torch.rand(6, 9, generator=g) < 0.6
    m[2] = False
    w = masked_whiten(x, m)
    assert (w[~m] == 0).all()
    close(w[m].mean(), 0.0, atol=1e-12)
    close(w[m].std(), 1.0, atol=1e-8)  # unbiased std, as masked_var
    # shift_mean=False keeps the mean and rescales the spread.
    w2 = masked_whiten(x, m, shift_mean=False)
    close(w2[m].mean(), x[m].mean(), atol=1e-12)
    close(w2[m].std(), 1.0, atol=1e-8)
    assert (w2[~m] == 0).all()


def test_masked_whiten_constant_input_is_zero_not_nan():
    w = masked_whiten(torch.full((2, 3), 4.0, dtype=F64), torch.ones(2, 3))
    close(w, torch.zeros(2, 3, dtype=F64))


def test_masked_shape_mismatch_raises():
    with pytest.raises(ValueError, match="mask must have the shape"):
        masked_mean(torch.zeros(2, 3), torch.ones(3))


# ============================================================================ aggregate

L = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]
LM = [[1, 1, 0], [1, 0, 0], [0, 0, 0]]


def test_aggregate_token_mean_hand():
    close(aggregate(t64(L), torch.tensor(LM), "token_mean"), 7.0 / 3.0)  # (1 + 2 + 4) / 3
    close(aggregate(t64(L), torch.tensor(LM), "token_mean", normalizer=10), 0.7)


def test_aggregate_seq_mean_token_mean_hand():
    # row means 1.5 and 4; the all-masked row is neither summed nor counted
    close(aggregate(t64(L), torch.tensor(LM), "seq_mean_token_mean"), (1.5 + 4.0) / 2)
    close(aggregate(t64(L), torch.tensor(LM), "seq_mean_token_mean", normalizer=5), 5.5 / 5)


def test_aggregate_seq_mean_token_sum_norm_hand():
    # row sums 3 and 4, each / max_len = 4, then / B = 3 (every row counts)
    close(aggregate(t64(L), torch.tensor(LM), "seq_mean_token_sum_norm", max_len=4), (3 / 4 + 4 / 4) / 3)
    close(aggregate(t64(L), torch.tensor(LM), "seq_mean_token_sum_norm", max_len=4, normalizer=2), 1.75 / 2)


def test_aggregate_seq_modes_differ_from_token_mean_on_unequal_lengths():
    # Short sequences weigh more in seq_mean_token_mean; Dr. GRPO has no length division at all.
    loss, m = t64([[1.0, 1.0, 1.0, 1.0], [5.0, 0.0, 0.0, 0.0]]), torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    close(aggregate(loss, m, "token_mean"), 9.0 / 5.0)
    close(aggregate(loss, m, "seq_mean_token_mean"), 3.0)
    close(aggregate(loss, m, "seq_mean_token_sum_norm", max_len=4), (4 / 4 + 5 / 4) / 2)


def test_aggregate_all_masked_is_zero():
    z = torch.zeros(2, 3)
    for mode in LOSS_AGGREGATIONS:
        out = aggregate(t64([[NAN, 1, 2], [3, 4, INF]]), z, mode, max_len=3)
        close(out, 0.0)


def test_aggregate_errors():
    with pytest.raises(ValueError, match="seq_mean_token_sum_norm needs max_len"):
        aggregate(t64(L), torch.tensor(LM), "seq_mean_token_sum_norm")
    with pytest.raises(ValueError, match=r"mode must be one of .*seq_mean_token_mean.*token_mean.*'bogus'"):
        aggregate(t64(L), torch.tensor(LM), "bogus")


def _accumulation_setup():
    g = torch.Generator().manual_seed(1)
    B, T = 7, 5
    w = torch.randn(B, T, generator=g, dtype=F64).requires_grad_(True)
    target = torch.randn(B, T, generator=g, dtype=F64)
    lengths = torch.tensor([5, 3, 0, 1, 4, 2, 5])
    mask = torch.arange(T)[None, :] < lengths[:, None]  # row 2 is empty
    slices = [slice(0, 2), slice(2, 3), slice(3, 7)]  # unequal micro-batches; the middle one is empty
    return w, target, mask, slices


def _elementwise(w, target):
    return (w - target) ** 2 + w.sin()


@pytest.mark.parametrize(
    ("mode", "global_count"),
    [
        ("token_mean", lambda mask: mask.sum()),
        ("seq_mean_token_mean", lambda mask: (mask.sum(-1) > 0).sum()),
        ("seq_mean_token_sum_norm", lambda mask: mask.shape[0]),
    ],
)
def test_gradient_accumulation_with_global_normalizer_matches_one_big_batch(mode, global_count):
    w, target, mask, slices = _accumulation_setup()
    kw = {"max_len": 5}

    big = aggregate(_elementwise(w, target), mask, mode, **kw)
    (g_big,) = torch.autograd.grad(big, w)

    z = global_count(mask)
    acc_value, acc_grad = torch.zeros((), dtype=F64), torch.zeros_like(w)
    for sl in slices:
        micro = aggregate(_elementwise(w[sl], target[sl]), mask[sl], mode, normalizer=z, **kw)
        (g,) = torch.autograd.grad(micro, w)  # one backward per micro-batch, grads summed
        acc_value, acc_grad = acc_value + micro.detach(), acc_grad + g
    close(acc_value, big.detach())
    close(acc_grad, g_big)

    # The naive recipe (each micro-batch normalised by its own count, then averaged) is different.
    naive = sum(aggregate(_elementwise(w[sl], target[sl]), mask[sl], mode, **kw) for sl in slices)
    naive = naive / len(slices)
    assert abs(float(naive.detach()) - float(big.detach())) > 1e-2


# ============================================================================ policy losses


def _ratio_batch(ratios, advantages, dtype=F64):
    """logp with grad and old_logp = 0, so that ρ = exp(logp) = ratios."""
    logp = torch.tensor([math.log(r) for r in ratios], dtype=dtype, requires_grad=True)
    return logp, torch.zeros(len(ratios), dtype=dtype), torch.tensor(advantages, dtype=dtype)


def test_pg_hand_values_and_gradient():
    logp = t64([-0.5, -1.0, -2.0, NAN], requires_grad=True)
    adv, mask = t64([2.0, -1.0, 0.5, NAN]), torch.tensor([1, 1, 1, 0])
    loss, metrics = pg(logp, torch.zeros(4, dtype=F64), adv, mask)
    close(loss, [1.0, -1.0, 1.0, 0.0])
    assert metrics == {}
    loss.sum().backward()
    close(logp.grad, [-2.0, 1.0, -0.5, 0.0])


def test_ppo_clip_hand_values_metrics_and_zero_gradient_where_clipped():
    ratios = [1.1, 1.5, 0.5, 0.5, 1.5, 0.9, 1.0]
    advs = [2.0, 2.0, 2.0, -1.0, -1.0, -1.0, 3.0]
    logp, old, adv = _ratio_batch(ratios, advs)
    mask = torch.tensor([1, 1, 1, 1, 1, 1, 0])
    loss, metrics = ppo_clip(logp, old, adv, mask, clip_low=0.2)
    # A>0 inside; A>0 above 1+ε (clipped: -1.2·2); A>0 below 1-ε (unclipped min: -0.5·2);
    # A<0 below 1-ε (clipped: 0.8); A<0 above 1+ε (unclipped: 1.5); A<0 inside; masked.
    expected = [-2.2, -2.4, -1.0, 0.8, 1.5, 0.9, 0.0]
    close(loss, expected, atol=1e-12)
    close(metrics["clipfrac"], 2.0 / 6.0)
    r = torch.tensor(ratios[:6], dtype=F64)
    close(metrics["approx_kl"], ((r - 1) - r.log()).mean(), atol=1e-12)
    close(metrics["ratio_mean"], r.mean(), atol=1e-12)
    assert all(v.dim() == 0 and not v.requires_grad for v in metrics.values())

    loss.sum().backward()
    # d/dlogp of -ρA is -ρA where unclipped; 0 where clipped or masked.
    close(logp.grad, [-2.2, 0.0, -1.0, 0.0, 1.5, 0.9, 0.0], atol=1e-12)


def test_ppo_clip_asymmetric_clip_high():
    logp, old, adv = _ratio_batch([1.25, 1.25, 0.75, 1.35], [1.0, 1.0, -1.0, 1.0])
    mask = torch.ones(4)
    sym, _ = ppo_clip(logp, old, adv, mask, clip_low=0.2)
    close(sym, [-1.2, -1.2, 0.8, -1.2], atol=1e-12)
    asym, m = ppo_clip(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    # 1.25 < 1.28 is no longer clipped above; 0.75 < 0.8 still clipped below; 1.35 clipped at 1.28.
    close(asym, [-1.25, -1.25, 0.8, -1.28], atol=1e-12)
    close(m["clipfrac"], 0.5)


def test_ppo_clip_dual_clip_caps_negative_advantage_loss():
    logp, old, adv = _ratio_batch([5.0, 2.0, 5.0, 0.5], [-1.0, -1.0, 1.0, -2.0])
    mask = torch.ones(4)
    plain, _ = ppo_clip(logp, old, adv, mask)
    close(plain, [5.0, 2.0, -1.2, 1.6], atol=1e-12)
    loss, m = ppo_clip(logp, old, adv, mask, dual_clip=3.0)
    close(loss, [3.0, 2.0, -1.2, 1.6], atol=1e-12)  # only A<0 with ρA < cA is capped at -cA
    close(m["dual_clipfrac"], 0.25)
    loss.sum().backward()
    close(logp.grad, [0.0, 2.0, 0.0, 0.0], atol=1e-12)
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        ppo_clip(logp, old, adv, mask, dual_clip=1.0)


def test_ppo_clip_log_ratio_clamp_prevents_inf():
    logp = torch.tensor([1000.0, 1000.0, -1000.0, 0.0], requires_grad=True)  # float32
    old = torch.tensor([0.0, 0.0, 0.0, -INF])
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0])
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0])
    loss, m = ppo_clip(logp, old, adv, mask)
    assert loss.dtype == torch.float32
    assert torch.isfinite(loss).all() and all(torch.isfinite(v) for v in m.values())
    close(loss, torch.tensor([-1.2, math.exp(20.0), 0.8, 0.0]), atol=1e-1)
    loss.sum().backward()
    assert torch.isfinite(logp.grad).all()
    # Without the clamp, exp(1000) overflows.
    assert torch.isinf(torch.exp(logp.detach()[0] - old[0]))
    with pytest.raises(ValueError, match="log_ratio_clamp must be > 0"):
        ppo_clip(logp, old, adv, mask, log_ratio_clamp=0.0)


def test_ppo_clip_low_precision_inputs_compute_in_float32():
    logp = torch.tensor([-1.0, -2.0], dtype=torch.bfloat16)
    loss, _ = ppo_clip(logp, logp.clone(), torch.tensor([1.0, 1.0], dtype=torch.bfloat16), torch.ones(2))
    assert loss.dtype == torch.float32
    close(loss, torch.tensor([-1.0, -1.0]))


def test_ppo_clip_validates_hyperparameters():
    logp, old, adv = _ratio_batch([1.0], [1.0])
    with pytest.raises(ValueError, match="clip_low must be in"):
        ppo_clip(logp, old, adv, torch.ones(1), clip_low=1.5)
    with pytest.raises(ValueError, match="clip_high must be >= 0"):
        ppo_clip(logp, old, adv, torch.ones(1), clip_high=-0.1)


def _policy_batch():
    """A tiny categorical policy [B=3, T=4, K=5] with sampled actions, a mask and advantages."""
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(3, 4, 5, generator=g, dtype=F64).requires_grad_(True)
    actions = torch.randint(0, 5, (3, 4), generator=g)
    adv = torch.randn(3, 4, generator=g, dtype=F64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    return logits, actions, adv, mask


def _logp(logits, actions):
    return logits.log_softmax(-1).gather(-1, actions[..., None])[..., 0]


@pytest.mark.parametrize(
    "loss_fn",
    [ppo_clip, partial(ppo_clip, clip_low=0.1, clip_high=0.3, dual_clip=2.0), partial(ppo_penalty, beta=0.7)],
)
def test_ratio_one_gives_minus_advantage_and_the_pg_gradient(loss_fn):
    logits, actions, adv, mask = _policy_batch()
    logp = _logp(logits, actions)
    old = logp.detach()
    loss, metrics = loss_fn(logp, old, adv, mask)
    close(loss, torch.where(mask.bool(), -adv, torch.zeros_like(adv)))
    close(metrics["approx_kl"], 0.0)
    close(metrics["ratio_mean"], 1.0)
    # d loss / d logp = -A exactly at ρ = 1 ...
    (g_logp,) = torch.autograd.grad(loss.sum(), logp, retain_graph=True)
    close(g_logp, torch.where(mask.bool(), -adv, torch.zeros_like(adv)))
    # ... so the parameter gradient is pg's: -A ∇logp.
    (g,) = torch.autograd.grad(aggregate(loss, mask, "token_mean"), logits, retain_graph=True)
    pg_loss, _ = pg(logp, old, adv, mask)
    (g_pg,) = torch.autograd.grad(aggregate(pg_loss, mask, "token_mean"), logits)
    close(g, g_pg)
    assert g.abs().sum() > 0


def test_ppo_penalty_hand_values():
    logp, old, adv = _ratio_batch([1.5, 0.5, 2.0], [2.0, -1.0, 1.0])
    mask = torch.tensor([1, 1, 0])
    loss, m = ppo_penalty(logp, old, adv, mask, beta=0.5)
    k3 = [0.5 - math.log(1.5), -0.5 - math.log(0.5)]
    close(loss, [-3.0 + 0.5 * k3[0], 0.5 + 0.5 * k3[1], 0.0], atol=1e-12)
    close(m["approx_kl"], (k3[0] + k3[1]) / 2, atol=1e-12)
    close(m["ratio_mean"], 1.0, atol=1e-12)
    loss.sum().backward()
    # d/dlogp = -ρA + β(ρ - 1)
    close(logp.grad, [-3.0 + 0.5 * 0.5, 0.5 + 0.5 * -0.5, 0.0], atol=1e-12)


def test_policy_registry_and_partial_binding():
    assert set(POLICY_LOSSES) == {"pg", "ppo_clip", "ppo_penalty", "gspo"}
    logp, old, adv = _ratio_batch([1.5], [1.0])
    loss, _ = partial(POLICY_LOSSES["ppo_clip"], clip_low=0.2, clip_high=0.28)(logp, old, adv, torch.ones(1))
    close(loss, [-1.28], atol=1e-12)


# ============================================================================ value losses


def test_value_losses_hand_values():
    v = t64([1.5, 1.1, 1.5, 0.0, 7.0], requires_grad=True)
    old = t64([1.0, 1.0, 1.0, 0.0, NAN])
    ret = t64([2.0, 2.0, 0.0, 3.0, NAN])
    mask = torch.tensor([1, 1, 1, 1, 0])
    close(mse(v, old, ret, mask), [0.125, 0.405, 1.125, 4.5, 0.0], atol=1e-12)
    cl = clipped(v, old, ret, mask, clip=0.2)
    # row 0: unclipped 0.25, clipped (1.2 - 2)^2 = 0.64 → max is the clipped branch
    # row 1: inside the clip range; row 2: unclipped 2.25 > clipped 1.44; row 3: v = old
    close(cl, [0.32, 0.405, 1.125, 4.5, 0.0], atol=1e-12)
    cl.sum().backward()
    close(v.grad, [0.0, -0.9, 1.5, -3.0, 0.0], atol=1e-12)  # 0 where the clipped branch wins
    # δ = 1: |e| = 1.5 and 3 are in the linear part, δ(|e| - δ/2) = 1.0 and 2.5
    close(huber(v, old, ret, mask), [0.125, 0.405, 1.0, 2.5, 0.0], atol=1e-12)
    # δ = 2: |e| = 1.5 is quadratic (1.125), |e| = 3 linear: 2 · (3 - 1) = 4
    close(huber(v, old, ret, mask, delta=2.0), [0.125, 0.405, 1.125, 4.0, 0.0], atol=1e-12)
    assert set(VALUE_LOSSES) == {"mse", "clipped", "huber"}
    close(partial(VALUE_LOSSES["clipped"], clip=10.0)(v, old, ret, mask), mse(v, old, ret, mask))


# ============================================================================ KL estimators

THETA = [0.3, -1.0, 0.8, 0.1]  # π's logits
REF = [-0.2, 0.5, 0.4, -0.7]  # π_ref's logits


def _expect(est, theta, ref_logits, sample_logits=None, weight_by_ratio=False):
    """Exact E_{a~q}[k(a)] and its gradient w.r.t. θ, with q = π (default) or softmax(sample_logits).

    The sampling distribution is not differentiated: this is the gradient of ``k`` used as a loss.
    """
    logp, ref_logp = theta.log_softmax(0), ref_logits.log_softmax(0)
    q = (theta if sample_logits is None else sample_logits).softmax(0).detach()
    k = est(logp, ref_logp)
    if weight_by_ratio:
        k = k * (logp.exp() / q).detach()
    value = (q * k).sum()
    (grad,) = torch.autograd.grad(value, theta)
    return value.detach(), grad


def _exact_kl(theta, ref_logits):
    """KL(π‖π_ref) and its exact gradient w.r.t. θ (π differentiated everywhere)."""
    logp, ref_logp = theta.log_softmax(0), ref_logits.log_softmax(0)
    kl = (logp.exp() * (logp - ref_logp)).sum()
    (grad,) = torch.autograd.grad(kl, theta)
    return kl.detach(), grad


def _var(est, theta, ref_logits):
    k = est(theta.log_softmax(0), ref_logits.log_softmax(0))
    p = theta.softmax(0)
    return float((p * k**2).sum() - (p * k).sum() ** 2)


def test_kl_estimator_values_exact_expectations():
    theta, ref = t64(THETA, requires_grad=True), t64(REF)
    kl, _ = _exact_kl(theta, ref)
    assert kl > 0.1
    close(_expect(kl_k1, theta, ref)[0], kl)  # unbiased
    close(_expect(kl_k3, theta, ref)[0], kl)  # unbiased
    bias_k2 = float(_expect(kl_k2, theta, ref)[0] - kl)
    assert abs(bias_k2) > 1e-3  # biased


def test_kl_estimator_signs():
    lp, rp = t64(THETA).log_softmax(0), t64(REF).log_softmax(0)
    assert (kl_k1(lp, rp) < 0).any()  # k1 can be negative
    assert (kl_k2(lp, rp) >= 0).all()
    assert (kl_k3(lp, rp) >= 0).all()
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(1000, generator=g, dtype=F64) * 3, torch.randn(1000, generator=g, dtype=F64) * 3
    assert (kl_k3(a, b) >= 0).all()


def test_kl_k2_bias_is_third_order_for_nearby_policies():
    theta, direction = t64(THETA, requires_grad=True), t64([1.0, -0.5, 0.3, -0.8])
    bias = []
    for eps in (0.2, 0.1):
        kl, _ = _exact_kl(theta, t64(THETA) + eps * direction)
        bias.append(float(_expect(kl_k2, theta, t64(THETA) + eps * direction)[0] - kl))
    assert 6.0 < bias[0] / bias[1] < 10.0  # halving the distance divides the bias by ~2^3


def test_kl_expected_gradients():
    theta, ref = t64(THETA, requires_grad=True), t64(REF)
    _, grad_kl = _exact_kl(theta, ref)
    assert grad_kl.abs().max() > 1e-2

    # k1 in the loss: expected gradient exactly 0.
    close(_expect(kl_k1, theta, ref)[1], torch.zeros(4, dtype=F64))
    # k2 in the loss: expected gradient = ∇θ KL(π‖π_ref), exactly.
    close(_expect(kl_k2, theta, ref)[1], grad_kl)
    # k3 in the loss: expected gradient ≠ ∇KL(π‖π_ref) ...
    g3 = _expect(kl_k3, theta, ref)[1]
    assert (g3 - grad_kl).abs().max() > 1e-2
    # ... it is the gradient of the forward KL(π_ref‖π), which for logits is π − π_ref.
    p_ref = ref.softmax(0)
    fwd = (p_ref * (ref.log_softmax(0) - theta.log_softmax(0))).sum()
    (grad_fwd,) = torch.autograd.grad(fwd, theta)
    close(g3, grad_fwd)
    close(g3, theta.softmax(0).detach() - p_ref)

    # k1 as a detached reward (REINFORCE): E[k1 ∇log π] = ∇KL(π‖π_ref).
    reinforce = lambda lp, rp: kl_k1(lp, rp).detach() * lp  # noqa: E731
    close(_expect(reinforce, theta, ref)[1], grad_kl)


def test_kl_k2_gradient_identity_needs_on_policy_samples():
    theta, ref, old = t64(THETA, requires_grad=True), t64(REF), t64([0.0, 0.4, -0.3, 0.9])
    _, grad_kl = _exact_kl(theta, ref)
    off = _expect(kl_k2, theta, ref, sample_logits=old)[1]
    assert (off - grad_kl).abs().max() > 1e-2
    weighted = _expect(kl_k2, theta, ref, sample_logits=old, weight_by_ratio=True)[1]
    close(weighted, grad_kl)


def test_kl_variance_k3_vs_k1():
    theta = t64(THETA)
    near = t64(THETA) + 0.3 * t64([1.0, -0.5, 0.3, -0.8])
    assert _var(kl_k3, theta, near) < _var(kl_k1, theta, near)
    # Not a theorem: a far pair where k3 has the larger variance (documented in kl.py).
    p, q = t64([0.9, 0.1]).log(), t64([0.1, 0.9]).log()
    v1, v3 = _var(kl_k1, p, q), _var(kl_k3, p, q)
    assert v3 > v1
    assert abs(v1 - 1.7380) < 1e-4 and abs(v3 - 1.8180) < 1e-4


def test_kl_k3_clamp_and_dtype():
    out = kl_k3(torch.tensor([0.0, -1000.0]), torch.tensor([-1000.0, 0.0]))
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    lp = torch.tensor([-1.0], dtype=torch.bfloat16)
    assert kl_k1(lp, lp).dtype == torch.float32
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3"}
    with pytest.raises(ValueError, match="ref_logp must have the shape"):
        kl_k1(torch.zeros(2), torch.zeros(3))


# ============================================================================ adaptive KL


def test_adaptive_kl_beta_branches_and_boundaries():
    target = 0.01
    assert adaptive_kl_beta(1.0, 0.001, target) == 0.5
    assert adaptive_kl_beta(1.0, 0.01, target) == 1.0
    assert adaptive_kl_beta(1.0, 0.05, target) == 2.0
    # Both boundaries leave β unchanged; one ulp beyond each moves it.
    lo, hi = target / 1.5, 1.5 * target
    assert adaptive_kl_beta(1.0, lo, target) == 1.0
    assert adaptive_kl_beta(1.0, hi, target) == 1.0
    assert adaptive_kl_beta(1.0, math.nextafter(lo, 0.0), target) == 0.5
    assert adaptive_kl_beta(1.0, math.nextafter(hi, 1.0), target) == 2.0
    assert adaptive_kl_beta(1.0, torch.tensor(0.05), target) == 2.0
    # Exactly representable boundaries: target 1.5 → lower boundary 1.0; target 2 → upper 3.0.
    assert adaptive_kl_beta(4.0, 1.0, 1.5) == 4.0
    assert adaptive_kl_beta(4.0, 3.0, 2.0) == 4.0
    with pytest.raises(ValueError, match="kl must be finite"):
        adaptive_kl_beta(1.0, NAN, target)
    with pytest.raises(ValueError, match="target must be > 0"):
        adaptive_kl_beta(1.0, 0.1, 0.0)


def test_adaptive_kl_controller():
    ctl = AdaptiveKLController(beta=1.0, target=0.02)
    assert ctl.beta == 1.0
    assert ctl.update(0.1) == 2.0 and ctl.beta == 2.0
    assert ctl.update(0.1) == 4.0
    assert ctl.update(0.02) == 4.0
    assert ctl.update(0.02 / 1.5) == 4.0
    assert ctl.update(0.0) == 2.0 and ctl.beta == 2.0
    with pytest.raises(ValueError, match="beta must be >= 0"):
        AdaptiveKLController(beta=-1.0, target=0.02)
