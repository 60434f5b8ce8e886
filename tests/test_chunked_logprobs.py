"""The chunked log-prob/entropy path equals the full-vocabulary path in value and gradient."""

import pytest
import torch
import torch.nn.functional as F

from advantage.lm.chunked import chunk_rows, chunked_logprobs, token_logprobs

# On every supported torch version too (benchmarks/torch_versions.py): a fast path against its reference.
pytestmark = pytest.mark.torch_versions

U = 2.0**-24  # unit roundoff of fp32: one rounding is off by at most u times the value


def _fp32_bounds(hidden, weight, bias, targets, tau, w_logp, w_ent):
    r"""What two fp32 evaluations of the same log-probs, entropies and gradients may differ by: twice the
    first-order forward error bound of one, whatever order its sums run in (so whatever the CPU's kernels).

    A sum of ``n`` terms in any order is off by at most ``n·u·Σ|terms|`` (Higham, *Accuracy and Stability
    of Numerical Algorithms*, §4.2), ``u = 2⁻²⁴``. From the logits to the gradients, with every magnitude
    computed in float64:

    - a logit ``z = (h·W_v + b_v)/τ`` is a sum of ``H + 1`` terms, then a division:
      ``δz ≤ (H + 2)·u·max(|h|·|W_v| + |b_v|)/τ``;
    - ``log p_v = z_v − logsumexp(z)``: the logsumexp has a derivative of 1-norm 1 in ``z``, a sum of ``V``
      exponentials in (0, 1] and an exp, a log and an add: ``δlog p ≤ 2·δz + (V + 4)·u·(1 + |lse|)``,
      also ``p``'s relative error;
    - ``H = −Σ p log p`` (``V`` terms): ``δH ≤ δlog p·(1 + H) + V·u·H``;
    - ``G = ∂L/∂z`` (``w_logp·(e_y − p) − w_ent·p·(log p + H)``): relative to its magnitude
      ``|w_logp|·(e_y + p) + |w_ent|·p·(|log p| + H + 1)``, off by ``ρ = δlog p + δH + (V + 2)·u`` (autograd's
      log-softmax backward adds a ``V``-term sum);
    - ``∂L/∂h = G·W/τ`` sums ``V`` terms, ``∂L/∂W = Gᵀh/τ`` and ``∂L/∂b = Σ G/τ`` sum ``N = B·T``:
      ``(ρ + (n + 1)·u)·(|G|·|W| or |G|ᵀ|h| or Σ|G|)/τ``.

    A real fault (a chunk skipped, τ applied twice, a wrong target) moves these outputs by far more."""
    f64 = torch.float64
    h, w = hidden.detach().to(f64).reshape(-1, hidden.shape[-1]), weight.detach().to(f64)
    b = bias.detach().to(f64) if bias is not None else torch.zeros(w.shape[0], dtype=f64)
    n, d = h.shape
    v = w.shape[0]
    dz = (d + 2) * U * float((h.abs() @ w.abs().T + b.abs()).max()) / tau
    z = (h @ w.T + b) / tau
    lse = z.logsumexp(-1)
    logp_all = z - lse[:, None]
    p = logp_all.exp()
    ent = -(p * logp_all).sum(-1)
    d_logp = 2 * dz + (v + 4) * U * (1 + float(lse.abs().max()))
    ent_max = float(ent.max())
    d_ent = d_logp * (1 + ent_max) + v * U * ent_max
    onehot = torch.nn.functional.one_hot(targets.reshape(-1), v).to(f64)
    wl, we = w_logp.reshape(-1, 1).to(f64).abs(), w_ent.reshape(-1, 1).to(f64).abs()
    g_mag = wl * (onehot + p) + we * p * (logp_all.abs() + ent[:, None] + 1)  # [N, V]
    rho = d_logp + d_ent + (v + 2) * U
    return {
        "logp": 2 * d_logp,
        "entropy": 2 * d_ent,
        "hidden": 2 * (rho + (v + 1) * U) * float((g_mag @ w.abs()).max()) / tau,
        "weight": 2 * (rho + (n + 1) * U) * float((g_mag.T @ h.abs()).max()) / tau,
        "bias": 2 * (rho + (n + 1) * U) * float(g_mag.sum(0).max()) / tau,
    }


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
    tol = _fp32_bounds(hidden, weight, bias, targets, tau, w_logp, w_ent)
    torch.testing.assert_close(logp, ref_logp, atol=tol["logp"], rtol=0)
    torch.testing.assert_close(ent, ref_ent, atol=tol["entropy"], rtol=0)

    inputs = [hidden, weight] + ([bias] if with_bias else [])
    got = torch.autograd.grad((w_logp * logp + w_ent * ent).sum(), inputs)
    want = torch.autograd.grad((w_logp * ref_logp + w_ent * ref_ent).sum(), inputs)
    for name, a, b in zip(("hidden", "weight", "bias"), got, want, strict=False):
        torch.testing.assert_close(a, b, atol=tol[name], rtol=0, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("keep_bytes", [0, 10**9])
def test_only_logp_or_only_entropy_in_the_loss(keep_bytes):
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(7, 4, generator=g, requires_grad=True)
    weight = torch.randn(11, 4, generator=g, requires_grad=True)
    targets = torch.randint(0, 11, (7,), generator=g)
    ref_logp, ref_ent = _reference(hidden, weight, None, targets, 1.0)
    ones, zeros = torch.ones(7), torch.zeros(7)
    for pick in (0, 1):
        out = chunked_logprobs(hidden, weight, targets, chunk_elements=22, keep_bytes=keep_bytes)[pick]
        ref = (ref_logp, ref_ent)[pick]
        tol = _fp32_bounds(hidden, weight, None, targets, 1.0, *((ones, zeros), (zeros, ones))[pick])
        got = torch.autograd.grad(out.sum(), [hidden, weight])
        want = torch.autograd.grad(ref.sum(), [hidden, weight], retain_graph=True)
        for name, a, b in zip(("hidden", "weight"), got, want, strict=True):
            torch.testing.assert_close(a, b, atol=tol[name], rtol=0)


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


class _Hidden(torch.nn.Module):
    """The final hidden states at the response positions, as a module (for ``torch.func``)."""

    def __init__(self, model, response_start):
        super().__init__()
        self.model, self.response_start = model, response_start

    def forward(self, ids, attn):
        from advantage.lm.model import sequence_logprobs

        return sequence_logprobs(
            self.model, ids, attn, response_start=self.response_start, return_hidden=True
        )[1]


def _hidden_jacobian_abs_sums(model, ids, attn, response_start, monkeypatch):
    """``Σ_i |∂h_i/∂θ|`` for every parameter ``θ``: the most a change of at most 1 in each final hidden
    state's gradient can move ``θ``'s gradient (first order). One vector-Jacobian product per hidden
    number, batched with ``vmap`` through transformers' forward (the lean decoder computes the same
    function of the parameters; its hand-written backward has no batching rule)."""
    wrapper = _Hidden(model, response_start)
    params = {k: v.detach() for k, v in wrapper.named_parameters()}
    from advantage import kernels

    with kernels.using(kernels.parse("reference")):
        h, vjp = torch.func.vjp(lambda p: torch.func.functional_call(wrapper, p, (ids, attn)), params)
        (rows,) = torch.vmap(vjp)(torch.eye(h.numel()).view(-1, *h.shape))
    return [rows[k].abs().sum(0) for k in params]


@pytest.mark.parametrize("lean", ["1", "0"])
def test_sequence_logprobs_chunked_path_equals_the_full_path(lean, monkeypatch, fast_path):
    """Forced into chunks (tiny ``chunk_elements``), ``sequence_logprobs`` gives the full path's
    log-probs and parameter gradients, through the lean decoder and through transformers' forward."""
    from advantage.lm.model import build_char_tokenizer, build_scratch_model, sequence_logprobs

    fast_path("lm_forward", lean == "1")
    tok = build_char_tokenizer("0123456789+=")
    model = build_scratch_model("qwen2", tok, hidden_size=16, layers=2, heads=2, seed=0)
    model.train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, len(tok), (3, 9), generator=g)
    attn = torch.ones_like(ids)
    attn[0, :2] = 0  # a left-padded prompt
    out = {}
    for name, chunk in (("full", 10**9), ("chunked", 2 * len(tok))):
        model.zero_grad()
        logp, hidden = sequence_logprobs(
            model, ids, attn, response_start=4, temperature=0.8, chunk_elements=chunk, return_hidden=True
        )
        w = torch.linspace(-1, 1, logp.numel()).view_as(logp)
        (logp * w).sum().backward()
        out[name] = (logp.detach(), [p.grad.clone() for p in model.parameters()])
    # Both paths share every operation up to the final hidden states h; from there the head's log-probs,
    # the gradient reaching h and the head's own gradient differ by at most _fp32_bounds, and a parameter
    # θ below h gets the gradient at h through the same backward: at most tol_h · Σ_i |∂h_i/∂θ| apart, plus
    # each backward's own rounding (k·u·max|∂L/∂h| per unit of Σ|∂h/∂θ|, k = the reduction lengths along
    # the backward: per layer 4 projections of H, the MLP's width and the sequence).
    head = model.get_output_embeddings().weight
    tol = _fp32_bounds(hidden, head, None, ids[:, 4:], 0.8, w, torch.zeros_like(w))
    torch.testing.assert_close(out["chunked"][0], out["full"][0], atol=tol["logp"], rtol=0)
    sums = _hidden_jacobian_abs_sums(model, ids, attn, 4, monkeypatch)
    cfg = model.config
    k = cfg.num_hidden_layers * (4 * cfg.hidden_size + cfg.intermediate_size + ids.shape[1])
    g_max = (
        2 * float(head.detach().abs().max()) * float(w.abs().max()) / 0.8
    )  # |∂L/∂h| ≤ |W|·|e_y − p|₁·|w|/τ
    tied = {id(head)}
    for (name, p), s, a, b in zip(
        model.named_parameters(), sums, out["chunked"][1], out["full"][1], strict=True
    ):
        atol = float((tol["hidden"] + 2 * k * U * g_max) * s.max()) + (
            tol["weight"] if id(p) in tied else 0.0
        )
        torch.testing.assert_close(a, b, atol=atol, rtol=0, msg=lambda m, name=name: f"{name}: {m}")
