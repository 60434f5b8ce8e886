r"""What the reinforcement-learning trainers of language models share: :mod:`~advantage.algos.llm.grpo`,
:mod:`~advantage.algos.llm.ppo_rlhf` and GRPO's Ray workers (:mod:`~advantage.algos.llm.workers`).

* **Tasks and rewards**: the task a run's prompts come from (a task with a verifier, or a preference task
  whose completions a reward model scores) and the scoring of sampled completions (:func:`score`).
* **The reward model**: its folder, the check that it reads the policy's tokenizer, loading it frozen.
* **Batching**: one optimizer step's normaliser and the rows of a micro-batch without their padding.
* **Evaluation against the reference** (:func:`evaluate_preference`) for a task scored by a reward model.

Nothing here imports a trainer, so the trainers and the workers import this module and not each other.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from advantage.algos.llm import common
from advantage.algos.llm.common import LMPolicy, preference_task
from advantage.configs.grpo import PREFERENCE_TASKS  # tasks scored by a reward model (one definition)
from advantage.errors import ConfigError, NonFiniteError

if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedTokenizerBase

    from advantage.envs.text.core import Task
    from advantage.lm.generate import Generation

# ----------------------------------------------------------------------------------------------------
# Tasks and rewards


def scored_task(d: Any) -> Any:
    """A text task with a verifier (:func:`advantage.algos.llm.common.make_task`), or ``synthetic``: the
    prompts of the synthetic preference task, scored by ``worker.reward.model``."""
    if d.task in PREFERENCE_TASKS:
        return preference_task(d)
    return common.make_task(d)


def score(policy: LMPolicy, examples: list[Any], texts: list[str], G: int) -> tuple[Tensor, Tensor]:
    """Verifier rewards ``[B]`` and correctness for completions grouped G per example. A reward that is
    not a finite number stops the run, naming the prompt and completion. A task that verifies by running
    code (``code``: one sandboxed process per completion) scores the batch in parallel, one sandbox per
    CPU core, through its ``verify_many``."""
    rewards, correct = [], []
    per_text = [examples[i // G] for i in range(len(texts))]
    rm = getattr(policy, "reward_model", None)
    if rm is not None:  # rewards from the reward model; correctness from the verifier, if the task has one
        scores = rm.score([e.prompt for e in per_text], texts, batch_size=policy.cfg.worker.reward.batch_size)
        for text, ex, value in zip(texts, per_text, scores.tolist(), strict=True):
            if not math.isfinite(value):
                raise NonFiniteError(
                    f"the reward model's score of completion {text!r} for prompt {ex.prompt!r} is {value}"
                )
        verify = getattr(policy.task, "verify", None)
        ok = [bool(verify(x, e).correct) if verify else False for x, e in zip(texts, per_text, strict=True)]
        return scores.float().cpu(), torch.tensor(ok)
    if hasattr(policy.task, "verify_many"):
        results = policy.task.verify_many(texts, per_text, max_workers=os.cpu_count() or 1)
    else:
        results = [policy.task.verify(text, ex) for text, ex in zip(texts, per_text, strict=True)]
    for text, ex, r in zip(texts, per_text, results, strict=True):
        value = r.score
        if value is None or not isinstance(value, int | float) or not math.isfinite(value):
            raise NonFiniteError(
                f"the reward of completion {text!r} for prompt {ex.prompt!r} is {value!r}; rewards must be "
                "finite numbers"
            )
        rewards.append(float(value))
        correct.append(bool(r.correct))
    return torch.tensor(rewards), torch.tensor(correct)


# ----------------------------------------------------------------------------------------------------
# The reward model


def reward_folder(cfg: Any) -> Path:
    """The checkpoint folder of ``worker.reward.model``; missing, absent or not a reward model: an error."""
    path = cfg.worker.reward.model
    if not path:
        raise ConfigError(
            "worker.reward.model is required: a reward_model run folder or checkpoint "
            "(train one with `advantage train reward_model data.task=synthetic`)"
        )
    if not Path(path).exists():
        raise ConfigError(f"worker.reward.model={path!r} does not exist")
    from advantage.algos.llm.reward_model import HEAD_FILE

    folder = common.model_folder(path)
    if not (folder / HEAD_FILE).is_file():
        raise ConfigError(
            f"worker.reward.model={path!r} is not a reward model: {str(folder)!r} has no {HEAD_FILE} "
            "(a policy or SFT run?)"
        )
    return folder


def check_tokenizers(
    policy_tok: PreTrainedTokenizerBase, reward_tok: PreTrainedTokenizerBase, policy_src: str, reward_src: str
) -> None:
    """The reward model must read responses with the policy's tokenizer: same vocabulary and special ids."""
    va, vb = policy_tok.get_vocab(), reward_tok.get_vocab()
    specials = ("pad_token_id", "eos_token_id")
    if va == vb and all(getattr(policy_tok, s) == getattr(reward_tok, s) for s in specials):
        return
    differ = sorted(set(va.items()) ^ set(vb.items()))[:3]
    raise ConfigError(
        f"the reward model {reward_src!r} uses a different tokenizer from the policy {policy_src!r} "
        f"({len(vb)} vs {len(va)} tokens; e.g. {differ}): train the reward model from the same base model "
        "or task alphabet as the policy"
    )


