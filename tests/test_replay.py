"""Tests for advantage.data.replay: ring storage, n-step emission, exact resume, sum-tree and PER."""

from __future__ import annotations

import json

import numpy as np
import pytest

from advantage.checkpoint import load_checkpoint, save_checkpoint
from advantage.data import PrioritizedReplayBuffer, ReplayBuffer, SumTree

GAMMA = 0.5  # powers of 1/2 are exact in float32, so n-step sums compare exactly


def step(rb, obs, actions, rewards, next_obs, term=None, trunc=None, valid=None):
    """One add() of N envs from plain lists; obs are scalars stored as shape (1,)."""
    n = len(obs)
    return rb.add(
        np.asarray(obs, np.float32).reshape(n, 1),
        np.asarray(actions, np.int64),
        np.asarray(rewards, np.float64),
        np.asarray(next_obs, np.float32).reshape(n, 1),
        np.zeros(n, bool) if term is None else np.asarray(term, bool),
        np.zeros(n, bool) if trunc is None else np.asarray(trunc, bool),
        valid=valid,
    )


def stored(rb) -> dict[str, np.ndarray]:
    """Every stored transition in slot order, obs flattened to scalars."""
    out = rb.gather(np.arange(len(rb)))
    out["obs"] = out["obs"][:, 0]
    out["next_obs"] = out["next_obs"][:, 0]
    return out


def make(capacity=16, num_envs=1, n_step=1, gamma=GAMMA, seed=0, **per):
    args = (capacity, (1,), np.float32, (), np.int64, num_envs, n_step, gamma, seed)
    return PrioritizedReplayBuffer(*args, **per) if per else ReplayBuffer(*args)


def random_steps(rb, steps: int, seed: int) -> None:
    """Feed random steps with terminations, truncations and skipped (autoreset) envs."""
    g = np.random.default_rng(seed)
    N = rb.num_envs if isinstance(rb, ReplayBuffer) else rb.buffer.num_envs
    for _ in range(steps):
        done = g.random(N)
        rb.add(
            g.normal(size=(N, 1)).astype(np.float32),
            g.integers(0, 4, N),
            g.normal(size=N),
            g.normal(size=(N, 1)).astype(np.float32),
            done < 0.1,
            (done >= 0.1) & (done < 0.15),
            valid=g.random(N) > 0.1,
        )


# ------------------------------------------------------------------------------------ ring storage


def test_ring_overwrite_and_wrap_around():
    rb = make(capacity=4)
    for t in range(6):
        written = step(rb, [t], [t], [10 * t], [t + 1])
        assert written.tolist() == [t % 4]
    assert len(rb) == 4 and rb.pos == 2
    s = stored(rb)
    # slots 0, 1 were overwritten by steps 4, 5; slots 2, 3 still hold steps 2, 3
    assert s["obs"].tolist() == [4, 5, 2, 3]
    assert s["actions"].tolist() == [4, 5, 2, 3]
    assert s["rewards"].tolist() == [40, 50, 20, 30]
    assert s["next_obs"].tolist() == [5, 6, 3, 4]
    assert s["discounts"].tolist() == [GAMMA] * 4
    assert not s["terminated"].any()
    batch = rb.sample(4)
    assert set(batch["indices"].tolist()) <= {0, 1, 2, 3}
    assert np.array_equal(batch["obs"][:, 0], s["obs"][batch["indices"]])


def test_batch_of_envs_in_env_order_and_valid_mask():
    rb = make(capacity=5, num_envs=3)
    assert step(rb, [0, 10, 20], [0, 1, 2], [1, 2, 3], [1, 11, 21]).tolist() == [0, 1, 2]
    # env 1 is in its autoreset step: skipped entirely
    w = step(rb, [1, 99, 21], [0, 1, 2], [1, 99, 3], [2, 99, 22], valid=[True, False, True])
    assert w.tolist() == [3, 4]
    assert step(rb, [2, 12, 22], [0, 1, 2], [1, 2, 3], [3, 13, 23]).tolist() == [0, 1, 2]  # wraps
    s = stored(rb)
    assert s["obs"].tolist() == [2, 12, 22, 1, 21]
    assert s["next_obs"].tolist() == [3, 13, 23, 2, 22]
    assert 99 not in s["rewards"]
    assert rb.obs.dtype == np.float32 and rb.actions.dtype == np.int64 and rb.actions.shape == (5,)


