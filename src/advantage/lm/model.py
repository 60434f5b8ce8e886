"""Causal language models as policies, fully offline: a character tokenizer and scratch models built from
configs, local checkpoints, and the per-token log-probabilities ``[B, T]`` that every LLM loss consumes.

The batch layout shared with :mod:`advantage.lm.generate`: prompts left-padded to a common length
``P``, responses right-padded to ``T``, ``input_ids = cat(prompt_ids, response_ids)`` of length
``L = P + T`` and ``response_start = P``. Position ids come from the attention mask
(``cumsum(mask) - 1``), so a row's left padding never shifts its positions: a padded row gets the same
log-probs as the same row alone, unpadded (tested to 1e-5).

Nothing here downloads: :func:`load_pretrained` reads a local folder with ``local_files_only=True``.
``transformers`` is imported here only (the ``llm`` extra), never by the classic-control code.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

import torch
from torch import Tensor

from advantage.errors import ConfigError

if TYPE_CHECKING:  # transformers is the optional `llm` extra: imported inside the functions that use it
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "ARCHS",
    "ATTN_IMPLEMENTATION",
    "ROLE_TOKENS",
    "SPECIAL_TOKENS",
    "build_char_tokenizer",
    "build_scratch_model",
    "forward_accepts",
    "load_pretrained",
    "position_ids_from_mask",
    "response_mask",
    "sequence_logprobs",
]

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")  # ids 0..3, in this order
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
# Each turn is <|role|>content<eos>; the generation prompt opens an assistant turn, so the model's own
# <eos> both ends its answer and closes the turn (one stop token, as in Qwen's <|im_end|>).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + eos_token }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)
ARCHS = ("qwen2", "llama")
# "eager": its padding mask adds the dtype's finite minimum to hidden scores, so a left-pad query row with
# no visible key softmaxes to a finite uniform row by construction and no NaN can reach real tokens (sdpa
# relies on the kernel's handling of fully masked rows). Both matched the unpadded log-probs to ~2e-7 on
# CPU (tests/test_lm.py), and sampling / forward+backward ran as fast with eager for these model sizes
# (benchmarks/lm_sampling.py --attn). On a GPU with long sequences, pass attn_implementation="sdpa".
ATTN_IMPLEMENTATION = "eager"

_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def build_char_tokenizer(
    alphabet: str, *, extra_tokens: Sequence[str] = (), model_max_length: int = 512
) -> PreTrainedTokenizerBase:
    """A character-level ``PreTrainedTokenizerFast`` built locally (``tokenizers`` WordLevel, one token
    per character), for tiny offline models and tests.

    Vocabulary: ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3, the role tokens ``<|system|>``,
    ``<|user|>``, ``<|assistant|>``, then ``extra_tokens`` (added special tokens, so a tag such as
    ``<answer>`` is one token), then each character of ``alphabet`` once (the space is always included).
    Padding is on the left; ``apply_chat_template`` renders ``<|role|>content<eos>`` per message and
    ``<|assistant|>`` for ``add_generation_prompt``. Decoding concatenates tokens (no spaces inserted),
    so ``decode(encode(s), skip_special_tokens=True) == s`` for any ``s`` over the alphabet.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if not isinstance(alphabet, str) or not alphabet:
        raise ConfigError(f"tokenizer.alphabet must be a non-empty string, got {alphabet!r}")
    if model_max_length < 1:
        raise ConfigError(f"tokenizer.model_max_length must be >= 1, got {model_max_length}")
    chars = list(dict.fromkeys(alphabet + " "))
    reserved = (*SPECIAL_TOKENS, *ROLE_TOKENS)
    bad = [t for t in extra_tokens if not t or t in reserved or t in chars or len(t) == 1]
    if bad or len(set(extra_tokens)) != len(extra_tokens):
        raise ConfigError(
            f"tokenizer.extra_tokens must be distinct multi-character strings, not reserved {list(reserved)} "
            f"nor in the alphabet, got {list(extra_tokens)}"
        )
    vocab = {t: i for i, t in enumerate([*reserved, *extra_tokens, *chars])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    # [\s\S], not ".": the dot skips newlines, and "\n\n" would stay one piece and become <unk>.
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()  # WordLevel's default decoding joins tokens with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        additional_special_tokens=[*ROLE_TOKENS, *extra_tokens],
        padding_side="left",
        model_max_length=model_max_length,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,  # it would delete the space before "." and "," on decode
    )


