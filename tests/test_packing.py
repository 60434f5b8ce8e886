"""Shared-prompt packing (advantage.nn.packing) of sampled responses: the same log-probs and gradients
as the padded batch."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from advantage.nn.lm import build_char_tokenizer, build_scratch_model, sequence_logprobs
from advantage.nn.packing import generation_logprobs


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


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_packed_generation_logprobs_equal_the_padded_batch(tok, arch, monkeypatch):
    model = build_scratch_model(arch, tok, hidden_size=32, layers=2, heads=4, kv_heads=2)
    prompt_ids, prompt_mask, response_ids, lengths = sampled_batch()
    T = int(lengths.max())
    valid = (torch.arange(T)[None] < lengths[:, None]).float()
    ids = torch.cat([prompt_ids, response_ids[:, :T]], 1)
    attn = torch.cat([prompt_mask, valid.long()], 1)
    weights = torch.randn(6, T, generator=torch.Generator().manual_seed(1)) * valid
    results = []
    for flag in ("1", "0"):  # the lean forward and the transformers forward both pack
        monkeypatch.setenv("ADVANTAGE_LEAN", flag)
        model.zero_grad()
        packed = generation_logprobs(model, prompt_ids, prompt_mask, response_ids, lengths, temperature=0.8)
        (packed * weights).sum().backward()
        results.append((packed.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    model.zero_grad()
    padded = sequence_logprobs(model, ids, attn, response_start=3, temperature=0.8) * valid
    (padded * weights).sum().backward()
    for packed, grads in results:
        assert packed.shape == (6, T)
        assert (packed - padded).abs().max() <= 1e-5
        assert (packed[valid == 0] == 0).all() and (packed[valid == 1] < 0).all()
        for n, p in model.named_parameters():
            assert (grads[n] - p.grad).abs().max() <= 1e-5 * max(1.0, p.grad.abs().max().item()), n


def test_an_empty_response_gets_no_log_probs(tok):
    model = build_scratch_model("qwen2", tok, hidden_size=32, layers=1, heads=2)
    prompt_ids, prompt_mask, response_ids, lengths = sampled_batch()
    lengths = lengths.clone()
    lengths[2] = 0
    out = generation_logprobs(model, prompt_ids, prompt_mask, response_ids, lengths)
    assert (out[2] == 0).all() and (out[0, :3] < 0).all()
