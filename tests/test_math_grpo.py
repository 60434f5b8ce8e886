"""Tests for the GRPO-family math: group advantages, process advantages, GSPO, the ppo_clip clip metrics,
reward shaping, Monte Carlo checks of the KL estimators, and gradient accumulation of a GRPO loss.

Hand values are in float64 with exact tolerances where the arithmetic is exact.
"""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from advantage.math import (
    GROUP_ADVANTAGES,
    POLICY_LOSSES,
    aggregate,
    batch_std,
    constant_groups,
    dr_grpo,
    grpo,
    gspo,
    kl_k1,
    kl_k2,
    kl_k3,
    length_preference,
    overlong_penalty,
    ppo_clip,
    process_advantages,
    rloo,
)

F64 = torch.float64
NAN, INF = float("nan"), float("inf")


def t64(xs, requires_grad: bool = False) -> torch.Tensor:
    return torch.tensor(xs, dtype=F64, requires_grad=requires_grad)


def close(a: torch.Tensor, b, atol: float = 1e-12) -> None:
    b = torch.as_tensor(b, dtype=a.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    torch.testing.assert_close(a, b, atol=atol, rtol=0.0)


# ============================================================================ group advantages

# Three groups of 4: mixed 0/1, all correct (zero std), one success in four.
R = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]


def test_grpo_hand_values_and_metrics():
    adv, m = grpo(t64(R), group_size=4, eps=0.0)
    a = 0.5 / math.sqrt(1.0 / 3.0)  # group 0: mean 1/2, unbiased std sqrt(1/3)
    close(adv, [a, -a, -a, a, 0, 0, 0, 0, -0.5, -0.5, -0.5, 1.5])  # group 2: mean 1/4, std 1/2
    close(m["zero_std_frac"], 1.0 / 3.0)
    close(m["reward_std_mean"], (math.sqrt(1.0 / 3.0) + 0.0 + 0.5) / 3.0)
    close(m["reward_mean"], 7.0 / 12.0)
    # With the default eps, close to the eps-free value and the same as a torch reference.
    r = t64(R).view(3, 4)
    ref = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)).view(-1)
    close(grpo(t64(R), 4)[0], ref)


# The estimators taking one reward per completion (the per-token ones, REINFORCE++, are tested in
# test_reinforce_plus_plus.py), from the registry: a new one is tested here without being listed.
OUTCOME = sorted(n for n, spec in GROUP_ADVANTAGES.specs().items() if not spec.get("per_token"))


@pytest.mark.parametrize("name", OUTCOME)
def test_zero_std_groups_are_exactly_zero_and_finite(name):
    # 0.1 is not representable: the group mean differs from 0.1 by rounding, so a naive (r - mean) /
    # (std + eps) gives ~1e-11 noise instead of 0. Large rewards check there is no blow-up.
    rewards = t64([0.1, 0.1, 0.1, 1e8, 1e8, 1e8, 0.0, 1.0, 3.0])
    adv, m = GROUP_ADVANTAGES[name](rewards, group_size=3)
    assert torch.isfinite(adv).all()
    assert (adv[:6] == 0).all()
    assert (adv[6:] != 0).all()
    close(m["zero_std_frac"], 2.0 / 3.0)
    adv32, _ = GROUP_ADVANTAGES[name](torch.full((4,), 0.1, dtype=torch.float32), group_size=2)
    assert (adv32 == 0).all()


# Equal float32 rewards whose mean is inexact: the population std of one such group is ~1e-8, not 0
# (format_reward=0.1 with every answer wrong but well formatted; G=6 at 0.3; G=16 at 0.05).
EQUAL_INEXACT = [(0.1, 8), (0.3, 6), (0.05, 16)]


@pytest.mark.parametrize(("value", "G"), EQUAL_INEXACT)
def test_constant_groups_is_exact_where_the_std_is_not(value, G):
    one = torch.full((G,), value)  # float32, one group
    assert float(one.view(-1, G).std(-1, unbiased=False)) > 0  # why a std test cannot decide this
    assert constant_groups(one, G).tolist() == [True]
    mixed = torch.cat([one, torch.full((G,), value).index_fill(0, torch.tensor([G - 1]), 0.0)])
    assert constant_groups(mixed, G).tolist() == [True, False]
    # The advantages use the same test: exactly 0 there, and counted as zero-std.
    for name in OUTCOME:
        adv, m = GROUP_ADVANTAGES[name](one, G)
        assert (adv == 0).all(), name
        assert float(m["zero_std_frac"]) == 1.0, name


