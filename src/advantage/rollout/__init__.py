"""Rollouts: sampling responses from a language model (the Gymnasium collectors live with their algorithms).

``transformers`` (the ``llm`` extra) is imported only when a model is sampled, not by this import."""

from advantage.rollout.generate import (
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
