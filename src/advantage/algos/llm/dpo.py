r"""Direct Preference Optimization (DPO; Rafailov et al. 2023) and its IPO / hinge variants.

Rafailov et al. 2023 §4: the KL-regularised objective :math:`\max_\pi \mathbb E[r(x,y)] - \beta\,
\mathrm{KL}[\pi\|\pi_\text{ref}]` has the closed-form optimum :math:`\pi^*(y|x) \propto \pi_\text{ref}(y|x)
e^{r(x,y)/\beta}`, so :math:`r(x,y) = \beta\log\frac{\pi^*(y|x)}{\pi_\text{ref}(y|x)} + \beta\log Z(x)`.
Putting that reward into the Bradley–Terry likelihood of the preference data cancels :math:`Z(x)`:

.. math::
    L(\theta) = -\mathbb E_{(x, y_w, y_l)}\Big[\log\sigma\Big(
        \beta\log\frac{\pi_\theta(y_w|x)}{\pi_\text{ref}(y_w|x)}
        - \beta\log\frac{\pi_\theta(y_l|x)}{\pi_\text{ref}(y_l|x)}\Big)\Big]

— the reward model is implicit, and no sampling is needed.

Implementation details:

1. :math:`\log\pi(y|x)` is the sum of the response tokens' log-probs (EOS included). Training packs each
   pair as one segment *prompt, chosen, rejected* (:func:`~advantage.lm.packing.pack_prompts`): both
   responses attend to the prompt and to themselves only, with the positions they would have after the
   prompt, so the prompt is computed once for the pair and several short segments share a row instead of
   being padded; the vocabulary projection runs only on the hidden states that predict response tokens.
   The values equal the padded ``[B, T]`` layout of :func:`advantage.lm.model.sequence_logprobs`
   (:func:`sequence_logps`, used by evaluation and for models :func:`~advantage.lm.packing.packable`
   refuses) to float rounding.
2. The reference is the starting policy, frozen. Its log-probs are computed once for the whole training
   set before training (``algorithm.precompute_ref``, as TRL's ``precompute_ref_log_probs``) or per
   batch.
3. ``algorithm.loss_type``: ``sigmoid`` (DPO, with optional label smoothing — conservative DPO),
   ``ipo`` (Azar et al. 2023) or ``hinge`` (SLiC), from :data:`advantage.math.DPO_LOSSES`.
4. K-wise data (responses ranked best first) gives every one of its :math:`\binom K2` pairs.
5. ``algorithm.batch_size`` counts preference pairs per optimizer step; micro-batches accumulate with
   the step's pair count as the normaliser.
6. Metrics: implicit rewards of chosen and rejected responses, their margin and the preference accuracy
   (fraction of pairs ranked right by the implicit reward), in training and on the validation split.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from advantage import distributed, optim
from advantage.algos.llm import data_parallel
from advantage.algos.llm.batches import collate
from advantage.algos.llm.checks import check as check_run
from advantage.algos.llm.data import preference_responses, preference_task
from advantage.algos.llm.evaluation import eval_examples
from advantage.algos.llm.models import eval_mode, frozen_reference, hf_files, policy_model
from advantage.algos.llm.policy import LMPolicy, prompt_text
from advantage.algos.llm.policy import load_policy as load_lm_policy
from advantage.algos.llm.training import resume, set_learning_rate
from advantage.algos.llm.training import snapshot as lm_snapshot
from advantage.configs.dpo import DPOAlgorithm, DPOConfig
from advantage.configs.llm import DataConfig
from advantage.context import RunContext, Snapshot
from advantage.errors import ConfigError, NonFiniteError
from advantage.lm.packing import PACK_ROW_LENGTH, pack_prompts, packable, packed_logprobs
from advantage.math import DPO_LOSSES, dpo_metrics
from advantage.schedules import schedule_total
from advantage.torch_state import LearnerState

if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

# ----------------------------------------------------------------------------------------------------
# Data: preference pairs as token ids


make_task = preference_task


def pairs_of(examples: list[Any]) -> list[tuple[str, str, str]]:
    """``(prompt, chosen, rejected)`` for every ranked pair of every example (K-wise: all C(K,2))."""
    return [
        (e.prompt, e.responses[i], e.responses[j])
        for e in examples
        for i, j in itertools.combinations(range(len(e.responses)), 2)
    ]


def tokenize_pairs(
    tok: PreTrainedTokenizerBase, pairs: list[tuple[str, str, str]], d: DataConfig
) -> list[tuple[list[int], list[int], list[int]]]:
    """Token ids of (prompt, chosen + EOS, rejected + EOS); over-long items are an error naming them."""
    out = []
    for n, (p, c, r) in enumerate(pairs):
        text = prompt_text(tok, p, d.chat_template)
        pi = tok(text, add_special_tokens=False)["input_ids"]
        ci = tok(c, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        ri = tok(r, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        if d.max_prompt_length is not None and len(pi) > d.max_prompt_length:
            raise ConfigError(
                f"preference pair {n}: prompt is {len(pi)} tokens, more than data.max_prompt_length="
                f"{d.max_prompt_length}"
            )
        if max(len(ci), len(ri)) > d.max_response_length:
            raise ConfigError(
                f"preference pair {n}: a response is {max(len(ci), len(ri))} tokens with EOS, more than "
                f"data.max_response_length={d.max_response_length}"
            )
        out.append((pi, ci, ri))
    return out


def sequence_logps(
    model: PreTrainedModel, items: list[tuple[list[int], list[int], list[int]]], pad_id: int
) -> tuple[Tensor, Tensor]:
    """Summed response log-probs ``[B]`` of the chosen and the rejected responses, one forward pass."""
    from advantage.lm.model import sequence_logprobs

    prompts = [p for p, _, _ in items] * 2
    responses = [c for _, c, _ in items] + [r for _, _, r in items]
    mb = collate(prompts, responses, pad_id)
    dev = next(model.parameters()).device
    logp = sequence_logprobs(  # [2B, T]
        model, mb["input_ids"].to(dev), mb["attention_mask"].to(dev), response_start=int(mb["P"])
    )
    seq = (logp * mb["response_mask"].to(dev)).sum(-1)
    B = len(items)
    return seq[:B], seq[B:]


def train_logps(
    model: PreTrainedModel,
    items: list[tuple[list[int], list[int], list[int]]],
    pad_id: int,
    row_length: int = PACK_ROW_LENGTH,
) -> tuple[Tensor, Tensor]:
    """:func:`sequence_logps` (summed response log-probs ``[B]`` of chosen and rejected), one forward pass
    of the pairs packed by :func:`~advantage.lm.packing.pack_prompts`; the padded path for models
    :func:`~advantage.lm.packing.packable` refuses or an empty prompt (nothing to predict a response's
    first token from)."""
    if not packable(model) or any(not p for p, _, _ in items):
        return sequence_logps(model, items, pad_id)
    dev = next(model.parameters()).device
    dtype = model.get_input_embeddings().weight.dtype
    # A pair longer than a row is split into (prompt, chosen) and (prompt, rejected): attention costs the
    # square of a segment's length, more than computing the prompt twice (nn.packing.response_segments).
    groups: list[tuple[list[int], tuple[list[int], ...]]] = []
    for p, c, r in items:
        pair = len(p) + len(c) + len(r) <= row_length
        groups += [(p, (c, r))] if pair else [(p, (c,)), (p, (r,))]
    packed = pack_prompts(groups, pad_id, dtype, row_length).to(dev)
    logp = packed_logprobs(model, packed)  # [N]: response tokens only
    seq = torch.zeros(packed.responses, dtype=logp.dtype, device=dev).index_add_(0, packed.owner, logp)
    return seq[0::2], seq[1::2]  # responses alternate chosen, rejected


def pair_logps(
    model: PreTrainedModel, items: list[Any], pad_id: int, micro: int, logps: Callable[..., Any] = train_logps
) -> Tensor:
    """``[N, 2]`` summed log-probs (chosen, rejected) of ``items`` under ``model``, ``micro`` pairs at a
    time, no grad. The reference's on the training pairs by :func:`train_logps` (the policy's own path,
    so the first step's log-ratios are 0 up to float rounding); evaluation passes :func:`sequence_logps`."""
    out = []
    with torch.no_grad():
        for j in range(0, len(items), micro):
            c, r = logps(model, items[j : j + micro], pad_id)
            out.append(torch.stack([c, r], dim=-1))
    return torch.cat(out) if out else torch.zeros(0, 2)