def test_constant_groups_on_correctness_nan_and_errors():
    correct = torch.tensor([True, True, True, True, False, False, True, False])
    assert constant_groups(correct, 4).tolist() == [True, False]
    assert constant_groups(t64([NAN, NAN, 1.0, 1.0]), 2).tolist() == [False, True]
    assert constant_groups(t64([3.0, 4.0]), 1).tolist() == [True, True]
    with pytest.raises(ValueError, match="batch size 5 and group_size 2"):
        constant_groups(t64([1.0] * 5), 2)
    with pytest.raises(ValueError, match="values must be 1-D"):
        constant_groups(torch.zeros(2, 2), 2)


@pytest.mark.parametrize("name", OUTCOME)
def test_group_size_errors(name):
    fn = GROUP_ADVANTAGES[name]
    with pytest.raises(ValueError, match=r"group-normalized advantages need group_size >= 2, got 1"):
        fn(t64([1.0, 0.0]), group_size=1)
    with pytest.raises(ValueError, match=r"batch size 5 and group_size 2"):
        fn(t64([1.0] * 5), group_size=2)
    with pytest.raises(ValueError, match="rewards must be 1-D"):
        fn(torch.zeros(2, 2, dtype=F64), group_size=2)


def test_dr_grpo_and_rloo_identities():
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(15, generator=g, dtype=F64)
    G = 5
    centered, _ = dr_grpo(rewards, G)
    r = rewards.view(-1, G)
    close(centered, (r - r.mean(1, keepdim=True)).view(-1))
    loo, _ = rloo(rewards, G)
    # r_i - mean of the others, by brute force.
    brute = torch.stack(
        [r[p, i] - torch.cat([r[p, :i], r[p, i + 1 :]]).mean() for p in range(3) for i in range(G)]
    )
    close(loo, brute)
    close(loo, G / (G - 1) * centered)
    # Group-normalized advantages sum to 0 within each group.
    for name in OUTCOME:
        close(GROUP_ADVANTAGES[name](rewards, G)[0].view(-1, G).sum(1), torch.zeros(3, dtype=F64), atol=1e-9)


def test_batch_std_uses_the_batch_scale():
    rewards = t64(R)
    adv, _ = batch_std(rewards, 4, eps=0.0)
    r = rewards.view(3, 4)
    close(adv, ((r - r.mean(1, keepdim=True)) / rewards.std()).view(-1))
    # One group: the batch std is the group std, so Lite PPO equals GRPO.
    one = t64([0.0, 1.0, 3.0, 0.5])
    close(batch_std(one, 4)[0], grpo(one, 4)[0])


def test_integer_rewards_and_registry():
    adv, m = grpo(torch.tensor([1, 0, 1, 1]), 2)
    assert adv.dtype == torch.float32 and m["zero_std_frac"].dtype == torch.float32
    close(adv[2:], torch.zeros(2, dtype=torch.float32))
    assert set(OUTCOME) == {"grpo", "dr_grpo", "rloo", "batch_std"}
    assert set(GROUP_ADVANTAGES) - set(OUTCOME) == {"reinforce_plus_plus"}
    close(partial(GROUP_ADVANTAGES["grpo"], group_size=4, eps=0.0)(t64(R))[0], grpo(t64(R), 4, eps=0.0)[0])