def test_more_transitions_than_capacity_in_one_call_keeps_the_newest():
    rb = make(capacity=2, num_envs=3)
    w = step(rb, [0, 1, 2], [0, 0, 0], [0, 1, 2], [0, 1, 2])
    assert len(rb) == 2 and sorted(w.tolist()) == [0, 1]
    assert sorted(stored(rb)["obs"].tolist()) == [1, 2]
    step(rb, [3, 4, 5], [0, 0, 0], [0, 0, 0], [0, 0, 0])
    assert sorted(stored(rb)["obs"].tolist()) == [4, 5]


# ------------------------------------------------------------------------------------------ n-step


def test_n_step_sums_and_discounts_by_hand():
    g = GAMMA
    rb = make(capacity=32, num_envs=2, n_step=3)
    # env 0 terminates after 2 steps; env 1 is truncated after 2 steps (final obs 102).
    assert step(rb, [0, 100], [0, 0], [1, 10], [1, 101]).size == 0
    w = step(rb, [1, 101], [1, 1], [2, 20], [2, 102], term=[True, False], trunc=[False, True])
    assert w.tolist() == [0, 1, 2, 3]
    s = stored(rb)
    assert s["obs"].tolist() == [0, 1, 100, 101]
    assert s["actions"].tolist() == [0, 1, 0, 1]
    assert s["rewards"].tolist() == [1 + g * 2, 2, 10 + g * 20, 20]
    assert s["next_obs"].tolist() == [2, 2, 102, 102]  # the final observation, never a reset one
    assert s["terminated"].tolist() == [True, True, False, False]  # truncation is not terminal
    assert s["discounts"].tolist() == [g**2, g, g**2, g]

    # Next episodes: env 0 runs 5 steps and terminates; env 1 is in its reset step at first.
    rb2 = make(capacity=32, num_envs=2, n_step=3)
    r = [1.0, 2.0, 4.0, 8.0, 16.0]
    got = []
    for t in range(5):
        last = t == 4
        got += step(
            rb2, [t, 50 + t], [t, t], [r[t], 0.0], [t + 1, 51 + t], term=[last, False], valid=[True, t > 0]
        ).tolist()
    s = stored(rb2)
    env0 = np.flatnonzero(s["obs"] < 50)
    # full windows: s0 (emitted at t=2), s1 (t=3); at the termination s2, s3, s4 flush with k = 3, 2, 1
    assert s["obs"][env0].tolist() == [0, 1, 2, 3, 4]
    assert s["rewards"][env0].tolist() == [
        1 + g * 2 + g**2 * 4,
        2 + g * 4 + g**2 * 8,
        4 + g * 8 + g**2 * 16,
        8 + g * 16,
        16,
    ]
    assert s["next_obs"][env0].tolist() == [3, 4, 5, 5, 5]
    assert s["terminated"][env0].tolist() == [False, False, True, True, True]
    assert s["discounts"][env0].tolist() == [g**3, g**3, g**3, g**2, g]
    env1 = np.flatnonzero(s["obs"] >= 50)  # started at t=1; windows full at t=3, t=4
    assert s["obs"][env1].tolist() == [51, 52]
    assert s["next_obs"][env1].tolist() == [54, 55]
    assert rb2._p_len.tolist() == [0, 2]  # env 1 still has 2 pending steps, env 0 was flushed


def test_n_step_one_is_the_plain_transition():
    rb = make(n_step=1)
    step(rb, [0], [3], [2.5], [1], term=[True])
    s = stored(rb)
    assert s["rewards"].tolist() == [2.5] and s["discounts"].tolist() == [GAMMA]
    assert s["terminated"].tolist() == [True] and s["actions"].tolist() == [3]


