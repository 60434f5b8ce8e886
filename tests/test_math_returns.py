"""Tests for advantage.math.returns against hand-computed and brute-force answers (float64)."""

from __future__ import annotations

import pytest
import torch

from advantage.math.returns import (
    discounted_return,
    first_visit_mask,
    gae,
    mc_update,
    n_step_returns,
    reward_to_go,
)

F64 = torch.float64
ATOL = 1e-12


def t64(xs) -> torch.Tensor:
    return torch.tensor(xs, dtype=F64)


def tbool(xs) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.bool)


def close(a: torch.Tensor, b: torch.Tensor, atol: float = ATOL) -> None:
    assert a.shape == b.shape
    torch.testing.assert_close(a, b, atol=atol, rtol=0.0)


# --------------------------------------------------------------------------- brute-force references


def episode_segments(terminated: list[bool], truncated: list[bool]) -> list[tuple[int, int]]:
    """(start, end) inclusive index pairs of the episodes in one row; the row end closes the last one."""
    segs, start = [], 0
    T = len(terminated)
    for t in range(T):
        if terminated[t] or truncated[t] or t == T - 1:
            segs.append((start, t))
            start = t + 1
    return segs


def brute_gae_row(r, v, nv, term, trunc, gamma, lam):
    """Seed 003's definition: (1-λ) Σ_{n<H} λ^{n-1} A^(n) + λ^{H-1} A^(H), per episode segment.

    A^(n)_t = Σ_{l<n} γ^l r_{t+l} + γ^n V_{t+n} - v_t, where V_{t+n} is the value of the observation
    n steps later: values[t+n] inside the segment, and at the segment's end the boundary value
    (0 after a termination, next_values of the last step after truncation / rollout end).
    """
    T = len(r)
    out = [0.0] * T
    for s, e in episode_segments(term, trunc):
        boundary = 0.0 if term[e] else nv[e]
        for t in range(s, e + 1):
            H = e - t + 1

            def a_n(n, t=t, e=e, boundary=boundary):
                obs = sum(gamma**j * r[t + j] for j in range(n))
                boot = v[t + n] if t + n <= e else boundary
                return obs + gamma**n * boot - v[t]

            total = sum((1 - lam) * lam ** (n - 1) * a_n(n) for n in range(1, H))
            total += lam ** (H - 1) * a_n(H)
            out[t] = total
    return out


def brute_n_step_row(r, nv, term, trunc, gamma, n):
    """Docstring formula: k = min(n, steps to the end of the episode or row)."""
    T = len(r)
    ends = [term[t] or trunc[t] or t == T - 1 for t in range(T)]
    out = []
    for t in range(T):
        k = 1
        while k < n and not ends[t + k - 1]:
            k += 1
        last = t + k - 1
        g = sum(gamma**j * r[t + j] for j in range(k))
        g += gamma**k * (0.0 if term[last] else nv[last])
        out.append(g)
    return out


def brute_rtg_row(r, gamma, dones=None, bootstrap=0.0):
    T = len(r)
    dones = dones or [False] * T
    out = []
    for t in range(T):
        g, disc, k = 0.0, 1.0, t
        while True:
            g += disc * r[k]
            disc *= gamma
            if dones[k]:
                break
            if k == T - 1:
                g += disc * bootstrap
                break
            k += 1
        out.append(g)
    return out


def random_row(gen: torch.Generator, T: int, p_end: float = 0.25, consistent: bool = True):
    """Random rewards/values with random episode ends; inside an episode next_values[t] = values[t+1].

    A terminated step gets a large garbage next_value, which must be ignored. Some terminated steps are
    also flagged truncated (termination must win).
    """
    r = torch.randn(T, generator=gen, dtype=F64).tolist()
    v = torch.randn(T, generator=gen, dtype=F64).tolist()
    u = torch.rand(T, generator=gen, dtype=F64).tolist()
    w = torch.rand(T, generator=gen, dtype=F64).tolist()
    term = [ui < p_end / 2 for ui in u]
    trunc = [p_end / 2 <= ui < p_end for ui in u]
    trunc = [tr or (te and wi < 0.3) for tr, te, wi in zip(trunc, term, w, strict=True)]
    extra = torch.randn(T, generator=gen, dtype=F64).tolist()
    nv = []
    for t in range(T):
        if term[t]:
            nv.append(100.0 + extra[t])
        elif trunc[t] or t == T - 1 or not consistent:
            nv.append(extra[t])
        else:
            nv.append(v[t + 1])
    return r, v, nv, term, trunc