def test_token_broadcast_with_aggregate():
    """Outcome supervision: each token of a response gets its response's advantage. At ratio 1 the
    ppo_clip loss is -A per valid token, so each aggregation mode has a closed form."""
    rewards = t64([1.0, 0.0, 0.0, 0.0])
    adv, _ = grpo(rewards, 2, eps=0.0)  # [1/√2, -1/√2, 0, 0]
    lengths = torch.tensor([3, 1, 2, 0])
    T = 4
    mask = torch.arange(T)[None, :] < lengths[:, None]
    token_adv = adv[:, None] * mask
    logp = torch.where(mask, torch.full((4, T), -0.7, dtype=F64), torch.full((4, T), -INF, dtype=F64))
    loss, _ = ppo_clip(logp.requires_grad_(True), logp.detach(), token_adv, mask)
    a = 1.0 / math.sqrt(2.0)
    close(loss, -token_adv)
    close(aggregate(loss, mask, "token_mean"), -(3 * a - 1 * a) / 6.0)
    # Per-row means are -a, +a, 0 over the 3 rows with a valid token: they cancel.
    close(aggregate(loss, mask, "seq_mean_token_mean"), 0.0)
    close(aggregate(loss, mask, "seq_mean_token_sum_norm", max_len=T), -(3 * a - a) / T / 4)
    # token_mean favours the long correct answer; seq_mean_token_mean weighs each response once.
    (g,) = torch.autograd.grad(aggregate(loss, mask, "seq_mean_token_mean"), logp)
    close(g[0, :3], torch.full((3,), -a / 3 / 3, dtype=F64))
    close(g[1, :1], torch.full((1,), a / 1 / 3, dtype=F64))


# ============================================================================ process supervision


def test_process_advantages_hand_example():
    # Group 0. Response 0: three steps (rewards 4, 2, 2) ending at tokens 1, 3, 4.
    #          Response 1: one step (reward 2) ending at token 2; the padding steps hold garbage.
    # The group's valid step rewards {4, 2, 2, 2}: mean 2.5, unbiased std sqrt(3·0.25 + 2.25)/3) = 1,
    # so the normalized step rewards are 1.5, -0.5, -0.5 and -0.5.
    # Group 1: all step rewards equal → 0; a response without steps → 0.
    step_rewards = t64([[4.0, 2.0, 2.0], [2.0, NAN, INF], [1.0, 1.0, 0.0], [1.0, 5.0, 5.0]])
    step_mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 0, 0]])
    step_end = torch.tensor([[1, 3, 4], [2, 99, -7], [0, 5, 0], [3, 0, 0]])
    adv = process_advantages(step_rewards, step_mask, step_end, num_tokens=6, group_size=2, eps=0.0)
    # Token t gets the sum over steps ending at or after t:
    # response 0: t=0,1 → 1.5 - 0.5 - 0.5; t=2,3 → -0.5 - 0.5; t=4 → -0.5; t=5 → nothing.
    close(
        adv,
        [
            [0.5, 0.5, -1.0, -1.0, -0.5, 0.0],
            [-0.5, -0.5, -0.5, 0.0, 0.0, 0.0],
            [0.0] * 6,
            [0.0] * 6,
        ],
    )
    # Against the definition, on random data.
    g = torch.Generator().manual_seed(4)
    B, S, T, G = 6, 4, 9, 3
    sr = torch.randn(B, S, generator=g, dtype=F64)
    sm = torch.rand(B, S, generator=g) < 0.7
    se = torch.randint(0, T, (B, S), generator=g)
    out = process_advantages(sr, sm, se, T, G)
    expected = torch.zeros(B, T, dtype=F64)
    for p in range(B // G):
        rows = range(p * G, (p + 1) * G)
        vals = torch.stack([sr[b, s] for b in rows for s in range(S) if sm[b, s]])
        mu, sd = vals.mean(), vals.std()
        for b in rows:
            for s in range(S):
                if sm[b, s]:
                    expected[b, : se[b, s] + 1] += (sr[b, s] - mu) / (sd + 1e-6)
    close(out, expected, atol=1e-10)


def test_process_advantages_scales_match_the_outcome_estimators():
    # With one step per response ending at the last token, process supervision is outcome supervision:
    # every scale equals the outcome estimator that names it (its ``process`` metadata) on every token.
    from advantage.math.advantages import GROUP_ADVANTAGES

    g = torch.Generator().manual_seed(7)
    B, T, G = 8, 5, 4
    r = torch.randn(B, generator=g, dtype=F64)
    ends = torch.full((B, 1), T - 1)
    pairs = [(spec.get("process"), name) for name, spec in GROUP_ADVANTAGES.specs().items()]
    assert sorted(p for p, _ in pairs if p) == ["batch", "group", "none"]  # every divisor has its estimator
    for scale, name in (p for p in pairs if p[0]):
        out = process_advantages(r[:, None], torch.ones(B, 1), ends, T, G, eps=1e-6, scale=scale)
        expected, _ = GROUP_ADVANTAGES[name](r, G, 1e-6)
        close(out, expected[:, None].expand(B, T))
    # Two steps: "none" centres by the group's mean step reward and does not divide.
    sr = t64([[1.0, 0.0], [1.0, 1.0]])
    out = process_advantages(sr, torch.ones(2, 2), torch.tensor([[0, 1], [0, 1]]), 2, 2, scale="none")
    close(out, [[0.25 - 0.75, -0.75], [0.25 + 0.25, 0.25]])
    with pytest.raises(ValueError, match="scale must be one of"):
        process_advantages(sr, torch.ones(2, 2), torch.tensor([[0, 1], [0, 1]]), 2, 2, scale="rloo")


def test_process_advantages_errors():
    z, zl = torch.zeros(2, 3, dtype=F64), torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="group_size >= 2, got 1"):
        process_advantages(z, z, zl, 4, 1)
    with pytest.raises(ValueError, match="batch size 2 and group_size 3"):
        process_advantages(z, z, zl, 4, 3)
    with pytest.raises(ValueError, match="step_end must have the shape"):
        process_advantages(z, z, zl[:, :2], 4, 2)