def test_sample_dict_layout():
    rb = ReplayBuffer(8, (2, 3), np.uint8, (2,), np.float32, num_envs=2, n_step=2, gamma=0.9)
    for _ in range(4):
        rb.add(np.ones((2, 2, 3)), np.zeros((2, 2)), np.ones(2), np.ones((2, 2, 3)), [False] * 2, [False] * 2)
    b = rb.sample(5)
    keys = {"obs", "actions", "rewards", "next_obs", "terminated", "discounts", "indices", "weights"}
    assert set(b) == keys
    assert b["obs"].shape == (5, 2, 3) and b["obs"].dtype == np.uint8
    assert b["actions"].shape == (5, 2) and b["actions"].dtype == np.float32
    assert b["rewards"].dtype == np.float32 and b["discounts"].dtype == np.float32
    assert b["terminated"].dtype == bool and b["indices"].dtype == np.int64
    assert np.array_equal(b["weights"], np.ones(5, np.float32))
    np.testing.assert_allclose(b["rewards"], 1.9)
    np.testing.assert_allclose(b["discounts"], 0.81)


def test_sample_batches_layout_and_uniform_draws():
    rb = ReplayBuffer(64, (2, 3), np.uint8, (), np.int64, num_envs=2, n_step=2, gamma=0.9, seed=3)
    for t in range(20):  # 38 transitions (2 envs, each window of 2 starts emitting at its second step)
        obs = np.full((2, 2, 3), t, np.uint8)
        rb.add(obs, np.array([t, -t]), np.ones(2), obs + 1, [False] * 2, [False] * 2)
    b = rb.sample_batches(5, 7)
    assert set(b) == set(rb.sample(7))
    assert b["obs"].shape == (5, 7, 2, 3) and b["obs"].dtype == np.uint8
    assert b["actions"].shape == b["rewards"].shape == b["indices"].shape == (5, 7)
    assert np.array_equal(b["weights"], np.ones((5, 7), np.float32))
    # each row is the gather of its own indices
    for g in range(5):
        row = rb.gather(b["indices"][g])
        assert all(np.array_equal(row[k], b[k][g]) for k in row)
    # uniform over the stored transitions: 38 slots, 38k draws, every count within 5 sigma of 1000
    counts = np.bincount(rb.sample_batches(1000, 38)["indices"].ravel(), minlength=len(rb))
    assert counts.size == len(rb) == 38 and np.abs(counts - 1000).max() < 5 * np.sqrt(1000)
    with pytest.raises(ValueError, match="num_batches must be an integer >= 1, got 0"):
        rb.sample_batches(0, 7)
    # a batch larger than what is stored: drawn with replacement from the 38 (SB3's early updates)
    big = rb.sample_batches(2, 100)["indices"]
    assert big.shape == (2, 100) and big.min() >= 0 and big.max() < 38 and len(np.unique(big)) > 30


# ----------------------------------------------------------------------------------------- resuming


def split(state):
    """The flat state dict split the way a trainer stores it: arrays / JSON-able values."""
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    return arrays, {k: v for k, v in state.items() if k not in arrays}


def json_roundtrip(state):
    arrays, rest = split(state)
    return arrays | json.loads(json.dumps(rest))


