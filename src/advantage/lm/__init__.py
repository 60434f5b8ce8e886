"""Language-model code: the model and tokenizer helpers (:mod:`~advantage.lm.model`), the lean Qwen2/Llama
forward pass with its hand-written backward (:mod:`~advantage.lm.lean`), chunked log-probabilities
(:mod:`~advantage.lm.chunked`), shared-prompt packing (:mod:`~advantage.lm.packing`), the KV-cache sampler
(:mod:`~advantage.lm.generate`) and a locally built model folder (:mod:`~advantage.lm.tiny_folder`).

``transformers`` (the ``llm`` extra) is imported only when a model is built or sampled, not by this import.
The classic-control code never imports this package.
"""

from advantage.lm.generate import (
    Generation,
    SamplingParams,
    concat_generations,
    encode_prompts,
    generate,
    max_prompt_length,
    sample_from_hidden,
    sample_tokens,
    slot_uniforms,
)

__all__ = [
    "Generation",
    "SamplingParams",
    "concat_generations",
    "encode_prompts",
    "generate",
    "max_prompt_length",
    "sample_from_hidden",
    "sample_tokens",
    "slot_uniforms",
]