# ============================================================================ ppo_clip clip metrics


def test_ppo_clip_clipfrac_low_and_high():
    ratios, advs = [0.5, 0.5, 1.5, 1.5, 1.0, 1.1], [-1.0, 1.0, 1.0, -1.0, 1.0, 0.0]
    logp = t64([math.log(r) for r in ratios])
    old, adv, mask = torch.zeros(6, dtype=F64), t64(advs), torch.ones(6)
    _, m = ppo_clip(logp, old, adv, mask, clip_low=0.2)
    close(m["clipfrac_low"], 1 / 6)  # ratio 0.5 < 0.8 with A < 0
    close(m["clipfrac_high"], 1 / 6)  # ratio 1.5 > 1.2 with A > 0
    close(m["clipfrac"], m["clipfrac_low"] + m["clipfrac_high"])
    _, m = ppo_clip(logp, old, adv, mask, clip_low=0.2, clip_high=0.6)  # clip-higher: 1.5 < 1.6
    close(m["clipfrac_high"], 0.0)
    close(m["clipfrac"], m["clipfrac_low"] + m["clipfrac_high"])
    # Masked elements do not count; with dual clip the identity still holds.
    mask = torch.tensor([0, 1, 1, 1, 1, 1])
    _, m = ppo_clip(logp, old, adv, mask, clip_low=0.2, dual_clip=1.2)
    close(m["clipfrac_low"], 0.0)
    close(m["clipfrac_high"], 1 / 5)
    close(m["clipfrac"], m["clipfrac_low"] + m["clipfrac_high"])
    assert ppo_clip(logp, old, adv, mask, with_metrics=False)[1] == {}


# ============================================================================ GSPO


def _gspo_reference(logp, old, adv_row, mask, lo, hi):
    """Sequence-level GSPO, eq. 5-7 of Zheng et al.: -mean_i min(s_i A_i, clip(s_i) A_i)."""
    m = mask.to(logp.dtype)
    n = m.sum(-1)
    s = torch.exp(((logp - old) * m).sum(-1) / n)
    obj = torch.minimum(s * adv_row, s.clamp(1 - lo, 1 + hi) * adv_row)
    return -obj.mean(), s


def _gspo_batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    B, T = 5, 6
    lengths = torch.tensor([6, 3, 1, 4, 2])
    mask = torch.arange(T)[None, :] < lengths[:, None]
    old = -torch.rand(B, T, generator=g, dtype=F64) * 2
    logp = old + 0.05 * torch.randn(B, T, generator=g, dtype=F64)
    adv_row = t64([1.0, -1.0, 2.0, -0.5, 0.7])
    return logp, old, adv_row, mask


