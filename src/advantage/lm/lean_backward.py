r"""The lean decoder's training path: the whole stack as one autograd node, :class:`Stack`, with a
hand-written backward (closed forms in its docstring), and the tensor operations the forward of
:mod:`advantage.lm.lean` shares with it (linear, RMSNorm, RoPE, attention).

Recording ~35 small operations per layer for autograd, then replaying about twice as many in the backward
engine, costs more than their arithmetic for a small model on a CPU. :class:`Stack` runs the forward of
:meth:`advantage.lm.lean.LeanDecoder.hidden` with autograd off, keeps what the backward needs, and
computes every parameter's gradient in one hand-written backward with fewer, larger kernels; autograd
sees one node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

PER_LAYER = 16  # `Stack` inputs per layer (parameters, None for absent biases), in `LAYER_SLOTS` order
LAYER_SLOTS = (
    ("input_layernorm", "weight"),
    ("self_attn.q_proj", "weight"),
    ("self_attn.q_proj", "bias"),
    ("self_attn.k_proj", "weight"),
    ("self_attn.k_proj", "bias"),
    ("self_attn.v_proj", "weight"),
    ("self_attn.v_proj", "bias"),
    ("self_attn.o_proj", "weight"),
    ("self_attn.o_proj", "bias"),
    ("post_attention_layernorm", "weight"),
    ("mlp.gate_proj", "weight"),
    ("mlp.gate_proj", "bias"),
    ("mlp.up_proj", "weight"),
    ("mlp.up_proj", "bias"),
    ("mlp.down_proj", "weight"),
    ("mlp.down_proj", "bias"),
)
assert len(LAYER_SLOTS) == PER_LAYER
MAX_SCORES = 1 << 25  # attention probabilities kept for the backward, all layers (elements); more: autograd


def column_major(w: Tensor) -> Tensor:
    """``w`` ``[out, in]`` with the same values, stored transposed (``w.t()`` is contiguous)."""
    return w.t().contiguous().t()


def cat_or_none(*tensors: Tensor | None) -> Tensor | None:
    if all(t is None for t in tensors):
        return None
    if any(t is None for t in tensors):
        raise ValueError("projections read by one matmul must all have a bias or none")
    return torch.cat(tensors)  # type: ignore[arg-type]


def _split(
    weight: Tensor, bias: Tensor | None, at: int
) -> tuple[tuple[Tensor, Tensor | None], tuple[Tensor, Tensor | None]]:
    """The rows before and after ``at`` of a fused projection's weight (or gradient) and bias."""
    head = (weight[:at], None if bias is None else bias[:at])
    return head, (weight[at:], None if bias is None else bias[at:])


def _linear(x: Tensor, weight: Tensor, bias: Tensor | None, residual: Tensor | None = None) -> Tensor:
    """``residual + x Wᵀ + b`` (``x`` ``[N, in]``, ``W`` ``[out, in]``), the residual added by the matmul."""
    if residual is None:
        return torch.mm(x, weight.t()) if bias is None else torch.addmm(bias, x, weight.t())
    y = torch.addmm(residual, x, weight.t())
    return y if bias is None else y.add_(bias)


