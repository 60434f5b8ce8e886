"""build_batch: a rollout whose steps are all valid is flattened without an index, to the same batch an
index of every step gives, and never as a view of the collector's buffers (the next rollout overwrites
them while a batch may still be in use)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from advantage.rollout.onpolicy import Rollout, build_batch


def _rollout(T: int, N: int, valid: np.ndarray) -> Rollout:
    g = torch.Generator().manual_seed(T * 10 + N)
    rng = np.random.default_rng(T + N)
    return Rollout(
        torch.randn(T, N, 3, generator=g),
        torch.randint(0, 4, (T, N), generator=g),
        torch.randn(T, N, generator=g),
        torch.randn(T, N, generator=g),
        rng.standard_normal((T, N)).astype(np.float32),
        rng.random((T, N)) < 0.2,
        rng.random((T, N)) < 0.1,
        valid,
    )


@pytest.mark.parametrize("env_major", [False, True])
@pytest.mark.parametrize(("T", "N"), [(5, 1), (5, 8), (16, 3)])
def test_all_valid_batch_equals_indexed_and_owns_its_memory(T, N, env_major):
    ro = _rollout(T, N, np.ones((T, N), bool))
    last = torch.randn(N)
    fast = build_batch(ro, last, 0.99, 0.95, None, env_major)
    # every step, in time-major (or env-major) order
    order = (lambda x: x.transpose(0, 1)) if env_major else (lambda x: x)
    for field in ("obs", "actions", "logp", "values"):
        x = order(torch.as_tensor(getattr(ro, field)))
        want = x.reshape(T * N, *x.shape[2:])
        got = getattr(fast, field)
        assert torch.equal(got, want), field
        assert (
            got.untyped_storage().data_ptr()
            != torch.as_tensor(getattr(ro, field)).untyped_storage().data_ptr()
        )
    before = fast.obs.clone()
    ro.obs.add_(1.0)  # the collector writes its next rollout
    assert torch.equal(fast.obs, before)


def test_batch_with_reset_steps_keeps_only_valid_steps():
    T, N = 6, 2
    valid = np.ones((T, N), bool)
    valid[2, 1] = valid[4, 0] = False
    ro = _rollout(T, N, valid)
    b = build_batch(ro, torch.randn(N), 0.99, 0.95)
    assert b.obs.shape[0] == valid.sum()
    keep = torch.as_tensor(valid).flatten().nonzero().squeeze(-1)
    assert torch.equal(b.obs, ro.obs.reshape(T * N, 3)[keep])
    assert all(getattr(b, f.name).shape[0] == valid.sum() for f in dataclasses.fields(b))