def test_gspo_equals_sequence_level_objective_values_and_gradients():
    logp, old, adv_row, mask = _gspo_batch()
    lo, hi = 0.01, 0.02  # some rows clipped, some not
    lp = logp.clone().requires_grad_(True)
    loss, m = gspo(lp, old, adv_row[:, None].expand_as(lp), mask, clip_low=lo, clip_high=hi)
    total = aggregate(loss, mask, "seq_mean_token_mean")
    (g,) = torch.autograd.grad(total, lp)

    lp2 = logp.clone().requires_grad_(True)
    ref, s = _gspo_reference(lp2, old, adv_row, mask, lo, hi)
    (g_ref,) = torch.autograd.grad(ref, lp2)
    close(total, ref.detach())
    close(g, g_ref)
    clipped_rows = ((s < 1 - lo) & (adv_row < 0)) | ((s > 1 + hi) & (adv_row > 0))
    assert clipped_rows.any() and not clipped_rows.all()
    # Every token of row i has the value s_i: per-token loss is -s_i A_i (unclipped rows).
    n = mask.sum(-1)
    for i in range(5):
        if not clipped_rows[i]:
            close(loss[i, : n[i]].detach(), (-s[i] * adv_row[i]).detach().expand(int(n[i])))
    close(m["seq_ratio_mean"], s.detach().mean())
    frac = (clipped_rows.to(F64) * n).sum() / n.sum()  # token-weighted
    close(m["clipfrac"], frac)
    close(m["clipfrac"], m["clipfrac_low"] + m["clipfrac_high"])


def test_gspo_gradient_is_minus_advantage_times_seq_ratio_over_length():
    logp, old, adv_row, mask = _gspo_batch(seed=1)
    lp = logp.clone().requires_grad_(True)
    loss, _ = gspo(lp, old, adv_row[:, None].expand_as(lp), mask, clip_low=0.5, clip_high=0.5)  # unclipped
    # Σ_i (1/|y_i|) Σ_t ℓ_it: seq_mean_token_mean with normalizer 1.
    (g,) = torch.autograd.grad(
        aggregate(loss, mask, "seq_mean_token_mean", normalizer=1.0), lp, retain_graph=True
    )
    n = mask.sum(-1, keepdim=True).to(F64)
    s = torch.exp(((logp - old) * mask).sum(-1, keepdim=True) / n)
    expected = torch.where(mask, -adv_row[:, None] * s / n, torch.zeros_like(g))
    close(g, expected)
    # Per-token loss (no aggregation): ∂ℓ_it/∂log π_t = -A_i s_i.
    (g_tok,) = torch.autograd.grad(loss.sum(), lp)
    close(g_tok, torch.where(mask, -adv_row[:, None] * s, torch.zeros_like(g)))


def test_gspo_one_token_per_sequence_equals_ppo_clip():
    ratios = [0.5, 0.5, 1.5, 1.5, 1.0, 1.1, 0.9]
    advs = [-1.0, 1.0, 1.0, -1.0, 1.0, -2.0, 0.3]
    old = t64([-1.0, -2.0, -0.5, -0.1, -3.0, -1.2, -0.8])[:, None]  # [B, 1]
    logp0 = old + t64([math.log(r) for r in ratios])[:, None]
    adv, mask = t64(advs)[:, None], torch.ones(7, 1)
    a, b = logp0.clone().requires_grad_(True), logp0.clone().requires_grad_(True)
    l_gspo, m_gspo = gspo(a, old, adv, mask, clip_low=0.2, clip_high=0.28)
    l_ppo, m_ppo = ppo_clip(b, old, adv, mask, clip_low=0.2, clip_high=0.28)
    close(l_gspo, l_ppo.detach())
    l_gspo.sum().backward()
    l_ppo.sum().backward()
    close(a.grad, b.grad)
    for k in ("clipfrac", "clipfrac_low", "clipfrac_high", "approx_kl"):
        close(m_gspo[k], m_ppo[k])


def test_gspo_masked_rows_and_tokens_contribute_nothing():
    logp, old, adv_row, mask = _gspo_batch(seed=2)
    mask[3] = False  # an all-masked row
    adv = adv_row[:, None].expand_as(logp).clone()

    def run(pad_logp, pad_adv):
        lp = torch.where(mask, logp, torch.full_like(logp, pad_logp)).requires_grad_(True)
        a = torch.where(mask, adv, torch.full_like(adv, pad_adv))
        o = torch.where(mask, old, torch.full_like(old, -INF))
        loss, m = gspo(lp, o, a, mask, clip_low=0.01, clip_high=0.01)
        (g,) = torch.autograd.grad(aggregate(loss, mask, "seq_mean_token_mean"), lp)
        return loss.detach(), g, m

    l1, g1, m1 = run(-INF, NAN)
    l2, g2, m2 = run(3.0, 100.0)
    assert torch.isfinite(l1).all() and torch.isfinite(g1).all()
    close(l1, l2)
    close(g1, g2)
    assert (l1[~mask] == 0).all() and (g1[~mask] == 0).all()
    for k in m1:
        close(m1[k], m2[k])
    # The empty row changes nothing for the other rows.
    keep = torch.tensor([0, 1, 2, 4])
    l3, _ = gspo(logp[keep], old[keep], adv[keep], mask[keep], clip_low=0.01, clip_high=0.01)
    close(l1[keep], l3)


