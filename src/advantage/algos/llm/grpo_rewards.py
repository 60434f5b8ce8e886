"""GRPO's rewards before the advantages: the shaping of a completion's scalar reward (DAPO's soft overlong
punishment, the length preference among equally rewarded answers, the KL-in-reward term;
:func:`shape_rewards`) and, for process supervision, the per-step rewards of each completion laid out by
token (:func:`step_tensors`) for :func:`~advantage.math.advantages.process_advantages`."""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from advantage.configs.grpo import GRPOConfig
from advantage.errors import NonFiniteError

if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedTokenizerBase

    from advantage.envs.text.core import Example
    from advantage.lm.generate import Generation


def token_char_ends(tokenizer: PreTrainedTokenizerBase, ids: list[int], text: str) -> list[int]:
    """The character offset in ``text`` (the decoded response) where each token's text ends, ``[len(ids)]``.

    Token by token decoding is exact for character-level and most subword tokenizers; where the pieces do
    not add up to ``text`` (a character split across byte-level tokens, clean-up of spaces), each prefix
    is decoded instead (slower, exact)."""
    pieces = tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=True)
    ends, at = [], 0
    for piece in pieces:
        at += len(piece)
        ends.append(at)
    if ends and ends[-1] == len(text) and "".join(pieces) == text:
        return ends
    return [len(tokenizer.decode(ids[: t + 1], skip_special_tokens=True)) for t in range(len(ids))]


def step_tensors(
    task: Any,  # a Task with step_rewards (a process-reward task)
    examples: list[Example],
    texts: list[str],
    gen: Generation,
    tokenizer: PreTrainedTokenizerBase,
    G: int,
    delta: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """Process supervision: ``(step_rewards, step_mask, step_end)`` ``[B, S]`` for
    :func:`~advantage.math.advantages.process_advantages`, from the task's ``step_rewards(completion,
    example)`` (``[(end character offset, reward)]`` per step).

    Each step ends at the token holding its last character; the last step ends at the response's last
    token (EOS included: stopping is part of the answer) and carries ``delta`` ``[B]``, the reward shaping
    of the outcome (overlong punishment, length preference, KL in the reward), so the step rewards of a
    completion add up to its shaped reward minus what its correct-prefix steps add. A step reward that is
    not a finite number stops the run, naming the prompt and completion."""
    lengths = gen.lengths.tolist()
    rows: list[list[tuple[int, float]]] = []
    for i, text in enumerate(texts):
        ex = examples[i // G]
        steps = list(task.step_rewards(text, ex))
        if not steps:
            raise ValueError(f"the task gave no steps for completion {text!r} of prompt {ex.prompt!r}")
        for _, value in steps:
            if value is None or not isinstance(value, int | float) or not math.isfinite(value):
                raise NonFiniteError(
                    f"a step reward of completion {text!r} for prompt {ex.prompt!r} is {value!r}; step "
                    "rewards must be finite numbers"
                )
        n = max(int(lengths[i]), 1)
        ends = token_char_ends(tokenizer, gen.response_ids[i, : int(lengths[i])].tolist(), text)
        out = []
        for c, value in steps[:-1]:
            t = next((j for j, e in enumerate(ends) if e >= c), n - 1)  # the token holding character c-1
            out.append((min(t, n - 1), float(value)))
        out.append((n - 1, float(steps[-1][1]) + float(delta[i])))
        rows.append(out)
    pad = partial(torch.nn.utils.rnn.pad_sequence, batch_first=True)  # [B, S], zeros after each row's steps
    reward = pad([torch.tensor([v for _, v in r]) for r in rows])
    end = pad([torch.tensor([e for e, _ in r]) for r in rows])
    mask = torch.arange(reward.shape[1]) < torch.tensor([len(r) for r in rows])[:, None]
    return reward, mask, end


def shape_rewards(
    rewards: Tensor, gen: Generation, cfg: GRPOConfig, kl_seq: Tensor | None, group: int | None = None
) -> tuple[Tensor, dict[str, float]]:
    """Reward shaping before the advantages: the soft overlong punishment, the length preference (within
    consecutive groups of ``group`` rows, default G) and the KL-in-reward term. All ``[B]``."""
    from advantage.math.rewards import length_preference, overlong_penalty

    w, metrics = cfg.worker.reward, {}
    counts = gen.lengths.to(rewards.device)  # rewards live on the CPU; the generation may be on the GPU
    lengths = counts.to(rewards.dtype)
    if w.overlong_buffer > 0:
        pen = overlong_penalty(counts, cfg.data.max_response_length, w.overlong_buffer)
        rewards = rewards + w.overlong_penalty_factor * pen.to(rewards)
        metrics["overlong_penalty"] = float(pen.mean())
    if w.length_preference > 0:
        rewards = length_preference(rewards, lengths, group or cfg.worker.rollout.n, w.length_preference)
    if kl_seq is not None and cfg.algorithm.kl_reward_coef > 0:
        rewards = rewards - cfg.algorithm.kl_reward_coef * kl_seq.to(rewards)
        metrics["kl_reward"] = float(kl_seq.mean())
    return rewards, metrics
