"""advantage.optim, the one optimizer step (zero_grad, clip_grad_norm, step, adam): bit for bit what
torch.optim's step and torch.nn.utils.clip_grad_norm_ do, state and checkpoints included, with the no_dynamo
path installed (as the advantage command does) and without; every fallback of the two fast paths (the
clip's: no foreach kernels, switched off, mixed dtypes; the step's: not installed, switched off, torch's
compiler already loaded, hook registries elsewhere) forced; exactly one place steps optimizers; private
torch names only in optim/ and lm/."""

from __future__ import annotations

import copy
import pathlib
import re
import sys

import pytest
import torch
from torch import nn
from torch.optim import optimizer as TORCH_OPTIMIZER

from advantage import kernels, optim
from advantage.optim import clip_grad_norm, eager, zero_grad
from advantage.optim import step as optimizer_step

# On every supported torch version too (benchmarks/torch_versions.py): a fast path against its reference.
pytestmark = pytest.mark.torch_versions


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
    "adam-plain": lambda ps, wd: torch.optim.Adam(ps, lr=3e-3, eps=1e-5, weight_decay=wd),
    "rmsprop": lambda ps, wd: torch.optim.RMSprop(
        ps, lr=7e-4, alpha=0.99, eps=1e-5, weight_decay=wd, foreach=True
    ),
    "sgd": lambda ps, wd: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, weight_decay=wd),
}


@pytest.fixture(params=["installed", "not installed"])
def installed(request, monkeypatch):
    """The no_dynamo path as the advantage command installs it, and as a library import leaves torch."""
    if request.param == "installed":
        eager.install()
    monkeypatch.setattr(eager, "_installed", request.param == "installed")
    return request.param == "installed"


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("max_norm", [0.05, 1e3, 0.0])  # clipping, not clipping, clip off
def test_steps_equal_torch_bit_for_bit(kind, weight_decay, max_norm, installed):
    ours, theirs = net(), net()
    opts = [KINDS[kind](params_of(m), weight_decay) for m in (ours, theirs)]
    for step in range(5):
        opts[1].param_groups[0]["lr"] = opts[0].param_groups[0]["lr"] = 3e-3 * (1 + step)  # a schedule
        zero_grad(params_of(ours))
        opts[1].zero_grad(set_to_none=True)
        for m in (ours, theirs):
            backward(m, step)
        got = clip_grad_norm(params_of(ours), max_norm)
        if max_norm > 0:
            assert torch.equal(got, nn.utils.clip_grad_norm_(params_of(theirs), max_norm))
        else:
            assert float(got) == 0.0
        optimizer_step(opts[0])
        opts[1].step()
        for a, b in zip(params_of(ours), params_of(theirs), strict=True):
            assert torch.equal(a, b) and torch.equal(a.grad, b.grad)
    zero_grad(params_of(ours))
    assert all(p.grad is None for p in params_of(ours))
    # the same state, so a checkpoint of one restores into the other
    sa, sb = opts[0].state_dict(), opts[1].state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    for k in sb["state"]:
        for name, t in sb["state"][k].items():
            if torch.is_tensor(t):
                assert torch.equal(sa["state"][k][name], t) and sa["state"][k][name].dtype == t.dtype, name
    resumed = net()
    resumed.load_state_dict(ours.state_dict())
    opt = KINDS[kind](params_of(resumed), weight_decay)
    opt.load_state_dict(copy.deepcopy(sa))
    opts[1].zero_grad(set_to_none=True)
    backward(resumed, 9)
    backward(theirs, 9)
    optimizer_step(opt)
    opts[1].step()
    for a, b in zip(params_of(resumed), params_of(theirs), strict=True):
        assert torch.equal(a, b)


def test_parameters_without_a_gradient_are_skipped_as_torch_skips_them(installed):
    ours, theirs = net(1), net(1)
    opts = [torch.optim.AdamW(params_of(m), lr=1e-2, fused=True) for m in (ours, theirs)]
    for m in (ours, theirs):
        m[0].requires_grad_(False)  # frozen after the optimizer was built: no gradient, no state
        backward(m, 0)
    optimizer_step(opts[0])
    opts[1].step()
    assert not opts[0].state[ours[0].weight] and not opts[1].state[theirs[0].weight]
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)


def test_step_hooks_run(installed):
    m = net(3)
    opt = torch.optim.AdamW(params_of(m), lr=1e-2, fused=True)
    seen = []
    opt.register_step_pre_hook(lambda *_: seen.append("pre"))
    opt.register_step_post_hook(lambda *_: seen.append("post"))
    backward(m, 0)
    optimizer_step(opt)
    assert seen == ["pre", "post"]


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