def test_gspo_clamp_dtype_registry_and_validation():
    lp = torch.tensor([[0.0, -1.0]], dtype=torch.bfloat16, requires_grad=True)
    loss, m = gspo(lp, torch.tensor([[-500.0, -1.0]]), torch.ones(1, 2), torch.ones(1, 2))
    assert loss.dtype == torch.float32 and torch.isfinite(loss).all()
    close(m["seq_ratio_mean"], torch.tensor(math.exp(20.0)), atol=1e-3 * math.exp(20.0))  # clamped at 20
    assert POLICY_LOSSES["gspo"] is gspo
    bound = partial(POLICY_LOSSES["gspo"], clip_low=3e-4, clip_high=4e-4)
    assert bound(lp, lp.detach(), torch.ones(1, 2), torch.ones(1, 2))[0].shape == (1, 2)
    with pytest.raises(ValueError, match="clip_low must be in"):
        gspo(lp, lp, lp, torch.ones(1, 2), clip_low=1.0)
    with pytest.raises(ValueError, match="clip_high must be >= 0"):
        gspo(lp, lp, lp, torch.ones(1, 2), clip_high=-0.1)
    with pytest.raises(ValueError, match="mask must have the shape"):
        gspo(lp, lp, lp, torch.ones(2, 2))
    # A 1-D input is one sequence.
    one, _ = gspo(t64([-1.0, -2.0]), t64([-1.5, -2.0]), t64([1.0, 1.0]), torch.ones(2), 0.5, 0.5)
    close(one, torch.full((2,), -math.exp(0.25), dtype=F64))


# ============================================================================ reward shaping


def test_overlong_penalty_boundaries():
    lengths = torch.tensor([0, 15, 16, 17, 18, 19, 20, 21, 100])
    close(
        overlong_penalty(lengths, max_length=20, cache_length=4),
        torch.tensor([0, 0, 0, -0.25, -0.5, -0.75, -1.0, -1.0, -1.0]),
    )
    close(overlong_penalty(lengths, 20, 0), torch.tensor([0.0] * 7 + [-1.0, -1.0]))  # hard cut
    close(overlong_penalty(torch.tensor([0.0, 10.0, 20.0]), 20, 20), torch.tensor([0.0, -0.5, -1.0]))
    assert overlong_penalty(t64([17.0]), 20, 4).dtype == F64
    with pytest.raises(ValueError, match="cache_length must be in"):
        overlong_penalty(lengths, 20, 21)
    with pytest.raises(ValueError, match="max_length must be > 0"):
        overlong_penalty(lengths, 0, 0)


def test_length_preference_hand_values():
    rewards = t64([1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0.5, 0])
    lengths = torch.tensor([10, 20, 30, 5, 1, 50, 9, 9, 7, 7, 1, 1])
    out = length_preference(rewards, lengths, group_size=4, weight=0.1)
    close(
        out,
        # Winners 10, 20, 30: mean 20, spread 20. Group 2 all wrong: unchanged. Group 3: equal lengths.
        [1.05, 1.0, 0.95, 0.0, 0, 0, 0, 0, 1, 1, 0.5, 0],
    )
    # A group whose best reward is <= 0 is unchanged, whatever the lengths.
    close(length_preference(t64([-1.0, -1.0]), torch.tensor([1, 9]), 2, 0.1), [-1.0, -1.0])
    with pytest.raises(ValueError, match="batch size 3 and group_size 2"):
        length_preference(t64([1, 1, 1]), torch.tensor([1, 2, 3]), 2, 0.1)
    with pytest.raises(ValueError, match="weight must be >= 0"):
        length_preference(t64([1, 1]), torch.tensor([1, 2]), 2, -0.1)


