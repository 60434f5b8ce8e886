"""Shared-prompt packing (advantage.lm.packing) of sampled responses: the same log-probs and gradients
as the padded batch."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from advantage.lm.model import build_char_tokenizer, build_scratch_model, sequence_logprobs
from advantage.lm.packing import generation_logprobs, response_segments

# On every supported torch version too (benchmarks/torch_versions.py): a fast path against its reference.
pytestmark = pytest.mark.torch_versions


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer("0123456789+= ")


def sampled_batch() -> tuple[torch.Tensor, ...]:
    """Six rows over three prompts, rows of one prompt not adjacent, responses of lengths 1..5."""
    prompts = [[5, 6, 7], [8, 9], [5, 6, 7], [10, 11, 12], [8, 9], [5, 6, 7]]
    lengths = torch.tensor([3, 5, 1, 4, 2, 5])
    P, T = 3, 6
    g = torch.Generator().manual_seed(0)
    prompt_ids = torch.zeros((6, P), dtype=torch.long)
    prompt_mask = torch.zeros((6, P), dtype=torch.long)
    for i, p in enumerate(prompts):
        prompt_ids[i, P - len(p) :], prompt_mask[i, P - len(p) :] = torch.tensor(p), 1
    response_ids = torch.randint(4, 16, (6, T), generator=g)
    return prompt_ids, prompt_mask, response_ids, lengths


@pytest.mark.parametrize(
    ("arch", "chunks", "row_length"),
    [("qwen2", False, 128), ("llama", False, 128), ("qwen2", True, 128), ("llama", False, 7)],
)
def test_packed_generation_logprobs_equal_the_padded_batch(
    tok, arch, chunks, row_length, monkeypatch, fast_path
):
    """row_length 7: a prompt's responses split over several segments, the prompt repeated in each."""
    if chunks:  # the output layer and log-softmax in chunks of two tokens (advantage.lm.chunked)
        monkeypatch.setattr("advantage.lm.chunked.DEFAULT_CHUNK_ELEMENTS", 2 * len(tok))
    model = build_scratch_model(arch, tok, hidden_size=32, layers=2, heads=4, kv_heads=2)
    prompt_ids, prompt_mask, response_ids, lengths = sampled_batch()
    T = int(lengths.max())
    valid = (torch.arange(T)[None] < lengths[:, None]).float()
    ids = torch.cat([prompt_ids, response_ids[:, :T]], 1)
    attn = torch.cat([prompt_mask, valid.long()], 1)
    weights = torch.randn(6, T, generator=torch.Generator().manual_seed(1)) * valid
    results = []
    for flag in ("1", "0"):  # the lean forward and the transformers forward both pack
        fast_path("lm_forward", flag == "1")
        model.zero_grad()
        packed = generation_logprobs(
            model, prompt_ids, prompt_mask, response_ids, lengths, temperature=0.8, row_length=row_length
        )
        (packed * weights).sum().backward()
        results.append((packed.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    model.zero_grad()
    # the reference never chunks
    padded = sequence_logprobs(model, ids, attn, response_start=3, temperature=0.8, chunk_elements=10**9)
    padded = padded * valid
    (padded * weights).sum().backward()
    for packed, grads in results:
        assert packed.shape == (6, T)
        assert (packed - padded).abs().max() <= 1e-5
        assert (packed[valid == 0] == 0).all() and (packed[valid == 1] < 0).all()
        for n, p in model.named_parameters():
            assert (grads[n] - p.grad).abs().max() <= 1e-5 * max(1.0, p.grad.abs().max().item()), n


def test_response_segments_split_long_groups_and_keep_short_ones_together():
    prompts = [[5, 6], [7], [5, 6], [5, 6], [7]]
    responses = [[1] * 3, [2] * 4, [], [3] * 5, [4] * 2]
    # row_length 128: one segment per prompt, in order of first appearance, the empty response left out
    assert response_segments(prompts, responses, 128) == [([5, 6], [0, 3]), ([7], [1, 4])]
    # row_length 8: prompt [5, 6] + 3 + 5 tokens = 10 > 8 splits; [7] + 4 + 2 = 7 fits
    assert response_segments(prompts, responses, 8) == [([5, 6], [0]), ([5, 6], [3]), ([7], [1, 4])]
    # a single response longer than the row still gets a segment of its own
    assert response_segments([[1]], [[2] * 20], 8) == [([1], [0])]


def test_an_empty_response_gets_no_log_probs(tok):
    model = build_scratch_model("qwen2", tok, hidden_size=32, layers=1, heads=2)
    prompt_ids, prompt_mask, response_ids, lengths = sampled_batch()
    lengths = lengths.clone()
    lengths[2] = 0
    out = generation_logprobs(model, prompt_ids, prompt_mask, response_ids, lengths)
    assert (out[2] == 0).all() and (out[0, :3] < 0).all()


def test_pack_prompts_mask_and_layout_follow_their_definitions():
    """Random groups: the layout is the cheapest (rows × width) of the candidate widths, tokens and
    positions sit where ``last`` says, and the additive mask is the rule of the docstring: a query sees a key
    of its own segment at or before it, in the prompt or in its own response; pads see earlier pads."""
    import random

    from advantage.lm import packing

    rng = random.Random(0)
    for _ in range(300):
        groups = [
            (
                [rng.randint(1, 20) for _ in range(rng.randint(1, 9))],
                [[rng.randint(1, 20) for _ in range(rng.randint(1, 7))] for _ in range(rng.randint(1, 4))],
            )
            for _ in range(rng.randint(1, 10))
        ]
        row_length = rng.choice([8, 16, 32, 128])
        p = packing.pack_prompts(groups, 0, torch.float64, row_length=row_length)
        R, L = p.input_ids.shape
        sizes = [len(q) + sum(map(len, rs)) for q, rs in groups]
        rows = -(-sum(sizes) // row_length)
        tight = max(max(sizes), -(-sum(sizes) // rows))
        caps = sorted({*range(tight, tight + 8), max(row_length, max(sizes))})
        fill, _ = min((packing._first_fit(sizes, c) for c in caps), key=lambda f: len(f[0]) * max(f[0]))
        assert (len(fill), max(fill)) == (R, L)
        # each slot's segment and branch (0 prompt, k response k; -1 pad), from the responses' last tokens
        seg, branch = [-1] * (R * L), [-1] * (R * L)
        ids, pos = p.input_ids.view(-1).tolist(), p.position_ids.view(-1).tolist()
        s = 0
        for n, (prompt, responses) in enumerate(groups):
            at = p.last[s].item() - len(responses[0]) + 1 - len(prompt)
            for k, part in enumerate([prompt, *responses]):
                for t, token in enumerate(part):
                    seg[at], branch[at] = n, k
                    assert ids[at] == token and pos[at] == (t if k == 0 else len(prompt) + t)
                    at += 1
                if k:
                    assert p.last[s].item() == at - 1
                    s += 1
        sg, br = torch.tensor(seg).view(R, 1, L), torch.tensor(branch).view(R, 1, L)
        col = torch.arange(L)
        visible = (
            (sg.transpose(1, 2) == sg)
            & (col[None, :, None] >= col[None, None, :])
            & ((br == 0) | (br == br.transpose(1, 2)))
        )
        assert torch.equal(p.attention_mask[:, 0] == 0, visible)
        assert (p.attention_mask[:, 0][~visible] == torch.finfo(torch.float64).min).all()


def test_long_tensor():
    from advantage.lm.packing import long_tensor

    for values in ([], [0], [3, -1, 2**40, -(2**62)]):
        t = long_tensor(values)
        assert t.dtype == torch.int64 and t.tolist() == values