# --------------------------------------------------------------------------- gae


def test_gae_seed_worked_table():
    adv = gae(
        t64([0.0, 0.0, 1.0]),
        t64([0.4, 0.5, 0.6]),
        t64([0.5, 0.6, 0.0]),
        tbool([False, False, True]),
        tbool([False, False, False]),
        gamma=0.9,
        lam=0.8,
    )
    close(adv, t64([0.28616, 0.328, 0.4]))


def test_gae_worked_table_ignores_next_value_after_termination():
    # The value after a terminal step must not be used, whatever the caller put there.
    adv = gae(
        t64([0.0, 0.0, 1.0]),
        t64([0.4, 0.5, 0.6]),
        t64([0.5, 0.6, 123.0]),
        tbool([False, False, True]),
        tbool([False, False, False]),
        gamma=0.9,
        lam=0.8,
    )
    close(adv, t64([0.28616, 0.328, 0.4]))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_gae_inf_or_nan_next_value_at_a_terminal_step_is_never_read(bad):
    """The issue's example: the value after a terminated step is 0 by definition, so an inf/NaN placed
    there (a diverged critic, a placeholder) must not turn the row into NaN; nor may it cross into the
    previous episode of the same row."""
    adv = gae(
        t64([0.0, 0.0, 1.0]),
        t64([0.4, 0.5, 0.6]),
        t64([0.5, 0.6, bad]),
        tbool([False, False, True]),
        tbool([False, False, False]),
        gamma=0.9,
        lam=0.8,
    )
    close(adv, t64([0.28616, 0.328, 0.4]))
    # Two episodes in a row: the first ends terminated with a bad next value at step 1; the second's
    # advantages come after it and must not leak back either.
    two = gae(
        t64([0.0, 1.0, 0.0, 0.0, 1.0]),
        t64([0.4, 0.6, 0.4, 0.5, 0.6]),
        t64([0.6, bad, 0.5, 0.6, bad]),
        tbool([False, True, False, False, True]),
        tbool([False, False, False, False, False]),
        gamma=0.9,
        lam=0.8,
    )
    assert torch.isfinite(two).all()
    close(two[2:], t64([0.28616, 0.328, 0.4]))
    close(two[1], t64(0.4))
    close(two[0], t64(0.9 * 0.6 - 0.4 + 0.9 * 0.8 * 0.4))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize(
    ("n", "expect"),
    [(1, [0.9 * 0.5, 0.9 * 0.6, 1.0]), (2, [0.81 * 0.6, 0.9, 1.0]), (3, [0.81, 0.9, 1.0])],
)
def test_n_step_inf_or_nan_next_value_at_a_terminal_step_is_never_read(bad, n, expect):
    r = t64([0.0, 0.0, 1.0])
    term, trunc = tbool([False, False, True]), tbool([False, False, False])
    close(n_step_returns(r, t64([0.5, 0.6, bad]), term, trunc, 0.9, n), t64(expect))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_reward_to_go_inf_or_nan_bootstrap_after_a_done_step_is_never_read(bad):
    close(reward_to_go(t64([1.0, 1.0]), 0.5, tbool([False, True]), bootstrap=t64(bad)), t64([1.5, 1.0]))
    # The bootstrap is read where the row's last step is not done; it must stop at the episode end.
    row = reward_to_go(t64([1.0, 2.0, 1.0]), 0.5, tbool([True, False, False]), bootstrap=t64(bad))
    assert float(row[0]) == 1.0 and not torch.isfinite(row[1:]).any()