def test_length_preference_keeps_order_and_group_mean():
    g = torch.Generator().manual_seed(5)
    G, P = 8, 200
    levels = t64([0.0, 0.5, 1.0])  # smallest gap 0.5
    rewards = levels[torch.randint(0, 3, (P * G,), generator=g)]
    lengths = torch.randint(1, 500, (P * G,), generator=g)
    weight = 0.24  # < half the smallest gap
    out = length_preference(rewards, lengths, G, weight)
    r, o = rewards.view(P, G), out.view(P, G)
    higher = r[:, :, None] > r[:, None, :]
    assert (o[:, :, None] > o[:, None, :])[higher].all()
    close(o.mean(1), r.mean(1), atol=1e-12)
    assert ((out - rewards).abs() < weight).all()
    # Among winners, strictly shorter ⇒ strictly larger shaped reward.
    win = r == r.amax(1, keepdim=True)
    shorter = (
        (lengths.view(P, G)[:, :, None] < lengths.view(P, G)[:, None, :]) & win[:, :, None] & win[:, None, :]
    )
    pos = (r.amax(1) > 0)[:, None, None]
    assert (o[:, :, None] > o[:, None, :])[shorter & pos].all()


# ============================================================================ KL estimators, Monte Carlo

THETA = [0.3, -1.0, 0.8, 0.1]
REF = [-0.2, 0.5, 0.4, -0.7]


def _exact(logp, ref_logp):
    return float((logp.exp() * (logp - ref_logp)).sum())


