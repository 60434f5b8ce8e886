"""The training-loop helpers of advantage.nn.lean (zero_grad, clip_grad_norm, optimizer_step): bit for bit
what torch.optim.AdamW/Adam(fused=True), torch.optim.RMSprop(foreach=True) and
torch.nn.utils.clip_grad_norm_ do, state and checkpoints included, and torch's own path wherever they do
not apply."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from advantage.nn.lean import adamw_step, clip_grad_norm, optimizer_step, zero_grad


def net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3), nn.LayerNorm(3))


def backward(model: nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(11, 5, generator=g)
    (model(x) * torch.randn(11, 3, generator=g)).square().sum().backward()


def params_of(model: nn.Module) -> list[torch.Tensor]:
    return [p for p in model.parameters() if p.requires_grad]


KINDS = {
    "adamw": lambda ps, wd: torch.optim.AdamW(ps, lr=3e-3, betas=(0.9, 0.98), weight_decay=wd, fused=True),
    "adam": lambda ps, wd: torch.optim.Adam(ps, lr=3e-3, eps=1e-5, weight_decay=wd, fused=True),
    # A2C's: SB3's alpha and eps; weight decay is not on the lean path (torch's step then)
    "rmsprop": lambda ps, wd: torch.optim.RMSprop(
        ps, lr=7e-4, alpha=0.99, eps=1e-5, weight_decay=wd, foreach=True
    ),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("max_norm", [0.05, 1e3])  # clipping and not
def test_steps_equal_torch_bit_for_bit(kind, weight_decay, max_norm, monkeypatch):
    ours, theirs = net(), net()
    opts = [KINDS[kind](params_of(m), weight_decay) for m in (ours, theirs)]
    lean = not (kind == "rmsprop" and weight_decay)

    def torch_step(*args, **kwargs):
        raise AssertionError("optimizer_step called torch's step: the comparison would prove nothing")

    if lean:
        monkeypatch.setattr(opts[0], "step", torch_step)
    for step in range(5):
        opts[1].param_groups[0]["lr"] = opts[0].param_groups[0]["lr"] = 3e-3 * (1 + step)  # a schedule
        zero_grad(params_of(ours))
        opts[1].zero_grad(set_to_none=True)
        for m in (ours, theirs):
            backward(m, step)
        norms = (
            clip_grad_norm(params_of(ours), max_norm),
            nn.utils.clip_grad_norm_(params_of(theirs), max_norm),
        )
        assert torch.equal(norms[0], norms[1])
        optimizer_step(opts[0])
        opts[1].step()
        for a, b in zip(params_of(ours), params_of(theirs), strict=True):
            assert torch.equal(a, b) and torch.equal(a.grad, b.grad)
    assert all(p.grad is not None for p in params_of(ours))
    zero_grad(params_of(ours))
    assert all(p.grad is None for p in params_of(ours))
    # the same state, so a checkpoint of one restores into the other
    sa, sb = opts[0].state_dict(), opts[1].state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    for k in sb["state"]:
        for name, t in sb["state"][k].items():
            assert torch.equal(sa["state"][k][name], t) and sa["state"][k][name].dtype == t.dtype, name
    resumed = net()
    resumed.load_state_dict(ours.state_dict())
    opt = KINDS[kind](params_of(resumed), 0.5)
    opt.load_state_dict(copy.deepcopy(sa))
    opts[1].zero_grad(set_to_none=True)
    backward(resumed, 9)
    backward(theirs, 9)
    optimizer_step(opt)
    opts[1].step()
    for a, b in zip(params_of(resumed), params_of(theirs), strict=True):
        assert torch.equal(a, b)


def test_parameters_without_a_gradient_are_skipped_as_torch_skips_them():
    ours, theirs = net(1), net(1)
    opts = [torch.optim.AdamW(params_of(m), lr=1e-2, fused=True) for m in (ours, theirs)]
    for m in (ours, theirs):
        m[0].requires_grad_(False)  # frozen after the optimizer was built: no gradient, no state
        backward(m, 0)
    adamw_step(opts[0])
    opts[1].step()
    assert not opts[0].state[ours[0].weight] and not opts[1].state[theirs[0].weight]
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)


def test_other_optimizers_and_settings_take_torch_step(monkeypatch):
    calls = []

    def counted(opt):  # record calls of opt.step (on the instance: torch wraps the class's step)
        real = opt.step

        def step(*args, **kwargs):
            calls.append(type(opt).__name__)
            return real(*args, **kwargs)

        monkeypatch.setattr(opt, "step", step)

    for make in (
        lambda ps: torch.optim.AdamW(ps, lr=1e-2),  # not fused
        lambda ps: torch.optim.AdamW(ps, lr=1e-2, fused=True, amsgrad=True),
        lambda ps: torch.optim.Adam(ps, lr=1e-2),  # not fused
        lambda ps: torch.optim.SGD(ps, lr=1e-2),
        lambda ps: torch.optim.RMSprop(ps, lr=1e-2),  # the per-tensor path (foreach unset on CPU)
        lambda ps: torch.optim.RMSprop(ps, lr=1e-2, foreach=True, momentum=0.9),
        lambda ps: torch.optim.RMSprop(ps, lr=1e-2, foreach=True, centered=True),
        lambda ps: torch.optim.AdamW([{"params": ps[:2]}, {"params": ps[2:]}], lr=1e-2, fused=True),
    ):
        ours, theirs = net(2), net(2)
        opts = [make(params_of(m)) for m in (ours, theirs)]
        for m in (ours, theirs):
            backward(m, 0)
        calls.clear()
        counted(opts[0])
        optimizer_step(opts[0])
        assert calls, "torch's step was not called"
        opts[1].step()
        for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
            assert torch.equal(a, b)
    # a step hook must run: torch's step
    m = net(3)
    opt = torch.optim.AdamW(params_of(m), lr=1e-2, fused=True)
    seen = []
    opt.register_step_post_hook(lambda *_: seen.append(1))
    backward(m, 0)
    adamw_step(opt)
    assert seen == [1]


def test_clip_with_mixed_dtypes_is_torch_clip():
    m = net(4)
    m[2].double()
    ref = copy.deepcopy(m)
    for x in (m, ref):
        for p in x.parameters():
            p.grad = torch.ones_like(p)
    got, want = clip_grad_norm(params_of(m), 0.5), nn.utils.clip_grad_norm_(params_of(ref), 0.5)
    assert torch.equal(got, want)
    for a, b in zip(m.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


def test_adamw_step_is_optimizer_step():
    assert adamw_step is optimizer_step
