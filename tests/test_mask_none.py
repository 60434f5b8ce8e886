"""``mask=None`` (every element valid) gives the all-ones mask's values and gradients, bit for bit.

The classic-control algorithms pass ``None`` (their batches have no padding) to skip the selects and weight
products; their results must not move by a single ulp, or runs would stop reproducing."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from advantage.math import (
    POLICY_LOSSES,
    VALUE_LOSSES,
    aggregate,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)

# On every supported torch version too (benchmarks/torch_versions.py): a fast path against its reference.
pytestmark = pytest.mark.torch_versions

SHAPES = [(1,), (5,), (64,), (3, 7), (8, 128)]
DTYPES = [torch.float32, torch.float64]


def _inputs(shape: tuple[int, ...], dtype: torch.dtype, seed: int, k: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g, dtype=dtype) for _ in range(k)]


def _same(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a, b), (a - b).abs().max()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions_and_whitening(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    (x,) = _inputs(shape, dtype, 0, 1)
    ones = torch.ones(shape)
    _same(masked_sum(x, None), masked_sum(x, ones))
    _same(masked_mean(x, None), masked_mean(x, ones))
    _same(masked_mean(x, None, dim=-1), masked_mean(x, ones, dim=-1))
    for unbiased in (True, False):
        _same(masked_var(x, None, unbiased), masked_var(x, ones, unbiased))
    for shift in (True, False):
        _same(masked_whiten(x, None, shift), masked_whiten(x, ones, shift))
    for mode in ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"):
        _same(aggregate(x, None, mode, max_len=9), aggregate(x, ones, mode, max_len=9))
        _same(aggregate(x, None, mode, 4.0, max_len=9), aggregate(x, ones, mode, 4.0, max_len=9))


LOSSES = {
    "pg": POLICY_LOSSES["pg"],
    "ppo_clip": POLICY_LOSSES["ppo_clip"],
    "ppo_clip_dual": partial(POLICY_LOSSES["ppo_clip"], clip_high=0.28, dual_clip=3.0),
    "ppo_penalty": partial(POLICY_LOSSES["ppo_penalty"], beta=0.3),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_policy_losses(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    logp, old, adv = _inputs(shape, dtype, 1, 3)
    logp, old = logp * 0.3 - 1.0, logp.detach() * 0.3 - 1.0 + 0.2 * old  # ratios near 1, some clipped
    results = []
    for mask in (None, torch.ones(shape)):
        lp = logp.detach().clone().requires_grad_()
        loss, metrics = LOSSES[name](lp, old, adv, mask)
        total = aggregate(loss, mask, "token_mean")
        total.backward()
        results.append((loss.detach(), total.detach(), lp.grad, metrics))
    (l0, t0, g0, m0), (l1, t1, g1, m1) = results
    _same(l0, l1)
    _same(t0, t1)
    assert g0 is not None and g1 is not None
    _same(g0, g1)
    assert m0.keys() == m1.keys()
    for k in m0:
        _same(m0[k], m1[k])


@pytest.mark.parametrize("name", sorted(VALUE_LOSSES))
@pytest.mark.parametrize("shape", SHAPES)
def test_value_losses(name: str, shape: tuple[int, ...]) -> None:
    v, old, ret = _inputs(shape, torch.float32, 2, 3)
    grads = []
    for mask in (None, torch.ones(shape, dtype=torch.bool)):
        vv = v.detach().clone().requires_grad_()
        loss = VALUE_LOSSES[name](vv, old, ret * 2, mask)
        aggregate(loss, mask, "token_mean").backward()
        grads.append((loss.detach(), vv.grad))
    _same(grads[0][0], grads[1][0])
    _same(grads[0][1], grads[1][1])


def test_none_mask_is_not_a_padding_mask() -> None:
    """``None`` counts every element; a real mask still drops padding (and its NaN)."""
    x = torch.tensor([1.0, 2.0, float("nan")])
    assert torch.isnan(masked_mean(x, None))
    assert masked_mean(x, torch.tensor([1.0, 1.0, 0.0])) == 1.5