def test_gae_lambda_zero_is_td_error():
    gen = torch.Generator().manual_seed(0)
    r, v, nv, term, trunc = random_row(gen, 12, consistent=False)
    gamma = 0.93
    adv = gae(t64(r), t64(v), t64(nv), tbool(term), tbool(trunc), gamma, 0.0)
    delta = [r[t] + gamma * (0.0 if term[t] else nv[t]) - v[t] for t in range(12)]
    close(adv, t64(delta))


def test_gae_lambda_one_terminated_is_reward_to_go_minus_values():
    r = [0.5, -1.0, 2.0, 0.25, 3.0]
    v = [0.1, 0.2, -0.3, 0.4, 0.5]
    nv = [*v[1:], 7.0]
    gamma = 0.9
    adv = gae(t64(r), t64(v), t64(nv), tbool([0, 0, 0, 0, 1]), tbool([0] * 5), gamma, 1.0)
    # explicit discounted sums
    g = [sum(gamma ** (k - t) * r[k] for k in range(t, 5)) for t in range(5)]
    close(adv, t64(g) - t64(v))
    close(adv, reward_to_go(t64(r), gamma) - t64(v))


@pytest.mark.parametrize("first_end", ["terminated", "truncated"])
def test_gae_two_episodes_in_one_row_equal_each_alone(first_end):
    gamma, lam = 0.95, 0.7
    r1, v1 = [1.0, 0.0, -2.0], [0.3, -0.1, 0.8]
    r2, v2 = [0.5, 1.5, 0.0, 2.0], [0.2, 0.4, -0.6, 1.1]
    # first episode's last next_value: value of its final observation (truncated) or junk (terminated)
    final1 = 0.77 if first_end == "truncated" else 55.0
    nv1 = [*v1[1:], final1]
    nv2 = [*v2[1:], 0.0]
    term1 = [False, False, first_end == "terminated"]
    trunc1 = [False, False, first_end == "truncated"]
    term2 = [False, False, False, True]
    trunc2 = [False] * 4

    alone1 = gae(t64(r1), t64(v1), t64(nv1), tbool(term1), tbool(trunc1), gamma, lam)
    alone2 = gae(t64(r2), t64(v2), t64(nv2), tbool(term2), tbool(trunc2), gamma, lam)
    joint = gae(
        t64(r1 + r2),
        t64(v1 + v2),
        t64(nv1 + nv2),
        tbool(term1 + term2),
        tbool(trunc1 + trunc2),
        gamma,
        lam,
    )
    close(joint, torch.cat([alone1, alone2]))
    # and the first episode's own answer, by hand (λ-recursion over δ)
    boot = 0.0 if first_end == "terminated" else final1
    d = [r1[0] + gamma * v1[1] - v1[0], r1[1] + gamma * v1[2] - v1[1], r1[2] + gamma * boot - v1[2]]
    a2 = d[2]
    a1 = d[1] + gamma * lam * a2
    a0 = d[0] + gamma * lam * a1
    close(alone1, t64([a0, a1, a2]))


def test_gae_rollout_end_bootstraps_with_last_next_value():
    gamma = 0.9
    r = [1.0, 0.0, 2.0, -1.0]
    v = [0.5, 0.1, -0.2, 0.3]
    last = 1.7
    nv = [*v[1:], last]
    no = tbool([0, 0, 0, 0])
    # λ = 1: Σ γ^l r + γ^{T-t} V(s_T) - v_t (seed's finite-rollout formula)
    adv = gae(t64(r), t64(v), t64(nv), no, no, gamma, 1.0)
    expect = [
        sum(gamma ** (k - t) * r[k] for k in range(t, 4)) + gamma ** (4 - t) * last - v[t] for t in range(4)
    ]
    close(adv, t64(expect))
    # any λ: changing only next_values[-1] by Δ shifts A_t by (γλ)^{T-1-t} γ Δ
    lam, delta = 0.6, 0.25
    a = gae(t64(r), t64(v), t64(nv), no, no, gamma, lam)
    nv2 = [*nv[:-1], last + delta]
    b = gae(t64(r), t64(v), t64(nv2), no, no, gamma, lam)
    close(b - a, t64([(gamma * lam) ** (3 - t) * gamma * delta for t in range(4)]))


