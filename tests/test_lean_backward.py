"""The lean decoder's training node (advantage.lm.lean_backward.Stack): its hand-written backward against
finite differences (float64 gradcheck), against the autograd lean path and against the transformers forward
(fp32, 1e-5), on packed and left-padded batches, with and without the ``rows`` read-out; and the cases
where it must step aside."""

from __future__ import annotations

import dataclasses
import importlib

import pytest
import torch

pytest.importorskip("transformers")

from advantage.lm.lean import lean_decoder, padded_causal_mask
from advantage.lm.lean_backward import Stack
from advantage.lm.model import build_char_tokenizer, build_scratch_model, position_ids_from_mask
from advantage.lm.packing import pack_prompts

# On every supported torch version too (benchmarks/torch_versions.py): a fast path against its reference.
pytestmark = pytest.mark.torch_versions

# (arch, kv heads of 4): Qwen2 has q/k/v biases, Llama none; kv < 4 is grouped-query attention
ARCHS = [("qwen2", 4), ("qwen2", 2), ("llama", 4), ("llama", 1)]


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer("0123456789+= ")


def model_of(tok, arch: str, kv: int, *, hidden: int = 32, inter: int | None = None, seed: int = 0):
    return build_scratch_model(
        arch, tok, hidden_size=hidden, layers=2, heads=4, kv_heads=kv, intermediate_size=inter, seed=seed
    )


def padded(tok, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A left-padded batch ``[4, 9]``: ids, positions from the mask, the additive mask (fp32)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, len(tok), (4, 9), generator=g)
    keep = torch.ones_like(ids)
    for row, pad in enumerate((0, 3, 6, 1)):
        keep[row, :pad] = 0
    return ids, position_ids_from_mask(keep), padded_causal_mask(keep, torch.float32)


def packed(tok, row_length: int, seed: int = 0):
    """Five prompts with one to three responses each, packed (:func:`pack_prompts`) at ``row_length``."""
    g = torch.Generator().manual_seed(seed)

    def seq(n: int) -> list[int]:
        return torch.randint(4, len(tok), (n,), generator=g).tolist()

    groups = [
        (seq(p), [seq(r) for r in rs])
        for p, rs in [(3, [2, 4]), (5, [1]), (2, [3, 3, 2]), (4, [5]), (1, [2])]
    ]
    return pack_prompts(groups, tok.pad_token_id, torch.float32, row_length=row_length)


def loss_of(flat: torch.Tensor, weights: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """``Σ_n (h_n · w)²`` over the kept rows of ``flat`` ``[N, H]`` (pads' hidden states are never read)."""
    y = (flat @ weights).square()
    return (y if keep is None else y[keep]).sum()


def run(model, ids, pos, mask, rows, weights, keep) -> tuple[torch.Tensor, dict[str, torch.Tensor], str]:
    """Hidden states (at ``rows``, or all), the parameter gradients of :func:`loss_of` and the autograd
    node that produced them."""
    lean = lean_decoder(model)
    model.zero_grad(set_to_none=True)
    h = lean.hidden(ids, pos, mask, rows=rows)
    flat = h.reshape(-1, h.shape[-1])
    loss_of(flat, weights, keep).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return flat.detach(), grads, node_of(h)


def node_of(h: torch.Tensor) -> str:
    """The autograd node that computed ``h`` (looking through a view or a row selection)."""
    fn = h.grad_fn
    if type(fn).__name__ in ("ViewBackward0", "IndexBackward0"):
        fn = fn.next_functions[0][0]
    return type(fn).__name__


def assert_close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], tol: float = 1e-5) -> None:
    assert got.keys() == want.keys()
    for name, g in want.items():
        assert (got[name] - g).abs().max() <= tol * max(1.0, g.abs().max().item()), name