@pytest.mark.parametrize(
    "fallback",
    ["none", "no foreach kernels", "kernels=reference", "mixed dtypes"],
)
def test_the_clip_fast_path_and_its_fallbacks_equal_torchs_clip(fallback, monkeypatch):
    """The clip's fast path (torch's foreach kernels called directly) and each fallback give torch's
    clip_grad_norm_ bit for bit; the fallbacks call clip_grad_norm_ itself (spied), the fast path does not."""
    m = net(6)
    backward(m, 3)
    if fallback == "mixed dtypes":  # one layer in float64, its gradient too
        m[2].double()
        m[2].weight.grad, m[2].bias.grad = torch.randn_like(m[2].weight), torch.randn_like(m[2].bias)
    ref = copy.deepcopy(m)
    for p, q in zip(m.parameters(), ref.parameters(), strict=True):
        q.grad = p.grad.clone()
    want = nn.utils.clip_grad_norm_(params_of(ref), 0.05)
    if fallback == "no foreach kernels":
        monkeypatch.setitem(optim.FEATURES, "foreach", False)
    if fallback == "kernels=reference":
        monkeypatch.setattr(kernels, "_on", frozenset())
    calls = []
    torch_clip = nn.utils.clip_grad_norm_
    monkeypatch.setattr(nn.utils, "clip_grad_norm_", lambda *a, **k: calls.append(1) or torch_clip(*a, **k))
    got = clip_grad_norm(params_of(m), 0.05)
    assert torch.equal(got, want)
    for a, b in zip(m.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
    assert bool(calls) == (fallback != "none"), fallback


class Registry:
    """A hook registry of another type than the dict eager.hooked reads (as another torch might keep)."""

    def values(self):
        return []


FALLBACKS = {
    # the advantage command did not install it (a program that imports the library)
    "not installed": lambda mp, opt: mp.setattr(eager, "_installed", False),
    # switched off (trainer.kernels=reference)
    "kernels=reference": lambda mp, opt: mp.setattr(kernels, "_on", frozenset()),
    # torch's compiler module already imported: nothing left to save
    "compiler loaded": lambda mp, opt: mp.setattr(eager, "_DYNAMO", "torch"),  # a name that is loaded
    # the step-hook registries not where they are read (another torch)
    "hook registries elsewhere": lambda mp, opt: mp.setattr(opt, "_optimizer_step_pre_hooks", Registry()),
    "global registry elsewhere": lambda mp, opt: mp.setattr(
        TORCH_OPTIMIZER, "_global_optimizer_post_hooks", Registry()
    ),
}


@pytest.mark.parametrize("fallback", sorted(FALLBACKS))
def test_every_fallback_is_torchs_own_step(fallback, monkeypatch):
    """Each fallback forced: ``opt.step()`` itself runs (spied on the instance), with the reference result;
    with none forced the undecorated step runs instead, with the same result."""
    eager.install()
    monkeypatch.setattr(eager, "_installed", True)
    for forced in (False, True):
        ours, theirs = net(5), net(5)
        opts = [KINDS["adam"](params_of(m), 0.0) for m in (ours, theirs)]
        for m in (ours, theirs):
            backward(m, 0)
        opts[1].step()
        with monkeypatch.context() as mp:
            if forced:
                FALLBACKS[fallback](mp, opts[0])
            calls = []
            dynamo_loaded = "torch._dynamo" in sys.modules  # then nothing is left to save: torch's step
            real = opts[0].step
            mp.setattr(opts[0], "step", lambda *a, c=calls, r=real, **k: c.append(1) or r(*a, **k))
            optimizer_step(opts[0])
        for a, b in zip(params_of(ours), params_of(theirs), strict=True):
            assert torch.equal(a, b)
        assert bool(calls) == (forced or dynamo_loaded), (fallback, forced)


def test_adam_is_fused_where_torch_has_the_kernel_and_plain_otherwise(monkeypatch):
    ps = params_of(net(7))
    assert optim.adam(ps, 1e-3).param_groups[0]["fused"] is True
    assert type(optim.adam(ps, 1e-3, decoupled=True)) is torch.optim.AdamW
    monkeypatch.setattr(optim, "_fused_cpu", lambda: False)  # a torch older than CPU fused Adam
    plain = optim.adam(ps, 1e-3)
    assert not plain.param_groups[0]["fused"]
    ours, theirs = net(7), net(7)
    opts = [optim.adam(params_of(m), 1e-3) for m in (ours, theirs)]
    for m in (ours, theirs):
        backward(m, 1)
    optimizer_step(opts[0])
    opts[1].step()
    for a, b in zip(params_of(ours), params_of(theirs), strict=True):
        assert torch.equal(a, b)


SRC = pathlib.Path(optim.__file__).resolve().parents[1]


def test_exactly_one_place_steps_optimizers():
    """No module but advantage.optim calls .step() of an optimizer itself."""
    stepped = []
    for path in sorted(SRC.rglob("*.py")):
        if path.is_relative_to(SRC / "optim"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\b(opt|optimizer|[a-z_]*_opt)\.step\(\)", line):
                stepped.append(f"{path.relative_to(SRC)}:{n}: {line.strip()}")
    assert not stepped, stepped


def test_private_torch_names_live_in_optim_and_lm_only():
    private = re.compile(r"torch\._[a-z]|torch\.ops\.aten|\._opt_called|_global_optimizer_|_optimizer_step_")
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel.parts[0] in ("optim", "lm"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if private.search(line):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, found
