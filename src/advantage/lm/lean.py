r"""A lean forward pass for Qwen2 and Llama decoders: the same function as the transformers modules, on
the model's own parameters, with a fraction of the Python work per call.

For the small models of RL post-training on a CPU (and for decoding one token at a time anywhere), a
transformers forward is dominated by framework overhead, not arithmetic: a module call per projection,
the causal-mask factory, the rotary module and a growing ``DynamicCache`` per step. This module computes

.. math::
    x_0 = E[\text{ids}], \qquad
    x \leftarrow x + W_o\,\mathrm{Attn}\big(\mathrm{RoPE}(W_{qkv}\,\mathrm{RMSNorm}(x))\big), \qquad
    x \leftarrow x + W_d\big(\mathrm{silu}(W_g h) \odot W_u h\big),\ h = \mathrm{RMSNorm}(x)

per layer, then the final RMSNorm, with the query/key/value (and gate/up) projections as one matmul each,
rotary tables built once and indexed by position, one ``scaled_dot_product_attention`` call per layer
(grouped-query attention included) and, for decoding, a preallocated key/value cache written in place.
The parameters are read from the modules at every call, so gradients reach the model's own
``nn.Parameter`` objects and an optimizer built on ``model.parameters()`` trains it as usual.

Equality with the transformers forward (hidden states, log-probs and gradients, to 1e-5, Qwen2 and Llama,
grouped-query attention, left padding, packed rows, decoding with the cache) is tested in
``tests/test_lean.py``. :func:`lean_decoder` returns ``None`` for anything it does not reproduce exactly
(other architectures, RoPE scaling, sliding windows, LoRA-wrapped projections, attention dropout while
training, gradient checkpointing), and callers then use the transformers forward. ``trainer.kernels``
without ``lm_forward`` (e.g. ``reference``, :mod:`advantage.kernels`) turns the lean path off everywhere
(to compare, or to rule it out when debugging).

Training (gradients enabled, CPU, fp32/fp64) runs the whole stack as one autograd node,
:class:`~advantage.lm.lean_backward.Stack`: the forward with autograd off and a hand-written backward
(closed forms in its docstring), instead of autograd recording and replaying a few hundred small
operations; with ``rows`` (the positions a loss reads: a reward model's last tokens, a policy's predicting
tokens) the last layer skips the queries and MLP nobody reads. Checked against finite differences, the
autograd path and transformers in ``tests/test_lean_backward.py``; ``trainer.kernels`` without
``lm_backward`` keeps the autograd path, as does a torch without the two private backward kernels it
calls (:data:`FEATURES`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from advantage import kernels
from advantage.lm.lean_backward import (
    LAYER_SLOTS,
    MAX_SCORES,
    Stack,
    StackBatch,
    attend_one,
    cat_or_none,
    column_major,
)

if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedModel

__all__ = [
    "FEATURES",
    "DecodeWeights",
    "KVCache",
    "LeanDecoder",
    "additive_mask",
    "lean_decoder",
    "padded_causal_mask",
]

LEAN_TYPES = ("qwen2", "llama")
# The private torch kernels the hand-written backward calls (softmax's and SiLU's backward, the ones autograd
# itself calls); without them the autograd path runs (tests set this False to force it).
FEATURES: dict[str, bool] = {
    "backward_kernels": callable(getattr(torch, "_softmax_backward_data", None))
    and hasattr(getattr(torch.ops.aten, "silu_backward", None), "grad_input"),
}
_CACHE: weakref.WeakKeyDictionary[nn.Module, LeanDecoder | None] = weakref.WeakKeyDictionary()


def _decoder_of(model: PreTrainedModel) -> PreTrainedModel | None:
    """The transformer stack (``Qwen2Model`` / ``LlamaModel``) of a causal LM or of the stack itself."""
    for stack in (model, getattr(model, "model", None)):
        if hasattr(stack, "layers") and hasattr(stack, "embed_tokens"):
            return stack
    return None


def _supported(model: PreTrainedModel, decoder: PreTrainedModel) -> bool:
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in LEAN_TYPES:
        return False
    if getattr(cfg, "hidden_act", "silu") != "silu" or getattr(cfg, "pretraining_tp", 1) != 1:
        return False
    if any(t != "full_attention" for t in getattr(cfg, "layer_types", None) or ()):
        return False
    rotary = getattr(decoder, "rotary_emb", None)
    if rotary is None or getattr(rotary, "rope_type", "default") != "default":
        return False
    for layer in decoder.layers:
        if type(layer).__name__.startswith("FSDP"):  # sharded parameters (trainer.strategy=fsdp)
            return False
        attn, mlp = layer.self_attn, layer.mlp
        linears: tuple[nn.Module, ...] = (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj)
        linears += (mlp.gate_proj, mlp.up_proj, mlp.down_proj)
        if any(type(m) is not nn.Linear for m in linears):  # LoRA / quantised layers: not reproduced here
            return False
    return True


def lean_decoder(model: PreTrainedModel) -> LeanDecoder | None:
    """The :class:`LeanDecoder` of a Qwen2/Llama causal LM (or its decoder stack), or ``None`` when the lean
    forward would not reproduce the transformers forward exactly (see the module docstring). Cached per
    module; whether the model is training (dropout) or checkpointing is checked at every call."""
    if not kernels.enabled("lm_forward"):
        return None
    if model in _CACHE:
        lean = _CACHE[model]
    else:
        decoder = _decoder_of(model)
        lean = LeanDecoder(model, decoder) if decoder is not None and _supported(model, decoder) else None
        _CACHE[model] = lean
    if lean is None:
        return None
    if model.training and (
        getattr(model.config, "attention_dropout", 0.0) > 0
        # gradient_checkpointing_enable() sets this flag on the layers (transformers' own property walks
        # every module, a visible cost per call for a small model)
        or any(getattr(m, "gradient_checkpointing", False) for m in (lean.decoder, *lean.layers))
    ):
        return None
    return lean


def additive_mask(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """0 where ``allowed`` (bool), the dtype's finite minimum elsewhere: a query with no visible key then
    softmaxes to a finite uniform row (its output is never used) instead of NaN, as in transformers'
    eager attention."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(
        ~allowed, torch.finfo(dtype).min
    )


