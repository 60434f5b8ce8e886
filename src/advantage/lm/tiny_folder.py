"""A Hugging Face model folder like a user's own, built locally with nothing downloaded: a tiny Qwen2
with a byte-level BPE tokenizer trained with ``tokenizers`` on given text, a ChatML chat template, a
``generation_config.json``, and no pad token (as many base models ship). For tests, examples and
benchmarks of the ``model.path`` code path (``examples/grpo_gsm8k.yaml``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedTokenizerFast

__all__ = ["CHATML_TEMPLATE", "build_bpe_tokenizer", "save_tiny_folder"]

# Qwen's ChatML layout: <|im_start|>role\ncontent<|im_end|>\n per message, then the assistant's header.
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_bpe_tokenizer(texts: Iterable[str], vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """A ``PreTrainedTokenizerFast``: byte-level BPE trained on ``texts`` to ``vocab_size`` tokens; special
    tokens ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` (the EOS); the ChatML template; no pad
    token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(texts), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        additional_special_tokens=specials,
        chat_template=CHATML_TEMPLATE,
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
    )


def save_tiny_folder(
    folder: str | Path,
    texts: Iterable[str],
    *,
    vocab_size: int = 400,
    hidden_size: int = 32,
    layers: int = 1,
    heads: int = 2,
    kv_heads: int = 1,
    max_position_embeddings: int = 512,
    seed: int = 0,
) -> Path:
    """Write a tiny random Qwen2 with :func:`build_bpe_tokenizer` (trained on ``texts``) to ``folder`` by
    ``save_pretrained``, with a ``generation_config.json`` (sampling defaults, two EOS ids as Qwen's) and
    no pad token."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no "Writing model shards" bar

    folder = Path(folder)
    tok = build_bpe_tokenizer(texts, vocab_size)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=4 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=eos,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=[eos, config.bos_token_id],
        do_sample=True,
        temperature=0.7,
        top_p=0.8,
    )
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    # Named as null: a config that names no pad token lets transformers' Qwen2 tokenizer invent one.
    config_file = folder / "tokenizer_config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "pad_token": None}, indent=2))
    return folder