def _mc(est, logp, ref_logp, n=200_000, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.multinomial(logp.exp(), n, replacement=True, generator=g)
    k = est(logp[a], ref_logp[a])
    return float(k.mean()), float(k.std() / math.sqrt(n)), k


def test_kl_monte_carlo_means_match_exact_kl():
    lp, rp = t64(THETA).log_softmax(0), t64(REF).log_softmax(0)
    kl = _exact(lp, rp)
    for est in (kl_k1, kl_k3):  # unbiased
        mean, se, _ = _mc(est, lp, rp)
        assert abs(mean - kl) < 4 * se, (est.__name__, mean, kl, se)
    assert (_mc(kl_k3, lp, rp)[2] >= 0).all()
    assert (_mc(kl_k1, lp, rp)[2] < 0).any()


def test_kl_k2_bias_direction_depends_on_the_pair():
    """E[k2] − KL = −E[f(x)], x = log(π_ref/π), f(x) = eˣ − 1 − x − x²/2 (E[eˣ] = 1). f has the sign of x,
    so k2 *under*-estimates when samples with π_ref > π dominate the cube term and over-estimates
    otherwise: there is no fixed direction. Checked exactly and by sampling."""
    cases = [
        (t64(THETA).log_softmax(0), t64(REF).log_softmax(0), -1),  # k2 below the KL
        (t64([0.9, 0.1]).log(), t64([0.1, 0.9]).log(), +1),  # k2 above the KL
    ]
    for lp, rp, sign in cases:
        kl = _exact(lp, rp)
        x = rp - lp
        f = x.exp() - 1 - x - x**2 / 2
        bias = float((lp.exp() * 0.5 * x**2).sum()) - kl
        close(torch.tensor(bias, dtype=F64), -(lp.exp() * f).sum(), atol=1e-12)
        assert math.copysign(1, bias) == sign
        mean, se, _ = _mc(kl_k2, lp, rp)
        assert sign * (mean - kl) > 4 * se + 1e-3  # detectable, in the predicted direction
        assert abs(mean - (kl + bias)) <= 4 * se + 1e-12


def test_k1_in_the_loss_has_zero_expected_gradient_monte_carlo():
    """∇θ k1(a) = ∇ log π_θ(a) = e_a − π; its mean over samples a ~ π is 0 within sampling error, and the
    exact expectation Σ_a π(a)(e_a − π) is 0."""
    theta = t64(THETA, requires_grad=True)
    lp, rp = theta.log_softmax(0), t64(REF).log_softmax(0)
    n = 100_000
    a = torch.multinomial(lp.detach().exp(), n, replacement=True, generator=torch.Generator().manual_seed(1))
    (g,) = torch.autograd.grad(kl_k1(lp[a], rp[a]).mean(), theta)
    per_sample = torch.nn.functional.one_hot(a, 4).to(F64) - lp.detach().exp()
    se = per_sample.std(0) / math.sqrt(n)
    close(g, per_sample.mean(0))
    assert (g.abs() < 4 * se).all()
    p = lp.detach().exp()
    close((p[:, None] * (torch.eye(4, dtype=F64) - p)).sum(0), torch.zeros(4, dtype=F64))


def test_kl_gradients_exact_loss_term_vs_full_derivative():
    """Exact expectations over the 4 outcomes. Two different gradients of E_{a~π_θ}[k(a)]:

    - the loss-term gradient E[∇k] (sampling not differentiated; what backprop of ``k`` in a loss gives):
      k1 → 0, k2 → ∇KL(π‖ref), k3 → ∇KL(ref‖π) (the forward KL, not the reverse);
    - the full derivative ∇θ E_{π_θ}[k] = E[∇k] + E[k ∇log π] (score-function term included): for the
      unbiased k1 and k3 this is ∇KL(π‖ref), since E_{π_θ}[k] = KL(π_θ‖ref) for every θ.
    """
    theta, ref = t64(THETA, requires_grad=True), t64(REF)
    lp, rp = theta.log_softmax(0), ref.log_softmax(0)
    p = lp.exp()
    (grad_rev,) = torch.autograd.grad((p * (lp - rp)).sum(), theta, retain_graph=True)
    (grad_fwd,) = torch.autograd.grad((rp.exp() * (rp - lp)).sum(), theta, retain_graph=True)

    def loss_term(est):
        return torch.autograd.grad((p.detach() * est(lp, rp)).sum(), theta, retain_graph=True)[0]

    def full(est):
        return torch.autograd.grad((p * est(lp, rp)).sum(), theta, retain_graph=True)[0]

    close(loss_term(kl_k1), torch.zeros(4, dtype=F64))
    close(loss_term(kl_k2), grad_rev)
    close(loss_term(kl_k3), grad_fwd)
    assert (loss_term(kl_k3) - grad_rev).abs().max() > 1e-2
    close(full(kl_k1), grad_rev)
    close(full(kl_k3), grad_rev)


# ============================================================================ gradient accumulation


@pytest.mark.parametrize(
    ("mode", "count"),
    [
        ("token_mean", lambda mask: mask.sum()),
        ("seq_mean_token_mean", lambda mask: (mask.sum(-1) > 0).sum()),
        ("seq_mean_token_sum_norm", lambda mask: mask.shape[0]),
    ],
)
@pytest.mark.parametrize("loss_name", ["ppo_clip", "gspo"])
def test_grpo_loss_accumulation_over_uneven_micro_batches(mode, count, loss_name):
    """A GRPO step: group advantages → token broadcast → policy loss → aggregate. Summing micro-batch
    losses normalized by the *global* count equals the one big batch (value and gradient)."""
    g = torch.Generator().manual_seed(7)
    B, T, G = 8, 6, 4
    lengths = torch.tensor([6, 2, 0, 5, 1, 3, 6, 4])  # row 2 empty
    mask = torch.arange(T)[None, :] < lengths[:, None]
    adv, _ = grpo(torch.randint(0, 2, (B,), generator=g).to(F64), G)
    token_adv = adv[:, None].expand(B, T)
    old = -torch.rand(B, T, generator=g, dtype=F64)
    logp = (old + 0.3 * torch.randn(B, T, generator=g, dtype=F64)).requires_grad_(True)
    fn = partial(POLICY_LOSSES[loss_name], clip_low=0.1, clip_high=0.15)
    kw = {"max_len": T}

    big = aggregate(fn(logp, old, token_adv, mask)[0], mask, mode, **kw)
    (g_big,) = torch.autograd.grad(big, logp)

    z = count(mask)
    value, grad = torch.zeros((), dtype=F64), torch.zeros_like(logp)
    for sl in (slice(0, 1), slice(1, 3), slice(3, 8)):  # sizes 1, 2, 5
        micro = aggregate(
            fn(logp[sl], old[sl], token_adv[sl], mask[sl])[0], mask[sl], mode, normalizer=z, **kw
        )
        (gm,) = torch.autograd.grad(micro, logp)
        value, grad = value + micro.detach(), grad + gm
    close(value, big.detach())
    close(grad, g_big)
