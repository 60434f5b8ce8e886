"""advantage.optim, the one optimizer step (zero_grad, clip_grad_norm, step): bit for bit what
torch.optim.AdamW/Adam(fused=True), torch.optim.RMSprop(foreach=True) and torch.nn.utils.clip_grad_norm_ do,
state and checkpoints included; torch's own path wherever they do not apply; and every fallback (a torch
without the private kernels, the fast path switched off, hook registries elsewhere) forced and checked
against the reference."""

from __future__ import annotations

import copy

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
    optimizer_step(opts[0])
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
    optimizer_step(opt)
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


class Registry:
    """A hook registry of another type than the dict read by eager.hooked (as another torch might keep)."""

    def values(self):
        return []


FALLBACKS = {
    # a torch without the fused kernels / the foreach kernels (FEATURES probed at import)
    "no fused kernels": lambda mp, opt: mp.setitem(optim.FEATURES, "fused_adam", False),
    "no foreach kernels": lambda mp, opt: mp.setitem(optim.FEATURES, "foreach", False),
    # the fast paths switched off (trainer.kernels=reference)
    "kernels=reference": lambda mp, opt: mp.setattr(kernels, "_on", frozenset()),
    # the step-hook registries not where they are read (another torch): torch's step, hooks honoured
    "hook registries elsewhere": lambda mp, opt: mp.setattr(opt, "_optimizer_step_pre_hooks", Registry()),
}


@pytest.mark.parametrize("fallback", sorted(FALLBACKS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_fallback_gives_the_reference_result(fallback, kind, monkeypatch):
    """Each fallback forced, the step and the clip equal torch's own (opt.step(), clip_grad_norm_) bit for
    bit, and torch's own functions were what ran (spied on)."""
    ours, theirs = net(5), net(5)
    opts = [KINDS[kind](params_of(m), 0.0) for m in (ours, theirs)]
    steps = []
    for m in (ours, theirs):
        backward(m, 0)
    reference_clip = nn.utils.clip_grad_norm_(params_of(theirs), 0.05)
    opts[1].step()
    FALLBACKS[fallback](monkeypatch, opts[0])
    real = opts[0].step
    monkeypatch.setattr(opts[0], "step", lambda *a, **k: steps.append(1) or real(*a, **k))
    clips = []
    torch_clip = nn.utils.clip_grad_norm_
    monkeypatch.setattr(nn.utils, "clip_grad_norm_", lambda *a, **k: clips.append(1) or torch_clip(*a, **k))
    with torch.no_grad():
        got_clip = clip_grad_norm(params_of(ours), 0.05)
    optimizer_step(opts[0])
    assert torch.equal(got_clip, reference_clip)
    for a, b in zip(params_of(ours), params_of(theirs), strict=True):
        assert torch.equal(a, b)
    took_torch_step = bool(steps)
    # the fused kernels concern Adam/AdamW only; the foreach kernels RMSprop's step (and the clip)
    unconcerned = {
        ("no fused kernels", "rmsprop"),
        ("no foreach kernels", "adam"),
        ("no foreach kernels", "adamw"),
    }
    if (fallback, kind) not in unconcerned:
        assert took_torch_step, f"{fallback}: the fast step ran"
    if fallback in ("no foreach kernels", "kernels=reference"):
        assert clips, f"{fallback}: the fast clip ran"


def test_the_fast_path_does_not_call_torch_step(monkeypatch):
    """The converse of the fallbacks: with every feature present the kernels are called directly."""
    m = net(6)
    opt = KINDS["adam"](params_of(m), 0.0)
    monkeypatch.setattr(opt, "step", lambda *a, **k: pytest.fail("torch's step called"))
    backward(m, 0)
    optimizer_step(opt)
    assert int(opt.state[m[0].weight]["step"]) == 1


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
    optimizer_step(opts[0])  # not fused: torch's step
    opts[1].step()
    for a, b in zip(params_of(ours), params_of(theirs), strict=True):
        assert torch.equal(a, b)


def test_eager_step_equals_torch_step_and_falls_back(monkeypatch):
    """The no_dynamo path (installed by the CLI only): the undecorated step equals opt.step(); without the
    install, with hooks, or with the hook registries elsewhere it is opt.step() itself."""
    monkeypatch.setattr(eager, "_installed", False)
    calls = []
    for installed in (False, True):
        monkeypatch.setattr(eager, "_installed", installed)
        ours, theirs = net(8), net(8)
        opts = [torch.optim.Adam(params_of(m), lr=1e-2) for m in (ours, theirs)]
        real = opts[0].step
        monkeypatch.setattr(
            opts[0], "step", lambda *a, r=real, i=installed, **k: calls.append(i) or r(*a, **k)
        )
        for m in (ours, theirs):
            backward(m, 2)
        eager.step(opts[0])
        opts[1].step()
        for a, b in zip(params_of(ours), params_of(theirs), strict=True):
            assert torch.equal(a, b)
    assert calls == [False] or "torch._dynamo" in __import__("sys").modules
    assert not eager.hooked(opts[0])
    monkeypatch.setattr(TORCH_OPTIMIZER, "_global_optimizer_post_hooks", Registry())
    assert eager.hooked(opts[0])


def test_the_lm_trainers_step_through_optim():
    """Exactly one place steps optimizers: no trainer calls .step() of an optimizer itself."""
    import pathlib
    import re

    src = pathlib.Path(optim.__file__).resolve().parents[1]
    stepped = []
    for path in sorted(src.rglob("*.py")):
        if path.is_relative_to(src / "optim"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\b(opt|optimizer|[a-z_]*_opt)\.step\(\)", line):
                stepped.append(f"{path.relative_to(src)}:{n}: {line.strip()}")
    assert not stepped, stepped


def test_private_torch_names_live_in_optim_and_lm_only():
    import pathlib
    import re

    src = pathlib.Path(optim.__file__).resolve().parents[1]
    private = re.compile(r"torch\._[a-z]|torch\.ops\.aten|\._opt_called|_global_optimizer_|_optimizer_step_")
    found = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        if rel.parts[0] in ("optim", "lm"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if private.search(line):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, found