def test_gae_truncated_differs_from_terminated_by_bootstrap_term():
    gamma, lam = 0.97, 0.85
    r = t64([0.2, -0.4, 1.0, 0.6, 0.0])
    v = t64([0.5, 0.4, 0.3, 0.2, 0.1])
    final_v = 2.5
    nv = torch.cat([v[1:], t64([final_v])])
    flag = tbool([0, 0, 0, 0, 1])
    none = tbool([0] * 5)
    a_trunc = gae(r, v, nv, none, flag, gamma, lam)
    a_term = gae(r, v, nv, flag, none, gamma, lam)
    expect = t64([(gamma * lam) ** (4 - t) * gamma * final_v for t in range(5)])
    close(a_trunc - a_term, expect)
    # a truncated last step is the same as an unflagged rollout end
    close(a_trunc, gae(r, v, nv, none, none, gamma, lam))


def test_gae_terminated_and_truncated_both_set_is_terminated():
    gen = torch.Generator().manual_seed(5)
    r, v = torch.randn(6, generator=gen, dtype=F64), torch.randn(6, generator=gen, dtype=F64)
    nv = torch.randn(6, generator=gen, dtype=F64)
    term = tbool([0, 1, 0, 0, 1, 0])
    both = gae(r, v, nv, term, term.clone(), 0.9, 0.9)
    only = gae(r, v, nv, term, tbool([0] * 6), 0.9, 0.9)
    close(both, only)


def test_gae_batch_equals_rows():
    gen = torch.Generator().manual_seed(1)
    rows = [random_row(gen, 9) for _ in range(4)]
    R, V, NV, TE, TR = (
        torch.stack([f(row[i]) for row in rows]) for i, f in enumerate([t64] * 3 + [tbool] * 2)
    )
    out = gae(R, V, NV, TE, TR, 0.99, 0.95)
    assert out.shape == (4, 9)
    for b in range(4):
        close(out[b], gae(R[b], V[b], NV[b], TE[b], TR[b], 0.99, 0.95))


@pytest.mark.parametrize("seed", range(8))
def test_gae_matches_brute_force_definition(seed):
    gen = torch.Generator().manual_seed(100 + seed)
    T = 15
    gamma = 0.8 + 0.2 * torch.rand(1, generator=gen).item()
    lams = [0.0, 1.0, torch.rand(1, generator=gen).item(), 0.95]
    rows = [random_row(gen, T, p_end=0.3) for _ in range(3)]
    R, V, NV = (torch.stack([t64(row[i]) for row in rows]) for i in range(3))
    TE, TR = (torch.stack([tbool(row[i]) for row in rows]) for i in (3, 4))
    for lam in lams:
        out = gae(R, V, NV, TE, TR, gamma, lam)
        expect = torch.stack([t64(brute_gae_row(*row, gamma, lam)) for row in rows])
        close(out, expect, atol=1e-10)


def test_gae_shape_and_dtype_preserved():
    for dtype in (torch.float64, torch.float32):
        for shape in ((7,), (3, 7)):
            r = torch.ones(shape, dtype=dtype)
            flags = torch.zeros(shape, dtype=torch.bool)
            out = gae(r, r, r, flags, flags, 0.9, 0.9)
            assert out.shape == shape
            assert out.dtype == dtype


def test_gae_accepts_integer_flags():
    r, v = t64([0.0, 0.0, 1.0]), t64([0.4, 0.5, 0.6])
    nv = t64([0.5, 0.6, 0.0])
    out = gae(r, v, nv, torch.tensor([0, 0, 1]), torch.tensor([0, 0, 0]), 0.9, 0.8)
    close(out, t64([0.28616, 0.328, 0.4]))


# --------------------------------------------------------------------------- reward_to_go / discounted_return


def test_reward_to_go_hand_values():
    close(reward_to_go(t64([1.0, 2.0, 3.0]), 0.5), t64([2.75, 3.5, 3.0]))
    close(reward_to_go(t64([1.0, 2.0, 3.0]), 1.0), t64([6.0, 5.0, 3.0]))
    close(reward_to_go(t64([1.0, 2.0, 3.0]), 0.0), t64([1.0, 2.0, 3.0]))


