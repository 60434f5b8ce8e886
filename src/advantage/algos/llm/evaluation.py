"""Evaluating a language-model policy: a task with a verifier by greedy accuracy, pass@K and maj@K
(:func:`evaluate`); a task scored by a reward model by the greedy responses' scores, the win rate against
the reference policy and the KL of sampled responses to it (:func:`evaluate_preference`); the examples an
evaluation scores (:func:`eval_examples`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from advantage.algos.llm.data import TaskExamples
from advantage.algos.llm.models import frozen_reference
from advantage.algos.llm.policy import LMPolicy
from advantage.algos.llm.reward_models import load_reward
from advantage.errors import ConfigError

if TYPE_CHECKING:
    from advantage.algos.llm.run_config import SampledRunConfig
    from advantage.config import LMRunConfig


# ----------------------------------------------------------------------------------------------------
# A task with a verifier: greedy accuracy, pass@K, maj@K


def evaluate(
    cfg: LMRunConfig,
    policy: LMPolicy,
    *,
    split: str = "validation",
    samples: int | None = None,
    limit: int | None = None,
    seed: int | None = None,
    temperature: float | None = None,
) -> dict[str, Any]:
    """Score ``policy`` on the first ``limit`` prompts of ``split`` (default ``trainer.eval_episodes`` for
    validation, the whole split otherwise).

    * ``accuracy`` — fraction of greedy completions the verifier marks correct; ``return_mean`` the mean
      verifier reward of those completions (what ``trainer.stop_at_return`` compares);
    * with ``samples = K > 1`` (default ``trainer.eval_samples``): K completions per prompt at
      ``temperature`` (default ``trainer.eval_temperature``); ``pass@1`` and ``pass@K`` by the unbiased
      estimator of Chen et al. (2021) with n = K, and ``maj@K``, majority vote over the extracted answers.
    """
    from advantage.math.pass_at_k import maj_at_k, pass_at_k

    t = cfg.trainer
    examples = eval_examples(cfg, policy, split, limit, samples)
    k = samples or t.eval_samples
    temp = t.eval_temperature if temperature is None else temperature
    bs = max(1, t.eval_batch_size)
    scores, correct, fmt, lengths = [], [], [], []
    for i in range(0, len(examples), bs):
        chunk = examples[i : i + bs]
        gen, texts = policy.complete([e.prompt for e in chunk], temperature=0.0)
        lengths.extend(gen.lengths.tolist())
        for e, text in zip(chunk, texts, strict=True):
            r = policy.task.verify(text, e)
            scores.append(r.score)
            correct.append(r.correct)
            fmt.append(r.format_ok)
    res: dict[str, Any] = {
        "split": split,
        "n": len(examples),
        "accuracy": sum(correct) / len(correct),
        "return_mean": sum(scores) / len(scores),
        "format_rate": sum(fmt) / len(fmt),
        "response_length": sum(lengths) / len(lengths),
    }
    if k > 1:
        g = torch.Generator(device=policy.device).manual_seed(t.seed if seed is None else seed)
        p1, pk, mk = [], [], []
        per = max(1, bs // k)
        for i in range(0, len(examples), per):
            chunk = examples[i : i + per]
            _, texts = policy.complete([e.prompt for e in chunk], temperature=temp, samples=k, generator=g)
            for j, e in enumerate(chunk):
                rs = [policy.task.verify(x, e) for x in texts[j * k : (j + 1) * k]]
                c = sum(r.correct for r in rs)
                p1.append(pass_at_k(k, c, 1))
                pk.append(pass_at_k(k, c, k))
                mk.append(maj_at_k([r.answer for r in rs], [r.correct for r in rs], k))
        res.update({"samples": k, "pass@1": _mean(p1), f"pass@{k}": _mean(pk), f"maj@{k}": _mean(mk)})
    return res


def eval_examples(
    cfg: LMRunConfig,
    policy: TaskExamples,
    split: str,
    limit: int | None,
    samples: int | None,
    greedy: str = "",
) -> list[Any]:
    """The examples an evaluation scores: the first ``limit`` of ``split`` (default
    ``trainer.eval_episodes`` for validation, the whole split otherwise). A ``limit`` or ``samples``
    below 1 is an error; so is ``samples`` above 1 for an evaluation that does not sample, the error
    then starting with ``greedy`` (why not)."""
    if limit is not None and limit < 1:
        raise ConfigError(f"limit must be >= 1, got {limit}")
    if greedy and samples not in (None, 1):
        raise ConfigError(f"{greedy}; --samples must be 1, got {samples}")
    if samples is not None and samples < 1:
        raise ConfigError(f"samples must be >= 1, got {samples}")
    examples = policy.examples(split, limit or (cfg.trainer.eval_episodes if split == "validation" else None))
    if not examples:
        where = getattr(getattr(policy, "task", None), "where", "the data")
        other = "validation" if split == "test" else "test"
        raise ConfigError(
            f"{where}: the {split} split is empty, nothing to evaluate; give data.{split}_path=FILE when "
            f"training, or evaluate --split {other}"
        )
    return examples


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs) if xs else float("nan")


# ----------------------------------------------------------------------------------------------------
# A task scored by a reward model: against the reference


def evaluate_preference(
    cfg: SampledRunConfig,
    policy: LMPolicy,
    *,
    split: str = "validation",
    samples: int | None = None,
    limit: int | None = None,
    seed: int | None = None,
    temperature: float | None = None,
) -> dict[str, Any]:
    """On the first ``limit`` prompts of ``split`` (default ``trainer.eval_episodes`` for validation, the
    whole split otherwise):

    * ``hidden_score`` (synthetic task) and ``rm_score``: mean scores of the policy's greedy responses, and
      ``reference_hidden_score`` / ``reference_rm_score`` of the reference's;
    * ``win_rate``: policy vs reference greedy responses, compared by the hidden score when the task has
      one, else by the reward model (``win_rate_by``); ties count half
      (:func:`advantage.algos.llm.preference_eval.win_rate`);
    * ``kl_ref``: the KL to the reference of responses sampled at ``worker.rollout.temperature`` (mean per
      response of :math:`\\sum_t \\log\\pi - \\log\\pi_\\text{ref}`, an unbiased estimate), seeded;
    * ``return_mean``: ``hidden_score`` when there is one, else ``rm_score``.
    """
    from advantage.algos.llm.preference_eval import greedy_options, greedy_responses, win_rate
    from advantage.lm.model import sequence_logprobs

    greedy = "ppo_rlhf evaluates greedy responses"
    examples = eval_examples(cfg, policy, split, limit, samples, greedy)
    t = cfg.trainer
    prompts = [e.prompt for e in examples]
    ref = getattr(policy, "reference", None)
    ref = ref or frozen_reference(cfg, policy.task, None).to(policy.device)
    rm = getattr(policy, "reward_model", None) or load_reward(cfg, policy.tokenizer)
    policy.reference, policy.reward_model = ref, rm
    texts, lengths = greedy_responses(policy.model, policy.tokenizer, prompts, **greedy_options(cfg))
    ref_texts, _ = greedy_responses(ref, policy.tokenizer, prompts, **greedy_options(cfg))
    bs = cfg.worker.reward.batch_size
    rm_scores = rm.score(prompts, texts, batch_size=bs).tolist()
    ref_rm = rm.score(prompts, ref_texts, batch_size=bs).tolist()
    res: dict[str, Any] = {
        "split": split,
        "n": len(prompts),
        "rm_score": sum(rm_scores) / len(rm_scores),
        "reference_rm_score": sum(ref_rm) / len(ref_rm),
        "response_length": sum(lengths) / len(lengths),
    }
    ours, theirs, by = rm_scores, ref_rm, "reward_model"
    rule = getattr(policy.task, "hidden_score", None)
    if rule is not None:
        ours = [rule(p, y) for p, y in zip(prompts, texts, strict=True)]
        theirs = [rule(p, y) for p, y in zip(prompts, ref_texts, strict=True)]
        res["hidden_score"], res["reference_hidden_score"] = sum(ours) / len(ours), sum(theirs) / len(theirs)
        by = "hidden_score"
    res.update({**win_rate(ours, theirs), "win_rate_by": by})
    # KL of sampled responses (the quantity the penalty controls), with a seeded generator.
    g = torch.Generator(device=policy.device).manual_seed(t.seed if seed is None else seed)
    tau = cfg.worker.rollout.temperature
    kl_sum = 0.0
    for i in range(0, len(prompts), t.eval_batch_size):
        gen, _ = policy.complete(prompts[i : i + t.eval_batch_size], temperature=tau, generator=g)
        ids, attn = gen.sequences()
        P = gen.prompt_ids.shape[1]
        with torch.no_grad():
            lp = sequence_logprobs(policy.model, ids, attn, response_start=P, temperature=tau)
            rp = sequence_logprobs(ref, ids, attn, response_start=P, temperature=tau)
        kl_sum += float(((lp - rp) * gen.response_mask).sum())
    res["kl_ref"] = kl_sum / len(prompts)
    res["return_mean"] = res.get("hidden_score", res["rm_score"])
    return res
