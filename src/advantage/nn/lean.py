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
training, gradient checkpointing), and callers then use the transformers forward. ``ADVANTAGE_LEAN=0`` in
the environment turns the lean path off everywhere (to compare, or to rule it out when debugging).
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["DecodeWeights", "KVCache", "LeanDecoder", "additive_mask", "lean_decoder", "padded_causal_mask"]

LEAN_TYPES = ("qwen2", "llama")
_CACHE: weakref.WeakKeyDictionary[nn.Module, LeanDecoder | None] = weakref.WeakKeyDictionary()


def _decoder_of(model: nn.Module) -> nn.Module | None:
    """The transformer stack (``Qwen2Model`` / ``LlamaModel``) of a causal LM or of the stack itself."""
    if hasattr(model, "layers") and hasattr(model, "embed_tokens"):
        return model
    inner = getattr(model, "model", None)
    if inner is not None and hasattr(inner, "layers") and hasattr(inner, "embed_tokens"):
        return inner
    return None


def _supported(model: nn.Module, decoder: nn.Module) -> bool:
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
        attn, mlp = layer.self_attn, layer.mlp
        linears = (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj)
        linears += (mlp.gate_proj, mlp.up_proj, mlp.down_proj)
        if any(type(m) is not nn.Linear for m in linears):  # LoRA / quantised layers: not reproduced here
            return False
    return True


def lean_decoder(model: nn.Module) -> LeanDecoder | None:
    """The :class:`LeanDecoder` of a Qwen2/Llama causal LM (or its decoder stack), or ``None`` when the lean
    forward would not reproduce the transformers forward exactly (see the module docstring). Cached per
    module; whether the model is training (dropout) or checkpointing is checked at every call."""
    if os.environ.get("ADVANTAGE_LEAN", "1") == "0":
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


def _cat(*tensors: Tensor | None) -> Tensor | None:
    return None if tensors[0] is None else torch.cat(tensors)  # type: ignore[arg-type]


class LeanDecoder:
    """The decoder forward on a transformers Qwen2/Llama model's parameters (module docstring).

    ``hidden`` gives final-norm hidden states for training and scoring; ``logits`` applies the LM head;
    ``new_cache`` / ``step`` decode with a preallocated cache. Build it with :func:`lean_decoder`.
    """

    def __init__(self, model: nn.Module, decoder: nn.Module):
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
                    _cat(a.q_proj.bias, a.k_proj.bias, a.v_proj.bias),
                    a.o_proj.weight,
                    a.o_proj.bias,
                    layer.post_attention_layernorm.weight,
                    torch.cat([m.gate_proj.weight, m.up_proj.weight]),
                    _cat(m.gate_proj.bias, m.up_proj.bias),
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

        Each removes several small operations per layer from every decoding step.
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
        layers = []
        with torch.no_grad():
            for lw in self.weights():
                qkv = (lw.qkv * lw.attn_norm)[order]
                qkv_bias = None if lw.qkv_bias is None else lw.qkv_bias[order]
                gate_up = lw.gate_up * lw.mlp_norm
                layers.append(
                    _Weights(
                        None,
                        qkv,
                        qkv_bias,
                        lw.o,
                        lw.o_bias,
                        None,
                        gate_up,
                        lw.gate_up_bias,
                        lw.down,
                        lw.down_bias,
                    )
                )
            head = self.lm_head.weight * self.decoder.norm.weight
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

    def _rotary(self, position_ids: Tensor, dtype: torch.dtype, size: int | None) -> tuple[Tensor, Tensor]:
        """``cos, sin`` ``[B, L, 1, head_dim]`` at ``position_ids``, in ``dtype``."""
        cos, sin, _ = self._tables(position_ids, size)
        return cos[position_ids].unsqueeze(2).to(dtype), sin[position_ids].unsqueeze(2).to(dtype)

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
    ) -> Tensor:
        """Final-norm hidden states ``[B, L, H]`` (with :class:`DecodeWeights`: before the final norm's
        weight, which those fold into the head; pass them to :meth:`logits` too).

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
        """
        decode = isinstance(weights, DecodeWeights)
        layers = weights.layers if isinstance(weights, DecodeWeights) else weights or self.weights()
        x = F.embedding(input_ids, self.decoder.embed_tokens.weight)  # [B, L, H]
        B, L = input_ids.shape
        nh, nkv, d = self.heads, self.kv_heads, self.head_dim
        if decode:
            cis = self._tables(position_ids, max_position)[2][position_ids].unsqueeze(2)  # [B, L, 1, d/2]
        else:
            cos, sin = self._rotary(position_ids, x.dtype, max_position)
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
            gqa = nkv != nh
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=gqa)
            x = x + F.linear(o.transpose(1, 2).reshape(B, L, nh * d), lw.o, lw.o_bias)
            h = F.rms_norm(x, (self.hidden_size,), lw.mlp_norm, self.eps)
            g, u = F.linear(h, lw.gate_up, lw.gate_up_bias).chunk(2, dim=-1)
            x = x + F.linear(F.silu(g) * u, lw.down, lw.down_bias)
        if cache is not None:
            cache.length = start + L
        return F.rms_norm(x, (self.hidden_size,), None if decode else self.decoder.norm.weight, self.norm_eps)

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