def test_discounted_return_hand_values():
    out = discounted_return(t64([1.0, 2.0, 3.0]), 0.5)
    assert out.shape == ()
    close(out, t64(2.75))
    batch = discounted_return(t64([[1.0, 2.0, 3.0], [0.0, 0.0, 8.0]]), 0.5)
    close(batch, t64([2.75, 2.0]))


def test_reward_to_go_dones_reset():
    r = t64([1.0, 2.0, 3.0, 4.0])
    dones = tbool([0, 1, 0, 0])
    # episode (1, 2): [1 + 0.5*2, 2]; episode (3, 4): [3 + 0.5*4, 4]
    close(reward_to_go(r, 0.5, dones), t64([2.0, 2.0, 5.0, 4.0]))


def test_reward_to_go_bootstrap_only_when_last_step_not_done():
    r = t64([1.0, 2.0, 3.0])
    boot = t64(10.0)
    close(reward_to_go(r, 0.5, None, boot), t64([2.75 + 0.125 * 10, 3.5 + 0.25 * 10, 3.0 + 0.5 * 10]))
    close(reward_to_go(r, 0.5, tbool([0, 0, 1]), boot), t64([2.75, 3.5, 3.0]))
    # an episode ending mid-row cuts the bootstrap off from the earlier steps
    close(reward_to_go(r, 0.5, tbool([1, 0, 0]), boot), t64([1.0, 2.0 + 1.5 + 0.25 * 10, 3.0 + 5.0]))


def test_reward_to_go_batch_and_brute_force():
    gen = torch.Generator().manual_seed(7)
    B, T, gamma = 4, 10, 0.9
    R = torch.randn(B, T, generator=gen, dtype=F64)
    D = torch.rand(B, T, generator=gen) < 0.3
    D[0, -1] = True
    D[1, -1] = False
    boot = torch.randn(B, generator=gen, dtype=F64)
    out = reward_to_go(R, gamma, D, boot)
    assert out.shape == (B, T)
    for b in range(B):
        close(out[b], reward_to_go(R[b], gamma, D[b], boot[b]))
        expect = brute_rtg_row(R[b].tolist(), gamma, D[b].tolist(), boot[b].item())
        close(out[b], t64(expect))


def test_reward_to_go_does_not_modify_inputs():
    r = t64([1.0, 2.0, 3.0])
    d = tbool([0, 1, 0])
    boot = t64(4.0)
    r0, d0, b0 = r.clone(), d.clone(), boot.clone()
    reward_to_go(r, 0.9, d, boot)
    assert torch.equal(r, r0) and torch.equal(d, d0) and torch.equal(boot, b0)


def test_reward_to_go_rejects_misshaped_dones():
    with pytest.raises(ValueError):
        reward_to_go(t64([1.0, 2.0, 3.0]), 0.9, tbool([0, 1]))


# --------------------------------------------------------------------------- n_step_returns


def test_n_step_one_is_one_step_target():
    gen = torch.Generator().manual_seed(3)
    r, _, nv, term, trunc = random_row(gen, 11, consistent=False)
    gamma = 0.9
    out = n_step_returns(t64(r), t64(nv), tbool(term), tbool(trunc), gamma, 1)
    close(out, t64([r[t] + gamma * (0.0 if term[t] else nv[t]) for t in range(11)]))


@pytest.mark.parametrize("n", [4, 5, 9])
def test_n_step_at_least_episode_length_is_reward_to_go(n):
    r = t64([1.0, -0.5, 2.0, 0.25])
    nv = t64([0.3, 0.6, 0.9, 42.0])  # last one must be ignored (termination)
    term = tbool([0, 0, 0, 1])
    trunc = tbool([0, 0, 0, 0])
    out = n_step_returns(r, nv, term, trunc, 0.8, n)
    close(out, reward_to_go(r, 0.8))
    close(out, t64(brute_rtg_row(r.tolist(), 0.8)))


