"""The chunked log-prob/entropy path equals the full-vocabulary path in value and gradient."""

import pytest
import torch
import torch.nn.functional as F

from advantage.nn.chunked import chunk_rows, chunked_logprobs
from advantage.nn.lm import token_logprobs


def _reference(hidden, weight, bias, targets, tau):
    logits = F.linear(hidden, weight, bias)
    logp = token_logprobs(logits, targets, tau)
    z = logits.float() / tau
    entropy = -(z.softmax(-1) * z.log_softmax(-1)).sum(-1)
    return logp, entropy


@pytest.mark.parametrize("tau", [1.0, 0.7])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("chunk_elements", [1, 37 * 3, 10**9])  # one token, uneven chunks, one chunk
@pytest.mark.parametrize("keep_bytes", [0, 10**9])  # logits recomputed in the backward, or kept
def test_values_and_gradients_match_the_full_vocabulary_path(tau, with_bias, chunk_elements, keep_bytes):
    g = torch.Generator().manual_seed(0)
    B, T, H, V = 3, 5, 8, 37
    hidden = torch.randn(B, T, H, generator=g, requires_grad=True)
    weight = (0.5 * torch.randn(V, H, generator=g)).requires_grad_()
    bias = torch.randn(V, generator=g, requires_grad=True) if with_bias else None
    targets = torch.randint(0, V, (B, T), generator=g)
    w_logp, w_ent = torch.randn(B, T, generator=g), torch.randn(B, T, generator=g)

    logp, ent = chunked_logprobs(
        hidden,
        weight,
        targets,
        bias=bias,
        temperature=tau,
        chunk_elements=chunk_elements,
        keep_bytes=keep_bytes,
    )
    ref_logp, ref_ent = _reference(hidden, weight, bias, targets, tau)
    torch.testing.assert_close(logp, ref_logp, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(ent, ref_ent, atol=1e-6, rtol=1e-6)

    inputs = [hidden, weight] + ([bias] if with_bias else [])
    got = torch.autograd.grad((w_logp * logp + w_ent * ent).sum(), inputs)
    want = torch.autograd.grad((w_logp * ref_logp + w_ent * ref_ent).sum(), inputs)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("keep_bytes", [0, 10**9])
def test_only_logp_or_only_entropy_in_the_loss(keep_bytes):
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(7, 4, generator=g, requires_grad=True)
    weight = torch.randn(11, 4, generator=g, requires_grad=True)
    targets = torch.randint(0, 11, (7,), generator=g)
    ref_logp, ref_ent = _reference(hidden, weight, None, targets, 1.0)
    for pick in (0, 1):
        out = chunked_logprobs(hidden, weight, targets, chunk_elements=22, keep_bytes=keep_bytes)[pick]
        ref = (ref_logp, ref_ent)[pick]
        got = torch.autograd.grad(out.sum(), [hidden, weight])
        want = torch.autograd.grad(ref.sum(), [hidden, weight], retain_graph=True)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


def test_kept_log_probs_survive_a_second_backward():
    """With the log-probs kept for the backward, a second backward through the same graph
    (``retain_graph``) gives the first one's gradients: the backward does not write into them."""
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(9, 4, generator=g, requires_grad=True)
    weight = torch.randn(13, 4, generator=g, requires_grad=True)
    targets = torch.randint(0, 13, (9,), generator=g)
    logp, ent = chunked_logprobs(hidden, weight, targets, chunk_elements=26, keep_bytes=10**9)
    loss = (logp * torch.randn(9, generator=g) + 0.5 * ent).sum()
    first = torch.autograd.grad(loss, [hidden, weight], retain_graph=True)
    second = torch.autograd.grad(loss, [hidden, weight])
    for a, b in zip(first, second, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_gradcheck_float64():
    g = torch.Generator().manual_seed(2)
    hidden = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(6, 3, generator=g, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(6, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 6, (4,), generator=g)

    def f(h, w, b):
        logp, ent = chunked_logprobs(h, w, targets, bias=b, temperature=0.9, chunk_elements=12)
        return logp * 0.3 + ent

    def recomputed(h, w, b):
        logp, ent = chunked_logprobs(h, w, targets, bias=b, temperature=0.9, chunk_elements=12, keep_bytes=0)
        return logp * 0.3 + ent

    assert torch.autograd.gradcheck(f, (hidden, weight, bias))
    assert torch.autograd.gradcheck(recomputed, (hidden, weight, bias))


def test_chunk_rows_and_bad_shapes():
    assert chunk_rows(32_000, 8 * 1024 * 1024) == 262
    assert chunk_rows(10**9, 5) == 1
    with pytest.raises(ValueError, match="leading dims"):
        chunked_logprobs(torch.zeros(2, 3, 4), torch.zeros(5, 4), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="weight must be"):
        chunked_logprobs(torch.zeros(2, 4), torch.zeros(5, 3), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="temperature"):
        chunked_logprobs(
            torch.zeros(2, 4), torch.zeros(5, 4), torch.zeros(2, dtype=torch.long), temperature=0
        )


@pytest.mark.parametrize("lean", ["1", "0"])
def test_sequence_logprobs_chunked_path_equals_the_full_path(lean, monkeypatch):
    """Forced into chunks (tiny ``chunk_elements``), ``sequence_logprobs`` gives the full path's
    log-probs and parameter gradients, through the lean decoder and through transformers' forward."""
    from advantage.nn.lm import build_char_tokenizer, build_scratch_model, sequence_logprobs

    monkeypatch.setenv("ADVANTAGE_LEAN", lean)
    tok = build_char_tokenizer("0123456789+=")
    model = build_scratch_model("qwen2", tok, hidden_size=32, layers=2, heads=4, seed=0)
    model.train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, len(tok), (3, 9), generator=g)
    attn = torch.ones_like(ids)
    attn[0, :2] = 0  # a left-padded prompt
    out = {}
    for name, chunk in (("full", 10**9), ("chunked", 2 * len(tok))):
        model.zero_grad()
        logp = sequence_logprobs(model, ids, attn, response_start=4, temperature=0.8, chunk_elements=chunk)
        (logp * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum().backward()
        out[name] = (logp.detach(), [p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(out["chunked"][0], out["full"][0], atol=1e-6, rtol=1e-6)
    for a, b in zip(out["chunked"][1], out["full"][1], strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