def build_scratch_model(
    arch: str,
    tokenizer: PreTrainedTokenizerBase,
    *,
    hidden_size: int,
    layers: int,
    heads: int,
    kv_heads: int | None = None,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 512,
    tie_embeddings: bool = True,
    seed: int = 0,
    attn_implementation: str = ATTN_IMPLEMENTATION,
) -> PreTrainedModel:
    """A randomly initialised ``Qwen2ForCausalLM`` or ``LlamaForCausalLM`` sized by the arguments, with the
    tokenizer's vocabulary size and pad/bos/eos ids, in fp32 and eval mode.

    Deterministic in ``seed``; the global torch RNG is left untouched (the init runs inside
    ``torch.random.fork_rng``). ``kv_heads`` defaults to ``heads`` (no grouped-query attention) and
    ``intermediate_size`` to ``4 * hidden_size``.
    """
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    configs = {"qwen2": Qwen2Config, "llama": LlamaConfig}
    if arch not in configs:
        raise ConfigError(f"model.arch must be one of {list(ARCHS)}, got {arch!r}")
    kv_heads = heads if kv_heads is None else kv_heads
    problems = [
        f"model.{name} must be >= 1, got {value}"
        for name, value in (
            ("hidden_size", hidden_size),
            ("layers", layers),
            ("heads", heads),
            ("kv_heads", kv_heads),
        )
        if value < 1
    ]
    if not problems and hidden_size % heads:
        problems.append(f"model.hidden_size must be divisible by model.heads={heads}, got {hidden_size}")
    if not problems and heads % kv_heads:
        problems.append(f"model.heads must be divisible by model.kv_heads={kv_heads}, got {heads}")
    if problems:
        raise ConfigError(problems)
    config = configs[arch](
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=intermediate_size or 4 * hidden_size,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(
            config, dtype=torch.float32, attn_implementation=attn_implementation
        )
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.eval()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"model.path: {path} is not readable JSON ({e})") from e


def _check_model_folder(folder: Path, trust_remote_code: bool) -> None:
    """Refuse, before transformers sees it, a folder that is missing, incomplete or needs remote code."""
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise ConfigError(
            f"model.path {str(folder)!r} {what}; expected a local folder saved by save_pretrained"
        )
    missing = []
    if not (folder / "config.json").is_file():
        missing.append("config.json")
    if not any((folder / f).is_file() for f in _WEIGHT_FILES):
        missing.append(f"model weights (one of {', '.join(_WEIGHT_FILES)})")
    if not any((folder / f).is_file() for f in _TOKENIZER_FILES):
        missing.append(f"a tokenizer (one of {', '.join(_TOKENIZER_FILES)})")
    if missing:
        raise ConfigError(f"model.path {str(folder)!r} is not a model folder: missing {'; '.join(missing)}")
    if trust_remote_code:
        return
    for name in ("config.json", "tokenizer_config.json"):
        if (folder / name).is_file() and "auto_map" in _read_json(folder / name):
            raise ConfigError(
                f"model.path {str(folder)!r}: {name} has an auto_map, so loading it runs Python code shipped "
                "with the checkpoint; refused. Set model.trust_remote_code=true to opt in if you trust it."
            )