def test_n_step_hand_example_with_truncation():
    # steps 0..2 form an episode truncated at step 2 (final obs value 5); step 3..4 reach the rollout end
    r = [1.0, 2.0, 3.0, 4.0, 5.0]
    nv = [0.1, 0.2, 5.0, 0.4, 0.5]
    term, trunc = tbool([0, 0, 0, 0, 0]), tbool([0, 0, 1, 0, 0])
    g = 0.5
    out = n_step_returns(t64(r), t64(nv), term, trunc, g, 2)
    expect = [
        1 + g * 2 + g**2 * 0.2,
        2 + g * 3 + g**2 * 5.0,
        3 + g * 5.0,
        4 + g * 5 + g**2 * 0.5,
        5 + g * 0.5,
    ]
    close(out, t64(expect))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("seed", range(4))
def test_n_step_matches_brute_force(n, seed):
    gen = torch.Generator().manual_seed(200 + seed)
    T, gamma = 13, 0.9
    rows = [random_row(gen, T, p_end=0.3, consistent=False) for _ in range(3)]
    R = torch.stack([t64(row[0]) for row in rows])
    NV = torch.stack([t64(row[2]) for row in rows])
    TE = torch.stack([tbool(row[3]) for row in rows])
    TR = torch.stack([tbool(row[4]) for row in rows])
    out = n_step_returns(R, NV, TE, TR, gamma, n)
    expect = torch.stack([t64(brute_n_step_row(row[0], row[2], row[3], row[4], gamma, n)) for row in rows])
    close(out, expect)
    for b in range(3):
        close(out[b], n_step_returns(R[b], NV[b], TE[b], TR[b], gamma, n))


def test_n_step_long_horizon_relates_to_gae_lambda_one():
    # n ≥ T and consistent next_values: G^(n) - v equals GAE(λ=1) on every row
    gen = torch.Generator().manual_seed(11)
    r, v, nv, term, trunc = random_row(gen, 10, p_end=0.3)
    args = (tbool(term), tbool(trunc))
    out = n_step_returns(t64(r), t64(nv), *args, 0.9, 10) - t64(v)
    close(out, gae(t64(r), t64(v), t64(nv), *args, 0.9, 1.0))


@pytest.mark.parametrize("n", [0, -1])
def test_n_step_rejects_n_below_one(n):
    z = torch.zeros(3, dtype=F64)
    f = torch.zeros(3, dtype=torch.bool)
    with pytest.raises(ValueError):
        n_step_returns(z, z, f, f, 0.9, n)


def test_n_step_does_not_modify_inputs():
    gen = torch.Generator().manual_seed(4)
    r, _, nv, term, trunc = random_row(gen, 8)
    args = [t64(r), t64(nv), tbool(term), tbool(trunc)]
    before = [a.clone() for a in args]
    n_step_returns(*args, 0.9, 3)
    for a, b in zip(args, before, strict=True):
        assert torch.equal(a, b)


# --------------------------------------------------------------------------- first_visit_mask / mc_update

STATES = torch.tensor([0, 1, 0, 2, 0])
RETURNS = t64([5.0, 4.0, 3.0, 2.0, 1.0])


def test_first_visit_mask_hand():
    assert first_visit_mask(STATES).tolist() == [True, True, False, True, False]
    assert first_visit_mask(torch.tensor([3, 3, 3])).tolist() == [True, False, False]
    assert first_visit_mask(torch.tensor([], dtype=torch.long)).tolist() == []


def test_mc_update_first_visit_vs_every_visit():
    values = torch.zeros(4, dtype=F64)
    counts = torch.zeros(4, dtype=F64)
    v_first, c_first = mc_update(values, counts, STATES, RETURNS, first_visit=True)
    close(v_first, t64([5.0, 4.0, 2.0, 0.0]))
    close(c_first, t64([1.0, 1.0, 1.0, 0.0]))
    v_every, c_every = mc_update(values, counts, STATES, RETURNS, first_visit=False)
    close(v_every, t64([(5.0 + 3.0 + 1.0) / 3, 4.0, 2.0, 0.0]))
    close(c_every, t64([3.0, 1.0, 1.0, 0.0]))


