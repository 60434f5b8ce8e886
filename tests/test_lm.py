"""advantage.lm.model: the char tokenizer, scratch models, local checkpoints, per-token log-probs and
masks."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from advantage.errors import ConfigError
from advantage.lm.model import (
    build_char_tokenizer,
    build_scratch_model,
    load_pretrained,
    position_ids_from_mask,
    response_mask,
    sequence_logprobs,
)

ALPHABET = "0123456789+=- "


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer(ALPHABET, extra_tokens=["<answer>", "</answer>"])


def tiny(arch: str, tokenizer, seed: int = 0):
    """A 2-layer, hidden-32 model. "gpt2" (absolute position embeddings, outside build_scratch_model's
    archs) is where wrong position ids show: RoPE models are invariant to a per-row position shift."""
    if arch == "gpt2":
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
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return GPT2LMHeadModel(cfg).eval()
    return build_scratch_model(arch, tokenizer, hidden_size=32, layers=2, heads=4, kv_heads=2, seed=seed)


def batch(prompts: list[list[int]], responses: list[list[int]], pad: int, response_pad_mask: bool = False):
    """Prompts left-padded to P, responses right-padded to T with ``pad``: ``(ids, mask, P)``.
    The response padding gets mask 0, or 1 with ``response_pad_mask`` (what a sampler's batch may hold)."""
    p, t = max(map(len, prompts)), max(map(len, responses))
    ids = torch.full((len(prompts), p + t), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (a, b) in enumerate(zip(prompts, responses, strict=True)):
        ids[i, p - len(a) : p] = torch.tensor(a)
        ids[i, p : p + len(b)] = torch.tensor(b)
        mask[i, p - len(a) : p + len(b)] = 1
        if response_pad_mask:
            mask[i, p:] = 1
    return ids, mask, p


# ---------------------------------------------------------------- tokenizer


def test_char_tokenizer_ids_and_round_trip(tok):
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert tok.padding_side == "left"
    for s in ["12+34=46", " 1 - 2 =  -1 ", "  ", "0", "-=+ 9876543210"]:
        ids = tok.encode(s)
        assert len(ids) == len(s)  # one token per character, spaces included
        assert tok.decode(ids, skip_special_tokens=True) == s
    assert tok.encode("10") == [tok.convert_tokens_to_ids("1"), tok.convert_tokens_to_ids("0")]
    assert tok.encode("a") == [tok.unk_token_id]  # outside the alphabet


def test_extra_tokens_are_one_token_and_skipped_when_special(tok):
    ids = tok.encode("<answer>42</answer>")
    assert len(ids) == 4
    assert ids[0] == tok.convert_tokens_to_ids("<answer>") and ids[-1] == tok.convert_tokens_to_ids(
        "</answer>"
    )
    assert tok.decode(ids) == "<answer>42</answer>"
    assert tok.decode(ids, skip_special_tokens=True) == "42"
    assert tok.decode([*tok.encode("1 2"), tok.eos_token_id, 0, 0], skip_special_tokens=True) == "1 2"


def test_space_is_always_in_the_alphabet():
    t = build_char_tokenizer("01")
    assert t.decode(t.encode("0 1"), skip_special_tokens=True) == "0 1"
    assert t.unk_token_id not in t.encode("0 1")


def test_left_padding(tok):
    enc = tok(["1", "123"], padding=True)
    one = tok.convert_tokens_to_ids("1")
    assert enc["input_ids"][0] == [0, 0, one]
    assert enc["attention_mask"] == [[0, 0, 1], [1, 1, 1]]


def test_chat_template(tok):
    msgs = [{"role": "system", "content": "add"}, {"role": "user", "content": "1+1="}]
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == (
        "<|system|>add<eos><|user|>1+1=<eos><|assistant|>"
    )
    assert tok.apply_chat_template(msgs[1:], tokenize=False) == "<|user|>1+1=<eos>"
    ids = tok.encode(tok.apply_chat_template(msgs[1:], tokenize=False, add_generation_prompt=True))
    assert ids[0] == tok.convert_tokens_to_ids("<|user|>") and ids[-2:] == [
        2,
        tok.convert_tokens_to_ids("<|assistant|>"),
    ]
    assert len(ids) == 1 + 4 + 1 + 1  # role tokens and <eos> are single tokens


def test_tokenizer_save_and_reload(tok, tmp_path):
    from transformers import AutoTokenizer

    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert again.get_vocab() == tok.get_vocab()
    assert again.padding_side == "left" and again.pad_token_id == 0 and again.model_max_length == 512
    assert again.chat_template == tok.chat_template
    s = "<answer> 12 + 3</answer>"
    assert again.encode(s) == tok.encode(s)
    assert again.decode(again.encode(s), skip_special_tokens=True) == " 12 + 3"


@pytest.mark.parametrize("extra", [["1"], ["<eos>"], ["<a>", "<a>"], [""]])
def test_tokenizer_rejects_bad_extra_tokens(extra):
    with pytest.raises(ConfigError, match="tokenizer.extra_tokens"):
        build_char_tokenizer(ALPHABET, extra_tokens=extra)


# ---------------------------------------------------------------- scratch models


def test_scratch_model_config_and_determinism(tok):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = tiny("qwen2", tok, seed=7)
    assert torch.equal(torch.rand(3), expected)  # the global RNG was not consumed
    b, c = tiny("qwen2", tok, seed=7), tiny("qwen2", tok, seed=8)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(
        sa["model.layers.0.self_attn.q_proj.weight"], sc["model.layers.0.self_attn.q_proj.weight"]
    )
    cfg = a.config
    assert (cfg.vocab_size, cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id) == (len(tok), 0, 1, 2)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (
        32,
        2,
        4,
        2,
    )
    assert cfg.intermediate_size == 128 and cfg.tie_word_embeddings
    assert a.lm_head.weight.data_ptr() == a.model.embed_tokens.weight.data_ptr()
    assert not a.training


def test_scratch_model_errors(tok):
    with pytest.raises(ConfigError) as e:
        build_scratch_model("gpt2", tok, hidden_size=32, layers=2, heads=4)
    assert "model.arch" in str(e.value) and "'gpt2'" in str(e.value) and "['qwen2', 'llama']" in str(e.value)
    with pytest.raises(ConfigError, match="model.hidden_size must be divisible by model.heads=3, got 32"):
        build_scratch_model("llama", tok, hidden_size=32, layers=2, heads=3)
    with pytest.raises(ConfigError, match="model.heads must be divisible by model.kv_heads=3, got 4"):
        build_scratch_model("llama", tok, hidden_size=32, layers=2, heads=4, kv_heads=3)


# ---------------------------------------------------------------- log-probs


def naive_logprobs(model, prompt: list[int], response: list[int], temperature: float = 1.0):
    """One sequence, no padding, full logits: log_softmax(z / τ)[y] at every response position."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float() / temperature
    logp = torch.log_softmax(logits, -1)[len(prompt) - 1 : -1]
    return logp.gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


PROMPTS = ["1+2=", "12+34=", "9", "100-99="]
RESPONSES = ["3", "46<eos>", "9+9=18<eos>", "1 1"]


@pytest.mark.parametrize("arch", ["qwen2", "llama", "gpt2"])
@pytest.mark.parametrize("response_pad_mask", [False, True])
def test_batched_left_padded_logprobs_equal_unpadded(tok, arch, response_pad_mask):
    model = tiny(arch, tok)
    prompts, responses = [tok.encode(s) for s in PROMPTS], [tok.encode(s) for s in RESPONSES]
    ids, mask, p = batch(prompts, responses, tok.pad_token_id, response_pad_mask)
    with torch.no_grad():
        logp, hidden = sequence_logprobs(model, ids, mask, response_start=p, return_hidden=True)
        logp_t = sequence_logprobs(model, ids, mask, response_start=p, temperature=0.7)
    assert (
        logp.shape == (4, ids.shape[1] - p)
        and logp.dtype == torch.float32
        and hidden.shape == (4, ids.shape[1] - p, 32)
    )
    for i, (a, b) in enumerate(zip(prompts, responses, strict=True)):
        assert (logp[i, : len(b)] - naive_logprobs(model, a, b)).abs().max() <= 1e-5
        assert (logp_t[i, : len(b)] - naive_logprobs(model, a, b, 0.7)).abs().max() <= 1e-5
        with torch.no_grad():
            h = model(input_ids=torch.tensor([a + b]), output_hidden_states=True).hidden_states[-1][0]
        assert (hidden[i, : len(b)] - h[len(a) - 1 : -1]).abs().max() <= 1e-5
    assert logp[:, 0].max() < -0.5  # log-probs of a random 24-token model, not zeros


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "transformers"])
def test_logits_only_for_response_positions(tok, lean, monkeypatch, fast_path):
    from advantage.lm.lean import LeanDecoder

    fast_path("lm_forward", lean)
    model = tiny("qwen2", tok)
    ids, mask, p = batch([tok.encode("12345678")], [tok.encode("9")], 0)
    seen = []
    record = LeanDecoder.logits

    def logits(self, hidden):
        seen.append(tuple(hidden.shape))
        return record(self, hidden)

    monkeypatch.setattr(LeanDecoder, "logits", logits)
    handle = model.lm_head.register_forward_hook(lambda mod, inp, out: seen.append(tuple(inp[0].shape)))
    try:
        sequence_logprobs(model, ids, mask, response_start=p)
    finally:
        handle.remove()
    assert seen == [(1, 1, 32)]  # one response token: one position through the vocab projection, not 9


def test_logprobs_pad_equals_eos(tok, tmp_path):
    # A tokenizer whose pad is its EOS (as many chat checkpoints ship): responses are right-padded with
    # EOS ids, so the mask must come from the first EOS, and the padded batch must still match.
    tok.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(tmp_path)
    t.pad_token = t.eos_token
    assert t.pad_token_id == t.eos_token_id == 2
    model = tiny("llama", t)
    assert model.config.pad_token_id == 2
    prompts = [t.encode(s) for s in PROMPTS]
    responses = [t.encode(s) for s in ["3<eos>", "46<eos>", "9+9=18<eos>", "1 1"]]
    ids, _, p = batch(prompts, responses, pad=2)
    rmask = response_mask(ids[:, p:], eos_id=2)
    expected = torch.zeros(4, 7)
    for i, n in enumerate([2, 3, 7, 4]):
        expected[i, :n] = 1
    # EOS kept, the EOS-looking pads after it dropped. The last row (cut at 3 tokens, no EOS) cannot be
    # told apart from one that ended with EOS from the ids alone: `valid` (what was generated) settles it.
    assert torch.equal(rmask, expected)
    valid = torch.arange(7)[None, :] < torch.tensor([[len(b)] for b in responses])
    rmask = response_mask(ids[:, p:], eos_id=2, valid=valid)
    expected[3, 3] = 0
    assert torch.equal(rmask, expected)
    mask = torch.cat([(ids[:, :p] != 2).long(), rmask.long()], dim=1)  # prompts hold no EOS here
    with torch.no_grad():
        logp = sequence_logprobs(model, ids, mask, response_start=p)
    for i, (a, b) in enumerate(zip(prompts, responses, strict=True)):
        assert (logp[i, : len(b)] - naive_logprobs(model, a, b)).abs().max() <= 1e-5


def test_sequence_logprobs_gradients_finite_with_left_padding(tok):
    model = tiny("qwen2", tok).train()
    ids, mask, p = batch([tok.encode("1"), tok.encode("123456")], [tok.encode("12"), tok.encode("3")], 0)
    logp, hidden = sequence_logprobs(model, ids, mask, response_start=p, return_hidden=True)
    (logp.sum() + hidden.sum()).backward()
    grads = [q.grad for q in model.parameters() if q.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert model.lm_head.weight.grad.abs().sum() > 0


def test_sequence_logprobs_argument_errors(tok):
    model = tiny("qwen2", tok)
    ids = torch.ones(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match=r"response_start must be in \[1, 4\] for L=5, got 5"):
        sequence_logprobs(model, ids, torch.ones_like(ids), response_start=5)
    with pytest.raises(ValueError, match="temperature must be > 0, got 0"):
        sequence_logprobs(model, ids, torch.ones_like(ids), response_start=2, temperature=0)
    with pytest.raises(ValueError, match="must both be"):
        sequence_logprobs(model, ids, torch.ones(2, 4), response_start=2)


def test_position_ids_from_mask():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 0, 0]])
    expected = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 1, 1, 1]])
    assert torch.equal(position_ids_from_mask(mask), expected)


# ---------------------------------------------------------------- response mask


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([2, 5, 5, 5], [1, 0, 0, 0]),  # EOS first: only the EOS counts
        ([5, 6, 7, 8], [1, 1, 1, 1]),  # no EOS: truncated, all kept
        ([5, 2, 6, 2], [1, 1, 0, 0]),  # EOS twice: only the first closes the response
        ([5, 6, 2, 2], [1, 1, 1, 0]),  # pad == eos: the pads after the EOS are dropped
        ([5, 6, 7, 2], [1, 1, 1, 1]),  # EOS last
    ],
)
def test_response_mask_cases(ids, expected):
    out = response_mask(torch.tensor([ids]), eos_id=2)
    assert out.dtype == torch.float32
    assert out.tolist() == [[float(x) for x in expected]]


def test_response_mask_batched_with_valid():
    ids = torch.tensor([[5, 2, 0, 0], [5, 6, 7, 0], [2, 0, 0, 0]])
    valid = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 1, 1, 1]], dtype=torch.bool)
    # pad id 0 is never consulted: row 1 has no EOS and keeps its pad (all 1) unless valid says otherwise
    assert response_mask(ids, 2).tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    # an EOS outside valid does not close the row
    assert response_mask(ids, 2, valid).tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 1, 1, 1]]


# ---------------------------------------------------------------- load_pretrained


def save(model, tokenizer, folder):
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_load_pretrained_round_trip(tok, tmp_path):
    model = tiny("llama", tok, seed=3)
    folder = save(model, tok, tmp_path / "ckpt")
    loaded, t = load_pretrained(folder)
    assert not loaded.training and t.padding_side == "left" and t.pad_token_id == 0
    assert type(loaded).__name__ == "LlamaForCausalLM" and loaded.dtype == torch.float32
    ids, mask, p = batch([tok.encode("12+3="), tok.encode("4=")], [tok.encode("15"), tok.encode("4<eos>")], 0)
    with torch.no_grad():
        a = sequence_logprobs(model, ids, mask, response_start=p)
        b = sequence_logprobs(loaded, ids, mask, response_start=p)
    assert torch.equal(a, b)
    assert t.encode("<answer>1 2") == tok.encode("<answer>1 2")


def test_load_pretrained_missing_or_incomplete(tok, tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError) as e:
        load_pretrained(missing)
    assert str(missing) in str(e.value) and "does not exist" in str(e.value)
    tok.save_pretrained(tmp_path / "tok_only")
    with pytest.raises(ConfigError) as e:
        load_pretrained(tmp_path / "tok_only")
    msg = str(e.value)
    assert "is not a model folder" in msg and "config.json" in msg and "model.safetensors" in msg
    assert "tokenizer" not in msg.split("missing")[1]  # the tokenizer is there; only the model is missing


def test_load_pretrained_refuses_remote_code(tok, tmp_path):
    folder = save(tiny("qwen2", tok), tok, tmp_path / "remote")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as e:
        load_pretrained(folder)
    assert "auto_map" in str(e.value) and "model.trust_remote_code=true" in str(e.value)


def test_load_pretrained_tokenizer_without_pad(tok, tmp_path):
    no_pad = build_char_tokenizer(ALPHABET)
    no_pad.pad_token = None
    folder = save(tiny("qwen2", tok), no_pad, tmp_path / "nopad")
    with pytest.raises(ConfigError) as e:
        load_pretrained(folder)
    assert (
        "no pad token" in str(e.value) and str(folder) in str(e.value) and "pad_to_eos=True" in str(e.value)
    )
    _, t = load_pretrained(folder, pad_to_eos=True)
    assert t.pad_token_id == t.eos_token_id == 2
    assert t(["1", "12"], padding=True)["input_ids"][0][0] == 2  # left-padded with EOS