def policy_tokenizer(cfg: Any, task: Task) -> tuple[PreTrainedTokenizerBase, str]:
    """The tokenizer the policy will have, without loading the model: ``(tokenizer, where it is from)``."""
    from advantage.lm.model import build_char_tokenizer, load_tokenizer

    m = cfg.model
    if m.pretrained:
        folder = common.model_folder(m.path)
        return load_tokenizer(folder, trust_remote_code=m.trust_remote_code, pad_to_eos=m.pad_to_eos), m.path
    return build_char_tokenizer(task.alphabet, extra_tokens=task.special_tokens), "scratch model"


def reward_model_problems(cfg: Any, make_task: Callable[[Any], Any]) -> list[str]:
    """The problems with ``worker.reward.model`` found before any compute: not set, missing, not a reward
    model, or not on the tokenizer the policy of ``make_task(cfg.data)`` will have (an empty list: none)."""
    path = cfg.worker.reward.model
    try:
        folder = reward_folder(cfg)
        from advantage.lm.model import load_tokenizer

        policy_tok, src = policy_tokenizer(cfg, make_task(cfg.data))
        check_tokenizers(policy_tok, load_tokenizer(folder), src, str(path))
    except ConfigError as e:
        return list(e.problems)
    return []


def load_reward(cfg: Any, policy_tok: PreTrainedTokenizerBase) -> Any:
    """The reward model of ``worker.reward.model``, checked against the policy's tokenizer, frozen."""
    from advantage.algos.llm.reward_model import load_reward_model

    folder = reward_folder(cfg)
    src = cfg.model.path or "scratch model"
    rm = load_reward_model(folder, device=cfg.trainer.device)
    check_tokenizers(policy_tok, rm.tokenizer, src, cfg.worker.reward.model)
    return rm.requires_grad_(False)


# ----------------------------------------------------------------------------------------------------
# Batching


def step_normalizer(mask: Tensor, mode: str) -> float:
    """The denominator of one optimizer step for ``mode``: valid tokens, sequences with a valid token,
    or all sequences (see :func:`advantage.math.aggregate`)."""
    if mode == "token_mean":
        return float(mask.sum())
    if mode == "seq_mean_token_mean":
        return float((mask.sum(-1) > 0).sum())
    return float(mask.shape[0])


def trimmed(gen: Generation, rows: Tensor) -> tuple[Tensor, Tensor, int, int]:
    """``(input_ids, attention_mask, P_r, T_r)`` of ``rows`` without the columns that are padding in
    every one of them: prompts cut to their longest (``P_r``), responses to their longest (``T_r``, EOS
    included). Log-probs are unchanged (positions come from the mask; padding is masked out)."""
    P = gen.prompt_ids.shape[1]
    p_len = max(int(gen.prompt_mask[rows].sum(-1).max()), 1)
    t_len = max(int(gen.lengths[rows].max()), 1)
    ids = torch.cat([gen.prompt_ids[rows, P - p_len :], gen.response_ids[rows, :t_len]], dim=1)
    attn = torch.cat(
        [gen.prompt_mask[rows, P - p_len :].to(gen.response_mask.dtype), gen.response_mask[rows, :t_len]],
        dim=1,
    )
    return ids, attn, p_len, t_len


# ----------------------------------------------------------------------------------------------------
# Evaluation against the reference


def evaluate_preference(
    cfg: Any,
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
    examples = common.eval_examples(cfg, policy, split, limit, samples, greedy)
    t = cfg.trainer
    prompts = [e.prompt for e in examples]
    ref = getattr(policy, "reference", None)
    ref = ref or common.frozen_reference(cfg, policy.task, None).to(policy.device)
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