def test_mc_update_prior_value_with_zero_count_is_overwritten():
    values = t64([9.0, -9.0, 9.0, 1.5])
    counts = torch.zeros(4, dtype=F64)
    v, c = mc_update(values, counts, STATES, RETURNS, first_visit=True)
    close(v, t64([5.0, 4.0, 2.0, 1.5]))
    close(c, t64([1.0, 1.0, 1.0, 0.0]))


@pytest.mark.parametrize("first_visit", [True, False])
def test_mc_update_incremental_over_two_episodes_is_mean(first_visit):
    states2 = torch.tensor([2, 0, 2])
    returns2 = t64([6.0, 7.0, 8.0])
    values = torch.zeros(4, dtype=F64)
    counts = torch.zeros(4, dtype=F64)
    inputs = [values, counts, STATES, RETURNS, states2, returns2]
    before = [x.clone() for x in inputs]

    v1, c1 = mc_update(values, counts, STATES, RETURNS, first_visit=first_visit)
    v1_before, c1_before = v1.clone(), c1.clone()
    v2, c2 = mc_update(v1, c1, states2, returns2, first_visit=first_visit)
    if first_visit:
        samples = {0: [5.0, 7.0], 1: [4.0], 2: [2.0, 6.0], 3: []}
    else:
        samples = {0: [5.0, 3.0, 1.0, 7.0], 1: [4.0], 2: [2.0, 6.0, 8.0], 3: []}
    expect_v = t64([sum(s) / len(s) if s else 0.0 for s in samples.values()])
    expect_c = t64([float(len(s)) for s in samples.values()])
    close(v2, expect_v)
    close(c2, expect_c)

    # inputs untouched, outputs are new tensors
    for x, y in zip(inputs, before, strict=True):
        assert torch.equal(x, y)
    assert torch.equal(v1, v1_before) and torch.equal(c1, c1_before)  # second call's inputs untouched
    assert v1.data_ptr() != values.data_ptr() and c1.data_ptr() != counts.data_ptr()


def test_mc_update_integer_counts():
    values = torch.zeros(3, dtype=F64)
    counts = torch.zeros(3, dtype=torch.long)
    v, c = mc_update(values, counts, STATES, RETURNS, first_visit=False)
    close(v, t64([3.0, 4.0, 2.0]))
    assert c.tolist() == [3, 1, 1]


@pytest.mark.parametrize("target", ["td", "mc"])
def test_a2c_critic_targets_ignore_a_nan_value_after_termination(target):
    """A2C's critic targets (the λ-return, or the reward-to-go bootstrapped at truncations and the rollout
    end) read no value after a terminated step: a NaN there changes nothing."""
    from advantage.algos.a2c import critic_targets

    r, v = t64([[0.0, 0.0, 1.0]]), t64([[0.4, 0.5, 0.6]])
    term, trunc = tbool([[False, False, True]]), tbool([[False, False, False]])
    finite, bad = t64([[0.5, 0.6, 0.0]]), t64([[0.5, 0.6, float("nan")]])
    out = []
    for nv in (finite, bad):
        adv = gae(r, v, nv, term, trunc, 0.9, 0.8)
        out.append(critic_targets(r, v, nv, term, trunc, adv, 0.9, target))
    assert torch.isfinite(out[1]).all()
    close(out[1], out[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1,), (5,), (1, 5), (8, 5), (3, 128)])
def test_gae_numpy_path_equals_torch_loop_bit_for_bit(dtype, shape):
    """CPU inputs without gradients run the recursion on NumPy views; inputs that need a gradient run the
    torch loop. Same arithmetic, so the same bits (rollouts must reproduce whichever path ran)."""
    g = torch.Generator().manual_seed(sum(shape))
    rewards, values, next_values = (torch.randn(shape, generator=g, dtype=dtype) for _ in range(3))
    term = torch.rand(shape, generator=g) < 0.15
    trunc = torch.rand(shape, generator=g) < 0.1
    fast = gae(rewards, values, next_values, term, trunc, 0.99, 0.95)
    slow = gae(rewards, values.requires_grad_(), next_values, term, trunc, 0.99, 0.95)
    assert slow.requires_grad and not fast.requires_grad  # each path ran
    assert fast.dtype == dtype and fast.shape == slow.shape
    assert torch.equal(fast, slow.detach())
