"""advantage.lm.generate: our KV-cache sampler against transformers' generate and our log-probs."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from advantage.errors import ConfigError
from advantage.lm import (
    Generation,
    SamplingParams,
    encode_prompts,
    generate,
    max_prompt_length,
    sample_from_hidden,
    sample_tokens,
    slot_uniforms,
)
from advantage.lm.model import build_char_tokenizer, build_scratch_model, sequence_logprobs

PROMPTS = ["1+2=", "12+34=", "9", "100-99=", "7-7=", "55+5="]


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer("0123456789+=- ")


def sharp_model(arch: str, tokenizer, seed: int = 0, std: float = 0.5):
    """A tiny model with large weights (std 0.5, 25 times the default): peaked, varied next-token
    distributions, so greedy decoding does not repeat one token forever, EOS actually occurs, and argmax
    ties never happen."""
    if arch == "gpt2":  # absolute positions: wrong position ids for left-padded rows change its output
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(
            vocab_size=len(tokenizer),
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=64,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        )
        model = GPT2LMHeadModel(cfg).eval()
    else:
        model = build_scratch_model(arch, tokenizer, hidden_size=32, layers=2, heads=4, seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 or name.endswith("bias"):  # qwen2's q/k/v biases too; norms stay at 1
                p.normal_(0.0, std, generator=g)
    return model


@pytest.fixture(scope="module", params=["qwen2", "llama", "gpt2"])
def model(request, tok):
    return sharp_model(request.param, tok, seed={"qwen2": 0, "llama": 1, "gpt2": 2}[request.param])


@pytest.fixture(scope="module")
def prompts(tok):
    return encode_prompts(tok, PROMPTS, max_length=None)


def run(model, prompts, tok, eos_id=None, seed=None, **params) -> Generation:
    ids, mask = prompts
    gen = None if seed is None else torch.Generator().manual_seed(seed)
    eos = tok.eos_token_id if eos_id is None else eos_id
    return generate(
        model, ids, mask, SamplingParams(**params), eos_id=eos, pad_id=tok.pad_token_id, generator=gen
    )


def check_consistent(g: Generation, eos_id: int, pad_id: int, max_new: int) -> None:
    """The invariants every Generation satisfies, checked against the tokens themselves."""
    b, t = g.response_ids.shape
    assert t <= max_new and g.logprobs.shape == g.response_mask.shape == (b, t)
    for i in range(b):
        row = g.response_ids[i].tolist()
        n = row.index(eos_id) + 1 if eos_id in row else t
        assert g.lengths[i].item() == n
        assert g.truncated[i].item() == (eos_id not in row)
        assert g.response_mask[i].tolist() == [1.0] * n + [0.0] * (t - n)
        assert all(x == pad_id for x in row[n:])
        assert (g.logprobs[i, n:] == 0).all() and (g.logprobs[i, :n] <= 0).all()


def test_encode_prompts_left_pads(tok, prompts):
    ids, mask = prompts
    assert ids.shape == mask.shape == (6, 7) and ids.dtype == torch.long
    assert ids[2].tolist() == [0] * 6 + [tok.convert_tokens_to_ids("9")]
    assert mask[2].tolist() == [0] * 6 + [1] and mask[3].tolist() == [1] * 7
    assert tok.decode(ids[1], skip_special_tokens=True) == "12+34="


def test_encode_prompts_errors(tok):
    with pytest.raises(ConfigError) as e:
        encode_prompts(tok, ["12", "12345", "1"], max_length=3)
    assert "prompt 1 has 5 tokens, more than the limit max_length=3" in str(e.value)
    with pytest.raises(ConfigError, match="prompt 1 is empty"):
        encode_prompts(tok, ["1", ""], max_length=None)
    model = build_scratch_model("llama", tok, hidden_size=16, layers=1, heads=2, max_position_embeddings=40)
    limit = max_prompt_length(model, SamplingParams(max_new_tokens=28))
    assert limit == 12  # the context of 40 minus 28 new tokens
    with pytest.raises(ConfigError, match="prompt 0 has 13 tokens, more than the limit max_length=12"):
        encode_prompts(tok, ["1" * 13], max_length=limit)
    with pytest.raises(ConfigError, match="sampling.max_new_tokens=40 leaves no room for a prompt"):
        max_prompt_length(model, SamplingParams(max_new_tokens=40))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"temperature": -0.1}, "sampling.temperature"),
        ({"temperature": float("nan")}, "sampling.temperature"),
        ({"top_p": 0.0}, "sampling.top_p"),
        ({"top_p": 1.5}, "sampling.top_p"),
        ({"top_k": -1}, "sampling.top_k"),
        ({"max_new_tokens": 0}, "sampling.max_new_tokens"),
        ({"min_new_tokens": -1}, "sampling.min_new_tokens"),
        ({"min_new_tokens": 33}, "sampling.min_new_tokens"),
    ],
)
def test_sampling_params_validation(kwargs, field):
    with pytest.raises(ConfigError, match=field) as e:
        SamplingParams(**kwargs)
    assert str(next(iter(kwargs.values()))) in str(e.value)


def test_sampling_params_lists_every_problem():
    with pytest.raises(ConfigError) as e:
        SamplingParams(temperature=-1, top_k=-2)
    assert len(e.value.problems) == 2


def greedy_probe(model, prompts, tok, steps: int = 24) -> list[list[int]]:
    """Greedy continuations with no EOS at all, to pick tokens that later tests use as the EOS."""
    return run(model, prompts, tok, eos_id=-1, temperature=0, max_new_tokens=steps).response_ids.tolist()


def test_greedy_equals_transformers_generate(model, prompts, tok):
    ids, mask = prompts
    # Row 3's third greedy token serves as EOS: row 3 ends after 3 tokens, the others later or never.
    eos = greedy_probe(model, prompts, tok)[3][2]
    ours = run(model, prompts, tok, eos_id=eos, temperature=0, max_new_tokens=24)
    hf = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=24,
        eos_token_id=eos,
        pad_token_id=tok.pad_token_id,
    )
    assert torch.equal(ours.response_ids, hf[:, ids.shape[1] :])
    assert ours.lengths[3].item() == 3 and not ours.truncated[3]
    assert len(set(ours.response_ids.flatten().tolist())) >= 6  # a varied continuation, not one token
    check_consistent(ours, eos, tok.pad_token_id, 24)


@pytest.fixture(scope="module")
def mild_model(tok):
    # std 0.2: logits of a few units. The fp32 gap between the cached and the full forward grows with the
    # logits' size (about 2e-5 at std 0.5, temperature 0.7; 2e-6 here; 2e-7 at the default init).
    return {arch: sharp_model(arch, tok, seed=3, std=0.2) for arch in ("qwen2", "gpt2")}


@pytest.mark.parametrize("arch", ["qwen2", "gpt2"])
@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.7, 5, 0.9), (0.0, 0, 1.0)])
def test_logprobs_equal_recomputed(mild_model, prompts, tok, arch, temperature, top_k, top_p):
    model = mild_model[arch]
    g = run(model, prompts, tok, seed=1, temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=12)
    check_consistent(g, tok.eos_token_id, tok.pad_token_id, 12)
    ids, mask = g.sequences()
    with torch.no_grad():
        # the log-prob under the unfiltered distribution at the sampling temperature (1 for greedy)
        logp = sequence_logprobs(
            model, ids, mask, response_start=g.prompt_ids.shape[1], temperature=temperature or 1.0
        )
    assert (g.logprobs - logp * g.response_mask).abs().max() <= 1e-5
    assert g.response_mask.sum() > 3 * g.response_ids.shape[0]  # real multi-token responses were compared


def test_seeded_sampling_is_reproducible(model, prompts, tok):
    a = run(model, prompts, tok, seed=5, max_new_tokens=10)
    b = run(model, prompts, tok, seed=5, max_new_tokens=10)
    c = run(model, prompts, tok, seed=6, max_new_tokens=10)
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.logprobs, b.logprobs)
    assert not torch.equal(a.response_ids, c.response_ids)


def test_top_k_one_and_tiny_top_p_are_greedy(model, prompts, tok):
    greedy = run(model, prompts, tok, temperature=0, max_new_tokens=10)
    for params in ({"top_k": 1}, {"top_p": 1e-6}):
        g = run(model, prompts, tok, seed=3, temperature=1.5, max_new_tokens=10, **params)
        assert torch.equal(g.response_ids, greedy.response_ids)
    sampled = run(model, prompts, tok, seed=3, temperature=1.5, max_new_tokens=10)
    assert not torch.equal(sampled.response_ids, greedy.response_ids)


def test_stops_when_every_row_has_ended(model, prompts, tok):
    rows = greedy_probe(model, prompts, tok)
    # a token that both rows 1 and 3 emit within 8 steps: as EOS it ends both, at known steps
    shared = set(rows[1][:8]) & set(rows[3][:8])
    assert shared, (rows[1], rows[3])
    eos = min(shared, key=lambda x: max(rows[1].index(x), rows[3].index(x)))
    expected = [rows[1].index(eos) + 1, rows[3].index(eos) + 1]
    ids, mask = encode_prompts(tok, [PROMPTS[1], PROMPTS[3]], max_length=None)
    g = generate(model, ids, mask, SamplingParams(temperature=0, max_new_tokens=40), eos_id=eos, pad_id=0)
    assert g.lengths.tolist() == expected and g.response_ids.shape == (2, max(expected))  # stopped early
    assert not g.truncated.any()
    check_consistent(g, eos, 0, 40)


def test_truncated_when_no_eos(model, prompts, tok):
    g = run(model, prompts, tok, eos_id=len(tok), seed=0, max_new_tokens=7)  # an id that cannot be sampled
    assert g.response_ids.shape == (6, 7)
    assert g.truncated.all() and g.lengths.tolist() == [7] * 6 and (g.response_mask == 1).all()


def test_pad_equal_to_eos(model, prompts, tok):
    eos = greedy_probe(model, prompts, tok, 12)[3][2]
    ids, mask = prompts
    g = generate(model, ids, mask, SamplingParams(temperature=0, max_new_tokens=12), eos_id=eos, pad_id=eos)
    assert g.lengths[3].item() == 3 and g.response_mask[3].tolist() == [1.0] * 3 + [0.0] * 9
    check_consistent(g, eos, eos, 12)  # the EOS kept, the EOS-valued pads after it masked


def test_texts(model, prompts, tok):
    g = run(model, prompts, tok, seed=2, max_new_tokens=8)
    texts = g.texts(tok)
    assert len(texts) == 6
    for text, row, n in zip(texts, g.response_ids.tolist(), g.lengths.tolist(), strict=True):
        expected = "".join(tok.convert_ids_to_tokens(x) for x in row[:n] if x not in tok.all_special_ids)
        assert text == expected


def test_generate_rejects_right_padding(model, tok):
    ids = torch.tensor([[5, 6, 0]])
    with pytest.raises(ValueError, match="left-padded"):
        generate(model, ids, (ids != 0).long(), SamplingParams(), eos_id=2, pad_id=0)


def test_sample_tokens_filters_and_logprobs():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().expand(4000, 4)
    gen = torch.Generator().manual_seed(0)
    tokens, logp = sample_tokens(logits, SamplingParams(top_p=0.7), gen)
    # nucleus 0.7: {0, 1} (0.5 < 0.7 before token 1; 0.8 ≥ 0.7 before token 2), renormalised to 5/8, 3/8
    assert set(tokens.tolist()) == {0, 1}
    assert abs((tokens == 0).float().mean().item() - 0.625) < 0.04
    assert torch.allclose(logp, probs.log()[tokens])  # unfiltered log-probs
    tokens, _ = sample_tokens(logits, SamplingParams(top_k=3), gen)
    assert set(tokens.tolist()) == {0, 1, 2}
    assert abs((tokens == 2).float().mean().item() - 0.15 / 0.95) < 0.03
    tokens, logp = sample_tokens(logits, SamplingParams(temperature=0.5), gen)
    sharpened = torch.softmax(probs.log() / 0.5, -1)
    assert abs((tokens == 0).float().mean().item() - sharpened[0].item()) < 0.04
    assert torch.allclose(logp, sharpened.log()[tokens])


def test_sample_tokens_follows_the_distribution_and_skips_zero_probability_tokens():
    """Inverse-CDF sampling: the frequencies of 20,000 draws match the softmax (total variation < 0.03;
    an off-by-one in the search would move each token's mass to its neighbour), and a token of
    probability 0 (logit -inf, or the banned EOS) is never drawn."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(40, generator=g) * 1.5
    logits[::5] = float("-inf")
    tokens, logp = sample_tokens(logits.expand(20_000, 40), SamplingParams(), g, banned=3)
    probs = logits.softmax(-1)
    assert torch.allclose(logp, probs.log()[tokens])  # the unbanned model's log-probs
    probs[3] = 0.0
    probs /= probs.sum()
    counts = torch.bincount(tokens, minlength=40).float()
    assert counts[::5].sum() == 0 and counts[3] == 0
    assert 0.5 * (counts / counts.sum() - probs).abs().sum() < 0.03


@pytest.mark.parametrize(
    ("vocab", "bias", "temperature", "banned"),
    [(1000, False, 1.0, None), (1000, True, 0.7, 5), (50, False, 1.3, 49), (301, True, 1.0, 300)],
)
@pytest.mark.parametrize("chunk", [7, 64, 300, None])
def test_sample_from_hidden_equals_the_head_then_sample_tokens(vocab, bias, temperature, banned, chunk):
    """The output layer fused with the draw, in blocks of the vocabulary (a last block shorter than the
    others, a banned token alone in its block, a banned token that is the last one): the tokens of
    ``sample_tokens`` on the whole logits with the same uniforms, and their log-probs (the blocks' sums
    are added in another order: 1e-5)."""
    g = torch.Generator().manual_seed(vocab + (banned or 0))
    h = torch.randn(40, 16, generator=g)
    w = torch.randn(vocab, 16, generator=g)
    b = torch.randn(vocab, generator=g) if bias else None
    u = torch.rand(40, generator=g, dtype=torch.float64)
    logits = torch.nn.functional.linear(h, w, b)
    want, want_logp = sample_tokens(logits, SamplingParams(temperature=temperature), None, banned, u)
    got, logp = sample_from_hidden(h, w, b, temperature, None, banned, u, chunk=chunk)
    assert torch.equal(got, want)
    assert (logp - want_logp).abs().max() <= 1e-5
    if banned is not None:
        assert not (got == banned).any()
    # from a generator: the same single draw per row as sample_tokens takes
    a = sample_from_hidden(h, w, b, temperature, torch.Generator().manual_seed(5), banned, chunk=chunk)
    params = SamplingParams(temperature=temperature)
    c = sample_tokens(logits, params, torch.Generator().manual_seed(5), banned)
    assert torch.equal(a[0], c[0])


def test_sample_from_hidden_follows_the_distribution_when_the_banned_token_dominates():
    """20,000 draws match the softmax without the banned token (total variation < 0.03), even when the
    banned token's logit is so far above the others that their weights relative to it underflow in fp32:
    the draw and its maxima leave the banned token out; the log-prob keeps it in the normaliser."""
    g = torch.Generator().manual_seed(2)
    head = torch.randn(30, 4, generator=g)
    h = torch.randn(1, 4, generator=g).expand(20_000, 4).contiguous()
    logits = torch.nn.functional.linear(h[:1], head)[0]
    head[7] = h[0] * (logits.max() + 200.0) / h[0].square().sum()  # token 7: 200 nats above the rest
    logits = torch.nn.functional.linear(h[:1], head)[0]
    tokens, logp = sample_from_hidden(h, head, None, 1.0, g, banned=7, chunk=8)
    assert torch.allclose(logp, logits.log_softmax(-1)[tokens], atol=1e-4)
    probs = logits.clone()
    probs[7] = float("-inf")
    probs = probs.softmax(-1)
    counts = torch.bincount(tokens, minlength=30).float()
    assert counts[7] == 0
    assert 0.5 * (counts / counts.sum() - probs).abs().sum() < 0.03


@pytest.mark.parametrize("banned", [0, 7, 29])
def test_sample_tokens_follows_the_distribution_when_the_banned_token_dominates(banned):
    """The whole-logits path (small vocabularies, the transformers stepper) as the fused head above: a
    banned token 200 nats above the rest (first, middle or last id) is never drawn, the others keep their
    softmax frequencies, and the log-probs are the full softmax's (finite, the banned token's weight in the
    normaliser)."""
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(30, generator=g)
    logits[banned] = logits.max() + 200.0
    tokens, logp = sample_tokens(logits.expand(20_000, 30).contiguous(), SamplingParams(), g, banned)
    assert torch.isfinite(logp).all()
    assert torch.allclose(logp, logits.log_softmax(-1)[tokens], atol=1e-4)
    probs = logits.clone()
    probs[banned] = float("-inf")
    probs = probs.softmax(-1)
    counts = torch.bincount(tokens, minlength=30).float()
    assert counts[banned] == 0
    assert 0.5 * (counts / counts.sum() - probs).abs().sum() < 0.03


def test_a_large_vocabulary_samples_through_the_fused_head(monkeypatch):
    """With a vocabulary of several head blocks (3,000 tokens), ``generate`` on a Qwen2 model takes the
    fused head (:func:`sample_from_hidden`): its tokens equal those of the whole-logits path on the same
    uniforms (HEAD_CHUNK raised past the vocabulary), its log-probs equal the recomputed ones, the EOS is
    banned until ``min_new_tokens``, and shared prompts (prefilled once) give what separate rows give."""
    import importlib

    gen_module = importlib.import_module("advantage.lm.generate")  # the module, not the function

    alphabet = "0123456789+=- "
    big = build_char_tokenizer(alphabet + "".join(map(chr, range(0x4E00, 0x4E00 + 3000 - 19))))
    assert len(big) > gen_module.HEAD_CHUNK
    model = sharp_model("qwen2", big, seed=3, std=0.15)
    ids, mask = encode_prompts(big, ["1+2=", "1+2=", "77-7=", "77-7="], max_length=None)
    eos = big.eos_token_id
    params = SamplingParams(max_new_tokens=10, min_new_tokens=4)
    u = slot_uniforms(0, [0, 1, 2, 3], 1, 10)
    calls = []
    fused_head = gen_module.sample_from_hidden
    monkeypatch.setattr(gen_module, "sample_from_hidden", lambda *a: calls.append(1) or fused_head(*a))
    fused = generate(model, ids, mask, params, eos_id=eos, pad_id=big.pad_token_id, uniforms=u)
    shared = generate(
        model, ids, mask, params, eos_id=eos, pad_id=big.pad_token_id, uniforms=u, shared_prompts=2
    )
    assert len(calls) == 2 * fused.response_ids.shape[1]  # one per token, in both calls
    monkeypatch.setattr(gen_module, "HEAD_CHUNK", 10**9)
    whole = generate(model, ids, mask, params, eos_id=eos, pad_id=big.pad_token_id, uniforms=u)
    assert torch.equal(fused.response_ids, whole.response_ids)
    assert torch.equal(shared.response_ids, fused.response_ids)
    assert (fused.logprobs - whole.logprobs).abs().max() <= 1e-5
    assert fused.lengths.min().item() >= 4 and not (fused.response_ids[:, :4] == eos).any()
    seq_ids, seq_mask = fused.sequences()
    with torch.no_grad():
        logp = sequence_logprobs(model, seq_ids, seq_mask, response_start=ids.shape[1])
    assert (fused.logprobs - logp * fused.response_mask).abs().max() <= 1e-5


def test_min_new_tokens_equals_transformers_generate(model, prompts, tok):
    """The EOS is forbidden for the first ``min_new_tokens`` tokens (transformers' ``min_new_tokens``);
    log-probs stay those of the unfiltered distribution; ``min = max`` gives fixed-length responses."""
    ids, mask = prompts
    eos = greedy_probe(model, prompts, tok)[3][2]  # ends row 3 after 3 tokens without the minimum
    ours = run(model, prompts, tok, eos_id=eos, temperature=0, max_new_tokens=24, min_new_tokens=6)
    hf = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=24,
        min_new_tokens=6,
        eos_token_id=eos,
        pad_token_id=tok.pad_token_id,
    )
    assert torch.equal(ours.response_ids, hf[:, ids.shape[1] :])
    assert ours.lengths.min().item() >= 6
    check_consistent(ours, eos, tok.pad_token_id, 24)
    fixed = run(model, prompts, tok, eos_id=eos, seed=4, max_new_tokens=9, min_new_tokens=9)
    assert fixed.response_ids.shape == (6, 9) and fixed.lengths.tolist() == [9] * 6
    assert not (fixed.response_ids == eos).any()
    seq_ids, seq_mask = fixed.sequences()
    with torch.no_grad():
        logp = sequence_logprobs(model, seq_ids, seq_mask, response_start=ids.shape[1])
    assert (fixed.logprobs - logp).abs().max() <= 1e-4