precompute_ref_logps = pair_logps  # the reference's log-probs of the training pairs, once per run


def dpo_loss_fn(a: DPOAlgorithm) -> Any:
    """The per-pair loss with β and label smoothing bound."""
    return partial(DPO_LOSSES[a.loss_type], beta=a.beta, label_smoothing=a.label_smoothing)


# ----------------------------------------------------------------------------------------------------
# Training


def train(cfg: DPOConfig, ctx: RunContext) -> None:
    a, t, d = cfg.algorithm, cfg.trainer, cfg.data
    torch.set_num_threads(t.torch_threads)
    torch.manual_seed(t.seed)
    task = make_task(d)
    restored = ctx.restored
    if cfg.model.lora.rank > 0:
        raise ConfigError("dpo does not support model.lora yet; set model.lora.rank=0")
    model, tok = policy_model(cfg, task, restored)
    ref = frozen_reference(cfg, task, model if restored is None else None)
    policy = LMPolicy(model, tok, task, cfg)
    items = tokenize_pairs(tok, pairs_of(policy.examples("train")), d)
    if not items:
        raise ConfigError(f"data.task={d.task!r} gave no training pairs")
    micro = a.micro_batch_size or a.batch_size
    ref_all = pair_logps(ref, items, tok.pad_token_id, micro) if a.precompute_ref else None
    world = distributed.current()
    net = data_parallel.wrap(world, model)  # what this rank trains: the model, or its FSDP shards
    params = [p for p in net.parameters() if p.requires_grad]
    opt = optim.adam(params, a.learning_rate, weight_decay=a.weight_decay, decoupled=True)
    learner = LearnerState(optimizers={"optim": data_parallel.optimizer(world, net, opt)})
    step, cursor = resume(learner, restored, len(items), t.seed)
    policy.reference = ref  # evaluation needs it for the implicit rewards

    save = partial(lm_snapshot, policy, learner, cursor, lambda: hf_files(model, tok))

    def snapshot() -> Snapshot:
        data_parallel.unshard(world, net, model)  # the full weights, from every rank's shard
        return save()

    loss_fn = dpo_loss_fn(a)
    net.train()
    while step < t.total_steps:
        idx = cursor.next(a.batch_size)
        share = world.share(idx)  # this rank's pairs; the loss and metrics below are over all of idx
        lr = set_learning_rate(opt, a, step, schedule_total(t, step))
        clock = time.perf_counter()
        optim.zero_grad(params)  # opt.zero_grad(set_to_none=True) without its profiler scope
        sums: dict[str, Tensor] = {}  # the step's loss and metrics, tensors until the step ends
        for j in range(0, len(share), micro):
            chunk = share[j : j + micro]
            batch = [items[i] for i in chunk]
            if ref_all is not None:
                ref_c, ref_r = ref_all[chunk].unbind(-1)
            else:
                with torch.no_grad():
                    ref_c, ref_r = train_logps(ref, batch, tok.pad_token_id)
            pc, pr = train_logps(net, batch, tok.pad_token_id)
            # The micro-batch's pair sum over the step's pair count: accumulation equals one big batch.
            loss = loss_fn(pc, pr, ref_c, ref_r).sum() / len(idx)
            loss.backward()
            parts = {"loss": loss.detach()}
            for k, v in dpo_metrics(pc, pr, ref_c, ref_r, a.beta).items():
                parts[k] = v * (len(chunk) / len(idx))
            for k, v in parts.items():
                sums[k] = sums[k] + v if k in sums else v
        values = world.reduce(torch.stack(list(sums.values())).tolist())  # one conversion per step
        stats = dict(zip(sums, values, strict=True))
        total = stats.pop("loss")
        if not math.isfinite(total):
            raise NonFiniteError(f"step {step + 1}: DPO loss is {total}; stopping")
        grad_norm = world.clip_grad_norm(params, a.max_grad_norm)
        optim.step(opt)
        step += 1
        if step % t.log_every == 0 or step == t.total_steps:
            row = {f"train/{k}": v for k, v in stats.items()}
            row.update(
                {
                    "train/loss": total,
                    "train/grad_norm": grad_norm,
                    "train/learning_rate": lr,
                    "train/seconds_per_step": time.perf_counter() - clock,
                }
            )
            ctx.log(step, row)
        if ctx.tick(step, snapshot):
            break
    ctx.finish(step, snapshot())


