"""Shared-prompt packing: many responses to the same prompt in one forward pass, the prompt computed once.

A *segment* is one prompt followed by its responses; segments fill rows of a fixed width first-fit, and a
4D additive mask lets each response token attend to its own prompt and causally to its own response
only, at the positions it would have right after the prompt. The hidden states, and so the log-probs, are
those of the padded ``prompt + response`` batch of :func:`advantage.lm.model.sequence_logprobs` up to float
rounding, without the padding: GRPO's groups of G samples, DPO's chosen/rejected pairs and the reward
model's K responses all share their prompt this way.
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from advantage.lm.chunked import head_logprobs
from advantage.lm.model import sequence_logprobs

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "PACK_ROW_LENGTH",
    "PackedPrompts",
    "generation_logprobs",
    "long_tensor",
    "pack_prompts",
    "packable",
    "packed_hidden",
    "packed_logprobs",
    "response_segments",
]


PACK_ROW_LENGTH = 128  # tokens per packed row (longer only for a longer segment): attention stays cheap
PACKABLE_TYPES = ("qwen2", "llama")  # decoders whose forward takes a 4D mask and applies no logit transform


@dataclass
class PackedPrompts:
    """Prompts with their responses packed into rows for one forward pass (:func:`pack_prompts`).

    Responses are numbered 0..S-1 in input order (the responses of the first prompt, then the second's, ...).
    Flat indices address ``[R, L]`` as ``row * L + column``."""

    input_ids: Tensor  # [R, L], pad_id after the last segment of a row
    position_ids: Tensor  # [R, L]: a prompt's tokens 0..P-1, each of its responses P..P+len-1
    attention_mask: Tensor  # [R, 1, L, L] additive: 0 where a query attends, the dtype's minimum elsewhere
    predictors: Tensor  # [N] flat index of the hidden state that predicts each response token
    targets: Tensor  # [N] the response tokens
    owner: Tensor  # [N] the response each token belongs to
    last: Tensor  # [S] flat index of each response's last token
    responses: int  # S

    def to(self, device: torch.device) -> PackedPrompts:
        if self.input_ids.device == torch.device(device):  # seven no-op copies and a new object spared
            return self
        moved = {f.name: getattr(self, f.name).to(device) for f in fields(self) if f.name != "responses"}
        return PackedPrompts(**moved, responses=self.responses)


def pack_prompts(
    groups: Sequence[tuple[list[int], Sequence[list[int]]]],
    pad_id: int,
    dtype: torch.dtype = torch.float32,
    row_length: int = PACK_ROW_LENGTH,
) -> PackedPrompts:
    """Pack ``(prompt ids, [response ids, ...])`` groups: each group is one segment *prompt, response 1,
    response 2, ...*; segments fill rows first-fit, in order, at the row width that leaves the fewest pad
    slots (every slot costs a full forward, padding included) among a few just above the average needed for
    ``ceil(total / row_length)`` rows and ``max(row_length, longest segment)``.

    A prompt token attends causally within its prompt; a response token attends to its prompt and causally
    to its own response, never to another response or segment, and sits at the position it would have right
    after the prompt. Each response's tokens therefore see exactly what they see in a padded batch of
    ``prompt + response`` rows with positions from the mask, so the hidden states (and log-probs) are the
    same up to float rounding, while the prompt is computed once per group and no row is padded to the
    longest sequence. Pad tokens attend only to earlier pads (a finite softmax; their outputs are unused).
    """
    sizes = [len(p) + sum(map(len, rs)) for p, rs in groups]
    longest, total = max(sizes), sum(sizes)
    rows = -(-total // row_length)
    tight = max(longest, -(-total // rows))  # the narrowest width that could hold them in `rows` rows
    caps = {*range(tight, tight + 8), max(row_length, longest)}  # a few widths: first-fit is Python work
    best: tuple[list[int], list[tuple[int, int]]] | None = None
    for cap in sorted(caps):
        layout = _first_fit(sizes, cap)
        if best is None or len(layout[0]) * max(layout[0]) < len(best[0]) * max(best[0]):
            best = layout
            if len(layout[0]) * max(layout[0]) == total:  # no pad slot: no later width does better
                break
    assert best is not None
    fill, start = best
    R, L = len(fill), max(fill)
    ids, pos = [pad_id] * (R * L), [0] * (R * L)
    seg, branch = [-1] * (R * L), [-1] * (R * L)  # segment of each slot (-1: pad); 0 prompt, k response k
    predictors: list[int] = []
    targets: list[int] = []
    owner: list[int] = []
    last: list[int] = []
    for n, ((prompt, responses), (row, col)) in enumerate(zip(groups, start, strict=True)):
        at, P = row * L + col, len(prompt)
        ids[at : at + P], pos[at : at + P] = prompt, range(P)
        seg[at : at + P], branch[at : at + P] = [n] * P, [0] * P
        first = at + P - 1  # the last prompt token predicts every response's first token
        at += P
        for k, resp in enumerate(responses, 1):
            m = len(resp)
            ids[at : at + m], pos[at : at + m] = resp, range(P, P + m)
            seg[at : at + m], branch[at : at + m] = [n] * m, [k] * m
            predictors.append(first)
            predictors.extend(range(at, at + m - 1))
            targets.extend(resp)
            owner.extend([len(last)] * m)
            last.append(at + m - 1)
            at += m
    # one int64 conversion for everything (per-list torch.tensor calls cost more than the packing)
    flat = long_tensor([*ids, *pos, *seg, *branch, *predictors, *targets, *owner, *last])
    grid = flat[: 4 * R * L].view(4, R, L)
    N = len(targets)
    tail = flat[4 * R * L :]
    # query i sees key j ≤ i of its own segment in its prompt (branch 0) or its own branch: with the unique
    # codes segment * M + branch (M > every branch; pads -M - 1), j's code is i's prompt code or i's own
    M = max(map(len, (rs for _, rs in groups))) + 1
    code = grid[2] * M + grid[3]  # [R, L]
    key = code[:, None, :]
    hidden = (key != (grid[2] * M)[:, :, None]) & (key != code[:, :, None])
    hidden |= _future(L)  # and causal
    mask = torch.zeros((R, 1, L, L), dtype=dtype).masked_fill_(hidden[:, None], torch.finfo(dtype).min)
    return PackedPrompts(
        grid[0], grid[1], mask, tail[:N], tail[N : 2 * N], tail[2 * N : 3 * N], tail[3 * N :], len(last)
    )


@functools.lru_cache(maxsize=32)
def _future(L: int) -> Tensor:
    """``[L, L]`` bool, True above the diagonal (key after query); cached per width, never written to."""
    return torch.ones((L, L), dtype=torch.bool).triu_(1)


def long_tensor(values: Sequence[int]) -> Tensor:
    """An int64 tensor ``[len(values)]`` of Python ints, through ``array('q')``: a C loop, several times
    faster than ``torch.tensor`` on a list (which converts element by element)."""
    if not values:
        return torch.zeros(0, dtype=torch.long)
    return torch.frombuffer(array("q", values), dtype=torch.int64)


def _first_fit(sizes: Sequence[int], cap: int) -> tuple[list[int], list[tuple[int, int]]]:
    """Segments of ``sizes`` placed first-fit, in order, in rows of ``cap``: tokens used per row and the
    ``(row, column)`` of each segment."""
    fill: list[int] = []
    start: list[tuple[int, int]] = []
    for size in sizes:
        row = 0
        while row < len(fill) and fill[row] + size > cap:
            row += 1
        if row == len(fill):
            fill.append(0)
        start.append((row, fill[row]))
        fill[row] += size
    return fill, start


def packable(model: PreTrainedModel) -> bool:
    """Whether :func:`pack_prompts` batches can go through ``model``: a Qwen2 or Llama decoder with eager or
    SDPA attention (they take a custom 4D mask as is) and no sliding-window layers, not sharded by FSDP."""
    cfg = getattr(model, "config", None)
    return (
        cfg is not None
        # FSDP2 gathers a sharded root's weights in its own forward, which packed rows bypass
        and not type(model).__name__.startswith("FSDP")
        and getattr(cfg, "model_type", None) in PACKABLE_TYPES
        and getattr(cfg, "_attn_implementation", None) in ("eager", "sdpa")
        and all(t == "full_attention" for t in getattr(cfg, "layer_types", None) or ())
    )


def packed_hidden(decoder: PreTrainedModel, packed: PackedPrompts, rows: Tensor | None = None) -> Tensor:
    """Final-norm hidden states ``[R * L, H]`` of a packed batch (``decoder``: the transformer without the
    LM head), or ``[len(rows), H]`` at the flat indices ``rows`` (``packed.last``, ``packed.predictors``).
    Qwen2/Llama decoders go through the lean forward (:mod:`advantage.lm.lean`), which then skips the last
    layer's queries and MLP at the positions nobody reads."""
    from advantage.lm.lean import lean_decoder

    lean = lean_decoder(decoder)
    if lean is not None:
        h = lean.hidden(packed.input_ids, packed.position_ids, packed.attention_mask, rows=rows)
        return h.reshape(-1, h.shape[-1])
    out = decoder(
        input_ids=packed.input_ids,
        attention_mask=packed.attention_mask,
        position_ids=packed.position_ids,
        use_cache=False,
    )
    h = out.last_hidden_state
    h = h.reshape(-1, h.shape[-1])
    return h if rows is None else h[rows]


def packed_logprobs(model: PreTrainedModel, packed: PackedPrompts, temperature: float = 1.0) -> Tensor:
    """``log π(y_t | x, y_<t) `` of every packed response token (``packed.targets``), ``[N]`` fp32: the
    vocabulary projection runs on the ``N`` hidden states that predict response tokens only."""
    h = packed_hidden(model.get_decoder(), packed, packed.predictors)  # [N, H]
    # in chunks of tokens once [N, V] is large (advantage.lm.chunked): equal values and gradients
    return head_logprobs(h, model.get_output_embeddings(), packed.targets, temperature)


def response_segments(
    prompts: Sequence[list[int]], responses: Sequence[list[int]], row_length: int = PACK_ROW_LENGTH
) -> list[tuple[list[int], list[int]]]:
    """Rows with the same prompt grouped into segments ``(prompt, [row, ...])`` for :func:`pack_prompts`,
    in order of first appearance; empty responses are left out.

    A segment takes a prompt's responses while it stays within ``row_length`` tokens, then the prompt
    starts a new segment: attention costs the square of a segment's length, so G long responses in one
    segment (P + G·T tokens) would cost about G times the attention of G segments of P + T tokens, to
    spare only the prompt's G − 1 repeats. Short responses (GRPO's usual few-token answers) still share one
    segment per prompt."""
    groups: dict[tuple[int, ...], list[int]] = {}  # prompt -> its rows, in order of first appearance
    for row, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        if r:
            groups.setdefault(tuple(p), []).append(row)
    segments: list[tuple[list[int], list[int]]] = []
    for prompt, rows in groups.items():
        seg_rows: list[int] = []
        size = len(prompt)
        for row in rows:
            if seg_rows and size + len(responses[row]) > row_length:
                segments.append((list(prompt), seg_rows))
                seg_rows, size = [], len(prompt)
            seg_rows.append(row)
            size += len(responses[row])
        segments.append((list(prompt), seg_rows))
    return segments


def generation_logprobs(
    model: PreTrainedModel,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    lengths: Tensor,
    temperature: float = 1.0,
    row_length: int = PACK_ROW_LENGTH,
) -> Tensor:
    """Per-token log-probs ``[B, T]`` (fp32, ``T = max(lengths)``, zeros after each response's end) of
    sampled responses, rows with the same prompt packed as one segment (:func:`pack_prompts`).

    Equal, to float rounding, to :func:`~advantage.lm.model.sequence_logprobs` on ``cat(prompt_ids,
    response_ids[:, :T])`` at response positions (tested); models :func:`packable` refuses, or an empty
    prompt, take that padded path.

    Args:
        prompt_ids, prompt_mask: ``[B, P]``, left-padded prompts (as :func:`~advantage.lm.generate.
            generate` returns them).
        response_ids: ``[B, ≥T]``. lengths: ``[B]`` response lengths, EOS included.
    """
    B = prompt_ids.shape[0]
    T = max(int(lengths.max()), 1) if B else 1
    dev = next(model.parameters()).device
    # one host copy each, then plain lists (a tensor op per row costs more than the row's Python work)
    prompts = [
        [t for t, m in zip(ids, ms, strict=True) if m]
        for ids, ms in zip(prompt_ids.tolist(), prompt_mask.tolist(), strict=True)
    ]
    if not packable(model) or any(not p for p in prompts):
        P = prompt_ids.shape[1]
        valid = torch.arange(T, device=lengths.device)[None, :] < lengths[:, None]
        ids = torch.cat([prompt_ids, response_ids[:, :T]], dim=1).to(dev)
        attn = torch.cat([prompt_mask.to(valid.dtype), valid], dim=1).to(dev)
        logp = sequence_logprobs(model, ids, attn, response_start=P, temperature=temperature)
        return logp * valid.to(dev)
    responses = [r[:n] for r, n in zip(response_ids.tolist(), lengths.tolist(), strict=True)]
    segments = response_segments(prompts, responses, row_length)
    order = [row for _, rows in segments for row in rows]  # packed responses, in pack order
    if not order:
        return torch.zeros((B, T), device=dev)
    dtype = model.get_input_embeddings().weight.dtype
    packed = pack_prompts(
        [(p, [responses[r] for r in rows]) for p, rows in segments], 0, dtype, row_length
    ).to(dev)
    logp = packed_logprobs(model, packed, temperature)  # [N]
    out_rows = long_tensor([r for r in order for _ in responses[r]]).to(dev)
    out_cols = long_tensor([c for r in order for c in range(len(responses[r]))]).to(dev)
    return logp.new_zeros((B, T)).index_put((out_rows, out_cols), logp)