def load_tokenizer(
    path: str | Path, *, trust_remote_code: bool = False, pad_to_eos: bool = False
) -> PreTrainedTokenizerBase:
    """The tokenizer of a local model folder, checked against the folder's model config (cheap: no
    weights are read), so a run can refuse a bad folder before it starts.

    A tokenizer without a pad token is refused unless ``pad_to_eos=True``, which sets pad = eos (safe:
    masks here are never inferred from the pad id, see :func:`response_mask`). A tokenizer with more
    tokens than the model embeds is refused too: transformers invents a default pad token for a
    tokenizer config that names none, and its id would fail deep inside the forward pass.
    """
    from transformers import AutoTokenizer

    folder = Path(path)
    _check_model_folder(folder, trust_remote_code)
    tokenizer = AutoTokenizer.from_pretrained(
        folder, local_files_only=True, trust_remote_code=trust_remote_code
    )
    if tokenizer.pad_token_id is None:
        if not pad_to_eos:
            raise ConfigError(
                f"the tokenizer at {str(folder)!r} has no pad token; padding needs one. Setting pad = eos is "
                "acceptable (masks come from the first EOS, not the pad id): pass pad_to_eos=True "
                "(model.pad_to_eos=true)"
            )
        if tokenizer.eos_token is None:
            raise ConfigError(f"the tokenizer at {str(folder)!r} has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    cfg = _read_json(folder / "config.json")
    rows = cfg.get("vocab_size", cfg.get("text_config", {}).get("vocab_size"))
    if isinstance(rows, int):
        beyond = {
            name: i
            for name, i in (("pad", tokenizer.pad_token_id), ("eos", tokenizer.eos_token_id))
            if i is not None and i >= rows
        }
        if beyond or len(tokenizer) > rows:
            ids = f"({', '.join(f'{k} id {v}' for k, v in beyond.items())}) " if beyond else ""
            raise ConfigError(
                f"the tokenizer at {str(folder)!r} does not fit the model: {len(tokenizer)} tokens {ids}"
                f"but the model embeds {rows}; the tokenizer config may lack its pad token"
            )
    return tokenizer


def load_pretrained(
    path: str | Path,
    *,
    trust_remote_code: bool = False,
    dtype: torch.dtype = torch.float32,
    pad_to_eos: bool = False,
    attn_implementation: str = ATTN_IMPLEMENTATION,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``(model, tokenizer)`` from a local folder written by ``save_pretrained``; never downloads.

    The model is in eval mode with ``attn_implementation`` attention (default :data:`ATTN_IMPLEMENTATION`);
    the tokenizer (:func:`load_tokenizer`, with its checks) pads on the left.
    """
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a "Loading weights" bar per load would clutter CLI output
    folder = Path(path)
    tokenizer = load_tokenizer(folder, trust_remote_code=trust_remote_code, pad_to_eos=pad_to_eos)
    model = AutoModelForCausalLM.from_pretrained(
        folder,
        local_files_only=True,
        trust_remote_code=trust_remote_code,
        dtype=dtype,
        attn_implementation=attn_implementation,
    )
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """``clamp(cumsum(mask) - 1, min=0)``: each real token's index among its row's real tokens, ``[B, L]``.
    Left padding (position 0 in the pad slots) does not shift the real tokens' positions."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def forward_accepts(model: PreTrainedModel, name: str) -> bool:
    """Whether the model's forward takes keyword ``name`` (for a PEFT wrapper: the wrapped model's), to
    pick between keywords that moved across transformers versions (``past_key_values`` → ``cache``)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return name in inspect.signature(type(base).forward).parameters


@overload
def sequence_logprobs(
    model: PreTrainedModel,
    input_ids: Tensor,
    attention_mask: Tensor,
    *,
    response_start: int,
    temperature: float = ...,
    return_hidden: Literal[False] = ...,
    chunk_elements: int | None = ...,
) -> Tensor: ...
@overload
def sequence_logprobs(
    model: PreTrainedModel,
    input_ids: Tensor,
    attention_mask: Tensor,
    *,
    response_start: int,
    temperature: float = ...,
    return_hidden: Literal[True],
    chunk_elements: int | None = ...,
) -> tuple[Tensor, Tensor]: ...
def sequence_logprobs(
    model: PreTrainedModel,
    input_ids: Tensor,
    attention_mask: Tensor,
    *,
    response_start: int,
    temperature: float = 1.0,
    return_hidden: bool = False,
    chunk_elements: int | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    r"""Per-token log-probabilities of the response tokens, one forward pass, fp32.

    .. math::
        \log\pi(y_t \mid x, y_{<t}) = \mathrm{log\_softmax}(z_{P-1+t} / \tau)[y_t], \quad t = 0..T-1

    where ``z_i`` are the logits at sequence position ``i`` and ``P = response_start``. Only the ``T``
    positions ``P-1 .. L-2`` go through the vocabulary projection (``logits_to_keep``), not the prompt.

    Args:
        input_ids: ``[B, L]``, ``cat(prompt_ids, response_ids)`` with prompts left-padded to ``P``.
        attention_mask: ``[B, L]``, 1 on real tokens (0 on left padding; response padding may be 0 or 1,
            it only affects positions that the response mask drops).
        response_start: ``P``, in ``[1, L - 1]``.
        temperature: ``τ > 0``; use the sampling temperature so the ratio is against the sampling policy.
        return_hidden: also return the final (post-norm) hidden states ``[B, T, H]`` at the same positions,
            ``h_{P-1+t}``: the state in which ``y_t`` is chosen, i.e. what a value head reads for ``V(s_t)``.
        chunk_elements: when ``B·T·V`` exceeds it (default 4M numbers, 16 MiB in fp32), the output layer
            and log-softmax run in chunks of ``chunk_elements // V`` tokens with their own backward
            (:func:`advantage.lm.chunked.chunked_logprobs`): equal values and gradients, memory
            ``O(chunk × V)`` instead of ``O(B·T·V)``.

    Returns:
        ``logp`` ``[B, T]`` fp32, or ``(logp, hidden)``. Values at masked response positions are garbage
        (finite); apply :func:`response_mask`.
    """
    if input_ids.shape != attention_mask.shape or input_ids.dim() != 2:
        raise ValueError(
            f"input_ids and attention_mask must both be [B, L], got {tuple(input_ids.shape)} and "
            f"{tuple(attention_mask.shape)}"
        )
    length = input_ids.shape[1]
    if not 1 <= response_start < length:
        raise ValueError(f"response_start must be in [1, {length - 1}] for L={length}, got {response_start}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    keep = torch.arange(response_start - 1, length - 1, device=input_ids.device)  # [T]
    targets = input_ids[:, response_start:]  # [B, T]
    from advantage.lm.chunked import head_logprobs, token_logprobs, use_chunks
    from advantage.lm.lean import lean_decoder, padded_causal_mask

    head = model.get_output_embeddings()  # in chunks past chunk_elements numbers (see the docstring)
    chunked = use_chunks(head, targets.numel(), chunk_elements)
    lean = lean_decoder(model)
    if lean is not None:  # the same function with less framework work per call (advantage.lm.lean)
        dtype = model.get_input_embeddings().weight.dtype
        mask = padded_causal_mask(attention_mask, dtype)
        hidden = lean.hidden(input_ids, position_ids_from_mask(attention_mask), mask)[:, keep]  # [B, T, H]
        if chunked:
            logp = head_logprobs(hidden, head, targets, temperature, chunk_elements)
        else:
            logp = token_logprobs(lean.logits(hidden), targets, temperature)
        return (logp, hidden) if return_hidden else logp
    kwargs: dict[str, Any] = {"use_cache": False, "output_hidden_states": return_hidden or chunked}
    if forward_accepts(model, "logits_to_keep"):
        # chunked: the head runs on one position only; the log-probs come from the hidden states
        kwargs["logits_to_keep"] = 1 if chunked else keep
    elif chunked:
        chunked = False
        kwargs["output_hidden_states"] = return_hidden
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        **kwargs,
    )
    if chunked:
        hidden = out.hidden_states[-1][:, keep]  # hidden_states[-1] is after the final norm
        logp = head_logprobs(hidden, head, targets, temperature, chunk_elements)
        return (logp, hidden) if return_hidden else logp
    logits = out.logits if "logits_to_keep" in kwargs else out.logits[:, keep]  # [B, T, V]
    logp = token_logprobs(logits, targets, temperature)
    if return_hidden:
        return logp, out.hidden_states[-1][:, keep]  # hidden_states[-1] is after the final norm
    return logp


def response_mask(response_ids: Tensor, eos_id: int, valid: Tensor | None = None) -> Tensor:
    """1.0 on response tokens up to and including the first EOS, 0.0 after it, ``[B, T]`` float.

    Computed from the EOS id only, never from the pad id, so it is right when pad == eos (the EOS is
    kept, the pads after it that look like EOS are not). ``valid`` (bool ``[B, T]``, optional) marks
    positions that exist at all; an EOS outside ``valid`` does not count and invalid positions are 0.
    A row without EOS is all ones (within ``valid``): a truncated response, kept whole.
    """
    is_eos = response_ids == eos_id  # [B, T]
    if valid is not None:
        if valid.shape != response_ids.shape:
            raise ValueError(
                f"valid must have the shape of response_ids {tuple(response_ids.shape)}, "
                f"got {tuple(valid.shape)}"
            )
        is_eos = is_eos & valid
    # EOS count strictly before t: 0 up to and including the first EOS, ≥ 1 after it.
    eos_before = is_eos.long().cumsum(-1) - is_eos.long()
    keep = eos_before == 0
    if valid is not None:
        keep = keep & valid
    return keep.float()