def padded_causal_mask(attention_mask: Tensor, dtype: torch.dtype) -> Tensor:
    """The additive mask ``[B, 1, L, L]`` of a padded batch: query ``i`` sees key ``j ≤ i`` when key ``j``
    is a real token (``attention_mask`` ``[B, L]``, 1 on real tokens)."""
    L = attention_mask.shape[1]
    causal = torch.ones((L, L), dtype=torch.bool, device=attention_mask.device).tril_()
    return additive_mask(causal[None, None] & attention_mask.bool()[:, None, None, :], dtype)


@dataclass
class KVCache:
    """Keys and values of every layer, ``[layers, B, kv_heads, S, head_dim]``, preallocated for the
    longest sequence ``S``; ``length`` positions are filled."""

    keys: Tensor
    values: Tensor
    length: int = 0

    def select(self, rows: Tensor) -> None:
        """Keep only the batch rows ``rows`` (rows that finished decoding leave the batch)."""
        self.keys, self.values = self.keys[:, rows], self.values[:, rows]


@dataclass
class _Weights:
    """One layer's parameters with the query/key/value and gate/up projections concatenated. In the decode
    form (:meth:`LeanDecoder.decode_weights`) the norms are ``None``, folded into the projections."""

    attn_norm: Tensor | None
    qkv: Tensor
    qkv_bias: Tensor | None
    o: Tensor
    o_bias: Tensor | None
    mlp_norm: Tensor | None
    gate_up: Tensor
    gate_up_bias: Tensor | None
    down: Tensor
    down_bias: Tensor | None


@dataclass
class DecodeWeights:
    """The parameters rearranged once per rollout for decoding (:meth:`LeanDecoder.decode_weights`)."""

    layers: list[_Weights]
    head: Tensor  # the LM head with the final norm's weight folded in
    head_bias: Tensor | None


