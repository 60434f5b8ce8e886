r"""Evaluating a policy trained from preferences (PPO-RLHF, DPO, SFT on ranked responses): greedy responses
on held-out prompts, scored by a rule or a reward model, and the **win rate against the reference policy**.

The win rate is the AlpacaEval / InstructGPT-style head-to-head comparison (Ouyang et al. 2022 compare
each model's outputs with the 175B SFT model's): for every prompt :math:`x_n`, the greedy response of the
policy :math:`y_n = \arg\max \pi_\theta(\cdot|x_n)` and of the reference :math:`y^\text{ref}_n` are scored
by the same scorer :math:`s`, and

.. math::
    \text{win rate} = \frac{1}{N}\sum_n \Big(\mathbb 1[s(x_n, y_n) > s(x_n, y^\text{ref}_n)]
    + \tfrac12\,\mathbb 1[s(x_n, y_n) = s(x_n, y^\text{ref}_n)]\Big)

— ties count half, so a policy identical to its reference scores exactly 0.5. Greedy decoding makes the
number deterministic (no sampling noise), which is what lets a test compare two runs.

The functions take models and a tokenizer, not a config, so any LM trainer can call them:
:func:`greedy_responses` generates, :func:`win_rate` compares two lists of scores, and
:func:`compare_to_reference` does both for a policy and its reference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from advantage.algos.llm.models import eval_mode
from advantage.algos.llm.policy import prompt_texts

if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from advantage.config import LMRunConfig

__all__ = ["compare_to_reference", "greedy_options", "greedy_responses", "win_rate"]

Scorer = Callable[[str, str], float]  # scorer(prompt, response) -> score, higher is better


def greedy_responses(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    *,
    max_prompt_length: int | None,
    max_response_length: int,
    chat_template: bool = False,
    batch_size: int = 64,
) -> tuple[list[str], list[int]]:
    """The greedy (temperature 0) response of ``model`` to every prompt, decoded without special tokens,
    and its length in tokens (EOS included). ``batch_size`` prompts are generated together."""
    from advantage.lm.generate import SamplingParams, encode_prompts, generate

    params = SamplingParams(temperature=0.0, max_new_tokens=max_response_length)
    device = next(model.parameters()).device
    texts: list[str] = []
    lengths: list[int] = []
    with eval_mode(model):
        for i in range(0, len(prompts), max(1, batch_size)):
            chunk = prompt_texts(tokenizer, prompts[i : i + batch_size], chat_template)
            ids, mask = encode_prompts(tokenizer, chunk, max_length=max_prompt_length)
            gen = generate(
                model,
                ids.to(device),
                mask.to(device),
                params,
                eos_id=tokenizer.eos_token_id,
                pad_id=tokenizer.pad_token_id,
            )
            texts.extend(gen.texts(tokenizer))
            lengths.extend(gen.lengths.tolist())
    return texts, lengths


def greedy_options(cfg: LMRunConfig) -> dict[str, Any]:
    """The options of :func:`greedy_responses` and :func:`compare_to_reference` in a run's config: the
    ``data`` section's lengths and chat template, ``trainer.eval_batch_size``."""
    d = cfg.data
    return {
        "max_prompt_length": d.max_prompt_length,
        "max_response_length": d.max_response_length,
        "chat_template": d.chat_template,
        "batch_size": cfg.trainer.eval_batch_size,
    }


def win_rate(scores: Sequence[float], reference_scores: Sequence[float]) -> dict[str, float]:
    """Head-to-head comparison of paired scores (module docstring): ``win_rate`` with ties counting half,
    and the counts ``wins``, ``ties``, ``losses``. Scores are compared exactly (the hidden score of the
    synthetic task is a fraction, so equal responses tie exactly)."""
    if len(scores) != len(reference_scores):
        raise ValueError(f"{len(scores)} scores but {len(reference_scores)} reference scores")
    if not scores:
        raise ValueError("win_rate needs at least one pair of scores")
    wins = sum(a > b for a, b in zip(scores, reference_scores, strict=True))
    ties = sum(a == b for a, b in zip(scores, reference_scores, strict=True))
    n = len(scores)
    return {"win_rate": (wins + 0.5 * ties) / n, "wins": wins, "ties": ties, "losses": n - wins - ties}


def compare_to_reference(
    model: PreTrainedModel,
    reference: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[Any],
    scorer: Scorer,
    **options: Any,
) -> dict[str, Any]:
    """Greedy responses of ``model`` and ``reference`` to the prompts of ``examples`` (anything with a
    ``.prompt``), both scored by ``scorer(prompt, response)``; ``options`` are :func:`greedy_responses`'
    (``max_prompt_length`` and ``max_response_length`` required).

    Returns ``win_rate`` / ``wins`` / ``ties`` / ``losses`` (:func:`win_rate`), ``score_mean`` and
    ``reference_score_mean``, the mean greedy ``response_length`` of each, and the texts themselves
    (``responses``, ``reference_responses``) for callers that score them again (e.g. with a reward model).
    """
    prompts = [e.prompt for e in examples]
    texts, lengths = greedy_responses(model, tokenizer, prompts, **options)
    ref_texts, ref_lengths = greedy_responses(reference, tokenizer, prompts, **options)
    scores = [float(scorer(p, y)) for p, y in zip(prompts, texts, strict=True)]
    ref_scores = [float(scorer(p, y)) for p, y in zip(prompts, ref_texts, strict=True)]
    return {
        **win_rate(scores, ref_scores),
        "score_mean": sum(scores) / len(scores),
        "reference_score_mean": sum(ref_scores) / len(ref_scores),
        "response_length": sum(lengths) / len(lengths),
        "reference_response_length": sum(ref_lengths) / len(ref_lengths),
        "responses": texts,
        "reference_responses": ref_texts,
    }