def assert_same_batch(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k


@pytest.mark.parametrize("prioritized", [False, True])
def test_exact_resume_from_state_dict(prioritized):
    per = {"alpha": 0.6, "beta_steps": 50} if prioritized else {}
    a = make(capacity=40, num_envs=3, n_step=3, gamma=0.9, seed=7, **per)
    random_steps(a, 30, seed=1)  # wraps the ring; leaves windows pending
    for _ in range(3):
        batch = a.sample(8)
        if prioritized:
            a.update_priorities(batch["indices"], np.random.default_rng(0).normal(size=8))
    state = json_roundtrip(a.state_dict())
    b = make(capacity=40, num_envs=3, n_step=3, gamma=0.9, seed=123, **per)  # seed is overwritten
    b.load_state_dict(state)
    assert_same_batch(a.sample(16), b.sample(16))
    random_steps(a, 10, seed=2)  # pending windows continue identically
    random_steps(b, 10, seed=2)
    for _ in range(3):
        assert_same_batch(a.sample(16), b.sample(16))
    (arr_a, rest_a), (arr_b, rest_b) = split(a.state_dict()), split(b.state_dict())
    assert rest_a == rest_b and arr_a.keys() == arr_b.keys()
    for k in arr_a:
        assert np.array_equal(arr_a[k], arr_b[k]), k


def test_resume_through_a_checkpoint(tmp_path):
    a = make(capacity=20, num_envs=2, n_step=2, beta_steps=10)
    random_steps(a, 15, seed=3)
    arrays, rest = split(a.state_dict())
    assert set(arrays) >= {"obs", "pending_obs", "priorities"} and "rng" in rest
    save_checkpoint(tmp_path / "ck", 15, {f"replay.{k}": v for k, v in arrays.items()}, {"replay": rest})
    ck = load_checkpoint(tmp_path / "ck")
    tensors = {k.removeprefix("replay."): v for k, v in ck.tensors.items() if k.startswith("replay.")}
    b = make(capacity=20, num_envs=2, n_step=2, beta_steps=10)
    b.load_state_dict(tensors | ck.state["replay"])  # torch tensors are accepted as arrays
    assert_same_batch(a.sample(10), b.sample(10))
    # an empty buffer round-trips too (zero-row arrays)
    e = make(capacity=20, num_envs=2, n_step=2)
    save_checkpoint(tmp_path / "e", 0, *split(e.state_dict()))
    ck = load_checkpoint(tmp_path / "e")
    f = make(capacity=20, num_envs=2, n_step=2)
    f.load_state_dict(ck.tensors | ck.state)
    assert len(f) == 0


def test_load_state_dict_rejects_another_configuration():
    a = make(capacity=8, n_step=2)
    with pytest.raises(ValueError, match="n_step=2, this buffer has n_step=3"):
        make(capacity=8, n_step=3).load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="capacity=8, this buffer has capacity=9"):
        make(capacity=9, n_step=2).load_state_dict(a.state_dict())
    p = make(capacity=8, alpha=0.6, beta_steps=5)
    with pytest.raises(ValueError, match="alpha=0.6, this buffer has alpha=0.7"):
        make(capacity=8, alpha=0.7, beta_steps=5).load_state_dict(p.state_dict())


# ----------------------------------------------------------------------------------------- sum-tree


def test_sum_tree_total_and_min_after_many_updates():
    g = np.random.default_rng(0)
    tree = SumTree(1000)  # not a power of two
    prios = np.zeros(1000)
    for _ in range(2000):
        idx = np.unique(g.integers(0, 1000, 64))
        vals = g.random(idx.size) * 10
        tree.update(idx, vals)
        prios[idx] = vals
    assert tree.total == pytest.approx(prios.sum(), rel=1e-12)
    assert np.isfinite(tree.mins[tree.leaf0 : tree.leaf0 + 1000]).all()  # every leaf was written
    assert tree.min == prios.min()
    internal = np.arange(1, tree.leaf0)
    assert np.array_equal(tree.sums[internal], tree.sums[2 * internal] + tree.sums[2 * internal + 1])
    assert np.array_equal(tree.leaves(), prios)


def test_sum_tree_find_matches_prefix_sums():
    g = np.random.default_rng(1)
    tree = SumTree(37)
    prios = g.integers(0, 5, 37).astype(np.float64)  # integers: every sum exact, zeros included
    tree.update(np.arange(37), prios)
    cum = np.cumsum(prios)
    u = np.concatenate([g.random(500) * cum[-1], cum[:-1], [0.0]])
    expect = np.searchsorted(cum, u, side="right")
    assert np.array_equal(tree.find(u), expect)
    assert (prios[tree.find(u)] > 0).all()  # zero-priority leaves are never found
    one = SumTree(1)
    one.update(np.array([0]), np.array([2.0]))
    assert one.find(np.array([0.0, 1.9])).tolist() == [0, 0]


