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

Training (gradients enabled, CPU, fp32/fp64) runs the whole stack as one autograd node, :class:`_Stack`:
the forward with autograd off and a hand-written backward (closed forms in its docstring), instead of
autograd recording and replaying a few hundred small operations; with ``rows`` (the positions a loss
reads: a reward model's last tokens, a policy's predicting tokens) the last layer skips the queries and
MLP nobody reads. Checked against finite differences, the autograd path and transformers in
``tests/test_lean_backward.py``; ``trainer.kernels`` without ``lm_backward`` keeps the autograd path, as
does a torch without the two private backward kernels it calls (:data:`FEATURES`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from advantage import kernels

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
        # training (_Stack): where each parameter lives, constants per dtype, the rotary table
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
                    _cat_or_none(a.q_proj.bias, a.k_proj.bias, a.v_proj.bias),
                    a.o_proj.weight,
                    a.o_proj.bias,
                    layer.post_attention_layernorm.weight,
                    torch.cat([m.gate_proj.weight, m.up_proj.weight]),
                    _cat_or_none(m.gate_proj.bias, m.up_proj.bias),
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
        layout = _column_major if device.type == "cpu" else (lambda w: w)
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
        in fp32/fp64, the stack runs as one autograd node with a hand-written backward (:class:`_Stack`;
        ``trainer.kernels`` without ``lm_backward`` turns it off); the function is the same.
        """
        if weights is None and cache is None:
            inputs = self._stack_inputs(input_ids, position_ids, mask, rows, max_position)
            if inputs is not None:
                out = _Stack.apply(*inputs)
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
            if cache is not None and L == 1:  # a decode step: see _attend_one
                o = _attend_one(q, k, v, mask, self.scale).reshape(B, L, nh * d)
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
        """The :class:`_Stack` inputs, read from the modules' parameter dicts (a parameter replaced since
        the last call is picked up; ``nn.Module.__getattr__`` per parameter would cost more)."""
        if self._slots is None:
            slots = [(self.decoder.embed_tokens._parameters, "weight")]
            for layer in self.layers:
                slots += [(layer.get_submodule(path)._parameters, name) for path, name in _LAYER_SLOTS]
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
        """The :class:`_Stack` inputs of a :meth:`hidden` call (the non-differentiable ones prepared once),
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
            or len(self.layers) * B * nh * L * L > _MAX_SCORES
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
        batch = _Batch(
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


# -- training: the whole stack as one autograd node ---------------------------------------------------------
#
# Recording ~35 small operations per layer for autograd, then replaying about twice as many in the backward
# engine, costs more than their arithmetic for a small model on a CPU. `_Stack` runs the forward of
# `LeanDecoder.hidden` with autograd off, keeps what the backward needs, and computes every parameter's
# gradient in one hand-written backward with fewer, larger kernels; autograd sees one node.

_PER_LAYER = 16  # `_Stack` inputs per layer (parameters, None for absent biases), in `_LAYER_SLOTS` order
_LAYER_SLOTS = (
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
assert len(_LAYER_SLOTS) == _PER_LAYER
_MAX_SCORES = 1 << 25  # attention probabilities kept for the backward, all layers (elements); more: autograd


def _column_major(w: Tensor) -> Tensor:
    """``w`` ``[out, in]`` with the same values, stored transposed (``w.t()`` is contiguous)."""
    return w.t().contiguous().t()


def _cat_or_none(*tensors: Tensor | None) -> Tensor | None:
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


def _rope(x: Tensor, cos: Tensor, sin: Tensor, out: Tensor, transpose: bool = False) -> Tensor:
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


def _attend_one(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float) -> Tensor:
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


# dg = dy·σ(g)(1 + g(1 − σ(g))), into a buffer; None where this torch lacks it (FEATURES["backward_kernels"]
# is then False and this path never runs)
_silu_backward: Any = getattr(getattr(torch.ops.aten, "silu_backward", None), "grad_input", None)


@dataclass
class _Batch:
    """The non-differentiable inputs of one :class:`_Stack` call (:meth:`LeanDecoder.hidden` prepares
    them), and the model's sizes."""

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


class _Stack(torch.autograd.Function):
    r"""Embedding → decoder layers → final RMSNorm as one autograd node (the block comment above).

    Inputs: a :class:`_Batch`, then the parameters: the embedding ``[V, H]``, :data:`_PER_LAYER` per layer
    (:data:`_LAYER_SLOTS`; ``None`` for absent biases) and the final norm's weight. Output: final-norm hidden
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
      :func:`_attend_backward`, the RoPE transpose (:func:`_rope`), :math:`dW_{qkv} = d(q,k,v)^\top
      h_1`, :math:`dh_1 = d(q,k,v)\,W_{qkv}`, the RMSNorm's plus :math:`dx_2`;
    * the embedding: :math:`dE_t = \sum_{n:\ \mathrm{ids}_n = t} dx_n`, and 0 for the padding index
      (``nn.Embedding(padding_idx=...)``'s rule).
    """

    @staticmethod
    def forward(ctx: Any, batch: _Batch, *params: Tensor | None) -> Tensor:  # type: ignore[override]
        B, L, N = batch.B, batch.L, batch.ids.shape[0]
        nh, nkv, d, scale = batch.heads, batch.kv_heads, batch.head_dim, batch.scale
        g = nh // nkv
        n_layers = (len(params) - 2) // _PER_LAYER
        x = F.embedding(batch.ids, cast(Tensor, params[0]))  # [N, H]
        saved = []
        for i in range(n_layers):
            # weights are tensors; a bias may be None (_cat_or_none and _linear take None)
            g1, wq, bq, wk, bk, wv, bv, wo, bo, g2, wg, bg, wu, bu, wd, bd = cast(
                "tuple[Tensor, ...]", params[1 + i * _PER_LAYER : 1 + (i + 1) * _PER_LAYER]
            )
            h1, xn1, r1 = _rms_norm(x, g1, batch.eps, batch.inv_h)
            if batch.rows is None or i < n_layers - 1:
                w_in = torch.cat((wq, wk, wv))
                qkv = _linear(h1, w_in, _cat_or_none(bq, bk, bv)).view(B, L, nh + 2 * nkv, d)
                # queries and keys rotated into one [B, heads, L, d] buffer: the batched matmuls read it
                qk = x.new_empty((B, nh + nkv, L, d))
                _rope(qkv[:, :, : nh + nkv], batch.cos, batch.sin, qk.transpose(1, 2))
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
                kv = _linear(h1, w_in, _cat_or_none(bk, bv)).view(N, 2 * nkv, d)
                hq = h1[rows]  # [S, H]
                q3 = x.new_empty((nh, S, d))
                _rope(_linear(hq, wq, bq).view(S, nh, d), batch.row_cos, batch.row_sin, q3.transpose(0, 1))
                q3 = q3.view(nkv, g * S, d)
                k3 = x.new_empty((nkv, N, d))
                _rope(kv[:, :nkv], batch.cos.view(N, 1, d), batch.sin.view(N, 1, -1), k3.transpose(0, 1))
                v3 = x.new_empty((nkv, N, d))
                v3.transpose(0, 1).copy_(kv[:, nkv:])
                o3, p = _attend(q3, k3, v3, batch.row_mask, scale)  # type: ignore[arg-type]
                o = o3.view(nh, S, d).transpose(0, 1).reshape(S, nh * d)
                x2 = _linear(o, wo, bo, x[rows])
            h2, xn2, r2 = _rms_norm(x2, g2, batch.eps, batch.inv_h)
            w_gu = torch.cat((wg, wu))
            gate, up = _linear(h2, w_gu, _cat_or_none(bg, bu)).chunk(2, dim=-1)
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
        batch: _Batch = ctx.batch
        params = ctx.saved_tensors
        B, L, N = batch.B, batch.L, batch.ids.shape[0]
        nh, nkv, d, scale = batch.heads, batch.kv_heads, batch.head_dim, batch.scale
        n_layers = (len(params) - 2) // _PER_LAYER
        grads: list[Tensor | None] = [None] * len(params)
        xnf, rf = ctx.final
        dx, grads[-1] = _rms_norm_backward(dout.reshape(xnf.shape), xnf, rf, params[-1], None)
        for i in reversed(range(n_layers)):
            g1, wq, bq, _, bk, _, _, wo, bo, g2, _, bg, _, _, wd, bd = params[
                1 + i * _PER_LAYER : 1 + (i + 1) * _PER_LAYER
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
                _rope(dqk.transpose(1, 2), batch.cos, batch.sin, dqkv[:, :, : nh + nkv], transpose=True)
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
                _rope(dq3.view(nh, S, d).transpose(0, 1), batch.row_cos, batch.row_sin, dqs, transpose=True)
                dqs = dqs.view(S, nh * d)
                dkv = do.new_empty((N, 2 * nkv, d))
                cos, sin = batch.cos.view(N, 1, d), batch.sin.view(N, 1, -1)
                _rope(dk3.transpose(0, 1), cos, sin, dkv[:, :nkv], transpose=True)
                dkv[:, nkv:] = dv3.transpose(0, 1)
                dkv = dkv.view(N, -1)
                dwq, dbq = torch.mm(dqs.t(), hq), None if bq is None else dqs.sum(0)
                dwkv, dbkv = torch.mm(dkv.t(), h1), None if bk is None else dkv.sum(0)
                dh1 = torch.mm(dkv, w_in).index_add_(0, rows, torch.mm(dqs, wq))
                dx, dg1 = _rms_norm_backward(dh1, xn1, r1, g1, None)
                dx.index_add_(0, rows, dx2)
            # the fused projections' gradients split back into the separate parameters (_LAYER_SLOTS order)
            (dwk, dbk), (dwv, dbv) = _split(dwkv, dbkv, nkv * d)
            (dwg, dbg), (dwu, dbu) = _split(dwgu, dbgu, inter)
            layer = [dg1, dwq, dbq, dwk, dbk, dwv, dbv, dwo, dbo, dg2, dwg, dbg, dwu, dbu, dwd, dbd]
            grads[1 + i * _PER_LAYER : 1 + (i + 1) * _PER_LAYER] = layer
        if ctx.needs_input_grad[1]:
            d_embed = torch.zeros_like(params[0]).index_add_(0, batch.ids, dx)
            if batch.padding_idx is not None:
                d_embed[batch.padding_idx] = 0.0
            grads[0] = d_embed
        return (None, *grads)
