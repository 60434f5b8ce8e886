r"""Group Relative Policy Optimization (GRPO) and its family: DAPO, GSPO, Dr.GRPO, RLOO, REINFORCE++,
Lite PPO.

Shao et al. 2024 (DeepSeekMath §4.1: objective, outcome vs process supervision; the study notes on GRPO:
GRPO replaces the critic's baseline by the mean reward of G samples of the same prompt). For each prompt
:math:`q`, sample G responses :math:`o_1..o_G` from :math:`\pi_\text{old}`, score them, and maximise

.. math::
    \frac{1}{G}\sum_{i=1}^{G}\frac{1}{|o_i|}\sum_{t}\Big[\min\big(\rho_{i,t}\hat A_{i,t},
    \operatorname{clip}(\rho_{i,t}, 1-\epsilon_\text{lo}, 1+\epsilon_\text{hi})\hat A_{i,t}\big)
    - \beta\,\mathbb D_\text{KL}[\pi_\theta\|\pi_\text{ref}]_{i,t}\Big],
    \qquad \hat A_{i,t} = \frac{r_i - \operatorname{mean}(r)}{\operatorname{std}(r) + \varepsilon}

The pieces are the shared math core's registries, each option picking an entry by name:
``GROUP_ADVANTAGES`` (``algorithm.advantage``; one advantage per completion, or per token for an entry
registered ``per_token``), ``POLICY_LOSSES`` (``worker.actor.loss``: the entries with a clipped ratio,
among them the ``ppo_clip`` CartPole's PPO uses), ``KL_ESTIMATORS`` (``worker.actor.kl_estimator``) and
``LOSS_AGGREGATIONS`` (``worker.actor.loss_agg``); ``advantage list grpo`` shows each option's names.
The presets (:data:`advantage.configs.grpo.PRESETS`: GRPO, DAPO, GSPO, Dr.GRPO, RLOO, REINFORCE++, Lite
PPO) are combinations of them.

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
   (:func:`~advantage.math.curriculum.difficulty_thresholds`). An easy prompt
   (:math:`d \ge \tau_\text{easy}`) puts ``easy_samples`` random ones of its G rows in the loss,
   advantages from all G; a hard one
   (:math:`d \le \tau_\text{hard}`) is sampled ``hard_samples - G`` more times and its advantages (and
   length preference, process advantages) are computed over all ``hard_samples``, a group of its own
   (for ``batch_std`` the hard prompts' rows are a batch of their own, as each dynamic-sampling round
   is). The step normaliser counts the rows in the loss; the thresholds are in the checkpoint.
7. Metrics: reward mean/std, accuracy, clip fractions (low / high), approx KL to π_old and to the
   reference, entropy (Monte Carlo: mean −log π of the sampled tokens), response length and truncated
   fraction, zero-std group fraction, tokens/s, and seconds per phase (generate / score / learn).

This module is the algorithm (its loss, the learning from one batch, the training loop); sampling, scoring
and the advantages of a batch are :mod:`advantage.algos.llm.grpo_rollout`, the reward shaping
:mod:`advantage.algos.llm.grpo_rewards`, the curriculum's maths :mod:`advantage.math.curriculum`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from advantage import distributed, optim
from advantage.algos.llm import data_parallel
from advantage.algos.llm.checks import check as check_run
from advantage.algos.llm.data import scored_task
from advantage.algos.llm.evaluation import evaluate as evaluate_verifier
from advantage.algos.llm.evaluation import evaluate_preference
from advantage.algos.llm.grpo_rollout import (
    GRPOBatch,
    GRPORollout,
    no_grad_logprobs,
    reference_logprobs,
    rows_logprobs,
)
from advantage.algos.llm.models import frozen_reference, hf_files, policy_model
from advantage.algos.llm.policy import LMPolicy
from advantage.algos.llm.policy import load_policy as load_lm_policy
from advantage.algos.llm.reward_models import load_reward, reward_model_problems
from advantage.algos.llm.training import set_learning_rate
from advantage.algos.llm.training import snapshot as lm_snapshot
from advantage.checkpoint import Checkpoint
from advantage.configs.grpo import PREFERENCE_TASKS, ActorConfig, GRPOConfig
from advantage.context import RunContext, Snapshot
from advantage.errors import ConfigError, NonFiniteError
from advantage.math import KL_ESTIMATORS, POLICY_LOSSES, aggregate, masked_mean
from advantage.math.masked import step_normalizer
from advantage.math.policy_losses import PolicyLoss
from advantage.schedules import schedule_total
from advantage.torch_state import LearnerState

if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedModel

# A task with a verifier, or a preference task (no verifier) scored by worker.reward.model.
make_task = scored_task


def check(cfg: GRPOConfig) -> list[str]:
    """:func:`advantage.algos.llm.checks.check`, plus the reward model when one is set (it exists, is a
    reward model and shares the policy's tokenizer) or required (a task without a verifier)."""
    problems = check_run(cfg, make_task)
    if cfg.algorithm.supervision == "process" and not cfg.worker.reward.model:
        try:
            task = make_task(cfg.data)
        except ConfigError:
            task = None  # check_run has reported it
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


# :func:`advantage.algos.llm.policy.load_policy` with this trainer's tasks.
load_policy = partial(load_lm_policy, task_factory=make_task)


def evaluate(cfg: GRPOConfig, policy: LMPolicy, **options: Any) -> dict[str, Any]:
    """Verifier tasks: :func:`advantage.algos.llm.evaluation.evaluate` (accuracy, pass@K, maj@K). A
    task scored by a reward model: :func:`advantage.algos.llm.evaluation.evaluate_preference` (greedy
    reward-model and hidden scores, win rate against the starting policy)."""
    if hasattr(policy.task, "verify"):
        return evaluate_verifier(cfg, policy, **options)
    return evaluate_preference(cfg, policy, **options)


# ----------------------------------------------------------------------------------------------------
# The loss


def policy_loss_fn(actor: ActorConfig) -> PolicyLoss:
    """The per-token policy loss ``actor.loss`` with its hyperparameters bound: those of its registry entry
    (``POLICY_LOSSES.spec(name).params``) that the actor section sets, by the same name (``clip_low``,
    ``clip_high``, ``dual_clip``)."""
    return POLICY_LOSSES.bind(actor.loss, **vars(actor))


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
    own longest response (:func:`~advantage.algos.llm.batches.trimmed`): most of a GRPO batch is padding
    after short answers, and the step's global normaliser keeps the gradient that of one batch."""
    if auto and len(rows) >= 8:
        order = rows[torch.argsort(lengths[rows], descending=True, stable=True)]
        half = (len(order) + 1) // 2
        return [order[:half], order[half:]]
    return [rows[j : j + micro] for j in range(0, len(rows), micro)]


# ----------------------------------------------------------------------------------------------------
# Training


def learn(
    cfg: GRPOConfig,
    model: PreTrainedModel,
    opt: torch.optim.Optimizer,
    ro: GRPOBatch,
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
    old_logp = None if on_policy else no_grad_logprobs(model, gen, all_rows, micro, roll.temperature)
    ref_logp = ref_logprobs(gen, all_rows) if actor.kl_coef > 0 else None
    adv_all = ro.advantages.to(mask.device)  # computed on the CPU with the rewards
    stats: dict[str, list[float]] = {}
    for _ in range(actor.ppo_epochs):
        perm = torch.arange(n_all) if on_policy else data_parallel.global_permutation(world, n_rows)
        for start in range(0, n_all, mini_rows):
            mini = data_parallel.local_rows(world, perm[start : start + mini_rows], n_rows)  # this rank's
            Z = world.reduce([step_normalizer(mask[mini], actor.loss_agg)])[0]  # of the global batch
            opt.zero_grad(set_to_none=True)
            total = 0.0
            micros = micro_batches(mini, gen.lengths, micro, actor.micro_batch_size == 0 and not packed)
            for r, real in data_parallel.even_micro_batches(world, micros, all_rows[:1]):
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
    (:func:`advantage.algos.llm.data_parallel.wrap`) and its optimizer. Built in this order on
    purpose: scratch models draw their initial weights from the global generator, which a resumed run
    then sets back."""
    a, actor = cfg.algorithm, cfg.worker.actor
    task = make_task(cfg.data)
    model, tok = policy_model(cfg, task, restored)
    ref_model = None
    if (actor.kl_coef > 0 or a.kl_reward_coef > 0) and actor.model.lora.rank == 0:  # the starting policy
        ref_model = frozen_reference(cfg, task, model if restored is None else None)
    policy = LMPolicy(model, tok, task, cfg)
    if cfg.worker.reward.model:
        policy.reward_model = load_reward(cfg, tok)
    policy.examples("train")  # the training prompts, read once here (cached for the rollout)
    world = distributed.current()
    net = data_parallel.wrap(world, model)  # what this rank trains: the model, or its FSDP shards
    params = [p for p in net.parameters() if p.requires_grad]
    opt = optim.adam(params, actor.learning_rate, weight_decay=actor.weight_decay, decoupled=True)
    learner = LearnerState(optimizers={"optim": data_parallel.optimizer(world, net, opt)})
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
    save = partial(lm_snapshot, policy, learner, rollout, lambda: hf_files(model, tok), lora)

    def snapshot() -> Snapshot:
        data_parallel.unshard(world, net, model)  # the full weights, from every rank's shard
        return save()

    net.train()
    while step < t.total_steps:
        lr = set_learning_rate(opt, actor, step, schedule_total(t, step))
        data_parallel.unshard(world, net, model, everywhere=True)  # fsdp: every rank samples
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