# ------------------------------------------------------------------------------------ prioritized


def test_new_transitions_get_the_max_priority():
    rb = make(capacity=4, alpha=1.0, eps=0.5, beta_steps=10)
    step(rb, [0], [0], [0], [1])
    assert rb.tree.leaves()[0] == 1.0
    rb.update_priorities(np.array([0]), np.array([2.5]))  # p = 3
    assert rb.max_priority == 3.0
    step(rb, [1], [0], [0], [2])
    assert rb.tree.leaves()[:2].tolist() == [3.0, 3.0]
    rb.update_priorities(np.array([1, 1]), np.array([9.5, 0.5]))  # repeated index: the last error wins
    assert rb.tree.leaves()[:2].tolist() == [3.0, 1.0]
    for t in range(2, 6):  # ring overwrite: slots 0, 1 get the max priority again
        step(rb, [t], [0], [0], [t + 1])
    assert rb.tree.leaves().tolist() == [3.0, 3.0, 3.0, 3.0]
    assert rb.tree.total == 12.0


def test_per_sampling_frequencies_match_priorities():
    alpha, n_items = 0.6, 8
    rb = make(capacity=n_items, alpha=alpha, eps=1e-6, beta_steps=10, seed=3)
    for t in range(n_items):
        step(rb, [t], [t], [0], [t])
    td = np.array([0.1, 0.5, 1.0, 2.0, 4.0, 0.0, 3.0, 8.0])
    rb.update_priorities(np.arange(n_items), td)
    p = (np.abs(td) + 1e-6) ** alpha
    probs = p / p.sum()
    n_batches, B = 5000, 8
    counts = np.zeros(n_items)
    for _ in range(n_batches):
        counts += np.bincount(rb.sample(B)["indices"], minlength=n_items)
    n = n_batches * B
    se = np.sqrt(probs * (1 - probs) / n)
    assert np.all(np.abs(counts / n - probs) < 4 * se), (counts / n, probs)
    chi2 = ((counts - n * probs) ** 2 / (n * probs)).sum()
    assert chi2 < 24.3  # 99.9% quantile of chi-square with 7 degrees of freedom


def test_importance_weights_by_hand():
    # alpha = 0.5, eps = 0.5: td errors 0.5, 3.5, 15.5, 3.5 give p = 1, 2, 4, 2; P = p / 9; N = 4.
    rb = make(capacity=4, alpha=0.5, eps=0.5, beta_start=0.5, beta_end=0.5, beta_steps=1)
    for t in range(4):
        step(rb, [t], [t], [0], [t])
    rb.update_priorities(np.arange(4), np.array([0.5, 3.5, 15.5, 3.5]))
    P = np.array([1, 2, 4, 2]) / 9
    w = (4 * P) ** -0.5
    w /= w.max()
    np.testing.assert_allclose(w, [1, 2**-0.5, 0.5, 2**-0.5])
    seen = set()
    for _ in range(20):
        b = rb.sample(4)
        np.testing.assert_allclose(b["weights"], w[b["indices"]], rtol=1e-6)
        seen |= set(b["indices"].tolist())
    assert seen == {0, 1, 2, 3}


def test_beta_annealing_endpoints():
    rb = make(capacity=4, alpha=1.0, eps=0.5, beta_start=0.4, beta_end=1.0, beta_steps=10)
    for t in range(4):
        step(rb, [t], [t], [0], [t])
    rb.update_priorities(np.arange(4), np.array([0.5, 1.5, 3.5, 1.5]))  # p = 1, 2, 4, 2
    assert rb.beta == pytest.approx(0.4)
    betas = []
    for _ in range(15):
        beta = rb.beta
        b = rb.sample(4)
        p = np.array([1.0, 2.0, 4.0, 2.0])[b["indices"]]
        np.testing.assert_allclose(b["weights"], p ** (-beta), rtol=1e-6)
        betas.append(beta)
    assert betas[0] == pytest.approx(0.4)
    assert betas[5] == pytest.approx(0.7)
    assert betas[10] == pytest.approx(1.0) and betas[14] == pytest.approx(1.0)
    assert rb.sample_calls == 15