# ----------------------------------------------------------------------------------------------------
# Evaluation and loading


def evaluate(
    cfg: DPOConfig,
    policy: LMPolicy,
    *,
    split: str = "validation",
    samples: int | None = None,
    limit: int | None = None,
    seed: int | None = None,
) -> dict[str, Any]:
    """Preference accuracy of the implicit reward on ``split`` (``return_mean`` is that accuracy), the
    mean implicit rewards and margin, and the loss. On a task with a hidden scoring rule (``synthetic``)
    also the **win rate against the reference policy**: greedy responses of the policy and of the
    reference to the same prompts, compared by the rule, ties counting half
    (:func:`advantage.algos.llm.preference_eval.compare_to_reference`), with both mean hidden scores."""
    if samples is not None and samples > 1:
        raise ConfigError("dpo evaluation scores given pairs; --samples is for generated answers")
    tok = policy.tokenizer
    examples = eval_examples(cfg, policy, split, limit, None)
    items = tokenize_pairs(tok, pairs_of(examples), cfg.data)
    ref = getattr(policy, "reference", None)
    if ref is None:
        ref = policy.reference = frozen_reference(cfg, policy.task, None)
    with eval_mode(policy.model):
        mb = cfg.trainer.eval_batch_size
        lp = pair_logps(policy.model, items, tok.pad_token_id, mb, sequence_logps)
        rp = pair_logps(ref, items, tok.pad_token_id, mb, sequence_logps)
    m = dpo_metrics(lp[:, 0], lp[:, 1], rp[:, 0], rp[:, 1], cfg.algorithm.beta)
    loss = dpo_loss_fn(cfg.algorithm)(lp[:, 0], lp[:, 1], rp[:, 0], rp[:, 1]).mean()
    # A count over the pairs, not a float32 mean (0.86, not 0.8600000143).
    acc = int(((lp[:, 0] - rp[:, 0]) > (lp[:, 1] - rp[:, 1])).sum()) / max(len(items), 1)
    out = {
        "split": split,
        "n": len(items),
        "accuracy": acc,
        "return_mean": acc,
        "reward_margin": float(m["reward_margin"]),
        "rewards_chosen": float(m["rewards_chosen"]),
        "rewards_rejected": float(m["rewards_rejected"]),
        "loss": float(loss),
    }
    scorer = getattr(policy.task, "hidden_score", None)
    if scorer is not None:
        from advantage.algos.llm.preference_eval import compare_to_reference, greedy_options

        c = compare_to_reference(policy.model, ref, tok, examples, scorer, **greedy_options(cfg))
        names = {"score_mean": "hidden_score", "reference_score_mean": "reference_hidden_score"}
        lengths = ("response_length", "reference_response_length")
        for k in ("win_rate", "wins", "ties", "losses", *names, *lengths):
            out[names.get(k, k)] = c[k]
    return out


# The policy of a checkpoint (a ``save_pretrained`` folder) with the run's preference task.
load_policy = partial(load_lm_policy, task_factory=make_task)


# :func:`advantage.algos.llm.checks.check` with the preference task.
check = partial(check_run, task_factory=make_task, responses=preference_responses)
