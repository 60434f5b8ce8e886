r"""Direct Preference Optimization (DPO; Rafailov et al. 2023) and its IPO / hinge variants.

Seed 003 "DPO": the KL-regularised objective :math:`\max_\pi \mathbb E[r(x,y)] - \beta\,
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
   pair as one segment *prompt, chosen, rejected* (:func:`pack_prompts`): both responses attend to the
   prompt and to themselves only, with the positions they would have after the prompt, so the prompt is
   computed once for the pair and several short segments share a row instead of being padded; the
   vocabulary projection runs only on the hidden states that predict response tokens. The values equal
   the padded ``[B, T]`` layout of :func:`advantage.nn.lm.sequence_logprobs` (:func:`sequence_logps`, used
   by evaluation and for models :func:`packable` refuses) to float rounding.
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

import copy
import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor

from advantage.algos.llm import common
from advantage.algos.llm.common import DataConfig, LMModelConfig, LMPolicy, LMTrainerConfig
from advantage.algos.llm.sft import collate
from advantage.config import option, section
from advantage.context import RunContext, Snapshot
from advantage.errors import ConfigError, NonFiniteError
from advantage.math import DPO_LOSSES, dpo_metrics
from advantage.registry import Algorithm, register
from advantage.torch_state import load_optimizer, optimizer_state


@dataclass
class DPOData(DataConfig):
    task: str = option("synthetic", "preference task: synthetic (built in), or dataset with data.path")


@dataclass
class DPOAlgorithm:
    beta: float = option(0.1, "β: strength of the implicit KL to the reference", lo=0, lo_open=True)
    loss_type: str = option("sigmoid", "sigmoid (DPO), ipo or hinge", choices=("sigmoid", "ipo", "hinge"))
    label_smoothing: float = option(0.0, "sigmoid: assumed label-flip probability (cDPO)", lo=0, hi=0.5)
    learning_rate: float = option(5e-4, "peak learning rate", lo=0, lo_open=True)
    lr_schedule: str = option("constant", "decay after warm-up", choices=("constant", "cosine", "linear"))
    warmup_steps: int = option(0, "linear warm-up steps", lo=0)
    min_lr_ratio: float = option(0.0, "final learning rate / peak (cosine and linear)", lo=0, hi=1)
    batch_size: int = option(32, "preference pairs per optimizer step", lo=1)
    micro_batch_size: int = option(0, "pairs per forward pass (0: the whole batch)", lo=0)
    weight_decay: float = option(0.0, "AdamW weight decay", lo=0)
    max_grad_norm: float = option(1.0, "global gradient-norm clip (0: none)", lo=0)
    precompute_ref: bool = option(True, "reference log-probs once for the whole training set")


@dataclass
class DPOConfig:
    data: DPOData = section(DPOData)
    algorithm: DPOAlgorithm = section(DPOAlgorithm)
    model: LMModelConfig = section(LMModelConfig)
    trainer: LMTrainerConfig = section(LMTrainerConfig)


# ----------------------------------------------------------------------------------------------------
# Data: preference pairs as token ids


def make_task(data: DataConfig) -> Any:
    from advantage.envs.text.preference import make_preference_task

    return make_preference_task(data.task, **data.kwargs)


def pairs_of(examples: list[Any]) -> list[tuple[str, str, str]]:
    """``(prompt, chosen, rejected)`` for every ranked pair of every example (K-wise: all C(K,2))."""
    return [
        (e.prompt, e.responses[i], e.responses[j])
        for e in examples
        for i, j in itertools.combinations(range(len(e.responses)), 2)
    ]


def tokenize_pairs(
    tok: Any, pairs: list[tuple[str, str, str]], d: DataConfig
) -> list[tuple[list[int], list[int], list[int]]]:
    """Token ids of (prompt, chosen + EOS, rejected + EOS); over-long items are an error naming them."""
    out = []
    for n, (p, c, r) in enumerate(pairs):
        text = common.prompt_text(tok, p, d.chat_template)
        pi = tok(text, add_special_tokens=False)["input_ids"]
        ci = tok(c, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        ri = tok(r, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        if len(pi) > d.max_prompt_length:
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
    model: torch.nn.Module, items: list[tuple[list[int], list[int], list[int]]], pad_id: int
) -> tuple[Tensor, Tensor]:
    """Summed response log-probs ``[B]`` of the chosen and the rejected responses, one forward pass."""
    from advantage.nn.lm import sequence_logprobs

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


def _ref_logps(ref: torch.nn.Module, items: list[Any], pad_id: int, micro: int) -> Tensor:
    """``[N, 2]`` reference log-probs (chosen, rejected) of ``items``."""
    out = []
    with torch.no_grad():
        for j in range(0, len(items), micro):
            c, r = sequence_logps(ref, items[j : j + micro], pad_id)
            out.append(torch.stack([c, r], dim=-1))
    return torch.cat(out) if out else torch.zeros(0, 2)


# ----------------------------------------------------------------------------------------------------
# Shared-prompt packing: the training forward pass (also the reward model's)

PACK_ROW_LENGTH = 128  # tokens per packed row (longer only for a longer segment): attention stays cheap
PACKABLE_TYPES = ("qwen2", "llama")  # decoders whose forward takes a 4D mask and applies no logit transform


@dataclass
class PackedPrompts:
    """Prompts with their responses packed into rows for one forward pass (:func:`pack_prompts`).

    Responses are numbered 0..S-1 in input order (the responses of the first prompt, then the second's, ...).
    Flat indices address ``[R, L]`` as ``row * L + column``."""

    input_ids: Tensor  # [R, L], pad_id after the last segment of a row
    position_ids: Tensor  # [R, L]: a prompt's tokens 0..P-1, each of its responses P..P+len-1
    attention_mask: Tensor  # [R, 1, L, L] additive: 0 where a query attends, the dtype's minimum elsewhere
    predictors: Tensor  # [N] flat index of the hidden state that predicts each response token
    targets: Tensor  # [N] the response tokens
    owner: Tensor  # [N] the response each token belongs to
    last: Tensor  # [S] flat index of each response's last token
    responses: int  # S

    def to(self, device: torch.device) -> PackedPrompts:
        return PackedPrompts(
            *(getattr(self, f).to(device) for f in ("input_ids", "position_ids", "attention_mask")),
            *(getattr(self, f).to(device) for f in ("predictors", "targets", "owner", "last")),
            self.responses,
        )


def pack_prompts(
    groups: Sequence[tuple[list[int], Sequence[list[int]]]],
    pad_id: int,
    dtype: torch.dtype = torch.float32,
    row_length: int = PACK_ROW_LENGTH,
) -> PackedPrompts:
    """Pack ``(prompt ids, [response ids, ...])`` groups: each group is one segment *prompt, response 1,
    response 2, ...*; segments fill rows of ``max(row_length, longest segment)`` tokens first-fit, in order.

    A prompt token attends causally within its prompt; a response token attends to its prompt and causally
    to its own response, never to another response or segment, and sits at the position it would have right
    after the prompt. Each response's tokens therefore see exactly what they see in a padded batch of
    ``prompt + response`` rows with positions from the mask, so the hidden states (and log-probs) are the
    same up to float rounding, while the prompt is computed once per group and no row is padded to the
    longest sequence. Pad tokens attend only to earlier pads (a finite softmax; their outputs are unused).
    """
    sizes = [len(p) + sum(map(len, rs)) for p, rs in groups]
    cap = max([row_length, *sizes])
    fill: list[int] = []  # tokens used per row
    start: list[tuple[int, int]] = []  # (row, column) of each segment
    for size in sizes:
        row = next((r for r, used in enumerate(fill) if used + size <= cap), len(fill))
        if row == len(fill):
            fill.append(0)
        start.append((row, fill[row]))
        fill[row] += size
    R, L = len(fill), max(fill)
    ids, pos = [pad_id] * (R * L), [0] * (R * L)
    seg, branch = [-1] * (R * L), [-1] * (R * L)  # segment of each slot (-1: pad); 0 prompt, k response k
    predictors: list[int] = []
    targets: list[int] = []
    owner: list[int] = []
    last: list[int] = []
    for n, ((prompt, responses), (row, col)) in enumerate(zip(groups, start, strict=True)):
        at, P = row * L + col, len(prompt)
        ids[at : at + P], pos[at : at + P] = prompt, range(P)
        seg[at : at + P], branch[at : at + P] = [n] * P, [0] * P
        first = at + P - 1  # the last prompt token predicts every response's first token
        at += P
        for k, resp in enumerate(responses, 1):
            m = len(resp)
            ids[at : at + m], pos[at : at + m] = resp, range(P, P + m)
            seg[at : at + m], branch[at : at + m] = [n] * m, [k] * m
            predictors.append(first)
            predictors.extend(range(at, at + m - 1))
            targets.extend(resp)
            owner.extend([len(last)] * m)
            last.append(at + m - 1)
            at += m
    s, b = torch.tensor(seg).view(R, L), torch.tensor(branch).view(R, L)
    col = torch.arange(L)
    allowed = (
        (s[:, :, None] == s[:, None, :])
        & (col[:, None] >= col[None, :])
        & ((b[:, None, :] == 0) | (b[:, None, :] == b[:, :, None]))
    )
    mask = torch.zeros((R, 1, L, L), dtype=dtype).masked_fill_(~allowed[:, None], torch.finfo(dtype).min)
    return PackedPrompts(
        torch.tensor(ids).view(R, L),
        torch.tensor(pos).view(R, L),
        mask,
        torch.tensor(predictors, dtype=torch.long),
        torch.tensor(targets, dtype=torch.long),
        torch.tensor(owner, dtype=torch.long),
        torch.tensor(last, dtype=torch.long),
        len(last),
    )


def packable(model: torch.nn.Module) -> bool:
    """Whether :func:`pack_prompts` batches can go through ``model``: a Qwen2 or Llama decoder with eager or
    SDPA attention (they take a custom 4D mask as is) and no sliding-window layers."""
    cfg = getattr(model, "config", None)
    return (
        cfg is not None
        and getattr(cfg, "model_type", None) in PACKABLE_TYPES
        and getattr(cfg, "_attn_implementation", None) in ("eager", "sdpa")
        and all(t == "full_attention" for t in getattr(cfg, "layer_types", None) or ())
    )


def packed_hidden(decoder: torch.nn.Module, packed: PackedPrompts) -> Tensor:
    """Final-norm hidden states ``[R * L, H]`` of a packed batch (``decoder``: the transformer without the
    LM head). Qwen2/Llama decoders go through the lean forward (:mod:`advantage.nn.lean`)."""
    from advantage.nn.lean import lean_decoder

    lean = lean_decoder(decoder)
    if lean is not None:
        h = lean.hidden(packed.input_ids, packed.position_ids, packed.attention_mask)
        return h.reshape(-1, h.shape[-1])
    out = decoder(
        input_ids=packed.input_ids,
        attention_mask=packed.attention_mask,
        position_ids=packed.position_ids,
        use_cache=False,
    )
    h = out.last_hidden_state
    return h.reshape(-1, h.shape[-1])


def train_logps(
    model: torch.nn.Module,
    items: list[tuple[list[int], list[int], list[int]]],
    pad_id: int,
    row_length: int = PACK_ROW_LENGTH,
) -> tuple[Tensor, Tensor]:
    """:func:`sequence_logps` (summed response log-probs ``[B]`` of chosen and rejected), one forward pass
    of the pairs packed by :func:`pack_prompts`; the padded path for models :func:`packable` refuses or
    an empty prompt (nothing to predict a response's first token from)."""
    if not packable(model) or any(not p for p, _, _ in items):
        return sequence_logps(model, items, pad_id)
    dev = next(model.parameters()).device
    dtype = model.get_input_embeddings().weight.dtype
    packed = pack_prompts([(p, (c, r)) for p, c, r in items], pad_id, dtype, row_length).to(dev)
    h = packed_hidden(model.get_decoder(), packed)[packed.predictors]  # [N, H]
    logits = model.get_output_embeddings()(h).float()  # [N, V]: response tokens only
    # gather − logsumexp, as in sequence_logprobs: no second [N, V] tensor
    logp = logits.gather(-1, packed.targets[:, None]).squeeze(-1) - logits.logsumexp(-1)
    seq = torch.zeros(packed.responses, dtype=logp.dtype, device=dev).index_add_(0, packed.owner, logp)
    return seq[0::2], seq[1::2]  # responses alternate chosen, rejected


def precompute_ref_logps(ref: torch.nn.Module, items: list[Any], pad_id: int, micro: int) -> Tensor:
    """``[N, 2]`` reference log-probs (chosen, rejected) of the training pairs, by :func:`train_logps` (the
    policy's own path, so the first step's log-ratios are 0 up to float rounding)."""
    out = []
    with torch.no_grad():
        for j in range(0, len(items), micro):
            c, r = train_logps(ref, items[j : j + micro], pad_id)
            out.append(torch.stack([c, r], dim=-1))
    return torch.cat(out) if out else torch.zeros(0, 2)


def fused_adamw(params: Sequence[Tensor]) -> bool | None:
    """``fused=True`` for ``torch.optim.AdamW`` where torch has the fused kernel (CPU and CUDA): the same
    update as the default per-tensor loop, in one kernel per step instead of a dozen ops per parameter."""
    return True if params and all(p.device.type in ("cpu", "cuda") for p in params) else None


def dpo_loss_fn(a: DPOAlgorithm) -> Any:
    """The per-pair loss with β and label smoothing bound."""
    return partial(DPO_LOSSES[a.loss_type], beta=a.beta, label_smoothing=a.label_smoothing)


# ----------------------------------------------------------------------------------------------------
# Training


def _reference(cfg: DPOConfig, task: Any, model: torch.nn.Module, fresh: bool) -> torch.nn.Module:
    """The frozen reference: the starting policy (a copy now, or rebuilt as it was at the start)."""
    ref = copy.deepcopy(model) if fresh else common.build_model(cfg, task)[0]
    return ref.eval().requires_grad_(False)


def train(cfg: DPOConfig, ctx: RunContext) -> None:
    a, t, d = cfg.algorithm, cfg.trainer, cfg.data
    torch.set_num_threads(t.torch_threads)
    torch.manual_seed(t.seed)
    task = make_task(d)
    restored = ctx.restored
    if cfg.model.lora.rank > 0:
        raise ConfigError("dpo does not support model.lora yet; set model.lora.rank=0")
    model, tok = common.policy_model(cfg, task, restored)
    ref = _reference(cfg, task, model, fresh=restored is None)
    policy = LMPolicy(model, tok, task, cfg)
    items = tokenize_pairs(tok, pairs_of(policy.examples("train")), d)
    if not items:
        raise ConfigError(f"data.task={d.task!r} gave no training pairs")
    micro = a.micro_batch_size or a.batch_size
    ref_all = precompute_ref_logps(ref, items, tok.pad_token_id, micro) if a.precompute_ref else None
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(
        params, lr=a.learning_rate, weight_decay=a.weight_decay, fused=fused_adamw(params)
    )
    step, epoch, pos = 0, 0, 0
    if restored is not None:
        s = restored.state["algo"]
        load_optimizer("optim", opt, restored.tensors, s["optim"])
        torch.set_rng_state(restored.tensors["torch_rng"])
        step, epoch, pos = restored.step, s["epoch"], s["pos"]
    cursor = common.DataCursor(len(items), t.seed, epoch, pos)
    policy.reference = ref  # evaluation needs it for the implicit rewards

    def snapshot() -> Snapshot:
        opt_tensors, opt_meta = optimizer_state("optim", opt)
        tensors = {**opt_tensors, "torch_rng": torch.get_rng_state()}
        state = {"optim": opt_meta, **cursor.state()}
        return Snapshot(policy, tensors, state, files=lambda: common.hf_files(model, tok))

    loss_fn = dpo_loss_fn(a)
    model.train()
    while step < t.total_steps:
        idx = cursor.next(a.batch_size)
        lr = common.learning_rate(a, step, t.total_steps)
        for g in opt.param_groups:
            g["lr"] = lr
        clock = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        sums: dict[str, Tensor] = {}  # the step's loss and metrics, tensors until the step ends
        for j in range(0, len(idx), micro):
            chunk = idx[j : j + micro]
            batch = [items[i] for i in chunk]
            if ref_all is not None:
                ref_c, ref_r = ref_all[chunk].unbind(-1)
            else:
                with torch.no_grad():
                    ref_c, ref_r = train_logps(ref, batch, tok.pad_token_id)
            pc, pr = train_logps(model, batch, tok.pad_token_id)
            # The micro-batch's pair sum over the step's pair count: accumulation equals one big batch.
            loss = loss_fn(pc, pr, ref_c, ref_r).sum() / len(idx)
            loss.backward()
            parts = {"loss": loss.detach()}
            for k, v in dpo_metrics(pc, pr, ref_c, ref_r, a.beta).items():
                parts[k] = v * (len(chunk) / len(idx))
            for k, v in parts.items():
                sums[k] = sums[k] + v if k in sums else v
        values = torch.stack(list(sums.values())).tolist()  # one conversion per step
        stats = dict(zip(sums, values, strict=True))
        total = stats.pop("loss")
        if not math.isfinite(total):
            raise NonFiniteError(f"step {step + 1}: DPO loss is {total}; stopping")
        grad_norm = (
            float(torch.nn.utils.clip_grad_norm_(params, a.max_grad_norm)) if a.max_grad_norm > 0 else 0.0
        )
        opt.step()
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
    n = limit or (cfg.trainer.eval_episodes if split == "validation" else None)
    tok = policy.tokenizer
    examples = policy.examples(split, n)
    items = tokenize_pairs(tok, pairs_of(examples), cfg.data)
    ref = getattr(policy, "reference", None)
    if ref is None:
        ref = policy.reference = _reference(cfg, policy.task, policy.model, fresh=False)
    was_training = policy.model.training
    policy.model.eval()
    try:
        with torch.no_grad():
            mb = cfg.trainer.eval_batch_size
            lp = _ref_logps(policy.model, items, tok.pad_token_id, mb)
            rp = _ref_logps(ref, items, tok.pad_token_id, mb)
    finally:
        policy.model.train(was_training)
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
        from advantage.algos.llm.preference_eval import compare_to_reference

        d = cfg.data
        c = compare_to_reference(
            policy.model,
            ref,
            tok,
            examples,
            scorer,
            max_prompt_length=d.max_prompt_length,
            max_response_length=d.max_response_length,
            chat_template=d.chat_template,
            batch_size=cfg.trainer.eval_batch_size,
        )
        out.update(
            {
                "win_rate": c["win_rate"],
                "wins": c["wins"],
                "ties": c["ties"],
                "losses": c["losses"],
                "hidden_score": c["score_mean"],
                "reference_hidden_score": c["reference_score_mean"],
                "response_length": c["response_length"],
                "reference_response_length": c["reference_response_length"],
            }
        )
    return out


def load_policy(cfg: DPOConfig, ckpt: Any) -> LMPolicy:
    from advantage.nn.lm import load_pretrained

    model, tok = load_pretrained(ckpt.path, dtype=getattr(torch, cfg.model.dtype))
    return LMPolicy(model.to(cfg.trainer.device), tok, make_task(cfg.data), cfg)


def check(cfg: DPOConfig) -> list[str]:
    """:func:`advantage.algos.llm.common.check` with the preference task."""
    return common.check(cfg, make_task)


register(
    Algorithm(
        name="dpo",
        summary="direct preference optimization (sigmoid, IPO, hinge) against a frozen reference (seed 003)",
        config=DPOConfig,
        train=train,
        load_policy=load_policy,
        evaluate=evaluate,
        check=check,
        defaults={"trainer.total_steps": 200, "trainer.eval_every": 50},
    )
)