@pytest.mark.parametrize(("arch", "kv"), ARCHS)
@pytest.mark.parametrize("batch", ["padded", "packed", "packed_rows"])
def test_gradcheck_float64(tok, arch, kv, batch):
    """Finite differences of every parameter (embedding, norms, projections and biases, final norm), in
    random directions (``fast_mode``: one check per input instead of one per Jacobian entry)."""
    model = model_of(tok, arch, kv, hidden=16, inter=24).double()
    with torch.no_grad():  # O(1) weights: the RMSNorms and the softmax away from their flat regions
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name)), dtype=p.dtype))
            if name.endswith("norm.weight"):
                p.mul_(0.3).add_(1.0)
            elif p.ndim == 2 and "embed" not in name:
                p.mul_(p.shape[1] ** -0.5)
    lean = lean_decoder(model)
    if batch == "padded":
        ids, pos, mask = padded(tok)
        ids, pos, mask, rows = ids[:2, 3:], pos[:2, 3:], mask[:2, :, 3:, 3:], None
    else:
        p = packed(tok, row_length=12)
        ids, pos, mask = p.input_ids, p.position_ids, p.attention_mask
        rows = p.last if batch == "packed_rows" else None
        assert ids.shape[0] > 1  # several rows: the row mask spans them
    inputs = lean._stack_inputs(ids, pos, mask.double(), rows, None)
    assert inputs is not None
    # the plain derivative: a pad slot's lookup differentiated too (the padding_idx rule, which drops it as
    # nn.Embedding does, is tested against transformers in test_a_pad_token_read_as_a_token_...)
    batch_in, params = dataclasses.replace(inputs[0], padding_idx=None), [p for p in inputs[1:]]
    assert (batch_in.rows is not None) == (batch == "packed_rows")  # the last layer at the rows only
    assert sum(p is None for p in params) == 2 * (4 if arch == "qwen2" else 7)  # absent biases

    def stack(*ps):
        return Stack.apply(batch_in, *ps)

    assert torch.autograd.gradcheck(stack, tuple(params), eps=1e-6, atol=1e-6, rtol=1e-5, fast_mode=True)


@pytest.mark.parametrize(("arch", "kv"), ARCHS)
@pytest.mark.parametrize("batch", ["padded", "packed128", "packed16"])
@pytest.mark.parametrize("read", ["all", "rows", "many_rows"])  # many: more than a row's width
def test_equal_to_the_autograd_path_and_transformers(tok, arch, kv, batch, read, monkeypatch, fast_path):
    model = model_of(tok, arch, kv)
    weights = torch.randn(32, generator=torch.Generator().manual_seed(1))
    if batch == "padded":
        ids, pos, mask = padded(tok)
        real = (mask[:, 0].diagonal(dim1=-2, dim2=-1) == 0).reshape(-1)  # a query that sees itself
        some = real.nonzero().squeeze(1)[[0, 3, 7, 7, 12, -1]]
        rows = {"all": None, "rows": some, "many_rows": real.nonzero().squeeze(1)}[read]
    else:
        p = packed(tok, row_length=int(batch.removeprefix("packed")))
        ids, pos, mask = p.input_ids, p.position_ids, p.attention_mask
        real = (ids != tok.pad_token_id).reshape(-1)
        rows = {"all": None, "rows": p.last, "many_rows": p.predictors.repeat(2)}[read]
    if read == "many_rows":
        assert rows.shape[0] > ids.shape[1]
    elif read == "rows":
        assert rows.shape[0] <= ids.shape[1]
    keep = None if rows is not None else real  # compare real tokens only (pads' outputs are never read)
    results = {}
    for flag in ("1", "0"):
        fast_path("lm_backward", flag == "1")
        h, grads, node = run(model, ids, pos, mask, rows, weights, keep)
        results[flag] = (h if keep is None else h[keep], grads)
        assert (node == "StackBackward") == (flag == "1"), node
    out = model.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)
    h_ref = out.last_hidden_state.reshape(-1, 32)
    h_ref = h_ref[rows] if rows is not None else h_ref
    model.zero_grad(set_to_none=True)
    loss_of(h_ref, weights, keep).backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    h_ref = h_ref.detach() if keep is None else h_ref.detach()[keep]
    for h, grads in results.values():
        assert (h - h_ref).abs().max() <= 1e-5
        assert_close(grads, ref_grads)


def test_rows_equal_the_full_hidden_states_and_repeat(tok):
    """``rows`` (repeats included, a fully masked pad query included) reads the full forward's rows."""
    model = model_of(tok, "qwen2", 2)
    lean = lean_decoder(model)
    ids, pos, mask = padded(tok)
    rows = torch.tensor([2, 9, 9, 20, 35, 30])  # 9: row 1 is left-padded there, a query that sees nothing
    with torch.no_grad():
        full = lean.hidden(ids, pos, mask).reshape(-1, 32)
    got = lean.hidden(ids, pos, mask, rows=rows)
    assert got.grad_fn is not None and type(got.grad_fn).__name__ == "StackBackward"
    assert (got.detach() - full[rows]).abs().max() <= 1e-5
    assert torch.equal(got[1], got[2])


