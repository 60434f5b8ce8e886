"""Batched sampling from a causal LM with a KV cache: our own decoding loop, returning the ``[B, T]``
tensors an on-policy LLM update consumes (response ids, mask, behaviour log-probs).

Why not ``model.generate``: it recomputes nothing we need (no per-token log-probs without a second
pass over ``output_scores``), and its per-step logits-processor and stopping-criteria machinery costs more
than the forward pass of a small model (``benchmarks/lm_sampling.py`` measures the difference).

The loop: one prefill forward over the left-padded prompts (position ids from the mask, as in
:func:`advantage.lm.model.sequence_logprobs`), then one token per step with a key/value cache: the
preallocated cache of :mod:`advantage.lm.lean` for Qwen2/Llama models, ``DynamicCache`` through the
transformers forward for any other causal LM. Outputs are
written into preallocated ``[B, max_new_tokens]`` buffers; the only host sync per step is the
"every row finished" check. Finished rows keep emitting ``pad_id`` (ignored by the mask).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from advantage.errors import ConfigError
from advantage.lm.model import forward_accepts, position_ids_from_mask, response_mask

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from advantage.lm.lean import LeanDecoder


@dataclass
class SamplingParams:
    """How to pick each token. ``temperature`` 0 is greedy (argmax); ``top_k`` 0 and ``top_p`` 1 disable
    those filters; ``min_new_tokens`` > 0 forbids the EOS token for the first that many tokens of a response
    (``min_new_tokens = max_new_tokens``: every response is exactly ``max_new_tokens`` long, the fixed
    amount of work of a benchmark). Log-probs are always those of the unfiltered, temperature-scaled
    distribution, as for the top-k/top-p filters."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 32
    min_new_tokens: int = 0

    def __post_init__(self) -> None:
        problems = []
        if not self.temperature >= 0:  # `not >=`: NaN fails too
            problems.append(f"sampling.temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            problems.append(f"sampling.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            problems.append(f"sampling.top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.max_new_tokens < 1:
            problems.append(f"sampling.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not 0 <= self.min_new_tokens <= max(self.max_new_tokens, 0):
            problems.append(
                f"sampling.min_new_tokens must be in [0, max_new_tokens={self.max_new_tokens}], "
                f"got {self.min_new_tokens}"
            )
        if problems:
            raise ConfigError(problems)


@dataclass
class Generation:
    """A batch of sampled responses. B = number of rows (prompts × samples per prompt), P = prompt
    length (left-padded), T = steps actually decoded (≤ ``max_new_tokens``; fewer if all rows ended)."""

    prompt_ids: Tensor  # [B, P] long, left-padded with pad_id
    prompt_mask: Tensor  # [B, P], 1 on real prompt tokens
    response_ids: Tensor  # [B, T] long, pad_id after the first EOS
    response_mask: Tensor  # [B, T] float, 1 up to and including the first EOS
    logprobs: Tensor  # [B, T] fp32, log π_τ(y_t | x, y_<t) of the sampled token, 0 where masked
    lengths: Tensor  # [B] long, response tokens including the EOS
    truncated: Tensor  # [B] bool, hit max_new_tokens without an EOS

    def texts(self, tokenizer: PreTrainedTokenizerBase) -> list[str]:
        """The decoded responses, special tokens (EOS, pad) removed."""
        rows = [ids[:n].tolist() for ids, n in zip(self.response_ids, self.lengths.tolist(), strict=True)]
        return tokenizer.batch_decode(rows, skip_special_tokens=True)

    def sequences(self) -> tuple[Tensor, Tensor]:
        """``(input_ids, attention_mask)`` ``[B, P + T]`` for :func:`~advantage.lm.model.sequence_logprobs`
        with ``response_start = P``."""
        mask = torch.cat([self.prompt_mask.to(self.response_mask.dtype), self.response_mask], dim=1)
        return torch.cat([self.prompt_ids, self.response_ids], dim=1), mask

    def to(self, device: torch.device | str) -> Generation:
        return Generation(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def select(self, rows: Tensor) -> Generation:
        """The rows ``rows`` (an index tensor) of every field."""
        return Generation(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})


def concat_generations(gens: list[Generation], pad_id: int) -> Generation:
    """Several generations in one (e.g. the rounds of DAPO's dynamic sampling): prompts left-padded and
    responses right-padded to the longest, so the batch layout stays ``[B, P]`` + ``[B, T]``."""
    if len(gens) == 1:
        return gens[0]
    P = max(g.prompt_ids.shape[1] for g in gens)
    T = max(g.response_ids.shape[1] for g in gens)
    out: dict[str, list[Tensor]] = {}
    for g in gens:
        for f in fields(g):
            v = getattr(g, f.name)
            fill = pad_id if f.name in ("prompt_ids", "response_ids") else 0
            if f.name in ("prompt_ids", "prompt_mask"):
                v = torch.nn.functional.pad(v, (P - v.shape[1], 0), value=fill)
            elif v.dim() == 2:
                v = torch.nn.functional.pad(v, (0, T - v.shape[1]), value=fill)
            out.setdefault(f.name, []).append(v)
    return Generation(**{k: torch.cat(v) for k, v in out.items()})


def max_prompt_length(model: PreTrainedModel, params: SamplingParams) -> int:
    """The longest prompt that leaves room for ``max_new_tokens`` in the model's context
    (``max_position_embeddings``); pass it to :func:`encode_prompts` as ``max_length``."""
    context = int(model.config.max_position_embeddings)
    if params.max_new_tokens >= context:
        raise ConfigError(
            f"sampling.max_new_tokens={params.max_new_tokens} leaves no room for a prompt in the model's "
            f"context of {context} tokens; it must be < {context}"
        )
    return context - params.max_new_tokens


def encode_prompts(
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    *,
    max_length: int | None,
    add_special_tokens: bool = False,
) -> tuple[Tensor, Tensor]:
    """Tokenize and left-pad ``prompts``: ``(ids [B, P] long, mask [B, P] long)``, P = longest prompt.

    ``add_special_tokens`` is off by default because prompts are expected to be formatted already (e.g.
    by ``apply_chat_template``, which writes any BOS itself). A prompt longer than ``max_length`` (for
    instance :func:`max_prompt_length`) is refused rather than silently cut: cutting the left loses the
    instruction, cutting the right loses the generation prompt.
    """
    if isinstance(prompts, str) or not prompts:
        raise ConfigError(f"prompts must be a non-empty list of strings, got {prompts!r}")
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        raise ConfigError(
            "the tokenizer has no pad token; load it with load_pretrained(..., pad_to_eos=True)"
        )
    encoded = tokenizer(list(prompts), add_special_tokens=add_special_tokens)["input_ids"]
    problems = []
    for i, ids in enumerate(encoded):
        if not ids:
            problems.append(f"prompt {i} is empty (0 tokens); generation needs at least one prompt token")
        elif max_length is not None and len(ids) > max_length:
            problems.append(f"prompt {i} has {len(ids)} tokens, more than the limit max_length={max_length}")
    if problems:
        raise ConfigError(problems)
    width = max(len(ids) for ids in encoded)
    out = torch.full((len(encoded), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(encoded), width), dtype=torch.long)
    for i, ids in enumerate(encoded):
        out[i, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        mask[i, width - len(ids) :] = 1
    return out, mask


def slot_uniforms(seed: int, slots: Sequence[int], rows_per_slot: int, steps: int) -> Tensor:
    """The sampling draws of prompts by their places in a run's stream of prompts (``slots``):
    ``[len(slots) · rows_per_slot, steps]`` float64 in [0, 1), the rows of slot ``k`` drawn from a generator
    seeded by ``(seed, k)``. :func:`generate` given these samples each prompt as it would in any batch, so
    GRPO and PPO-RLHF take the same samples in one process, on N ranks or on Ray workers."""
    draws = [
        torch.rand(
            (rows_per_slot, steps),
            generator=torch.Generator().manual_seed((seed * 1_000_003 + int(k)) % 2**63),
            dtype=torch.float64,
        )
        for k in slots
    ]
    return torch.cat(draws) if draws else torch.zeros((0, steps), dtype=torch.float64)


def sample_tokens(
    logits: Tensor,
    params: SamplingParams,
    generator: torch.Generator | None = None,
    banned: int | None = None,
    uniforms: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    r"""One token per row from ``logits`` ``[B, V]``: ``(tokens [B] long, logp [B] fp32)``; token
    ``banned`` (the EOS while a response is shorter than ``min_new_tokens``) is never picked.
    ``uniforms`` ``[B]`` (float64 in [0, 1)), when given, are the rows' draws instead of ``generator``'s.

    ``logp = log_softmax(z / τ)[y]`` with τ = temperature (τ = 1 when greedy), before top-k / top-p,
    so it is the quantity :func:`~advantage.lm.model.sequence_logprobs` recomputes at the same τ. Sampling
    is by inverse CDF: one uniform ``u ~ U[0, 1)`` per row from ``generator``, and the token is the first
    whose cumulative probability (summed in float64) exceeds ``u`` times the total. That is one random
    draw per row instead of one per vocabulary entry (Gumbel-max and ``torch.multinomial`` draw ``B × V``
    exponentials, which cost more than the output layer itself for a 32k vocabulary on a CPU:
    ``benchmarks/lm_sampling.py``). A filtered or banned token has probability 0, so the cumulative sum
    does not rise there and it is never picked.
    """
    z = logits.float()
    if params.temperature > 0 and params.temperature != 1:
        z = z / params.temperature
    if params.temperature > 0 and params.top_k == 0 and params.top_p >= 1:
        return _sample_unfiltered(z, generator, banned, uniforms)
    # log_softmax, not z - logsumexp(z): one fused kernel (logsumexp alone costs several times more on CPU)
    logp_all = z.log_softmax(-1)  # [B, V]
    if params.temperature == 0:
        tokens = (z if banned is None else _ban(z, banned)).argmax(-1)
    else:
        pick = logp_all if banned is None else _ban(logp_all, banned)
        filtered = _top_k_top_p(pick, params.top_k, params.top_p)  # a shift of z: the same tokens kept
        tokens, _ = _inverse_cdf(filtered.exp(), generator, uniforms)
    return tokens, logp_all.gather(-1, tokens[:, None]).squeeze(-1)


def _inverse_cdf(
    weights: Tensor, generator: torch.Generator | None, uniforms: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """One index per row of ``weights`` ``[B, V]`` (≥ 0, unnormalised) with probability proportional to
    its weight: the first whose float64 cumulative sum exceeds ``u`` × the row's total, ``u ~ U[0, 1)``.
    Returns ``(indices [B], totals [B, 1] float64)``."""
    cdf = weights.double().cumsum_(-1)  # flat where a weight is 0, so such an index is never picked
    total = cdf[:, -1:]
    # rand < 1, and rand * total < total in float64, so the last entry always exceeds u
    if uniforms is None:
        uniforms = torch.rand(total.shape, generator=generator, dtype=cdf.dtype, device=cdf.device)
    u = uniforms.to(cdf).view(total.shape) * total
    return torch.searchsorted(cdf, u, right=True).squeeze(-1), total


def _sample_unfiltered(
    z: Tensor, generator: torch.Generator | None, banned: int | None, uniforms: Tensor | None
) -> tuple[Tensor, Tensor]:
    """:func:`sample_tokens` without top-k / top-p, in fewer passes over the ``[B, V]`` scores: one
    ``exp(z - max)`` serves both the sampling weights and the normaliser of the log-prob,
    ``logp = z_y - max - log Σ_v exp(z_v - max)`` (the banned token's weight counted in the normaliser,
    so the log-prob is the unbanned model's, as on the general path). The max leaves the banned token out:
    a banned token far above every other (``min_new_tokens`` holding back a confident EOS) would otherwise
    underflow every weight that can be drawn."""
    if banned is None:
        top = z.amax(-1, keepdim=True)  # [B, 1]
    else:  # the max over the other tokens: two reductions over views, no copy of z
        parts = [p.amax(-1) for p in (z[:, :banned], z[:, banned + 1 :]) if p.shape[-1] > 0]
        top = (parts[0] if len(parts) == 1 else torch.maximum(*parts)).unsqueeze(-1)
    w = (z - top).exp_()  # [B, V]
    if banned is not None:
        w[:, banned] = 0.0
    tokens, norm = _inverse_cdf(w, generator, uniforms)
    log_norm = norm.log()
    if banned is not None:  # log(Σ_unbanned + e^(z_b - top)), without overflow when z_b ≫ top
        log_norm = torch.logaddexp(log_norm, (z[:, banned : banned + 1] - top).to(log_norm.dtype))
    logp = z.gather(-1, tokens[:, None]) - top - log_norm.float()
    return tokens, logp.squeeze(-1)


HEAD_CHUNK = 2048  # vocabulary rows per block of sample_from_hidden's output layer on a CPU (see there)


def sample_from_hidden(
    hidden: Tensor,
    head: Tensor,
    head_bias: Tensor | None,
    temperature: float,
    generator: torch.Generator | None = None,
    banned: int | None = None,
    uniforms: Tensor | None = None,
    chunk: int | None = None,
) -> tuple[Tensor, Tensor]:
    r""":func:`sample_tokens` without top-k / top-p, fused with the output layer: ``(tokens [B] long,
    logp [B] fp32)`` from final hidden states ``hidden`` ``[B, H]`` and the head ``head`` ``[V, H]``
    (``head_bias`` ``[V]``), the same tokens and log-probs as ``sample_tokens(F.linear(hidden, head,
    head_bias), ...)`` up to float rounding, with the same draws (one ``u`` per row, from ``generator`` or
    ``uniforms``).

    The scores :math:`z = (W h + b) / \tau` are made in blocks of ``chunk`` vocabulary rows (default
    :data:`HEAD_CHUNK` on a CPU, the whole vocabulary elsewhere), and each block's max :math:`m_c` and
    weight :math:`S_c = \sum_{v \in c} e^{z_v - m_c}` (an fp32 pairwise sum: a float64 sum would first
    copy the block to float64, ~4 % of a decoding step) are taken while the block is still in cache. The
    draw then picks a block by the float64 cumulative sum of :math:`S_c e^{m_c - m}` (:math:`m` the overall
    max) and a token inside it by the cumulative sum of that block's weights, recomputed for the chosen
    block only: the inverse CDF of :func:`sample_tokens`, in two levels. Against one output-layer matmul
    and four passes over the ``[B, V]`` scores (max, exp, float64 cumulative sum), the head and draw take
    about a quarter less time for 64 rows of a 32k vocabulary on one CPU thread (41 ms against 55 ms,
    measured alone): a ``[B, 256] × [256, 32000]`` matmul runs at ~60 % of the rate of
    ``[B, 256] × [256, 2048]`` ones, and the cumulative sum over the whole vocabulary is gone.

    ``banned`` (the EOS while a response is shorter than ``min_new_tokens``) gets weight 0 for the draw
    and still counts in the log-prob's normaliser, ``logp = z_y - m - \log(\sum_c S_c e^{m_c - m} +
    e^{z_b - m})``, the unbanned model's log-prob, as in :func:`sample_tokens`.
    """
    B, V = hidden.shape[0], head.shape[0]
    n = -(-V // (chunk or (HEAD_CHUNK if hidden.device.type == "cpu" else V)))
    C = -(-V // n)  # blocks of equal size, the last one shorter by less than n
    rows = torch.arange(B, device=hidden.device)
    # [n, B, C] scores, each block contiguous (the matmul writes it in place); -inf past the vocabulary
    z = hidden.new_empty((n, B, C), dtype=torch.float32)
    z[-1, :, V - (n - 1) * C :] = float("-inf")
    block_max = z.new_empty((B, n))  # [B, n]
    block_sum = z.new_empty((B, n), dtype=torch.float64)  # [B, n], each relative to its block's max
    scratch = z.new_empty((B, C))
    banned_z = None
    for i in range(n):
        a, b = i * C, min(V, (i + 1) * C)
        zc = z[i, :, : b - a]
        if head_bias is None:
            torch.mm(hidden, head[a:b].t(), out=zc)
        else:
            torch.addmm(head_bias[a:b], hidden, head[a:b].t(), out=zc)
        if temperature != 1:
            zc.div_(temperature)
        if banned is not None and a <= banned < b:  # out of the draw (and the maxima), into the normaliser
            banned_z = zc[:, banned - a].clone()
            zc[:, banned - a] = float("-inf")
        m = zc.amax(-1, keepdim=True)
        block_max[:, i : i + 1] = m
        safe = m.clamp(min=torch.finfo(m.dtype).min)  # a block of only the banned token: weight 0, not NaN
        block_sum[:, i] = torch.sub(zc, safe, out=scratch[:, : b - a]).exp_().sum(-1)
    top = block_max.amax(-1, keepdim=True)  # [B, 1]
    scale = (block_max - top).double().exp()  # [B, n]; 0 for a block of only -inf
    cdf = (block_sum * scale).cumsum_(-1)  # [B, n]
    total = cdf[:, -1:]  # ≥ 1: the best token's own weight is e^0
    if uniforms is None:
        uniforms = torch.rand(total.shape, generator=generator, dtype=torch.float64, device=z.device)
    target = uniforms.to(cdf).view(total.shape) * total  # < total
    block = torch.searchsorted(cdf, target, right=True).clamp_(max=n - 1)  # [B, 1], a block of weight > 0
    before = torch.where(block > 0, cdf.gather(-1, (block - 1).clamp(min=0)), 0.0)
    zb = z[block.squeeze(-1), rows]  # [B, C] the chosen block's scores
    inner = (zb - block_max.gather(-1, block)).exp_().double().cumsum_(-1) * scale.gather(-1, block)
    # rounding may put the target at or past the block's own total; stay inside it (the last weighted token)
    last = inner[:, -1:]
    target = torch.minimum(target - before, torch.nextafter(last, torch.zeros_like(last)))
    j = torch.searchsorted(inner, target, right=True)  # [B, 1]
    norm = total if banned_z is None else total + (banned_z[:, None] - top).double().exp()
    logp = zb.gather(-1, j) - top - norm.log().float()
    return (block * C + j).squeeze(-1), logp.squeeze(-1)


def _checked_uniforms(
    uniforms: Tensor, generator: torch.Generator | None, batch: int, n_new: int, device: torch.device
) -> Tensor:
    """:func:`generate`'s ``uniforms``, checked (``[B, max_new_tokens]``, no generator beside them), as
    float64 on the model's device."""
    if generator is not None:
        raise ValueError("give generate() either a generator or uniforms, not both")
    if tuple(uniforms.shape) != (batch, n_new):
        raise ValueError(
            f"uniforms must be [B, max_new_tokens] = [{batch}, {n_new}], got {tuple(uniforms.shape)}"
        )
    return uniforms.to(device=device, dtype=torch.float64)


def _ban(z: Tensor, token: int) -> Tensor:
    """A copy of ``z`` ``[B, V]`` with ``-inf`` at ``token``: that token is never picked."""
    out = z.clone()
    out[:, token] = float("-inf")
    return out


def _top_k_top_p(z: Tensor, top_k: int, top_p: float) -> Tensor:
    """``z`` with -inf outside the top-k tokens and outside the smallest set of most likely tokens whose
    probability reaches ``top_p`` (nucleus; Holtzman et al. 2020). The most likely token always stays."""
    if 0 < top_k < z.shape[-1]:
        kth = z.topk(top_k, dim=-1).values[:, -1:]  # [B, 1]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p < 1:
        sorted_z, order = z.sort(dim=-1, descending=True)
        probs = sorted_z.softmax(-1)
        # drop a token when the mass strictly before it already reaches top_p
        drop = (probs.cumsum(-1) - probs) >= top_p
        z = z.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return z


class _HFStepper:
    """Decoding through the transformers forward with a ``DynamicCache`` (any causal LM)."""

    def __init__(self, model: PreTrainedModel, mask: Tensor):
        from transformers import DynamicCache

        self.model = model
        try:
            self.cache = DynamicCache(config=model.config)
        except TypeError:  # transformers < 4.56 takes no config
            self.cache = DynamicCache()
        self.cache_key = "cache" if forward_accepts(model, "cache") else "past_key_values"  # renamed in v5
        # logits for the last position only: the vocabulary projection of the prompt is wasted work
        self.last_only = {"logits_to_keep": 1} if forward_accepts(model, "logits_to_keep") else {}
        self.mask, self.step_mask = mask, _decode_mask(model, mask)
        self.can_drop = hasattr(self.cache, "batch_select_indices")
        self.can_repeat = hasattr(self.cache, "batch_repeat_interleave")

    def _forward(self, ids: Tensor, mask: Tensor, pos: Tensor) -> Tensor:
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=pos,
            use_cache=True,
            **self.last_only,
            **{self.cache_key: self.cache},
        )
        return out.logits[:, -1]

    def prefill(self, prompt_ids: Tensor, prompt_mask: Tensor, repeat: int = 1) -> Tensor:
        """Logits ``[B, V]`` after the prompts; with ``repeat``, the prompts are every ``repeat``-th row's
        and the cache and logits are repeated to the full batch."""
        plen = prompt_ids.shape[1]
        logits = self._forward(prompt_ids, self.mask[::repeat, :plen], position_ids_from_mask(prompt_mask))
        if repeat > 1:
            self.cache.batch_repeat_interleave(repeat)
            logits = logits.repeat_interleave(repeat, 0)
        return logits

    def step(self, tok: Tensor, pos: Tensor, length: int) -> Tensor:
        """Logits ``[A, V]`` after appending ``tok`` ``[A]`` at positions ``pos`` ``[A, 1]``; ``length``:
        the sequence length including ``tok``."""
        return self._forward(tok[:, None], self.step_mask[..., :length], pos)

    def select(self, rows: Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.step_mask = self.step_mask[rows]

    def sample(self, logits: Tensor, *args: Any) -> tuple[Tensor, Tensor]:
        """:func:`sample_tokens` on what :meth:`prefill` or :meth:`step` returned."""
        return sample_tokens(logits, *args)


class _LeanStepper:
    """Decoding through :class:`~advantage.lm.lean.LeanDecoder`: weights rearranged once per call
    (:meth:`~advantage.lm.lean.LeanDecoder.decode_weights`; fp32/fp64, since RoPE becomes a complex product),
    a preallocated key/value cache written in place, the decode mask built once."""

    def __init__(self, lean: LeanDecoder, mask: Tensor, dtype: torch.dtype):
        from advantage.lm.lean import additive_mask

        self.lean = lean
        self.weights = lean.decode_weights() if dtype in (torch.float32, torch.float64) else lean.weights()
        self.head = self.weights if not isinstance(self.weights, list) else None
        self.mask, self.length = mask, mask.shape[1]
        self.cache = lean.new_cache(mask.shape[0], mask.shape[1])
        self.step_mask = additive_mask(mask.bool(), dtype)[:, None, None, :]  # [B, 1, 1, P + N]
        self.can_drop = self.can_repeat = True

    def prefill(self, prompt_ids: Tensor, prompt_mask: Tensor, repeat: int = 1) -> Tensor:
        from advantage.lm.lean import padded_causal_mask

        mask = padded_causal_mask(prompt_mask, self.step_mask.dtype)
        pos = position_ids_from_mask(prompt_mask)
        # with repeat: a cache for the unique prompts, copied row by row into the batch's afterwards
        cache = self.cache if repeat == 1 else self.lean.new_cache(prompt_ids.shape[0], prompt_ids.shape[1])
        h = self.lean.hidden(
            prompt_ids, pos, mask, weights=self.weights, cache=cache, max_position=self.length
        )
        last = h[:, -1]
        if repeat > 1:
            plen = cache.length
            self.cache.keys[..., :plen, :] = cache.keys.repeat_interleave(repeat, 1)
            self.cache.values[..., :plen, :] = cache.values.repeat_interleave(repeat, 1)
            self.cache.length = plen
            last = last.repeat_interleave(repeat, 0)
        return last

    def step(self, tok: Tensor, pos: Tensor, length: int) -> Tensor:
        """Final hidden states ``[A, H]`` after appending ``tok``; :meth:`sample` applies the head."""
        mask = self.step_mask[..., :length]
        h = self.lean.hidden(
            tok[:, None], pos, mask, weights=self.weights, cache=self.cache, max_position=self.length
        )
        return h[:, -1]

    def select(self, rows: Tensor) -> None:
        self.cache.select(rows)
        self.step_mask = self.step_mask[rows]

    def sample(
        self,
        hidden: Tensor,
        params: SamplingParams,
        generator: torch.Generator | None,
        banned: int | None,
        uniforms: Tensor | None,
    ) -> tuple[Tensor, Tensor]:
        """Tokens and log-probs from the hidden states :meth:`prefill` or :meth:`step` returned: the output
        layer fused with the draw (:func:`sample_from_hidden`) when no top-k / top-p filter applies and the
        vocabulary spans several blocks (for a small one, the fused path's extra small operations cost more
        than the passes over ``[B, V]`` they save)."""
        head = self.head
        unfiltered = params.temperature > 0 and params.top_k == 0 and params.top_p >= 1
        if head is not None and unfiltered and hidden.device.type == "cpu" and len(head.head) > HEAD_CHUNK:
            return sample_from_hidden(
                hidden, head.head, head.head_bias, params.temperature, generator, banned, uniforms
            )
        return sample_tokens(self.lean.logits(hidden, head), params, generator, banned, uniforms)


def _decode_mask(model: PreTrainedModel, mask: Tensor) -> Tensor:
    """The attention mask for the one-token decode steps, built once for all steps.

    A decode query sees every cached key, so only padding matters: for eager and SDPA attention this is
    the additive 4-D mask ``[B, 1, 1, L]`` (0 visible, dtype-min hidden) that transformers would otherwise
    rebuild from the 2-D mask at every step (about a tenth of a small model's step). Other attention
    backends (flash-attention takes the 2-D mask) get the 2-D mask.
    """
    from advantage.lm.lean import additive_mask

    if getattr(model.config, "_attn_implementation", None) not in ("eager", "sdpa"):
        return mask
    return additive_mask(mask.bool(), model.dtype)[:, None, None, :]


def generate(
    model: PreTrainedModel,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    params: SamplingParams,
    *,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator | None = None,
    shared_prompts: int = 1,
    uniforms: Tensor | None = None,
) -> Generation:
    """Sample up to ``params.max_new_tokens`` tokens per row under ``torch.inference_mode``.

    Greedy (``temperature=0``) gives the tokens of ``model.generate(do_sample=False)``; ``logprobs`` equal
    :func:`~advantage.lm.model.sequence_logprobs` on ``Generation.sequences()`` at the same temperature
    (1e-5, tested). Reproducible for a seeded ``generator``. The model is used as it is (call
    ``.eval()`` first if it has dropout).

    Args:
        prompt_ids: ``[B, P]`` long, left-padded (see :func:`encode_prompts`).
        prompt_mask: ``[B, P]``, 1 on real tokens; every row needs at least one.
        params: temperature, top-k, top-p and ``max_new_tokens`` (``T`` ≤ it: the loop stops once every
            row has emitted ``eos_id``).
        eos_id: the stop token; it is kept in the response and its mask.
        pad_id: written after a row's EOS; may equal ``eos_id`` (masks never look at it).
        generator: the source of sampling noise, on the model's device; ``None`` uses torch's global RNG.
        uniforms: instead of ``generator``, each row's draws ``[B, max_new_tokens]`` (float64 in [0, 1);
            token t of row r uses ``uniforms[r, t]``, see :func:`slot_uniforms`): a row's sample then does
            not depend on the other rows of the batch, so a batch split across ranks or workers samples
            what one process does.
        shared_prompts: rows come in consecutive groups of this size with the same prompt (GRPO's G samples
            per prompt): each prompt is prefilled once and its keys/values copied to its group's rows.
    """
    if prompt_ids.dim() != 2 or prompt_ids.shape != prompt_mask.shape:
        raise ValueError(
            f"prompt_ids and prompt_mask must both be [B, P], got {tuple(prompt_ids.shape)} and "
            f"{tuple(prompt_mask.shape)}"
        )
    if not bool(prompt_mask[:, -1].all()):
        raise ValueError("prompts must be left-padded: prompt_mask[:, -1] must be 1 for every row")
    G = shared_prompts
    if G < 1 or prompt_ids.shape[0] % G:
        raise ValueError(f"shared_prompts must divide the batch of {prompt_ids.shape[0]} rows, got {G}")
    if G > 1 and not all(
        torch.equal(x.view(-1, G, x.shape[1]), x[::G, None].expand(-1, G, -1))
        for x in (prompt_ids, prompt_mask)
    ):
        raise ValueError(
            f"shared_prompts={G}: the rows of a group of {G} consecutive rows differ in their prompt"
        )
    from advantage.lm.lean import lean_decoder

    batch, plen = prompt_ids.shape
    n_new = params.max_new_tokens
    device = prompt_ids.device
    if uniforms is not None:
        uniforms = _checked_uniforms(uniforms, generator, batch, n_new, device)

    tokens = torch.full((batch, n_new), pad_id, dtype=torch.long, device=device)  # [B, N]
    logps = torch.zeros((batch, n_new), dtype=torch.float32, device=device)  # [B, N]
    finished = torch.zeros(batch, dtype=torch.bool, device=device)  # [B]
    # The mask over prompt + generated tokens, preallocated; step t attends to [..., :P + t + 1].
    # Finished rows keep attending to their pads, harmlessly: nothing they produce is kept.
    mask = torch.ones((batch, plen + n_new), dtype=torch.long, device=device)
    mask[:, :plen] = prompt_mask
    lean = lean_decoder(model)
    stepper: Any = (
        _LeanStepper(lean, mask, model.get_input_embeddings().weight.dtype)
        if lean is not None
        else _HFStepper(model, mask)
    )
    next_pos = prompt_mask.long().sum(-1, keepdim=True)  # [B, 1] position of the first response token

    # Rows that have ended leave the batch: once a quarter of the rows still decoding have emitted EOS,
    # the cache, mask and positions keep only the others (GRPO batches end at very different lengths, and
    # decoding finished rows was most of the work). `active` maps cache rows to output rows.
    active = torch.arange(batch, device=device)
    steps = 0
    with torch.inference_mode():
        if G > 1 and stepper.can_repeat:  # prefill each prompt once, then copy its cache to its group
            state = stepper.prefill(prompt_ids[::G], prompt_mask[::G], repeat=G)
        else:
            state = stepper.prefill(prompt_ids, prompt_mask)
        for t in range(n_new):
            banned = eos_id if t < params.min_new_tokens else None
            u = None if uniforms is None else uniforms[active, t]
            tok, lp = stepper.sample(state, params, generator, banned, u)  # [A]
            done = finished[active]  # [A]
            tok = tok.masked_fill(done, pad_id)
            tokens[active, t] = tok
            logps[active, t] = lp.masked_fill(done, 0.0)
            done = done | (tok == eos_id)
            finished[active] = done
            steps = t + 1
            n_done = int(done.sum())  # the one host sync per step
            if steps == n_new or n_done == len(active):
                break
            if stepper.can_drop and 4 * n_done >= len(active):
                keep = (~done).nonzero().squeeze(-1)
                stepper.select(keep)
                active, tok, next_pos = active[keep], tok[keep], next_pos[keep]
            state = stepper.step(tok, next_pos + t, plen + steps)  # logits (HF) or hidden states (lean)

    response_ids = tokens[:, :steps]
    rmask = response_mask(response_ids, eos_id)  # [B, T]
    return Generation(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=response_ids,
        response_mask=rmask,
        logprobs=logps[:, :steps] * rmask,
        lengths=rmask.sum(-1).long(),
        truncated=~(response_ids == eos_id).any(-1),
    )
