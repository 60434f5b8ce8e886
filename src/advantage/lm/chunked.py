r"""Per-token log-probabilities and entropies straight from hidden states, a chunk of tokens at a time.

A policy-gradient step needs, for each response token, :math:`\log\pi(y_t)` of the sampled token (and,
for an entropy bonus or a metric, the entropy of the whole distribution):

.. math::
    z = (h W^\top + b) / \tau, \qquad \log\pi(y) = z_y - \operatorname{logsumexp}(z), \qquad
    \mathcal H = \operatorname{logsumexp}(z) - \textstyle\sum_j p_j z_j

The plain way materialises the logits of every token, ``[B, T, V]`` in fp32, and autograd keeps them (and
the softmax) for the backward pass: 64 × 256 tokens of a 32k vocabulary are 2.1 GB each, and a 150k
vocabulary five times that. :func:`chunked_logprobs` computes the same values ``chunk`` tokens at a time
and keeps only ``h``, ``W``, the targets and one logsumexp per token; its backward recomputes each chunk's
logits and forms the gradient in place:

.. math::
    \frac{\partial \log\pi(y)}{\partial z} = e_y - p, \qquad
    \frac{\partial \mathcal H}{\partial z} = -p \odot (\log p + \mathcal H), \qquad
    \frac{\partial L}{\partial h} = \frac{1}{\tau} G W, \quad
    \frac{\partial L}{\partial W} = \frac{1}{\tau} G^\top h

with ``G`` the chunk's ``[c, V]`` gradient with respect to ``z``. Peak extra memory is a few ``[c, V]``
fp32 buffers instead of ``[N, V]``; the cost is one more output-layer matmul per chunk in the backward.
The same idea is the "cut cross-entropy"/Liger fused linear cross-entropy used by LLM trainers; this is
a plain-PyTorch version (CPU and GPU alike) whose gradients equal the unchunked path's to float rounding.

That matmul is 10-15 % of a learn step for a 32k vocabulary on a CPU (``benchmarks/lm_learn_profile.py``),
so when the whole ``[N, V]`` of probabilities takes at most ``keep_bytes`` (default :data:`KEEP_BYTES`,
512 MiB) the forward keeps them, still made a chunk at a time, and the backward reads them instead of
recomputing the logits and their exp. Past that size (64 × 256 tokens of a 32k vocabulary are 2.1 GB) the
backward recomputes: memory stays bounded by ``keep_bytes`` plus the chunk buffers, whatever ``N``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["chunk_rows", "chunked_logprobs", "head_logprobs", "token_logprobs", "use_chunks"]

# Elements of one [c, V] fp32 buffer: 4M elements = 16 MiB. Forward and backward hold two such buffers.
DEFAULT_CHUNK_ELEMENTS = 4 * 1024 * 1024
# The largest [N, V] of probabilities the forward keeps for the backward (module docstring)
KEEP_BYTES = 512 * 1024 * 1024


def chunk_rows(vocab_size: int, chunk_elements: int = DEFAULT_CHUNK_ELEMENTS) -> int:
    """Tokens per chunk so that one ``[c, V]`` fp32 buffer holds at most ``chunk_elements`` numbers."""
    return max(1, chunk_elements // max(vocab_size, 1))


def _chunk_logits(h: Tensor, weight: Tensor, bias: Tensor | None, temperature: float) -> Tensor:
    z = F.linear(h, weight, bias)  # [c, V]
    z = z if z.dtype == torch.float64 else z.float()  # fp32 at least (fp64 stays, for gradcheck)
    return z.div_(temperature) if temperature != 1.0 else z  # z is a fresh buffer: divide in place


class _ChunkedLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        hidden: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        targets: Tensor,
        temperature: float,
        rows: int,
        keep_bytes: int,
    ) -> tuple[Tensor, Tensor]:
        n = hidden.shape[0]
        acc = torch.float64 if hidden.dtype == torch.float64 else torch.float32
        logp = torch.empty(n, dtype=acc, device=hidden.device)
        entropy = torch.empty(n, dtype=acc, device=hidden.device)
        lse = torch.empty(n, dtype=acc, device=hidden.device)
        kept = None  # [N, V] probabilities for the backward, when they fit in keep_bytes
        if n * weight.shape[0] * torch.finfo(acc).bits // 8 <= keep_bytes:
            kept = torch.empty((n, weight.shape[0]), dtype=acc, device=hidden.device)
        for i in range(0, n, rows):
            z = _chunk_logits(hidden[i : i + rows], weight, bias, temperature)  # [c, V]
            lse_c = torch.logsumexp(z, -1)  # [c]
            lse[i : i + rows] = lse_c
            log_p = z.sub_(lse_c[:, None])  # log p, in place of z
            logp[i : i + rows] = log_p.gather(-1, targets[i : i + rows, None]).squeeze(-1)
            p = torch.exp(log_p) if kept is None else torch.exp(log_p, out=kept[i : i + rows])
            entropy[i : i + rows] = -torch.mul(p, log_p).sum(-1)  # H = −Σ p log p (pairwise sum)
        ctx.save_for_backward(hidden, weight, bias, targets, lse, entropy, kept)  # type: ignore[arg-type]  # bias, kept may be None
        ctx.temperature, ctx.rows = temperature, rows  # type: ignore[attr-defined]  # read by backward
        return logp, entropy

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, g_logp: Tensor | None, g_entropy: Tensor | None
    ) -> tuple[Tensor | None, ...]:
        hidden, weight, bias, targets, lse, entropy, kept = ctx.saved_tensors  # type: ignore[attr-defined]
        tau, rows = ctx.temperature, ctx.rows  # type: ignore[attr-defined]
        need_h, need_w, need_b = ctx.needs_input_grad[:3]  # type: ignore[attr-defined]  # set by autograd
        grad_h = torch.empty_like(hidden) if need_h else None
        acc = lse.dtype
        grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        grad_b = torch.zeros(weight.shape[0], dtype=acc, device=weight.device) if need_b else None
        n = hidden.shape[0]
        for i in range(0, n, rows):
            h = hidden[i : i + rows]
            # G = g_H · (−p ⊙ (log p + H)) + g_logp · (e_y − p)
            grad = None
            if kept is None:  # recomputed, in fresh buffers
                logp_all = _chunk_logits(h, weight, bias, tau).sub_(lse[i : i + rows, None])  # [c, V]
                p = torch.exp(logp_all)  # [c, V]
                if g_entropy is not None:
                    grad = logp_all.add_(entropy[i : i + rows, None]).mul_(p)
            else:  # read only (a second backward, retain_graph, reads it again); p log p = 0 where p = 0
                p = kept[i : i + rows]
                if g_entropy is not None:
                    grad = torch.xlogy(p, p).addcmul_(p, entropy[i : i + rows, None])
            if g_entropy is not None and grad is not None:
                grad.mul_(-g_entropy[i : i + rows, None])
            if g_logp is not None:
                g = g_logp[i : i + rows, None]
                if grad is not None:
                    grad.addcmul_(p, g, value=-1)
                else:
                    grad = p.mul_(-g) if kept is None else torch.mul(p, -g)
                grad.scatter_add_(-1, targets[i : i + rows, None], g)
            if grad is None:
                grad = torch.zeros_like(p)
            if tau != 1.0:
                grad.div_(tau)
            grad_low = grad.to(weight.dtype)
            if grad_h is not None:
                grad_h[i : i + rows] = grad_low @ weight
            if grad_w is not None:
                grad_w.addmm_(grad.t(), h.to(acc))  # accumulate in place: no [V, H] temporary
            if grad_b is not None:
                grad_b.add_(grad.sum(0))
        grad_w = grad_w.to(weight.dtype) if grad_w is not None else None
        grad_b = grad_b.to(bias.dtype) if grad_b is not None and bias is not None else None
        return grad_h, grad_w, grad_b, None, None, None, None  # none for targets, τ, rows, keep_bytes


def chunked_logprobs(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    bias: Tensor | None = None,
    temperature: float = 1.0,
    chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
    keep_bytes: int = KEEP_BYTES,
) -> tuple[Tensor, Tensor]:
    r"""``(log π(y), H)`` per token from the final hidden states, without the ``[..., V]`` logits in memory.

    Equal, to float rounding and in value and gradient, to ``token_logprobs(F.linear(hidden, weight,
    bias), targets, temperature)`` and the entropy of ``softmax(logits / τ)``; computed in fp32 whatever
    the dtype of ``hidden`` and ``weight`` (fp64 stays fp64; the matmul runs in their dtype, as the model's
    own head does).

    Args:
        hidden: ``[..., H]`` final (post-norm) hidden states at the positions that predict ``targets``.
        weight: ``[V, H]`` output-layer weight (``model.get_output_embeddings().weight``).
        targets: ``[...]`` token ids in ``[0, V)``.
        bias: ``[V]`` output-layer bias, if the model has one.
        temperature: ``τ > 0``.
        chunk_elements: size of one ``[c, V]`` buffer in numbers; ``c = chunk_elements // V`` tokens.
        keep_bytes: the forward keeps the ``[N, V]`` probabilities for the backward when they take at
            most this many bytes (no recomputed logits); 0 always recomputes (module docstring).

    Returns:
        ``logp`` and ``entropy``, both ``[...]`` fp32, differentiable with respect to ``hidden``,
        ``weight`` and ``bias``.
    """
    if hidden.shape[:-1] != targets.shape:
        raise ValueError(
            f"hidden [..., H] and targets [...] must share leading dims, got {tuple(hidden.shape)} and "
            f"{tuple(targets.shape)}"
        )
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[-1]:
        raise ValueError(f"weight must be [V, {hidden.shape[-1]}], got {tuple(weight.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    lead = targets.shape
    flat_h = hidden.reshape(-1, hidden.shape[-1])
    flat_t = targets.reshape(-1).long()
    rows = chunk_rows(weight.shape[0], chunk_elements)
    logp, entropy = _ChunkedLogProbs.apply(
        flat_h, weight, bias, flat_t, float(temperature), rows, int(keep_bytes)
    )
    return logp.reshape(lead), entropy.reshape(lead)


def use_chunks(head: nn.Module | None, tokens: int, chunk_elements: int | None = None) -> bool:
    """Whether ``tokens`` rows through ``head`` (an ``nn.Linear`` output layer) should go in chunks: when
    their ``[tokens, V]`` logits would exceed one buffer of ``chunk_elements`` (default 4M) numbers."""
    limit = DEFAULT_CHUNK_ELEMENTS if chunk_elements is None else chunk_elements
    return isinstance(head, nn.Linear) and tokens * head.out_features > limit


def token_logprobs(logits: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
    r"""``log_softmax(logits / τ)[target]`` in fp32: logits ``[..., V]``, targets ``[...]`` → ``[...]``.

    ``gather − logsumexp`` equals ``log_softmax(...).gather`` but never materialises a second ``[..., V]``
    tensor."""
    z = logits.float()
    if temperature != 1.0:
        z = z / temperature
    return z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - z.logsumexp(-1)


def head_logprobs(
    hidden: Tensor,
    head: nn.Module,
    targets: Tensor,
    temperature: float = 1.0,
    chunk_elements: int | None = None,
) -> Tensor:
    """``log π(y)`` ``[...]`` fp32 of ``targets`` ``[...]`` from hidden states ``[..., H]`` through the output
    layer ``head``: in chunks (:func:`chunked_logprobs`) when :func:`use_chunks` says so, else through the
    full ``[..., V]`` logits (:func:`token_logprobs`). Equal values and gradients."""
    if use_chunks(head, targets.numel(), chunk_elements):
        assert isinstance(head, nn.Linear)
        limit = DEFAULT_CHUNK_ELEMENTS if chunk_elements is None else chunk_elements
        return chunked_logprobs(
            hidden, head.weight, targets, bias=head.bias, temperature=temperature, chunk_elements=limit
        )[0]
    return token_logprobs(head(hidden), targets, temperature)