def test_the_training_node_steps_aside(tok, monkeypatch, fast_path):
    model = model_of(tok, "qwen2", 4)
    lean = lean_decoder(model)
    ids, pos, mask = padded(tok)

    def node(**kw) -> str:
        h = lean.hidden(ids, pos, mask, **kw)
        return "none" if h.grad_fn is None else node_of(h)

    assert node() == "StackBackward"
    with torch.no_grad():  # scoring without gradients: the plain forward
        assert node() == "none"
    fast_path("lm_backward", False)
    assert node() not in ("none", "StackBackward")
    fast_path("lm_backward", True)
    features = importlib.import_module("advantage.lm.lean").FEATURES
    monkeypatch.setitem(features, "backward_kernels", False)  # a torch without its private kernels
    assert node() not in ("none", "StackBackward")
    monkeypatch.setitem(features, "backward_kernels", True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert lean._stack_inputs(ids, pos, mask, None, None) is None
    model.requires_grad_(False)  # nothing to differentiate
    assert lean._stack_inputs(ids, pos, mask, None, None) is None
    model.requires_grad_(True)
    cache = lean.new_cache(ids.shape[0], ids.shape[1])  # decoding writes a cache: the plain forward
    assert lean._stack_inputs(ids, pos, mask, None, None) is not None
    assert lean.hidden(ids, pos, mask, cache=cache).grad_fn is not None and cache.length == ids.shape[1]
    model.to(torch.bfloat16)
    assert lean._stack_inputs(ids, pos, mask.to(torch.bfloat16), None, None) is None


def test_a_parameter_changed_before_the_backward_is_an_error(tok):
    """The node keeps the parameters with ``save_for_backward``: an in-place update between the forward
    and the backward (an optimizer step too early) raises instead of giving wrong gradients."""
    model = model_of(tok, "llama", 2)
    ids, pos, mask = padded(tok)
    h = lean_decoder(model).hidden(ids, pos, mask)
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        h.sum().backward()


def test_gradients_accumulate_over_calls_and_tied_embeddings(tok):
    """Two backward passes add up, and the tied LM head's gradient joins the embedding's."""
    model = model_of(tok, "qwen2", 2)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    lean = lean_decoder(model)
    ids, pos, mask = padded(tok)

    def loss() -> torch.Tensor:
        return lean.logits(lean.hidden(ids, pos, mask)).logsumexp(-1).sum()

    model.zero_grad(set_to_none=True)
    loss().backward()
    once = {n: p.grad.clone() for n, p in model.named_parameters()}
    loss().backward()
    for n, p in model.named_parameters():
        assert (p.grad - 2 * once[n]).abs().max() <= 1e-5 * max(1.0, once[n].abs().max().item()), n


def test_a_pad_token_read_as_a_token_adds_no_gradient_to_its_embedding_row(tok, monkeypatch, fast_path):
    """A sampled pad token (or the EOS where pad = EOS) is read like any token, and, by nn.Embedding's
    ``padding_idx`` rule, its lookups add nothing to its row's gradient: the lean pass (hand-written and
    autograd backward) equals the transformers forward, embedding included."""
    model = model_of(tok, "qwen2", 2)
    ids, pos, mask = padded(tok)
    ids[:, -3:-1] = tok.pad_token_id  # real positions (every row's last three are real) holding the pad id
    real = (mask[:, 0].diagonal(dim1=-2, dim2=-1) == 0).reshape(-1)
    weights = torch.randn(32, generator=torch.Generator().manual_seed(2))
    out = model.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)
    model.zero_grad(set_to_none=True)
    loss_of(out.last_hidden_state.reshape(-1, 32), weights, real).backward()
    ref = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert ref["model.embed_tokens.weight"][tok.pad_token_id].abs().max() == 0
    for flag in ("1", "0"):
        fast_path("lm_backward", flag == "1")
        _, grads, _ = run(model, ids, pos, mask, None, weights, real)
        assert_close(grads, ref)