def _rms_norm(x: Tensor, weight: Tensor, eps: Tensor, inv_h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r""":math:`y = \hat x \odot g`, :math:`\hat x = x\,r`, :math:`r = (\overline{x^2} + \epsilon)^{-1/2}`
    over the last dim of ``x`` ``[N, H]``; ``eps`` a 0-d tensor, ``inv_h`` ``[H]`` filled with 1/H (the mean
    and the epsilon in one ``addmv``). Returns ``y``, ``x̂`` ``[N, H]`` and ``r`` ``[N, 1]``."""
    r = torch.addmv(eps, x * x, inv_h).rsqrt_().unsqueeze_(-1)
    xn = x * r
    return xn * weight, xn, r


def _rms_norm_backward(
    dy: Tensor, xn: Tensor, r: Tensor, weight: Tensor, residual: Tensor | None
) -> tuple[Tensor, Tensor]:
    r"""Gradients of :func:`_rms_norm` from ``dy`` ``[N, H]``: with :math:`t = dy \odot g`,

    .. math::
        dx = r\,\big(t - \hat x\,\overline{t \odot \hat x}\big), \qquad dg = \textstyle\sum_n dy \odot \hat x

    (:math:`\partial r / \partial x_j = -r^3 x_j / H`; :math:`t \odot \hat x = (dy \odot \hat x) \odot g`,
    one product for both). ``residual``, the gradient reaching ``x`` around the block, is added."""
    u = dy * xn
    dweight = u.sum(0)
    t = dy * weight
    dx = torch.addcmul(t, xn, torch.mv(u, weight).unsqueeze_(-1), value=-1.0 / xn.shape[-1])
    return (dx.mul_(r) if residual is None else torch.addcmul(residual, dx, r)), dweight


def rope(x: Tensor, cos: Tensor, sin: Tensor, out: Tensor, transpose: bool = False) -> Tensor:
    r"""RoPE into ``out``: :math:`x \cos + \mathrm{rot}(x) \sin`, :math:`\mathrm{rot}(x) = (-x_2, x_1)` for
    the halves :math:`x_1, x_2` of the head dim. ``x``, ``out`` ``[..., d]`` (``out``'s strides set the
    layout attention reads), ``cos`` ``[..., d]``, ``sin`` ``[..., d/2]`` (the table's halves are equal).
    ``transpose``: its transpose, the backward (a rotation per frequency): :math:`dx = dy \cos +
    \mathrm{rot}^\top(dy) \sin`, :math:`\mathrm{rot}^\top(y) = (y_2, -y_1)`."""
    h, sign = x.shape[-1] // 2, -1 if transpose else 1
    torch.mul(x, cos, out=out)
    out[..., :h].addcmul_(x[..., h:], sin, value=-sign)
    out[..., h:].addcmul_(x[..., :h], sin, value=sign)
    return out


def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    r"""Attention over batched heads: :math:`P = \mathrm{softmax}(s\,QK^\top + M)`, :math:`O = PV`.

    ``q`` ``[b, Lq, d]``, ``k``, ``v`` ``[b, Lk, d]``, ``mask`` ``[b, Lq, Lk]`` additive. The query heads
    sharing a key/value head are stacked along ``Lq`` (grouped-query attention without repeating keys).
    Returns ``O`` ``[b, Lq, d]`` and ``P`` (kept for the backward: the math path, as the flash kernel's
    blocking costs more than it saves at these sizes)."""
    p = torch.softmax(torch.baddbmm(mask, q, k.transpose(1, 2), alpha=scale), -1)
    return torch.bmm(p, v), p


def attend_one(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float) -> Tensor:
    r"""Attention of one new query per head over the cache (a decode step),
    :math:`\mathrm{softmax}(s\,q K^\top + M)\,V`: ``q`` ``[B, nh, 1, d]``, ``k``, ``v`` ``[B, nkv, S, d]``
    (views of the cache), ``mask`` additive ``[B, 1, 1, S]``; returns ``[B, nkv, nh / nkv, d]``, the heads
    in order. The query heads that share a key/value head are stacked (grouped-query attention without
    repeating keys). Two batched matmuls: on a CPU, ``scaled_dot_product_attention``'s flash kernel takes
    about 1.5× as long for a single query (64 rows × 8 heads × 80 cached keys of 32: 3.5 ms against 2.3,
    measured alone on one thread)."""
    B, nh, _, d = q.shape
    nkv = k.shape[1]
    scores = torch.matmul(q.reshape(B, nkv, nh // nkv, d), k.transpose(-1, -2))  # [B, nkv, g, S]
    probs = scores.mul_(scale).add_(mask).softmax(-1)
    return torch.matmul(probs, v)


def _attend_backward(
    do: Tensor, q: Tensor, k: Tensor, v: Tensor, p: Tensor, scale: float, dq: Tensor, dk: Tensor
) -> Tensor:
    r"""Gradients of :func:`_attend`: :math:`dV = P^\top dO`, :math:`dP = dO\,V^\top`,
    :math:`dS = P \odot (dP - \mathrm{rowsum}(dP \odot P))` (the softmax backward), :math:`dQ = s\,dS\,K`,
    :math:`dK = s\,dS^\top Q`; ``dQ``, ``dK`` are written into ``dq``, ``dk``, ``dV`` returned."""
    ds = torch._softmax_backward_data(torch.bmm(do, v.transpose(1, 2)), p, -1, p.dtype)
    torch.baddbmm(q, ds, k, beta=0, alpha=scale, out=dq)  # beta=0: the first argument gives the shape only
    torch.baddbmm(k, ds.transpose(1, 2), q, beta=0, alpha=scale, out=dk)
    return torch.bmm(p.transpose(1, 2), do)


# dg = dy·σ(g)(1 + g(1 − σ(g))), into a buffer; None where this torch lacks it
# (advantage.lm.lean.FEATURES["backward_kernels"] is then False and this path never runs)
_silu_backward: Any = getattr(getattr(torch.ops.aten, "silu_backward", None), "grad_input", None)


@dataclass
class StackBatch:
    """The non-differentiable inputs of one :class:`Stack` call
    (:meth:`~advantage.lm.lean.LeanDecoder.hidden` prepares them), and the model's sizes."""

    ids: Tensor  # [N] token ids, N = B * L
    B: int
    L: int
    heads: int
    kv_heads: int
    head_dim: int
    scale: float
    eps: Tensor  # 0-d, the layers' RMSNorm epsilon
    norm_eps: Tensor  # 0-d, the final norm's
    inv_h: Tensor  # [H] filled with 1/H
    cos: Tensor  # [B, L, 1, d] rotary tables at each position
    sin: Tensor  # [B, L, 1, d/2] (the table's first half; the second is the same)
    mask: Tensor | None  # [B * kv, g * L, L] additive, repeated for the g query heads of each key/value head
    rows: Tensor | None  # [S] flat positions (row * L + column) whose final hidden states are returned
    row_mask: Tensor | None  # [kv, g * S, N]: their mask over all N positions (-inf in other rows)
    row_cos: Tensor | None  # [S, 1, d]
    row_sin: Tensor | None  # [S, 1, d/2]
    padding_idx: int | None  # the embedding's: its row gets no gradient from lookups (nn.Embedding's rule)


class Stack(torch.autograd.Function):
    r"""Embedding → decoder layers → final RMSNorm as one autograd node (the block comment above).

    Inputs: a :class:`StackBatch`, then the parameters: the embedding ``[V, H]``, :data:`PER_LAYER` per layer
    (:data:`LAYER_SLOTS`; ``None`` for absent biases) and the final norm's weight. Output: final-norm hidden
    states ``[N, H]``, or ``[S, H]`` at ``batch.rows``.

    With ``rows``, the last layer computes keys and values at every position but its queries, output
    projection, MLP and final norm only at those rows (no other hidden state of it is read): a reward model
    reading one position per response skips most of its last layer.

    The backward, per layer in reverse (``dx`` the gradient of its output ``x'``):

    * MLP :math:`x' = x_2 + W_d a + b_d`, :math:`a = \mathrm{silu}(g) \odot u`, :math:`(g, u) = W_{gu} h_2 +
      b_{gu}`: :math:`dW_d = dx^\top a`, :math:`da = dx\,W_d`, :math:`du = da \odot \mathrm{silu}(g)`,
      :math:`dg = da \odot u \odot \sigma(g)(1 + g(1 - \sigma(g)))`, :math:`dW_{gu} = d(g,u)^\top h_2`,
      :math:`dh_2 = d(g,u)\,W_{gu}`, then the RMSNorm's (:func:`_rms_norm_backward`) plus :math:`dx`;
    * attention :math:`x_2 = x + W_o O + b_o`: :math:`dW_o = dx_2^\top O`, :math:`dO = dx_2 W_o`,
      :func:`_attend_backward`, the RoPE transpose (:func:`rope`), :math:`dW_{qkv} = d(q,k,v)^\top
      h_1`, :math:`dh_1 = d(q,k,v)\,W_{qkv}`, the RMSNorm's plus :math:`dx_2`;
    * the embedding: :math:`dE_t = \sum_{n:\ \mathrm{ids}_n = t} dx_n`, and 0 for the padding index
      (``nn.Embedding(padding_idx=...)``'s rule).
    """

    @staticmethod
    def forward(ctx: Any, batch: StackBatch, *params: Tensor | None) -> Tensor:  # type: ignore[override]
        B, L, N = batch.B, batch.L, batch.ids.shape[0]
        nh, nkv, d, scale = batch.heads, batch.kv_heads, batch.head_dim, batch.scale
        g = nh // nkv
        n_layers = (len(params) - 2) // PER_LAYER
        x = F.embedding(batch.ids, cast(Tensor, params[0]))  # [N, H]
        saved = []
        for i in range(n_layers):
            # weights are tensors; a bias may be None (cat_or_none and _linear take None)
            g1, wq, bq, wk, bk, wv, bv, wo, bo, g2, wg, bg, wu, bu, wd, bd = cast(
                "tuple[Tensor, ...]", params[1 + i * PER_LAYER : 1 + (i + 1) * PER_LAYER]
            )
            h1, xn1, r1 = _rms_norm(x, g1, batch.eps, batch.inv_h)
            if batch.rows is None or i < n_layers - 1:
                w_in = torch.cat((wq, wk, wv))
                qkv = _linear(h1, w_in, cat_or_none(bq, bk, bv)).view(B, L, nh + 2 * nkv, d)
                # queries and keys rotated into one [B, heads, L, d] buffer: the batched matmuls read it
                qk = x.new_empty((B, nh + nkv, L, d))
                rope(qkv[:, :, : nh + nkv], batch.cos, batch.sin, qk.transpose(1, 2))
                q3 = qk[:, :nh].reshape(B * nkv, g * L, d)  # views when B = 1
                k3 = qk[:, nh:].reshape(B * nkv, L, d)
                v3 = x.new_empty((B, nkv, L, d))
                v3.transpose(1, 2).copy_(qkv[:, :, nh + nkv :])
                v3 = v3.view(B * nkv, L, d)
                o3, p = _attend(q3, k3, v3, batch.mask, scale)  # type: ignore[arg-type]
                o = o3.view(B, nh, L, d).transpose(1, 2).reshape(N, nh * d)
                hq, x2 = h1, _linear(o, wo, bo, x)
            else:  # the last layer at `rows` only: keys and values everywhere, queries at the rows
                rows = batch.rows
                assert batch.row_cos is not None and batch.row_sin is not None  # set with rows
                S = rows.shape[0]
                w_in = torch.cat((wk, wv))
                kv = _linear(h1, w_in, cat_or_none(bk, bv)).view(N, 2 * nkv, d)
                hq = h1[rows]  # [S, H]
                q3 = x.new_empty((nh, S, d))
                rope(_linear(hq, wq, bq).view(S, nh, d), batch.row_cos, batch.row_sin, q3.transpose(0, 1))
                q3 = q3.view(nkv, g * S, d)
                k3 = x.new_empty((nkv, N, d))
                rope(kv[:, :nkv], batch.cos.view(N, 1, d), batch.sin.view(N, 1, -1), k3.transpose(0, 1))
                v3 = x.new_empty((nkv, N, d))
                v3.transpose(0, 1).copy_(kv[:, nkv:])
                o3, p = _attend(q3, k3, v3, batch.row_mask, scale)  # type: ignore[arg-type]
                o = o3.view(nh, S, d).transpose(0, 1).reshape(S, nh * d)
                x2 = _linear(o, wo, bo, x[rows])
            h2, xn2, r2 = _rms_norm(x2, g2, batch.eps, batch.inv_h)
            w_gu = torch.cat((wg, wu))
            gate, up = _linear(h2, w_gu, cat_or_none(bg, bu)).chunk(2, dim=-1)
            silu = F.silu(gate)
            a = silu * up
            saved.append((xn1, r1, h1, hq, w_in, q3, k3, v3, p, o, xn2, r2, h2, w_gu, gate, up, silu, a))
            x = _linear(a, wd, bd, x2)
        out, xnf, rf = _rms_norm(x, params[-1], batch.norm_eps, batch.inv_h)  # type: ignore[arg-type]
        ctx.save_for_backward(*params)  # (checks that no parameter changed in place before the backward)
        ctx.batch, ctx.layers, ctx.final = batch, saved, (xnf, rf)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, dout: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        batch: StackBatch = ctx.batch
        params = ctx.saved_tensors
        B, L, N = batch.B, batch.L, batch.ids.shape[0]
        nh, nkv, d, scale = batch.heads, batch.kv_heads, batch.head_dim, batch.scale
        n_layers = (len(params) - 2) // PER_LAYER
        grads: list[Tensor | None] = [None] * len(params)
        xnf, rf = ctx.final
        dx, grads[-1] = _rms_norm_backward(dout.reshape(xnf.shape), xnf, rf, params[-1], None)
        for i in reversed(range(n_layers)):
            g1, wq, bq, _, bk, _, _, wo, bo, g2, _, bg, _, _, wd, bd = params[
                1 + i * PER_LAYER : 1 + (i + 1) * PER_LAYER
            ]
            xn1, r1, h1, hq, w_in, q3, k3, v3, p, o, xn2, r2, h2, w_gu, gate, up, silu, a = ctx.layers[i]
            # MLP
            dwd, dbd = torch.mm(dx.t(), a), None if bd is None else dx.sum(0)
            da = torch.mm(dx, wd)
            inter = da.shape[1]
            dgu = da.new_empty((da.shape[0], 2 * inter))  # [dg, du]: one matmul each for dW_gu and dh_2
            torch.mul(da, silu, out=dgu[:, inter:])
            _silu_backward(da * up, gate, grad_input=dgu[:, :inter])
            dwgu, dbgu = torch.mm(dgu.t(), h2), None if bg is None else dgu.sum(0)
            dx2, dg2 = _rms_norm_backward(torch.mm(dgu, w_gu), xn2, r2, g2, dx)
            # attention
            dwo, dbo = torch.mm(dx2.t(), o), None if bo is None else dx2.sum(0)
            do = torch.mm(dx2, wo)
            if batch.rows is None or i < n_layers - 1:
                dqk = do.new_empty((B, nh + nkv, L, d))
                dq3 = dqk[:, :nh].view(B * nkv, -1, d) if B == 1 else torch.empty_like(q3)
                dk3 = dqk[:, nh:].view(B * nkv, L, d) if B == 1 else torch.empty_like(k3)
                do3 = do.view(B, L, nh, d).transpose(1, 2).reshape(B * nkv, -1, d)
                dv3 = _attend_backward(do3, q3, k3, v3, p, scale, dq3, dk3)
                if B > 1:
                    dqk[:, :nh] = dq3.view(B, nh, L, d)
                    dqk[:, nh:] = dk3.view(B, nkv, L, d)
                dqkv = do.new_empty((B, L, nh + 2 * nkv, d))
                rope(dqk.transpose(1, 2), batch.cos, batch.sin, dqkv[:, :, : nh + nkv], transpose=True)
                dqkv[:, :, nh + nkv :] = dv3.view(B, nkv, L, d).transpose(1, 2)
                dqkv = dqkv.view(N, -1)
                dw_in, db_in = torch.mm(dqkv.t(), h1), None if bq is None else dqkv.sum(0)
                dx, dg1 = _rms_norm_backward(torch.mm(dqkv, w_in), xn1, r1, g1, dx2)
                (dwq, dbq), (dwkv, dbkv) = _split(dw_in, db_in, nh * d)
            else:
                rows = batch.rows
                assert batch.row_cos is not None and batch.row_sin is not None  # set with rows
                S = rows.shape[0]
                do3 = do.view(S, nh, d).transpose(0, 1).reshape(nkv, -1, d)
                dq3, dk3 = torch.empty_like(q3), torch.empty_like(k3)
                dv3 = _attend_backward(do3, q3, k3, v3, p, scale, dq3, dk3)
                dqs = do.new_empty((S, nh, d))
                rope(dq3.view(nh, S, d).transpose(0, 1), batch.row_cos, batch.row_sin, dqs, transpose=True)
                dqs = dqs.view(S, nh * d)
                dkv = do.new_empty((N, 2 * nkv, d))
                cos, sin = batch.cos.view(N, 1, d), batch.sin.view(N, 1, -1)
                rope(dk3.transpose(0, 1), cos, sin, dkv[:, :nkv], transpose=True)
                dkv[:, nkv:] = dv3.transpose(0, 1)
                dkv = dkv.view(N, -1)
                dwq, dbq = torch.mm(dqs.t(), hq), None if bq is None else dqs.sum(0)
                dwkv, dbkv = torch.mm(dkv.t(), h1), None if bk is None else dkv.sum(0)
                dh1 = torch.mm(dkv, w_in).index_add_(0, rows, torch.mm(dqs, wq))
                dx, dg1 = _rms_norm_backward(dh1, xn1, r1, g1, None)
                dx.index_add_(0, rows, dx2)
            # the fused projections' gradients split back into the separate parameters (LAYER_SLOTS order)
            (dwk, dbk), (dwv, dbv) = _split(dwkv, dbkv, nkv * d)
            (dwg, dbg), (dwu, dbu) = _split(dwgu, dbgu, inter)
            layer = [dg1, dwq, dbq, dwk, dbk, dwv, dbv, dwo, dbo, dg2, dwg, dbg, dwu, dbu, dwd, dbd]
            grads[1 + i * PER_LAYER : 1 + (i + 1) * PER_LAYER] = layer
        if ctx.needs_input_grad[1]:
            d_embed = torch.zeros_like(params[0]).index_add_(0, batch.ids, dx)
            if batch.padding_idx is not None:
                d_embed[batch.padding_idx] = 0.0
            grads[0] = d_embed
        return (None, *grads)
