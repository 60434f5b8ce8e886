r"""Group Relative Policy Optimization (GRPO) and its family: DAPO, GSPO, Dr.GRPO, Lite PPO.

Shao et al. 2024 (DeepSeekMath §4.1: objective, outcome vs process supervision; the study notes on GRPO:
GRPO replaces the critic's baseline by the mean reward of G samples of the same prompt). For each prompt
:math:`q`, sample G responses :math:`o_1..o_G` from :math:`\pi_\text{old}`, score them, and maximise

.. math::
    \frac{1}{G}\sum_{i=1}^{G}\frac{1}{|o_i|}\sum_{t}\Big[\min\big(\rho_{i,t}\hat A_{i,t},
    \operatorname{clip}(\rho_{i,t}, 1-\epsilon_\text{lo}, 1+\epsilon_\text{hi})\hat A_{i,t}\big)
    - \beta\,\mathbb D_\text{KL}[\pi_\theta\|\pi_\text{ref}]_{i,t}\Big],
    \qquad \hat A_{i,t} = \frac{r_i - \operatorname{mean}(r)}{\operatorname{std}(r) + \varepsilon}

The pieces are the shared math core: ``GROUP_ADVANTAGES`` (``grpo``, ``dr_grpo``, ``rloo``,
``batch_std``), ``POLICY_LOSSES`` (``ppo_clip`` — the same function CartPole's PPO uses — or ``gspo``),
``KL_ESTIMATORS`` (k1, k2, k3) and ``aggregate`` (``token_mean``, ``seq_mean_token_mean``,
``seq_mean_token_sum_norm``). The presets are combinations of them:

==========  ==============  ==========  =======================  ======================================
preset      advantage       loss        aggregation              other
==========  ==============  ==========  =======================  ======================================
grpo        grpo            ppo_clip    seq_mean_token_mean      β = 0.04, k3 in the loss (the paper)
dapo        grpo            ppo_clip    token_mean               clip-higher 0.2/0.28, β = 0, dynamic
                                                                 sampling, overlong filter + soft
                                                                 penalty
gspo        grpo            gspo        seq_mean_token_mean      sequence-level ratio and clipping
dr_grpo     dr_grpo         ppo_clip    seq_mean_token_sum_norm  no std, sums / max length
lite_ppo    batch_std       ppo_clip    token_mean               group mean, batch std (Liu et al.
                                                                 2025)
==========  ==============  ==========  =======================  ======================================

Implementation details:

1. Batch units: ``data.rollout_batch_size`` counts **prompts**; each gives ``worker.rollout.n`` = G
   completions, so a rollout has rollout_batch_size × G rows. ``worker.actor.mini_batch_size`` counts
   prompts per optimizer step (0: the whole rollout; with adaptive difficulty, where prompts have
   different row counts, that many prompts' worth of rows on average),
   ``worker.actor.micro_batch_size`` completions per forward pass; the loss of each optimizer step is
   normalised by its global count (tokens or sequences), so gradient accumulation equals one big batch.
2. Log-probs are those of the sampling distribution, logits / ``worker.rollout.temperature`` (as TRL
   does), for the policy, π_old and the reference alike.
   :math:`\pi_\text{old}` log-probs: with one epoch over one mini-batch the data is exactly on-policy
   (ρ = 1 in value), so ``old_logp = sg(logp)`` of the same forward pass, as TRL and verl do; otherwise
   they are recomputed once after generation (not taken from the sampler, whose numerics may differ).
3. The reference model is the starting policy, frozen; it is skipped entirely when no KL term uses it
   (β = 0 and no KL in the reward). With LoRA it is the base model with the adapters switched off.
4. KL: in the loss (``worker.actor.kl_coef`` β with ``kl_estimator``; k3 by default: an unbiased,
   non-negative value whose expected gradient is that of the *forward* KL(π_ref‖π), a sound
   regulariser but not ∇KL(π‖π_ref), see :mod:`advantage.math.kl`) or in the reward
   (``algorithm.kl_reward_coef``: :math:`r_i \leftarrow r_i - \beta_r\sum_t k_{1,t}`, before the group
   normalisation).
5. DAPO: dynamic sampling drops groups whose rewards are all equal (no gradient signal) and samples more
   prompts until the batch is full, at most ``algorithm.max_sampling_rounds`` rounds, each later round
   over-sampled by the step's keep rate so far (the surplus is trimmed); overlong
   filtering masks truncated responses out of the loss; the soft overlong punishment (eq. 13 of the DAPO
   paper) is added to the reward (``worker.reward.overlong_buffer``).
6. Curriculum (hard-example mining, from the study notes on GRPO): every prompt's pass rate is tracked;
   ``algorithm.curriculum=hard`` samples the next prompts with weight
   :math:`1 - \text{pass rate} + \text{floor}` (unseen prompts count as hard), and
   ``worker.reward.length_preference`` favours shorter answers among equally rewarded ones.
   ``algorithm.adaptive_difficulty`` (study notes: a problem's difficulty is the mean reward of its sampled
   episodes, the thresholds move as the model trains; few samples of easy problems, more of hard ones):
   a prompt's difficulty :math:`d` is the mean shaped reward of its G samples in the step; the
   thresholds are EMAs (rate ``difficulty_rate``) of the ``hard_quantile`` / ``easy_quantile``
   quantiles of the step's :math:`d` (after dynamic sampling's filter), updated before the split
   (:func:`difficulty_thresholds`). An easy prompt (:math:`d \ge \tau_\text{easy}`) puts
   ``easy_samples`` random ones of its G rows in the loss, advantages from all G; a hard one
   (:math:`d \le \tau_\text{hard}`) is sampled ``hard_samples - G`` more times and its advantages (and
   length preference, process advantages) are computed over all ``hard_samples``, a group of its own
   (for ``batch_std`` the hard prompts' rows are a batch of their own, as each dynamic-sampling round
   is). The step normaliser counts the rows in the loss; the thresholds are in the checkpoint.
7. Metrics: reward mean/std, accuracy, clip fractions (low / high), approx KL to π_old and to the
   reference, entropy (Monte Carlo: mean −log π of the sampled tokens), response length and truncated
   fraction, zero-std group fraction, tokens/s, and seconds per phase (generate / score / learn).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from advantage import distributed, optim
from advantage.algos.llm import common
from advantage.algos.llm import distributed as lm_distributed
from advantage.algos.llm.common import LMPolicy
from advantage.algos.llm.shared import (  # noqa: F401  (step_normalizer, trimmed: part of the API here)
    evaluate_preference,
    load_reward,
    reward_model_problems,
    score,
    scored_task,
    step_normalizer,
    trimmed,
)
from advantage.checkpoint import Checkpoint
from advantage.configs.grpo import (  # noqa: F401  (PRESETS: re-exported)
    PREFERENCE_TASKS,
    PRESETS,
    ActorConfig,
    GRPOAlgorithm,
    GRPOConfig,
)
from advantage.context import RunContext, Snapshot
from advantage.errors import ConfigError, NonFiniteError
from advantage.math import KL_ESTIMATORS, POLICY_LOSSES, aggregate, masked_mean
from advantage.schedules import schedule_total
from advantage.torch_state import LearnerState

if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from advantage.envs.text.core import Example
    from advantage.lm.generate import Generation

# ----------------------------------------------------------------------------------------------------
# Rollout: generate, score, shape rewards, advantages


@dataclass
class Rollout:
    """One rollout batch: rows ``[p0 × G, p1 × G, ...]``, prompt by prompt (with adaptive difficulty an
    easy prompt has ``easy_samples`` rows and a hard one ``hard_samples``)."""

    gen: Generation
    prompt_idx: list[int]  # [P] training-set index of each prompt
    slots: list[int]  # [P] each prompt's place in the stream of drawn prompts (its sampling draws' seed)
    rewards: Tensor  # [B] scalar reward of each completion (shaped)
    correct: Tensor  # [B] bool
    advantages: Tensor  # [B] (outcome supervision) or [B, T] (process)
    texts: list[str] = field(default_factory=list)  # [B] decoded completions
    raw_rewards: Tensor | None = None  # [B] rewards before shaping


# A task with a verifier, or a preference task (no verifier) scored by worker.reward.model.
make_task = scored_task


def check(cfg: GRPOConfig) -> list[str]:
    """:func:`advantage.algos.llm.common.check`, plus the reward model when one is set (it exists, is a
    reward model and shares the policy's tokenizer) or required (a task without a verifier)."""
    problems = common.check(cfg, make_task)
    if cfg.algorithm.supervision == "process" and not cfg.worker.reward.model:
        try:
            task = make_task(cfg.data)
        except ConfigError:
            task = None  # common.check has reported it
        if task is not None and not hasattr(task, "step_rewards"):
            problems.append(
                f"algorithm.supervision=process: data.task={cfg.data.task} gives no step rewards (it has "
                "no step_rewards method); use supervision=outcome or a task with steps (addition, "
                "multiplication, reverse, sort)"
            )
    a = cfg.algorithm
    if a.dynamic_sampling and a.dynamic_sampling_on == "correctness" and cfg.data.task in PREFERENCE_TASKS:
        problems.append(
            f"algorithm.dynamic_sampling_on=correctness: data.task={cfg.data.task} has no verifier, so no "
            "answer is ever correct and every group would be dropped; allowed here: reward (drop the groups "
            "whose rewards are all equal)"
        )
    if cfg.trainer.num_workers > 0 and cfg.model.lora.rank > 0:
        problems.append(
            "trainer.num_workers > 0 with LoRA (worker.actor.model.lora.rank > 0) is not supported"
        )
    if not cfg.worker.reward.model:
        if cfg.data.task in PREFERENCE_TASKS:
            problems.append(
                f"data.task={cfg.data.task} has no verifier: set worker.reward.model to a reward_model run"
            )
        return problems
    return problems + reward_model_problems(cfg, make_task)


# :func:`advantage.algos.llm.common.load_policy` with this trainer's tasks.
load_policy = partial(common.load_policy, task_factory=make_task)


def evaluate(cfg: GRPOConfig, policy: LMPolicy, **options: Any) -> dict[str, Any]:
    """Verifier tasks: :func:`advantage.algos.llm.common.evaluate` (accuracy, pass@K, maj@K). A task scored
    by a reward model: :func:`advantage.algos.llm.shared.evaluate_preference` (greedy reward-model and hidden
    scores, win rate against the starting policy)."""
    if hasattr(policy.task, "verify"):
        return common.evaluate(cfg, policy, **options)
    return evaluate_preference(cfg, policy, **options)


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


# Process supervision divides the centred step rewards as the outcome estimator of the same name does.
PROCESS_SCALE = {"grpo": "group_std", "dr_grpo": "none", "batch_std": "batch_std"}


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


# ----------------------------------------------------------------------------------------------------
# Hard-example mining


def hard_example_weights(passes: Tensor, tries: Tensor, floor: float) -> Tensor:
    r"""``algorithm.curriculum=hard``'s sampling weight of every training prompt, ``[N]``:

    .. math::
        w_i = 1 - \frac{\text{passes}_i}{\text{tries}_i} + \text{floor}

    ``passes`` counts the correct samples of a prompt so far and ``tries`` all its samples; a prompt not
    tried yet has pass rate 0 (it counts as hard). ``floor`` keeps solved prompts in the draw."""
    rate = torch.where(tries > 0, passes / tries.clamp(min=1), torch.zeros_like(tries))
    return 1.0 - rate + floor


def sample_hard_prompts(
    passes: Tensor, tries: Tensor, n: int, floor: float, generator: torch.Generator
) -> list[int]:
    r"""``n`` distinct prompts by :func:`hard_example_weights`: drawn one after another, each with
    probability proportional to its weight among the prompts not drawn yet (``torch.multinomial`` without
    replacement; for n = 1, exactly :math:`w_i / \sum_j w_j`). With ``floor = 0`` a prompt solved every
    time has weight 0; it is drawn only when fewer than n others remain, uniformly among such prompts."""
    weights = hard_example_weights(passes, tries, floor)
    positive = int((weights > 0).sum())
    if positive >= n:
        return torch.multinomial(weights, n, replacement=False, generator=generator).tolist()
    first = torch.multinomial(weights, positive, replacement=False, generator=generator) if positive else None
    solved = (weights <= 0).nonzero().squeeze(-1)
    rest = solved[torch.randperm(len(solved), generator=generator)[: n - positive]]
    return (rest if first is None else torch.cat([first, rest])).tolist()


# ----------------------------------------------------------------------------------------------------
# Adaptive difficulty


def difficulty_thresholds(prev: Tensor, difficulty: Tensor, a: GRPOAlgorithm) -> Tensor:
    r"""Adaptive difficulty's thresholds ``(τ_hard, τ_easy)`` ``[2]`` (float64) after a step whose P prompts
    had difficulties ``difficulty`` ``[P]`` (each the mean shaped reward of the prompt's G samples):

    .. math::
        q_t = \big(Q_{q_h}(d_t),\ Q_{q_e}(d_t)\big), \qquad
        \tau_t = q_t \ \text{(first step: prev is NaN)}, \qquad
        \tau_t = (1-\alpha)\,\tau_{t-1} + \alpha\, q_t \ \text{(after)}

    with :math:`Q_q` the q-quantile (``torch.quantile``, linear interpolation), :math:`q_h, q_e`
    ``algorithm.hard_quantile`` < ``easy_quantile`` and α ``algorithm.difficulty_rate``. The EMA lets the
    thresholds follow the model as it improves without jumping with the few prompts of one step."""
    q = torch.tensor([a.hard_quantile, a.easy_quantile], dtype=torch.float64)
    now = torch.quantile(difficulty.to(torch.float64), q)
    if bool(prev.isnan().any()):
        return now
    return (1 - a.difficulty_rate) * prev + a.difficulty_rate * now


def split_by_difficulty(difficulty: Tensor, thresholds: Tensor) -> tuple[Tensor, Tensor]:
    r"""``(easy, hard)`` ``[P]`` bool: easy :math:`d \ge \tau_\text{easy}`, hard
    :math:`d \le \tau_\text{hard}`, the rest medium. ``thresholds`` is ``(τ_hard, τ_easy)``; τ_hard ≤
    τ_easy always (both are EMAs of ordered quantiles), and when they are equal (the step's prompts barely
    differ) a prompt on them is neither: it cannot be told easy or hard."""
    d = difficulty.to(torch.float64)
    lo, hi = thresholds[0], thresholds[1]
    return (d >= hi) & (d > lo), (d <= lo) & (d < hi)


def grouped_order(n: int, first: int, second: int) -> Tensor:
    """``[n · (first + second)]`` row order that puts the rows of group p together: rows
    ``p·first .. (p+1)·first - 1`` of a first block of ``n × first`` rows, then rows
    ``n·first + p·second ..`` of a second block of ``n × second`` rows after it."""
    a = torch.arange(n * first).view(n, first)
    b = n * first + torch.arange(n * second).view(n, second)
    return torch.cat([a, b], dim=1).reshape(-1)


# ----------------------------------------------------------------------------------------------------
# The loss


def policy_loss_fn(actor: ActorConfig) -> Any:
    """The per-token policy loss with its hyperparameters bound (one signature for every loss)."""
    if actor.loss == "gspo":
        return partial(
            POLICY_LOSSES["gspo"],
            clip_low=actor.clip_low,
            clip_high=actor.clip_high if actor.clip_high is not None else actor.clip_low,
        )
    return partial(
        POLICY_LOSSES["ppo_clip"],
        clip_low=actor.clip_low,
        clip_high=actor.clip_high,
        dual_clip=actor.dual_clip,
    )


def grpo_loss(
    logp: Tensor,
    old_logp: Tensor | None,
    ref_logp: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    actor: ActorConfig,
    normalizer: float,
    max_len: int,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The GRPO-family loss of one micro-batch, divided by the optimizer step's global ``normalizer``.

    Args:
        logp: ``[B, T]`` current log-probs (with grad). old_logp, ref_logp: ``[B, T]`` or None
            (None old: on-policy, ``sg(logp)``; None ref: no KL term).
        advantages: ``[B]`` per completion (outcome supervision) or ``[B, T]`` per token (process).
        mask: ``[B, T]`` response mask (times the overlong filter).
    """
    adv = advantages[:, None].expand_as(logp) if advantages.dim() == 1 else advantages
    old = logp.detach() if old_logp is None else old_logp
    per_token, metrics = policy_loss_fn(actor)(logp, old, adv, mask)
    if ref_logp is not None and actor.kl_coef > 0:
        kl = KL_ESTIMATORS[actor.kl_estimator](logp, ref_logp)
        per_token = per_token + actor.kl_coef * kl
        metrics["kl_ref"] = masked_mean(kl.detach(), mask)
    loss = aggregate(per_token, mask, actor.loss_agg, normalizer=normalizer, max_len=max_len)
    return loss, metrics


def micro_batches(rows: Tensor, lengths: Tensor, micro: int, auto: bool) -> list[Tensor]:
    """The rows of one optimizer step in micro-batches. With ``auto`` (``micro_batch_size=0``) and at least
    8 rows, the rows are sorted by response length and cut in two halves, each then padded only to its
    own longest response (:func:`trimmed`): most of a GRPO batch is padding after short answers, and the
    step's global normaliser keeps the gradient that of one batch."""
    if auto and len(rows) >= 8:
        order = rows[torch.argsort(lengths[rows], descending=True, stable=True)]
        half = (len(order) + 1) // 2
        return [order[:half], order[half:]]
    return [rows[j : j + micro] for j in range(0, len(rows), micro)]


# ----------------------------------------------------------------------------------------------------
# Training


def rows_logprobs(model: PreTrainedModel, gen: Generation, rows: Tensor, temperature: float) -> Tensor:
    """``[len(rows), T_r]`` log-probs of the responses of ``rows`` (``T_r``: their longest, EOS included),
    the rows of one prompt packed with their shared prompt computed once
    (:func:`~advantage.lm.packing.generation_logprobs`; zeros after each response's end)."""
    from advantage.lm.packing import generation_logprobs

    prompts, responses = (gen.prompt_ids[rows], gen.prompt_mask[rows]), gen.response_ids[rows]
    return generation_logprobs(model, *prompts, responses, gen.lengths[rows], temperature)


def _logprobs(
    model: PreTrainedModel, gen: Generation, rows: Tensor, micro: int, temperature: float
) -> Tensor:
    """``[len(rows), T]`` log-probs without grad, ``micro`` rows per forward pass."""
    T = gen.response_ids.shape[1]
    out = []
    with torch.no_grad():
        for j in range(0, len(rows), micro):
            lp = rows_logprobs(model, gen, rows[j : j + micro], temperature)
            out.append(torch.nn.functional.pad(lp, (0, T - lp.shape[1])))
    return torch.cat(out)


def reference_logprobs(
    cfg: GRPOConfig, model: PreTrainedModel, ref_model: PreTrainedModel | None, gen: Generation, rows: Tensor
) -> Tensor:
    """``[len(rows), T]`` log-probs of the reference without grad, ``worker.ref.micro_batch_size`` rows per
    forward pass: the frozen copy of the starting policy, or with LoRA the base model (adapters off)."""
    micro = cfg.worker.ref.micro_batch_size or len(rows)
    temperature = cfg.worker.rollout.temperature
    if ref_model is not None:
        return _logprobs(ref_model, gen, rows, micro, temperature)
    with model.disable_adapter():  # LoRA: the base model is the reference
        return _logprobs(model, gen, rows, micro, temperature)


class GRPORollout:
    """The sampling side of GRPO and its state in the checkpoint: the prompt cursor (``epoch``, ``pos``),
    the curriculum's pass counts (``passes``, ``tries``), adaptive difficulty's thresholds
    (``difficulty_thresholds``), and the generator of prompt and row picks (``pick_rng``; sampling draws
    come from each prompt's slot in the stream, so the cursor fixes them). :meth:`collect` fills one
    batch: generate, score, shape rewards, advantages, with dynamic sampling's refill rounds and adaptive
    difficulty's split; with ``trainer.num_workers > 0`` Ray workers generate and score
    (:class:`~advantage.algos.llm.workers.RemoteGenerator`).

    ``ref_logprobs(gen, rows)`` gives the reference's log-probs (the KL-in-reward term)."""

    def __init__(
        self,
        cfg: GRPOConfig,
        policy: LMPolicy,
        examples: list[Any],
        ref_logprobs: Callable[[Any, Tensor], Tensor],
        restored: Checkpoint | None,
    ):
        a, t, roll = cfg.algorithm, cfg.trainer, cfg.worker.rollout
        self.cfg, self.a, self.policy, self.examples = cfg, a, policy, examples
        self.ref_logprobs = ref_logprobs
        self.G, self.process = roll.n, a.supervision == "process"
        self.easy_k, self.hard_n = cfg.difficulty_samples()
        self.sampling = roll.sampling()
        self.pick_rng = torch.Generator().manual_seed(t.seed + 1)
        self.passes = torch.zeros(len(examples))  # curriculum: correct samples per prompt
        self.tries = torch.zeros(len(examples))
        # adaptive difficulty: (τ_hard, τ_easy), NaN until the first step sets them
        self.thresholds = torch.full((2,), math.nan, dtype=torch.float64)
        epoch, pos = 0, 0
        if restored is not None:
            tensors = restored.tensors
            self.pick_rng.set_state(tensors["pick_rng"])
            self.passes, self.tries = tensors["passes"].clone(), tensors["tries"].clone()
            if "difficulty_thresholds" in tensors:
                self.thresholds = tensors["difficulty_thresholds"].clone()
            epoch, pos = restored.state["algo"]["epoch"], restored.state["algo"]["pos"]
        self.cursor = common.DataCursor(len(examples), t.seed, epoch, pos)
        # Prompts drawn so far: the next one's slot (the seed of its sampling draws). The cursor's place
        # when a checkpoint predates the count (equal to it unless the curriculum picks the prompts).
        self.drawn = epoch * len(examples) + pos
        if restored is not None:
            self.drawn = restored.state["algo"].get("drawn", self.drawn)
        self.world = distributed.current()
        # Dynamic sampling on several ranks: its refill rounds read every group's verdict, so each rank
        # samples every round whole (the same samples: slot-seeded draws) and then trains on its share.
        self.whole = self.world.group and a.dynamic_sampling
        self.remote: Any = None  # trainer.num_workers > 0: generation and scoring in Ray workers
        self.weights_ref: Any = None
        if t.num_workers > 0:
            from advantage.algos.llm.workers import RemoteGenerator

            self.remote = RemoteGenerator(cfg, policy.model, policy.tokenizer.pad_token_id)

    # ---- checkpoint state -----------------------------------------------------------------------------

    def tensors(self) -> dict[str, Tensor]:
        tensors = {
            "pick_rng": self.pick_rng.get_state(),
            "passes": self.passes,
            "tries": self.tries,
        }
        if self.a.adaptive_difficulty:  # only then: checkpoints of runs without it stay as they were
            tensors["difficulty_thresholds"] = self.thresholds
        return tensors

    def state(self) -> dict[str, int]:
        return {**self.cursor.state(), "drawn": self.drawn}

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()

    # ---- sampling --------------------------------------------------------------------------------------

    def next_prompts(self, n: int) -> list[int]:
        self.drawn += n  # the slots of these prompts follow the ones drawn before
        if self.a.curriculum == "hard":  # hard-example mining: weight 1 - pass rate (+ floor)
            return sample_hard_prompts(self.passes, self.tries, n, self.a.curriculum_floor, self.pick_rng)
        return self.cursor.next(n)

    def count_passes(self, idx: list[int], correct: Tensor, n: int) -> None:
        """Add to the curriculum's pass counts: ``n`` samples of each prompt in ``idx``, their verdicts
        ``correct`` ``[len(idx)·n]`` prompt by prompt."""
        for j, i in enumerate(idx):
            self.passes[i] += float(correct[j * n : (j + 1) * n].sum())
            self.tries[i] += n

    def sample(
        self, idx: list[int], n: int, slots: list[int]
    ) -> tuple[Any, list[str], Tensor, Tensor, float]:
        """``n`` completions of each training prompt in ``idx``, prompt by prompt: ``(Generation, texts,
        rewards [len(idx)·n] (unshaped), correct [len(idx)·n], t1)``, ``t1`` the ``perf_counter`` time
        when generation ended (scoring is timed from it). ``slots`` are the prompts' places in the stream
        of drawn prompts: each prompt's samples are drawn from its slot's seed, so they are the same in one
        process, on any number of ranks and on Ray workers."""
        if self.remote is not None:  # workers generate and score (time/generate covers both)
            gen, texts, rewards, correct = self.remote.generate(
                self.weights_ref, idx, slots, n, self.sampling
            )
            return gen.to(self.policy.device), texts, rewards, correct, time.perf_counter()
        exs = [self.examples[i] for i in idx]
        gen, texts = self.policy.complete([e.prompt for e in exs], samples=n, slots=slots, **self.sampling)
        t1 = time.perf_counter()
        rewards, correct = score(self.policy, exs, texts, n)
        return gen, texts, rewards, correct, t1

    def group_advantages(
        self, gen: Generation, idx: list[int], texts: list[str], raw: Tensor, n: int
    ) -> tuple[Tensor, Tensor, dict[str, float]]:
        """Shaped rewards ``[b]`` and advantages (``[b]``, or ``[b, T]`` with process supervision) of rows
        in consecutive groups of ``n`` samples of the prompts ``idx``, and the shaping metrics."""
        from advantage.math.advantages import GROUP_ADVANTAGES, process_advantages

        a, cfg = self.a, self.cfg
        kl_seq = None
        if a.kl_reward_coef > 0:
            rows = torch.arange(len(texts))
            micro = cfg.worker.actor.micro_batch_size or len(rows)
            lp = _logprobs(self.policy.model, gen, rows, micro, cfg.worker.rollout.temperature)
            kl_seq = ((lp - self.ref_logprobs(gen, rows)) * gen.response_mask).sum(-1)
        rewards, shaped = shape_rewards(raw, gen, cfg, kl_seq, n)
        metrics = {f"reward/{k}": v for k, v in shaped.items()}
        if self.process:  # [b, T]: each token, the normalised rewards of the steps from its own on
            exs = [self.examples[i] for i in idx]
            steps = step_tensors(self.policy.task, exs, texts, gen, self.policy.tokenizer, n, rewards - raw)
            T = gen.response_ids.shape[1]
            adv = process_advantages(*steps, T, n, a.std_eps, scale=PROCESS_SCALE[a.advantage])
            adv = adv.to(gen.response_mask.dtype) * gen.response_mask.cpu()  # rollout bookkeeping: CPU
        else:
            # batch_std on several ranks: the std of every rank's rewards, so the whole batch's advantages
            # are computed and this rank's rows kept (group advantages need only the rank's own groups).
            spread = a.advantage == "batch_std" and self.world.size > 1 and not self.whole
            adv, am = GROUP_ADVANTAGES[a.advantage](
                self.world.gather(rewards) if spread else rewards, n, a.std_eps
            )
            if spread:
                k = len(rewards)
                adv = adv[self.world.rank * k : (self.world.rank + 1) * k]
            if "reward_std_mean" in am:
                metrics["advantage/group_std_mean"] = float(am["reward_std_mean"])
        return rewards, adv, metrics

    # ---- one batch --------------------------------------------------------------------------------------

    def collect(self) -> tuple[Rollout | None, dict[str, float]]:
        """One batch (None: every group was dropped, even after ``max_sampling_rounds``) and its metrics;
        with Ray workers, the current weights are sent to them first."""
        if self.remote is not None:
            self.weights_ref = self.remote.push()
        ro, m = self._collect()
        if self.remote is not None:
            m.update({"worker_restarts": self.remote.restarts, "weights_version": self.remote.version})
        return ro, m

    def _collect(self) -> tuple[Rollout | None, dict[str, float]]:
        """Generate and score until the batch is full (one round unless dynamic sampling)."""
        from advantage.lm.generate import concat_generations
        from advantage.math.advantages import constant_groups

        a, G, B = self.a, self.G, self.cfg.data.rollout_batch_size
        kept_idx: list[list[int]]
        kept_slots: list[int] = []
        kept_gens, kept_idx, kept_r, kept_c, kept_adv = [], [], [], [], []
        kept_texts: list[str] = []
        kept_raw: list[Tensor] = []
        m: dict[str, float] = {"time/generate": 0.0, "time/score": 0.0}
        all_r, all_c, all_len, all_trunc, zero_groups, dropped, groups = [], [], [], [], 0, 0, 0
        rounds = 0
        while sum(len(i) for i in kept_idx) < B and rounds < a.max_sampling_rounds:
            rounds += 1
            missing = B - sum(len(i) for i in kept_idx)
            n_ask = missing
            if a.dynamic_sampling and groups > 0:
                # Over-sample by the keep rate seen so far in this step (at least 1/4), then filter, as
                # DAPO does: late in a run most groups are all correct, and asking only for the missing
                # prompts took one round per few kept prompts. Any surplus is trimmed below.
                rate = max((groups - dropped) / groups, 0.25)
                n_ask = min(math.ceil(missing / rate), len(self.examples))
            first = self.drawn  # prompts drawn before these
            drawn = idx = self.next_prompts(n_ask if a.dynamic_sampling else B)
            slots = list(range(first, first + len(idx)))  # each prompt's sampling draws come from its slot
            if self.world.group and not self.whole:  # whole prompt groups per rank
                idx, slots = self.world.share(idx), self.world.share(slots)
            t0 = time.perf_counter()
            gen, texts, raw, correct, t1 = self.sample(idx, G, slots)
            rewards, adv, shaped = self.group_advantages(gen, idx, texts, raw, G)
            m["time/score"] += time.perf_counter() - t1
            m["time/generate"] += t1 - t0
            m.update(shaped)
            verdicts = correct.double() if self.whole else self.world.gather(correct.double())
            self.count_passes(drawn, verdicts, G)  # every rank's (a rank's own when it samples all)
            all_r.append(rewards)
            all_c.append(correct)
            all_len.append(gen.lengths.float())
            all_trunc.append(gen.truncated.float())
            # No signal (train/advantage/zero_std_frac): the shaped rewards of the group all equal, or
            # with process supervision every token's advantage in the group 0.
            std0 = (
                adv.reshape(len(idx), -1).abs().amax(-1) == 0 if self.process else constant_groups(rewards, G)
            )
            # DAPO's filter (algorithm.dynamic_sampling_on): by default the groups all correct or all
            # wrong, by the verifier before shaping; an all-correct group where the soft overlong
            # punishment hit one answer, (1, 1, 1, 0.25), is dropped although its rewards differ.
            drop = constant_groups(correct, G) if a.dynamic_sampling_on == "correctness" else std0
            zero_groups += int(std0.sum())
            dropped += int(drop.sum())
            groups += len(idx)
            keep = ~drop if a.dynamic_sampling else torch.ones_like(drop)
            if keep.any():
                rows = torch.repeat_interleave(keep, G).nonzero().squeeze(-1)
                kept_gens.append((gen, rows))
                kept_idx.append([i for i, k in zip(idx, keep.tolist(), strict=True) if k])
                kept_slots.extend(s for s, k in zip(slots, keep.tolist(), strict=True) if k)
                kept_r.append(rewards[rows])
                kept_c.append(correct[rows])
                kept_adv.append(adv[rows])
                kept_texts.extend(texts[r] for r in rows.tolist())
                kept_raw.append(raw[rows])
            if not a.dynamic_sampling:
                break
        if not kept_gens:
            return None, m
        gen = concat_generations(
            [g.select(rows) for g, rows in kept_gens], self.policy.tokenizer.pad_token_id
        )
        if self.process:  # rounds differ in response width: pad each round's [b, T_round] to the batch's
            width = gen.response_ids.shape[1]
            kept_adv = [torch.nn.functional.pad(x, (0, width - x.shape[1])) for x in kept_adv]
        n_prompts = sum(len(i) for i in kept_idx)
        keep_rows = min(n_prompts, B) * G  # dynamic sampling may overshoot: trim to the batch size
        r_all, c_all = torch.cat(all_r), torch.cat(all_c)
        m.update(
            {
                "reward/mean": float(r_all.mean()),
                "reward/std": float(r_all.std()) if len(r_all) > 1 else 0.0,
                "reward/accuracy": float(c_all.float().mean()),
                "response/length_mean": float(torch.cat(all_len).mean()),
                "response/truncated_frac": float(torch.cat(all_trunc).mean()),
                "advantage/zero_std_frac": zero_groups / max(groups, 1),
                "rollout/dropped_frac": dropped / max(groups, 1) if a.dynamic_sampling else 0.0,
                "rollout/rounds": rounds,
                "rollout/sampled_prompts": groups,
                "rollout/prompts": min(n_prompts, B),
            }
        )
        ro = Rollout(
            gen=gen.select(torch.arange(keep_rows)),
            prompt_idx=[i for ids in kept_idx for i in ids][: keep_rows // G],
            slots=kept_slots[: keep_rows // G],
            rewards=torch.cat(kept_r)[:keep_rows],
            correct=torch.cat(kept_c)[:keep_rows],
            advantages=torch.cat(kept_adv)[:keep_rows],
            texts=kept_texts[:keep_rows],
            raw_rewards=torch.cat(kept_raw)[:keep_rows],
        )
        if a.adaptive_difficulty:
            ro = self.adapt(ro, m)
        if self.whole:
            return self.rank_share(ro), m
        return ro, m

    def rank_share(self, ro: Rollout) -> Rollout | None:
        """This rank's contiguous share of a rollout every rank holds whole (dynamic sampling on several
        ranks): ``P // N`` prompts each. When the rounds ran out with fewer than ``B`` prompts and ``P`` is
        not a multiple of N, the last ``P mod N`` are left out (None: fewer prompts than ranks, a step
        with nothing to learn, as when every group is dropped)."""
        k = len(ro.prompt_idx) // self.world.size
        if k == 0:
            return None
        lo, G = self.world.rank * k, self.G
        rows = torch.arange(lo * G, (lo + k) * G)
        return Rollout(
            gen=ro.gen.select(rows),
            prompt_idx=ro.prompt_idx[lo : lo + k],
            slots=ro.slots[lo : lo + k],
            rewards=ro.rewards[rows],
            correct=ro.correct[rows],
            advantages=ro.advantages[rows],
            texts=[ro.texts[r] for r in rows.tolist()],
            raw_rewards=None if ro.raw_rewards is None else ro.raw_rewards[rows],
        )

    def adapt(self, ro: Rollout, m: dict[str, float]) -> Rollout:
        """Adaptive difficulty on a batch of P prompts × G rows (prompt by prompt): update the thresholds
        with the prompts' difficulties (:func:`difficulty_thresholds`), split the prompts
        (:func:`split_by_difficulty`), keep ``easy_samples`` random rows of each easy prompt (advantages
        from its whole group of G) and give each hard prompt ``hard_samples - G`` more samples, its
        advantages then computed over all ``hard_samples`` of them. Rows stay prompt by prompt."""
        from advantage.lm.generate import concat_generations

        G, hard_n, pad_id = self.G, self.hard_n, self.policy.tokenizer.pad_token_id
        P = len(ro.prompt_idx)
        difficulty = ro.rewards.view(P, G).mean(-1)  # [P] mean shaped reward of each prompt's G samples
        self.thresholds = difficulty_thresholds(self.thresholds, difficulty, self.a)
        easy, hard = split_by_difficulty(difficulty, self.thresholds)
        gens, adv, rewards, correct = [ro.gen], [ro.advantages], [ro.rewards], [ro.correct]
        hard_p = hard.nonzero().squeeze(-1).tolist() if hard_n > G else []  # hard_samples = G: none more
        E = hard_n - G
        if hard_p:
            assert ro.raw_rewards is not None
            idx = [ro.prompt_idx[j] for j in hard_p]
            t0 = time.perf_counter()
            # a prompt's extra samples: draws of its own, seeded by -1 - slot (slots are ≥ 0)
            x_gen, x_texts, x_raw, x_correct, t1 = self.sample(idx, E, [-1 - ro.slots[j] for j in hard_p])
            self.count_passes(idx, x_correct, E)  # pass rates count every sample
            # Each hard prompt's hard_samples rows consecutive (its G, then its E new ones): the group
            # advantages, the length preference and process supervision take consecutive equal groups.
            own = (torch.tensor(hard_p)[:, None] * G + torch.arange(G)).reshape(-1)  # [n·G] batch rows
            order = grouped_order(len(hard_p), G, E)
            h_gen = concat_generations([ro.gen.select(own), x_gen], pad_id).select(order)
            h_texts = [ro.texts[r] for r in own.tolist()] + x_texts
            h_texts = [h_texts[r] for r in order.tolist()]
            h_raw = torch.cat([ro.raw_rewards[own], x_raw])[order]
            h_rewards, h_adv, _ = self.group_advantages(h_gen, idx, h_texts, h_raw, hard_n)
            gens.append(h_gen)
            adv.append(h_adv)
            rewards.append(h_rewards)
            correct.append(torch.cat([ro.correct[own], x_correct])[order])
            m["time/score"] += time.perf_counter() - t1
            m["time/generate"] += t1 - t0
        gen = concat_generations(gens, pad_id)
        if self.process:  # pad each part's [b, T_part] advantages to the joined width
            adv = [torch.nn.functional.pad(x, (0, gen.response_ids.shape[1] - x.shape[1])) for x in adv]
        # The rows of the loss, prompt by prompt: easy_samples random rows of an easy prompt's G (drawn
        # with the trainer's generator: reproducible, resumable), a hard prompt's hard_samples (after the
        # P·G rows of the batch), a medium prompt's G.
        picks = torch.rand(int(easy.sum()), G, generator=self.pick_rng).argsort(-1)[:, : self.easy_k]
        picks = picks.sort(-1).values
        rows: list[int] = []
        hard_at = {j: P * G + n * hard_n for n, j in enumerate(hard_p)}
        n_easy = 0
        for j in range(P):
            if j in hard_at:
                rows.extend(range(hard_at[j], hard_at[j] + hard_n))
            elif easy[j]:
                rows.extend((j * G + picks[n_easy]).tolist())
                n_easy += 1
            else:
                rows.extend(range(j * G, (j + 1) * G))
        keep = torch.tensor(rows)
        m.update(
            {
                "curriculum/easy_frac": float(easy.float().mean()),
                "curriculum/hard_frac": float(hard.float().mean()),
                "curriculum/easy_threshold": float(self.thresholds[1]),
                "curriculum/hard_threshold": float(self.thresholds[0]),
                "curriculum/rows": len(rows),
                "curriculum/extra_samples": len(hard_p) * E,
            }
        )
        return Rollout(
            gen=gen.select(keep),
            prompt_idx=ro.prompt_idx,
            slots=ro.slots,
            rewards=torch.cat(rewards)[keep],
            correct=torch.cat(correct)[keep],
            advantages=torch.cat(adv)[keep],
        )


def learn(
    cfg: GRPOConfig,
    model: PreTrainedModel,
    opt: torch.optim.Optimizer,
    ro: Rollout,
    ref_logprobs: Callable[[Any, Tensor], Tensor],
    step: int,
) -> dict[str, list[float]]:
    """``worker.actor.ppo_epochs`` passes over the batch in mini-batches (one optimizer step each) and
    micro-batches (one forward each); returns every micro-batch's loss metrics and every optimizer step's
    loss and gradient norm. ``step`` (done so far) names the step in errors."""
    from advantage.lm.packing import packable

    a, d, actor, roll = cfg.algorithm, cfg.data, cfg.worker.actor, cfg.worker.rollout
    params = opt.param_groups[0]["params"]
    world = distributed.current()
    packed = packable(model)  # rows of one prompt share one forward of it: no need to sort by length
    gen = ro.gen
    n_rows = gen.response_ids.shape[0]
    mask = gen.response_mask.clone()
    if a.overlong_filter:
        mask = mask * (~gen.truncated).float()[:, None]
    # mini_batch_size counts prompts of the global batch (every rank's). With adaptive difficulty prompts
    # have different row counts: a mini-batch holds mini_batch_size prompts' worth of rows on average
    # (exactly mini_batch_size × G rows without it), and 0 still means the whole rollout.
    mb, n_all = actor.mini_batch_size, n_rows * world.size
    mini_rows = -(-n_all * mb // (len(ro.prompt_idx) * world.size)) if mb else n_all
    micro = actor.micro_batch_size or mini_rows
    all_rows = torch.arange(n_rows)
    n_minis = math.ceil(n_all / mini_rows)
    on_policy = actor.ppo_epochs == 1 and n_minis == 1
    old_logp = None if on_policy else _logprobs(model, gen, all_rows, micro, roll.temperature)
    ref_logp = ref_logprobs(gen, all_rows) if actor.kl_coef > 0 else None
    adv_all = ro.advantages.to(mask.device)  # computed on the CPU with the rewards
    stats: dict[str, list[float]] = {}
    for _ in range(actor.ppo_epochs):
        perm = torch.arange(n_all) if on_policy else lm_distributed.global_permutation(world, n_rows)
        for start in range(0, n_all, mini_rows):
            mini = lm_distributed.local_rows(world, perm[start : start + mini_rows], n_rows)  # this rank's
            Z = world.reduce([step_normalizer(mask[mini], actor.loss_agg)])[0]  # of the global batch
            opt.zero_grad(set_to_none=True)
            total = 0.0
            micros = micro_batches(mini, gen.lengths, micro, actor.micro_batch_size == 0 and not packed)
            for r, real in lm_distributed.even_micro_batches(world, micros, all_rows[:1]):
                logp = rows_logprobs(model, gen, r, roll.temperature)  # [b, t_len]
                t_len = logp.shape[1]
                m_r = mask[r, :t_len]
                loss, lm = grpo_loss(
                    logp,
                    None if old_logp is None else old_logp[r, :t_len],
                    None if ref_logp is None else ref_logp[r, :t_len],
                    adv_all[r] if adv_all.dim() == 1 else adv_all[r, :t_len],
                    m_r,
                    actor,
                    max(Z, 1.0),
                    d.max_response_length,  # Dr.GRPO's fixed length constant, not this batch's width
                )
                if not real:  # a filler: the ranks make as many forwards and backwards, this one adds 0
                    (loss * 0.0).backward()
                    continue
                loss.backward()
                total += float(loss.detach())
                lm["entropy"] = masked_mean(-logp.detach(), m_r)
                for k, v in lm.items():
                    stats.setdefault(k, []).append(float(v))
            total = world.reduce([total])[0]
            if not math.isfinite(total):
                raise NonFiniteError(f"step {step + 1}: GRPO loss is {total}; stopping")
            stats.setdefault("loss", []).append(total)
            gn = world.clip_grad_norm(params, actor.max_grad_norm)  # ddp: sums the ranks' gradients
            if actor.max_grad_norm > 0:
                stats.setdefault("grad_norm", []).append(gn)
            optim.step(opt)
    return stats


def build(
    cfg: GRPOConfig, restored: Checkpoint | None
) -> tuple[LMPolicy, PreTrainedModel | None, LearnerState, PreTrainedModel, torch.optim.Optimizer]:
    """The policy (with the reward model of ``worker.reward.model`` when set), the frozen reference (None
    when no KL term uses it, or with LoRA: then the base model is the reference), the learner state
    (the optimizer ``optim`` and the torch RNG), restored from ``restored``, the module this rank trains
    (:func:`advantage.algos.llm.distributed.wrap`) and its optimizer. Built in this order on
    purpose: scratch models draw their initial weights from the global generator, which a resumed run
    then sets back."""
    a, actor = cfg.algorithm, cfg.worker.actor
    task = make_task(cfg.data)
    model, tok = common.policy_model(cfg, task, restored)
    ref_model = None
    if (actor.kl_coef > 0 or a.kl_reward_coef > 0) and actor.model.lora.rank == 0:  # the starting policy
        ref_model = common.frozen_reference(cfg, task, model if restored is None else None)
    policy = LMPolicy(model, tok, task, cfg)
    if cfg.worker.reward.model:
        policy.reward_model = load_reward(cfg, tok)
    policy.examples("train")  # the training prompts, read once here (cached for the rollout)
    world = distributed.current()
    net = lm_distributed.wrap(world, model)  # what this rank trains: the model, or its FSDP shards
    params = [p for p in net.parameters() if p.requires_grad]
    opt = optim.adam(params, actor.learning_rate, weight_decay=actor.weight_decay, decoupled=True)
    learner = LearnerState(optimizers={"optim": lm_distributed.optimizer(world, net, opt)})
    if restored is not None:
        learner.load(restored.tensors, restored.state["algo"])
    return policy, ref_model, learner, net, opt


def train(cfg: GRPOConfig, ctx: RunContext) -> None:
    t, actor = cfg.trainer, cfg.worker.actor
    torch.set_num_threads(t.torch_threads)
    torch.manual_seed(t.seed)
    restored = ctx.restored
    policy, ref_model, learner, net, opt = build(cfg, restored)
    model, tok = policy.model, policy.tokenizer
    world = distributed.current()
    ref_logprobs = partial(reference_logprobs, cfg, model, ref_model)
    rollout = GRPORollout(cfg, policy, policy.examples("train"), ref_logprobs, restored)
    step = 0 if restored is None else restored.step
    lora = model if actor.model.lora.rank > 0 else None
    save = partial(common.snapshot, policy, learner, rollout, lambda: common.hf_files(model, tok), lora)

    def snapshot() -> Snapshot:
        lm_distributed.unshard(world, net, model)  # the full weights, from every rank's shard
        return save()

    net.train()
    while step < t.total_steps:
        lr = common.set_learning_rate(opt, actor, step, schedule_total(t, step))
        lm_distributed.unshard(world, net, model, everywhere=True)  # fsdp: every rank samples
        ro, m = rollout.collect()
        if ro is None:  # every group had equal rewards, even after max_sampling_rounds: nothing to learn
            step += 1
            ctx.log(step, {**{f"train/{k}": v for k, v in m.items()}, "train/skipped": 1.0})
            if ctx.tick(step, snapshot):
                break
            continue
        t_learn = time.perf_counter()
        stats = learn(cfg, net, opt, ro, ref_logprobs, step)
        step += 1
        m["time/learn"] = time.perf_counter() - t_learn
        spent = m["time/generate"] + m["time/score"] + m["time/learn"]
        row = {f"train/{k}": v for k, v in m.items()}
        row.update({f"train/{k}": sum(v) / len(v) for k, v in stats.items()})
        row["train/learning_rate"] = lr
        row["train/tokens_per_second"] = float(ro.gen.lengths.sum()) / max(spent, 1e-9)
        row = world.mean(row, summed=("train/tokens_per_second", "train/rollout/prompts"))
        ctx.log(step, row)
        if ctx.tick(step, snapshot):
            break
    ctx.finish(step, snapshot())
    rollout.close()