def test_slot_uniforms_make_a_rows_sample_independent_of_its_batch(model, prompts, tok):
    """Rows sampled with their slots' draws: the same tokens and log-probs whether a prompt is decoded
    with the others or alone (a rank's or a Ray worker's share), and other slots give other samples."""
    ids, mask = prompts
    params = SamplingParams(max_new_tokens=8)
    kw = {"eos_id": tok.eos_token_id, "pad_id": tok.pad_token_id}
    slots = [10, 11, 12, 13, 14, 15]
    whole = generate(model, ids, mask, params, uniforms=slot_uniforms(3, slots, 1, 8), **kw)
    for k in (0, 4):
        alone = generate(
            model,
            ids[k : k + 1],
            mask[k : k + 1],
            params,
            uniforms=slot_uniforms(3, slots[k : k + 1], 1, 8),
            **kw,
        )
        n = int(alone.lengths[0])
        assert torch.equal(alone.response_ids[0, :n], whole.response_ids[k, :n])
        assert torch.allclose(alone.logprobs[0, :n], whole.logprobs[k, :n], atol=1e-5)
    other = generate(
        model, ids, mask, params, uniforms=slot_uniforms(3, [20, 21, 22, 23, 24, 25], 1, 8), **kw
    )
    assert not torch.equal(other.response_ids, whole.response_ids)
    with pytest.raises(ValueError, match="uniforms must be"):
        generate(model, ids, mask, params, uniforms=slot_uniforms(3, slots[:2], 1, 8), **kw)