class LeanDecoder:
    """The decoder forward on a transformers Qwen2/Llama model's parameters (module docstring).

    ``hidden`` gives final-norm hidden states for training and scoring; ``logits`` applies the LM head;
    ``new_cache`` and ``hidden(..., cache=...)`` decode with a preallocated cache. Build it with
    :func:`lean_decoder`.
    """

    def __init__(self, model: PreTrainedModel, decoder: PreTrainedModel):
        cfg = model.config
        self.model, self.decoder = model, decoder
        self.layers = list(decoder.layers)
        attn = self.layers[0].self_attn
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = attn.head_dim
        self.scale = float(attn.scaling)
        self.eps = float(self.layers[0].input_layernorm.variance_epsilon)
        self.norm_eps = float(decoder.norm.variance_epsilon)
        self.hidden_size = cfg.hidden_size
        self.lm_head = getattr(model, "lm_head", None)  # None for a bare decoder stack
        self._rope: dict[torch.device, tuple[Tensor, Tensor, Tensor]] = {}
        self._order: Tensor | None = None  # decode_weights' query/key row order
        # training (Stack): where each parameter lives, constants per dtype, the rotary table
        self._slots: list[tuple[dict[str, nn.Parameter | None], str]] | None = None
        self._consts: dict[torch.dtype, tuple[Tensor, Tensor, Tensor]] = {}
        self._train_rope: Tensor | None = None

    # -- parameters ---------------------------------------------------------------------------------------
    def weights(self) -> list[_Weights]:
        """Each layer's parameters, fused where two projections read the same input. Differentiable (the
        concatenations are ops on the parameters); under ``inference_mode`` compute once per rollout."""
        out = []
        for layer in self.layers:
            a, m = layer.self_attn, layer.mlp
            out.append(
                _Weights(
                    layer.input_layernorm.weight,
                    torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
                    cat_or_none(a.q_proj.bias, a.k_proj.bias, a.v_proj.bias),
                    a.o_proj.weight,
                    a.o_proj.bias,
                    layer.post_attention_layernorm.weight,
                    torch.cat([m.gate_proj.weight, m.up_proj.weight]),
                    cat_or_none(m.gate_proj.bias, m.up_proj.bias),
                    m.down_proj.weight,
                    m.down_proj.bias,
                )
            )
        return out

    def decode_weights(self) -> DecodeWeights:
        r"""The weights rearranged for decoding, computed once per rollout (no gradient), same function:

        * each RMSNorm weight is folded into the projection that reads it,
          :math:`W(\hat x \odot g) = (W\,\mathrm{diag}(g))\,\hat x`, the final norm's into the LM head;
        * the query and key rows of each head are reordered from the rotate-half layout
          :math:`(x_1..x_{d/2}, x_{d/2+1}..x_d)` to pairs :math:`(x_i, x_{i+d/2})`, so RoPE is one complex
          product :math:`(x_i + j\,x_{i+d/2})\,e^{j\theta_i}`. Queries and keys are permuted alike, so their
          dot products (and the cached keys, used only by this rollout) are unchanged.

        Each removes several small operations per layer from every decoding step. On a CPU every matrix is
        also stored transposed (the same ``[out, in]`` tensor, column-major): ``F.linear`` then multiplies
        by a row-major ``[in, out]`` operand, which the one-thread GEMM streams faster from memory when the
        weights do not stay in cache between steps (8 × 256 layers and a 32k head, 64 rows: 29.0 against
        32.1 ms of matmuls per step, measured alone).
        """
        if self.lm_head is None:
            raise ValueError("this lean decoder wraps a bare decoder stack: it has no LM head")
        device = self.decoder.embed_tokens.weight.device
        if self._order is None or self._order.device != device:
            nh, nkv, d = self.heads, self.kv_heads, self.head_dim
            half = torch.arange(d // 2)
            pairs = torch.stack([half, half + d // 2], dim=-1).flatten()  # [d]: 0, d/2, 1, d/2+1, ...
            heads = torch.arange(nh + nkv)[:, None] * d
            rest = torch.arange((nh + nkv) * d, (nh + 2 * nkv) * d)  # the value rows keep their order
            self._order = torch.cat([(heads + pairs).flatten(), rest]).to(device)
        order = self._order
        layout = column_major if device.type == "cpu" else (lambda w: w)
        layers = []
        with torch.no_grad():
            for lw in self.weights():
                assert lw.attn_norm is not None and lw.mlp_norm is not None  # weights() has the norms
                qkv = (lw.qkv * lw.attn_norm)[order]
                qkv_bias = None if lw.qkv_bias is None else lw.qkv_bias[order]
                gate_up = lw.gate_up * lw.mlp_norm
                qkv, o, gate_up, down = (layout(w) for w in (qkv, lw.o, gate_up, lw.down))
                layers.append(
                    replace(
                        lw,
                        attn_norm=None,
                        mlp_norm=None,
                        qkv=qkv,
                        qkv_bias=qkv_bias,
                        o=o,
                        gate_up=gate_up,
                        down=down,
                    )
                )
            head = layout(self.lm_head.weight * self.decoder.norm.weight)
        return DecodeWeights(layers, head, self.lm_head.bias)

    def _tables(self, position_ids: Tensor, size: int | None) -> tuple[Tensor, Tensor, Tensor]:
        """fp32 ``cos``, ``sin`` ``[S, head_dim]`` and the complex ``cis`` ``[S, head_dim / 2]`` of positions
        ``0..S-1``, built once with the transformers rotary module's own ``inv_freq`` and scaling (fp32
        angles, as it computes them); ``size`` (an upper bound on the positions) spares a host sync."""
        device = position_ids.device
        need = size if size is not None else (int(position_ids.max()) + 1 if position_ids.numel() else 1)
        tables = self._rope.get(device)
        if tables is None or tables[0].shape[0] < need:
            rotary = self.decoder.rotary_emb
            size = max(need, int(getattr(self.model.config, "max_position_embeddings", 0) or 0))
            with torch.no_grad():
                pos = torch.arange(size, device=device, dtype=torch.float32)
                freqs = pos[:, None] * rotary.inv_freq.to(device, torch.float32)[None, :]  # [S, d/2]
                emb = torch.cat([freqs, freqs], dim=-1)  # [S, head_dim]
                scaling = float(getattr(rotary, "attention_scaling", 1.0))
                cis = torch.polar(torch.full_like(freqs, scaling), freqs)
                tables = (emb.cos() * scaling, emb.sin() * scaling, cis)
            self._rope[device] = tables
        return tables

    # -- forward ------------------------------------------------------------------------------------------
    def hidden(
        self,
        input_ids: Tensor,
        position_ids: Tensor,
        mask: Tensor,
        *,
        weights: list[_Weights] | DecodeWeights | None = None,
        cache: KVCache | None = None,
        max_position: int | None = None,
        rows: Tensor | None = None,
    ) -> Tensor:
        """Final-norm hidden states ``[B, L, H]`` (with :class:`DecodeWeights`: before the final norm's
        weight, which those fold into the head; pass them to :meth:`logits` too), or ``[S, H]`` at ``rows``.

        Args:
            input_ids: ``[B, L]``.
            position_ids: ``[B, L]`` rotary positions (from the padding mask, or restarting per packed
                segment).
            mask: additive ``[B or 1, 1, L, K]`` (0 visible, dtype-min hidden; :func:`padded_causal_mask`,
                :func:`additive_mask`), ``K = L`` without a cache, ``K = cache.length + L`` with one.
            weights: :meth:`weights` or :meth:`decode_weights`, precomputed (decoding); :meth:`weights`
                computed here when ``None``.
            cache: keys/values of the previous positions; this call's are written after them and
                ``cache.length`` advances by ``L``.
            max_position: an upper bound on ``position_ids`` (decoding knows it), to skip looking it up.
            rows: ``[S]`` flat positions (``row * L + column``) whose hidden states are wanted, no cache:
                ``hidden(...).reshape(B * L, H)[rows]``; training computes the last layer's queries and MLP
                at these rows only (when ``S ≤ L``: their attention spans all rows).

        With gradients enabled and no cache or precomputed weights (training, scoring for a loss), on a CPU
        in fp32/fp64, the stack runs as one autograd node with a hand-written backward (:class:`Stack`;
        ``trainer.kernels`` without ``lm_backward`` turns it off); the function is the same.
        """
        if weights is None and cache is None:
            inputs = self._stack_inputs(input_ids, position_ids, mask, rows, max_position)
            if inputs is not None:
                out = Stack.apply(*inputs)
                if inputs[0].rows is not None:
                    return out
                return out.view(*input_ids.shape, -1) if rows is None else out[rows]
        if rows is not None:
            if cache is not None:
                raise ValueError("rows needs cache=None")
            h = self.hidden(input_ids, position_ids, mask, weights=weights, max_position=max_position)
            return h.reshape(-1, h.shape[-1])[rows]
        decode = isinstance(weights, DecodeWeights)
        layers = weights.layers if isinstance(weights, DecodeWeights) else weights or self.weights()
        # padding_idx as nn.Embedding: a lookup of the pad token adds no gradient to its row (a sampled pad
        # token, or the EOS where pad = EOS, still reads it)
        x = F.embedding(input_ids, self.decoder.embed_tokens.weight, self.decoder.embed_tokens.padding_idx)
        B, L = input_ids.shape
        nh, nkv, d = self.heads, self.kv_heads, self.head_dim
        cos, sin, cis = self._tables(position_ids, max_position)
        if decode:
            cis = cis[position_ids].unsqueeze(2)  # [B, L, 1, d/2]
        else:  # [B, L, 1, head_dim], in the activations' dtype
            cos, sin = cos[position_ids].unsqueeze(2).to(x.dtype), sin[position_ids].unsqueeze(2).to(x.dtype)
        start = cache.length if cache is not None else 0
        for i, lw in enumerate(layers):
            h = F.rms_norm(x, (self.hidden_size,), lw.attn_norm, self.eps)
            qkv = F.linear(h, lw.qkv, lw.qkv_bias).view(B, L, nh + 2 * nkv, d)
            qk, v = qkv[:, :, : nh + nkv], qkv[:, :, nh + nkv :]
            if decode:  # rows in (x_i, x_{i+d/2}) pairs: RoPE is one complex product
                pairs = torch.view_as_complex(qk.reshape(B, L, nh + nkv, d // 2, 2))
                qk = torch.view_as_real(pairs * cis).flatten(-2)
            else:
                x1, x2 = qk.chunk(2, dim=-1)
                qk = qk * cos + torch.cat([-x2, x1], dim=-1) * sin  # RoPE: q·cos + rotate_half(q)·sin
            q, k, v = qk[:, :, :nh].transpose(1, 2), qk[:, :, nh:].transpose(1, 2), v.transpose(1, 2)
            if cache is not None:  # write this call's keys/values in place, attend to all so far
                cache.keys[i, :, :, start : start + L] = k
                cache.values[i, :, :, start : start + L] = v
                k, v = cache.keys[i, :, :, : start + L], cache.values[i, :, :, : start + L]
            if cache is not None and L == 1:  # a decode step: see attend_one
                o = attend_one(q, k, v, mask, self.scale).reshape(B, L, nh * d)
            else:
                gqa = nkv != nh
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=gqa)
                o = o.transpose(1, 2).reshape(B, L, nh * d)
            x = x + F.linear(o, lw.o, lw.o_bias)
            h = F.rms_norm(x, (self.hidden_size,), lw.mlp_norm, self.eps)
            g, u = F.linear(h, lw.gate_up, lw.gate_up_bias).chunk(2, dim=-1)
            x = x + F.linear(F.silu(g) * u, lw.down, lw.down_bias)
        if cache is not None:
            cache.length = start + L
        return F.rms_norm(x, (self.hidden_size,), None if decode else self.decoder.norm.weight, self.norm_eps)

    def _stack_parameters(self) -> list[Tensor | None]:
        """The :class:`Stack` inputs, read from the modules' parameter dicts (a parameter replaced since
        the last call is picked up; ``nn.Module.__getattr__`` per parameter would cost more)."""
        if self._slots is None:
            slots = [(self.decoder.embed_tokens._parameters, "weight")]
            for layer in self.layers:
                slots += [(layer.get_submodule(path)._parameters, name) for path, name in LAYER_SLOTS]
            slots.append((self.decoder.norm._parameters, "weight"))
            self._slots = slots
        return [params.get(name) for params, name in self._slots]

    def _stack_inputs(
        self,
        input_ids: Tensor,
        position_ids: Tensor,
        mask: Tensor,
        rows: Tensor | None,
        max_position: int | None,
    ) -> tuple[Any, ...] | None:
        """The :class:`Stack` inputs of a :meth:`hidden` call (the non-differentiable ones prepared once),
        or ``None`` where the autograd path stays: no gradient wanted, not a CPU fp32/fp64 model, autocast,
        attention probabilities too large to keep, or the ``lm_backward`` fast path off."""
        if (
            not torch.is_grad_enabled()
            or not kernels.enabled("lm_backward")
            or not FEATURES["backward_kernels"]
            or torch.is_autocast_enabled("cpu")
        ):
            return None
        params = self._stack_parameters()
        p = params[0]
        assert p is not None
        B, L = input_ids.shape
        nh, nkv, d = self.heads, self.kv_heads, self.head_dim
        if (
            p.device.type != "cpu"
            or p.dtype not in (torch.float32, torch.float64)
            or mask.shape[-1] != L
            or len(self.layers) * B * nh * L * L > MAX_SCORES
            or not any(t is not None and t.requires_grad for t in params)
        ):
            return None
        N, g, dtype = B * L, nh // nkv, p.dtype
        consts = self._consts.get(dtype)
        if consts is None:
            consts = self._consts[dtype] = (
                p.new_tensor(self.eps),
                p.new_tensor(self.norm_eps),
                p.new_full((self.hidden_size,), 1.0 / self.hidden_size),
            )
        cos, sin, _ = self._tables(position_ids, max_position)
        if (
            self._train_rope is None
            or self._train_rope.shape[0] != cos.shape[0]
            or self._train_rope.dtype != dtype
        ):
            self._train_rope = torch.cat([cos, sin[:, : d // 2]], dim=-1).to(dtype)  # [S, 3d/2]
        table = self._train_rope[position_ids.reshape(N)]  # [N, 3d/2]: one gather for both
        cos, sin = table[:, :d].view(B, L, 1, d), table[:, d:].view(B, L, 1, d // 2)
        mask = mask.to(dtype)
        full = None
        if rows is None or rows.shape[0] > L or len(self.layers) > 1:  # per (row, kv head): g heads stacked
            full = mask[:, :, None].expand(B, nkv, g, L, L).reshape(B * nkv, g * L, L)
        row_mask = row_cos = row_sin = None
        if rows is not None and rows.shape[0] > L:
            # the last layer's queries at `rows` attend over all B * L positions (S * N scores): with more
            # rows than a row's width that is more than the B * L * L of the whole layer, computed instead
            rows = None
        if rows is not None:
            S = rows.shape[0]
            if B == 1:
                own = mask[0, 0].index_select(0, rows)  # [S, L]
            else:  # over all N positions, -inf in other rows (a fully masked query stays in its own row)
                b = rows.div(L, rounding_mode="floor")
                own = mask.new_full((S, B, L), float("-inf"))
                own[torch.arange(S, device=rows.device), b] = mask.expand(B, 1, L, L)[b, 0, rows - b * L]
                own = own.view(S, N)
            row_mask = own.expand(nkv, g, S, N).reshape(nkv, g * S, N)
            at = table.index_select(0, rows)
            row_cos, row_sin = at[:, None, :d], at[:, None, d:]
        ids = input_ids.reshape(N)
        batch = StackBatch(
            ids,
            B,
            L,
            nh,
            nkv,
            d,
            self.scale,
            *consts,
            cos,
            sin,
            full,
            rows,
            row_mask,
            row_cos,
            row_sin,
            self.decoder.embed_tokens.padding_idx,
        )
        return (batch, *params)

    def logits(self, hidden: Tensor, weights: DecodeWeights | None = None) -> Tensor:
        """The LM head on hidden states ``[..., H]`` → ``[..., V]`` (the folded head of ``weights`` when the
        hidden states came from :class:`DecodeWeights`)."""
        if weights is not None:
            return F.linear(hidden, weights.head, weights.head_bias)
        if self.lm_head is None:
            raise ValueError("this lean decoder wraps a bare decoder stack: it has no LM head")
        return F.linear(hidden, self.lm_head.weight, self.lm_head.bias)

    def new_cache(self, batch: int, length: int) -> KVCache:
        """An empty cache for ``batch`` rows of up to ``length`` positions, in the model's dtype/device."""
        p = self.decoder.embed_tokens.weight
        shape = (len(self.layers), batch, self.kv_heads, length, self.head_dim)
        return KVCache(p.new_empty(shape), p.new_empty(shape))
