"""The lean Qwen2/Llama forward (advantage.lm.lean) against the transformers forward: hidden states,
log-probs, gradients, packed rows, cached decoding, and the cases where it must step aside."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from advantage.lm.generate import SamplingParams, generate
from advantage.lm.lean import additive_mask, lean_decoder, padded_causal_mask
from advantage.lm.model import (
    build_char_tokenizer,
    build_scratch_model,
    position_ids_from_mask,
    sequence_logprobs,
)

# On every supported torch version too (benchmarks/torch_versions.py): a fast path against its reference.
pytestmark = pytest.mark.torch_versions

ARCHS = [("qwen2", 4), ("qwen2", 2), ("llama", 4), ("llama", 1)]  # (arch, kv heads of 4): GQA included


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer("0123456789+= ")


def model_of(tok, arch: str, kv_heads: int, seed: int = 0):
    return build_scratch_model(arch, tok, hidden_size=32, layers=2, heads=4, kv_heads=kv_heads, seed=seed)


def padded_batch(tok, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, len(tok), (5, 11), generator=g)
    mask = torch.ones_like(ids)
    for row, pad in enumerate((0, 3, 7, 1, 0)):  # left padding of different lengths
        mask[row, :pad] = 0
    return ids, mask


@pytest.mark.parametrize(("arch", "kv"), ARCHS)
def test_hidden_states_and_gradients_equal_the_transformers_forward(tok, arch, kv):
    model = model_of(tok, arch, kv)
    lean = lean_decoder(model)
    assert lean is not None
    ids, mask = padded_batch(tok)
    pos = position_ids_from_mask(mask)
    ref = model.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).last_hidden_state
    out = lean.hidden(ids, pos, padded_causal_mask(mask, torch.float32))
    real = mask.bool()
    assert (out - ref)[real].abs().max() <= 1e-5
    # gradients of the same scalar, through each path, reach the same parameters with the same values
    weights = torch.randn(out.shape[-1], generator=torch.Generator().manual_seed(1))
    grads = []
    for h in (ref, out):
        model.zero_grad()
        (h[real] @ weights).square().mean().backward(retain_graph=True)
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, g in grads[0].items():
        assert (grads[1][name] - g).abs().max() <= 1e-5 * max(1.0, g.abs().max().item()), name


@pytest.mark.parametrize(("arch", "kv"), ARCHS[:3])
def test_sequence_logprobs_are_the_same_on_both_paths(tok, arch, kv, monkeypatch, fast_path):
    model = model_of(tok, arch, kv)
    ids, mask = padded_batch(tok, seed=2)
    got = {}
    for flag in ("1", "0"):
        fast_path("lm_forward", flag == "1")
        got[flag] = sequence_logprobs(model, ids, mask, response_start=7, temperature=0.7)
    assert (got["1"] - got["0"]).abs().max() <= 1e-5
    assert got["1"].max() < 0


def test_packed_rows_match_the_padded_batch(tok):
    """Two sequences packed in one row with a block-diagonal causal mask and restarting positions give the
    hidden states each has alone."""
    model = model_of(tok, "qwen2", 2)
    lean = lean_decoder(model)
    a, b = torch.randint(4, len(tok), (7,)), torch.randint(4, len(tok), (5,))
    ids = torch.cat([a, b])[None]
    pos = torch.cat([torch.arange(7), torch.arange(5)])[None]
    seg = torch.tensor([0] * 7 + [1] * 5)
    allowed = (seg[:, None] == seg[None, :]) & torch.ones(12, 12, dtype=torch.bool).tril()
    h = lean.hidden(ids, pos, additive_mask(allowed, torch.float32)[None, None])[0]
    with torch.no_grad():
        ha = model.model(input_ids=a[None]).last_hidden_state[0]
        hb = model.model(input_ids=b[None]).last_hidden_state[0]
    assert (h[:7] - ha).abs().max() <= 1e-5 and (h[7:] - hb).abs().max() <= 1e-5


@pytest.mark.parametrize(("arch", "kv"), ARCHS)
def test_cached_decoding_matches_the_transformers_path(tok, arch, kv, monkeypatch, fast_path):
    """Greedy tokens are identical and sampled tokens (same noise) too, with log-probs to 1e-5, between the
    preallocated-cache decoder and the DynamicCache one; rows that end early leave the batch in both."""
    model = model_of(tok, arch, kv, seed=3)
    ids, mask = padded_batch(tok, seed=4)
    eos = int(ids[0, -1])  # a token the random model does emit, so rows end at different steps
    for temperature in (0.0, 1.0):
        params = SamplingParams(temperature=temperature, max_new_tokens=12)
        gens = {}
        for flag in ("1", "0"):
            fast_path("lm_forward", flag == "1")
            g = torch.Generator().manual_seed(5)
            gens[flag] = generate(model, ids, mask, params, eos_id=eos, pad_id=0, generator=g)
        assert torch.equal(gens["1"].response_ids, gens["0"].response_ids)
        assert (gens["1"].logprobs - gens["0"].logprobs).abs().max() <= 1e-5


def test_the_lean_path_steps_aside_when_it_would_not_be_exact(tok, monkeypatch, fast_path):
    model = model_of(tok, "qwen2", 4)
    assert lean_decoder(model) is not None
    fast_path("lm_forward", False)
    assert lean_decoder(model) is None
    fast_path("lm_forward", True)
    # attention dropout only matters while training
    model.config.attention_dropout = 0.1
    assert lean_decoder(model) is not None
    model.train()
    assert lean_decoder(model) is None
    model.eval()
    # a LoRA-wrapped projection is not an nn.Linear: the transformers forward (and PEFT) handle it
    peft = pytest.importorskip("peft")
    wrapped = peft.get_peft_model(
        model_of(tok, "qwen2", 4), peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"])
    )
    assert lean_decoder(wrapped) is None and lean_decoder(wrapped.get_base_model()) is None
    # another architecture
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=len(tok)))
    assert lean_decoder(gpt2) is None


@pytest.mark.parametrize("lean", ["1", "0"], ids=["lean", "transformers"])
def test_shared_prompts_prefill_once_and_sample_the_same(tok, lean, monkeypatch, fast_path):
    """G samples per prompt: prefilling each prompt once and copying its cache gives the tokens and
    log-probs of prefilling every row; groups whose rows differ are refused."""
    fast_path("lm_forward", lean == "1")
    model = model_of(tok, "qwen2", 2, seed=6)
    ids, mask = padded_batch(tok, seed=7)
    ids, mask = ids[:3].repeat_interleave(4, 0), mask[:3].repeat_interleave(4, 0)  # 3 prompts x G = 4
    params = SamplingParams(temperature=1.0, max_new_tokens=9)
    out = [
        generate(
            model, ids, mask, params, eos_id=5, pad_id=0, generator=torch.Generator().manual_seed(8), **kw
        )
        for kw in ({}, {"shared_prompts": 4})
    ]
    assert torch.equal(out[0].response_ids, out[1].response_ids)
    assert (out[0].logprobs - out[1].logprobs).abs().max() <= 1e-5
    with pytest.raises(ValueError, match="differ in their prompt"):
        generate(model, ids.roll(1, 0), mask.roll(1, 0), params, eos_id=5, pad_id=0, shared_prompts=4)
    with pytest.raises(ValueError, match="must divide"):
        generate(model, ids, mask, params, eos_id=5, pad_id=0, shared_prompts=5)


def test_gradient_checkpointing_in_training_takes_the_transformers_path(tok):
    model = model_of(tok, "qwen2", 4)
    model.gradient_checkpointing_enable()
    assert lean_decoder(model) is not None  # eval mode: checkpointing does nothing
    model.train()
    assert lean_decoder(model) is None
    model.gradient_checkpointing_disable()
    assert lean_decoder(model) is not None