def test_vectorized_sampling_from_a_large_buffer():
    # 100k transitions from 1000 envs; sampling 256 is a handful of numpy calls (no per-sample loop).
    N = 1000
    for rb in (make(capacity=100_000, num_envs=N), make(capacity=100_000, num_envs=N, beta_steps=100)):
        obs, no = np.zeros((N, 1), np.float32), np.zeros(N, bool)
        for t in range(100):
            rb.add(obs + t, np.zeros(N, np.int64), np.ones(N), obs + t + 1, no, no)
        assert len(rb) == 100_000
        b = rb.sample(256)
        assert b["obs"].shape == (256, 1) and b["indices"].shape == (256,)
        assert b["indices"].max() < 100_000
    assert rb.tree.depth == 17  # the descent is 17 vectorized steps over the whole batch


# ------------------------------------------------------------------------------------------- errors


def test_constructor_errors_name_the_argument():
    with pytest.raises(ValueError, match="capacity must be an integer >= 1, got 0"):
        make(capacity=0)
    with pytest.raises(ValueError, match="n_step must be an integer >= 1, got 0"):
        make(n_step=0)
    with pytest.raises(ValueError, match="num_envs must be an integer >= 1, got 0"):
        make(num_envs=0)
    for bad in (1.5, -0.1):
        with pytest.raises(ValueError, match=rf"gamma must be in \[0, 1\], got {bad}"):
            make(gamma=bad)
    with pytest.raises(ValueError, match="alpha must be >= 0, got -1"):
        make(alpha=-1, beta_steps=10)
    with pytest.raises(ValueError, match="beta_steps must be an integer >= 1, got 0"):
        make(beta_steps=0)
    with pytest.raises(ValueError, match=r"beta_start must be in \[0, 1\], got 2"):
        make(beta_start=2, beta_steps=10)
    with pytest.raises(ValueError, match="eps must be > 0, got 0"):
        make(eps=0, beta_steps=10)
    with pytest.raises(TypeError):
        PrioritizedReplayBuffer(8, (1,), np.float32, (), np.int64)  # beta_steps is required


@pytest.mark.parametrize("per", [{}, {"beta_steps": 10}])
def test_sampling_errors(per):
    rb = make(capacity=8, **per)
    with pytest.raises(ValueError, match="cannot sample batch_size=4 from an empty replay buffer"):
        rb.sample(4)
    step(rb, [0], [0], [0], [1])
    step(rb, [1], [0], [0], [2])
    b = rb.sample(5)  # more than the 2 stored: with replacement
    assert b["indices"].shape == (5,) and set(b["indices"].tolist()) <= {0, 1}
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        rb.sample(0)


def test_add_and_update_errors():
    rb = make(capacity=8, num_envs=2, beta_steps=10)
    with pytest.raises(ValueError, match=r"obs must have shape \(2, 1\) \(num_envs first\), got \(1, 1\)"):
        step(rb, [0], [0], [0], [0])
    with pytest.raises(ValueError, match=r"rewards must have shape \(2,\)"):
        rb.add(np.zeros((2, 1)), np.zeros(2), np.zeros(3), np.zeros((2, 1)), np.zeros(2), np.zeros(2))
    step(rb, [0, 1], [0, 0], [0, 0], [1, 2])
    with pytest.raises(ValueError, match=r"indices must be in \[0, 2\), got values in \[0, 5\]"):
        rb.update_priorities(np.array([0, 5]), np.zeros(2))
    with pytest.raises(ValueError, match="same length"):
        rb.update_priorities(np.array([0, 1]), np.zeros(3))
    with pytest.raises(ValueError, match="td_errors must be finite"):
        rb.update_priorities(np.array([0]), np.array([np.nan]))
