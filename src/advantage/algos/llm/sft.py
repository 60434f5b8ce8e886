r"""Supervised fine-tuning (SFT): teach a causal language model the task's reference responses before RL.

Ouyang et al. 2022 (RLHF pipelines start from a supervised policy: InstructGPT's SFT stage). The loss is the
negative log-likelihood of the response tokens only — the prompt is context, not a target:

.. math::
    L(\theta) = -\frac{1}{Z}\sum_{i\in\text{step}}\sum_{t} m_{i,t}\,\log\pi_\theta(y_{i,t}\mid x_i, y_{i,<t}),
    \qquad Z = \sum_{i\in\text{step}}\sum_t m_{i,t}

where :math:`m` is the response mask (the EOS token that ends each response is a target too) and
:math:`Z` counts the response tokens of the *whole optimizer step*: with gradient accumulation over
micro-batches each micro-batch's token sum is divided by the same global :math:`Z`, so accumulating gives
exactly the gradient of one big batch (a per-micro-batch mean would weigh short micro-batches more).

Implementation details:

1. Batches use the layout of every language-model algorithm here: prompts left-padded to ``P``, responses
   (target + EOS) right-padded to ``T``; :func:`advantage.lm.model.sequence_logprobs` gives the ``[B, T]``
   log-probs in one forward pass, and :func:`advantage.math.masked.token_mean` (with the global
   normalizer) the loss.
2. ``algorithm.batch_size`` counts sequences per optimizer step; ``algorithm.micro_batch_size`` sequences
   per forward pass (gradient accumulation when smaller). ``algorithm.packing`` puts several sequences in
   one row with restarting position ids and a block-diagonal mask (:func:`pack`); the loss is the same.
3. AdamW, linear warm-up then cosine or linear decay (to ``min_lr_ratio`` × the peak) or constant;
   global gradient-norm clipping.
4. The training set is shuffled once per epoch with a generator seeded by (``trainer.seed``, epoch), so
   a resumed run sees exactly the batches of an uninterrupted one.
5. Every checkpoint folder is also a ``save_pretrained`` model folder (safetensors weights, config,
   tokenizer; LoRA merged), usable as ``model.path`` by a later run; optimizer moments, RNG state and
   the data position are in the checkpoint's tensors and state for an exact resume.
6. Validation during training: greedy accuracy (and pass@K / maj@K with ``trainer.eval_samples``) on the
   validation split; ``advantage eval RUN`` reports the same on the test split.
7. Preference data (the start of the RLHF pipeline: pretrain → SFT → reward model → PPO): with
   ``data.task=synthetic`` (or ``data.task=dataset data.targets=chosen|all`` for a preference file) the
   targets are a preference task's responses — ``data.targets=all`` imitates every ranked response of a
   prompt (a policy with varied, middling answers: room for RL to improve), ``chosen`` only the best
   one. Evaluation then reports the greedy responses' mean hidden score (the synthetic task's rule) and
   the held-out NLL of the targets (:func:`evaluate`).
"""

from __future__ import annotations

import math
import time
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from advantage import distributed, optim
from advantage.algos.llm import data_parallel
from advantage.algos.llm.batches import collate
from advantage.algos.llm.checks import check as check_run
from advantage.algos.llm.data import make_task as text_task
from advantage.algos.llm.data import preference_task
from advantage.algos.llm.evaluation import eval_examples
from advantage.algos.llm.evaluation import evaluate as evaluate_verifier
from advantage.algos.llm.models import eval_mode, hf_files, policy_model
from advantage.algos.llm.policy import LMPolicy, prompt_text
from advantage.algos.llm.policy import load_policy as load_lm_policy
from advantage.algos.llm.training import resume, set_learning_rate
from advantage.algos.llm.training import snapshot as lm_snapshot
from advantage.configs.llm import DataConfig
from advantage.configs.sft import PREFERENCE_ONLY, SFTConfig
from advantage.context import RunContext, Snapshot
from advantage.errors import ConfigError, NonFiniteError
from advantage.math.masked import token_mean
from advantage.schedules import schedule_total
from advantage.torch_state import LearnerState

if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedModel


class Demonstration(NamedTuple):
    """One SFT target: a prompt and the response to imitate."""

    prompt: str
    target: str


def preference_targets(d: DataConfig) -> str | None:
    """``"chosen"`` or ``"all"`` when SFT imitates a preference task's responses, None for a text task."""
    targets = getattr(d, "targets", "target")
    if targets == "auto":
        return "all" if d.task in PREFERENCE_ONLY else None
    return targets if targets in ("chosen", "all") else None


def make_task(d: DataConfig) -> Any:
    """The task of ``data``: a preference task (:func:`preference_targets`) or a text task."""
    return text_task(d) if preference_targets(d) is None else preference_task(d)


def demonstrations(examples: list[Any], d: DataConfig) -> list[Any]:
    """The training targets: a text task's examples as they are; for a preference task every ranked
    response of each prompt (``all``) or the best one (``chosen``), as :class:`Demonstration` s."""
    mode = preference_targets(d)
    if mode is None:
        return examples
    return [
        Demonstration(e.prompt, r)
        for e in examples
        for r in (e.responses if mode == "all" else e.responses[:1])
    ]


def tokenize_examples(
    policy: LMPolicy, examples: list[Any], max_prompt: int | None, max_response: int
) -> tuple[list[list[int]], list[list[int]]]:
    """Token ids of each prompt (as the model sees it) and of each target response followed by EOS."""
    tok, chat = policy.tokenizer, policy.cfg.data.chat_template
    prompts, responses = [], []
    for i, e in enumerate(examples):
        p = tok(prompt_text(tok, e.prompt, chat), add_special_tokens=False)["input_ids"]
        r = tok(e.target, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        if max_prompt is not None and len(p) > max_prompt:
            raise ConfigError(
                f"training prompt {i} is {len(p)} tokens, longer than data.max_prompt_length={max_prompt}"
            )
        if len(r) > max_response:
            raise ConfigError(
                f"training target {i} is {len(r)} tokens with EOS, longer than "
                f"data.max_response_length={max_response}"
            )
        prompts.append(p)
        responses.append(r)
    return prompts, responses


def sft_loss(model: PreTrainedModel, mb: dict[str, torch.Tensor], normalizer: float) -> torch.Tensor:
    """Sum of response-token NLL of micro-batch ``mb`` divided by the step's token count ``normalizer``."""
    from advantage.lm.model import sequence_logprobs

    logp = sequence_logprobs(  # [B, T]
        model, mb["input_ids"], mb["attention_mask"], response_start=int(mb["P"])
    )
    return token_mean(-logp, mb["response_mask"], normalizer=normalizer)


def pack(
    prompts: list[list[int]], responses: list[list[int]], pad_id: int, length: int
) -> dict[str, torch.Tensor]:
    """Several (prompt, response) sequences per row, first-fit in order: ``input_ids`` and
    ``position_ids`` [R, L] (positions restart at 0 for every sequence) and ``target_mask`` [R, L] (1 on
    response tokens, the targets of the loss). With no attention mask, transformers derives a
    block-diagonal causal mask from the restarting positions, so a sequence never attends to its
    neighbours (``masking_utils.find_packed_sequence_indices``); the result equals the padded batch."""
    rows: list[tuple[list[int], list[int], list[float]]] = []
    for p, r in zip(prompts, responses, strict=True):
        n = len(p) + len(r)
        if n > length:
            raise ConfigError(f"a sequence of {n} tokens does not fit algorithm.pack_length={length}")
        row = next((row for row in rows if len(row[0]) + n <= length), None)
        if row is None:
            row = ([], [], [])
            rows.append(row)
        row[0].extend(p + r)
        row[1].extend(range(n))
        row[2].extend([0.0] * len(p) + [1.0] * len(r))
    L = max(len(row[0]) for row in rows)
    ids = torch.full((len(rows), L), pad_id, dtype=torch.long)
    pos = torch.zeros((len(rows), L), dtype=torch.long)
    tmask = torch.zeros((len(rows), L))
    for i, (row_ids, row_pos, row_mask) in enumerate(rows):
        n = len(row_ids)
        ids[i, :n] = torch.tensor(row_ids)
        # The padding tail is a sequence of its own (positions from 0), outside every real block.
        pos[i] = torch.cat([torch.tensor(row_pos), torch.arange(L - n)])
        tmask[i, :n] = torch.tensor(row_mask)
    return {"input_ids": ids, "position_ids": pos, "target_mask": tmask}


def packed_loss(model: PreTrainedModel, mb: dict[str, torch.Tensor], normalizer: float) -> torch.Tensor:
    """:func:`sft_loss` over packed rows: token j is predicted from the logits at j - 1."""
    # use_cache=False: transformers detects packed rows only when no KV cache is being built.
    out = model(input_ids=mb["input_ids"], position_ids=mb["position_ids"], use_cache=False)
    logits = out.logits[:, :-1].float()
    targets = mb["input_ids"][:, 1:]
    logp = logits.gather(-1, targets[..., None]).squeeze(-1) - logits.logsumexp(-1)  # [R, L-1]
    return token_mean(-logp, mb["target_mask"][:, 1:], normalizer=normalizer)


def train(cfg: SFTConfig, ctx: RunContext) -> None:
    a, t, d = cfg.algorithm, cfg.trainer, cfg.data
    torch.set_num_threads(t.torch_threads)
    torch.manual_seed(t.seed)
    task = make_task(d)
    restored = ctx.restored
    model, tok = policy_model(cfg, task, restored)
    policy = LMPolicy(model, tok, task, cfg)
    examples = demonstrations(policy.examples("train"), d)
    if not examples:
        raise ConfigError(f"data.task={d.task!r} gave no training examples")
    prompts, responses = tokenize_examples(policy, examples, d.max_prompt_length, d.max_response_length)
    world = distributed.current()
    net = data_parallel.wrap(world, model)  # what this rank trains: the model, or its FSDP shards
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(
        params, lr=a.learning_rate, betas=(a.betas[0], a.betas[1]), weight_decay=a.weight_decay
    )
    learner = LearnerState(optimizers={"optim": data_parallel.optimizer(world, net, opt)})
    step, cursor = resume(learner, restored, len(examples), t.seed)
    lora = model if cfg.model.lora.rank > 0 else None
    save = partial(lm_snapshot, policy, learner, cursor, lambda: hf_files(model, tok), lora)

    def snapshot() -> Snapshot:
        data_parallel.unshard(world, net, model)  # the full weights, from every rank's shard
        return save()

    micro = a.micro_batch_size or a.batch_size
    net.train()
    stats: dict[str, float] = {"loss": 0.0, "tokens": 0.0, "grad_norm": 0.0, "n": 0}
    clock = time.perf_counter()
    while step < t.total_steps:
        batch = cursor.next(a.batch_size)
        lr = set_learning_rate(opt, a, step, schedule_total(t, step))
        normalizer = float(sum(len(responses[i]) for i in batch))  # of the global batch: every rank's Z
        idx = world.share(batch)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for j in range(0, len(idx), micro):
            chunk = idx[j : j + micro]
            ps, rs = [prompts[i] for i in chunk], [responses[i] for i in chunk]
            if a.packing:
                mb = {k: v.to(t.device) for k, v in pack(ps, rs, tok.pad_token_id, a.pack_length).items()}
                loss = packed_loss(net, mb, normalizer)
            else:
                mb = {k: v.to(t.device) for k, v in collate(ps, rs, tok.pad_token_id).items()}
                loss = sft_loss(net, mb, normalizer)
            loss.backward()
            total += float(loss.detach())
        total = world.reduce([total])[0]
        if not math.isfinite(total):
            raise NonFiniteError(
                f"step {step + 1}: SFT loss is {total}; stopping (the last checkpoint is kept)"
            )
        grad_norm = world.clip_grad_norm(params, a.max_grad_norm)
        optim.step(opt)
        step += 1
        stats["loss"] += total
        stats["tokens"] += normalizer
        stats["grad_norm"] += grad_norm
        stats["n"] += 1
        if step % t.log_every == 0 or step == t.total_steps:
            now = time.perf_counter()
            n = stats["n"]
            ctx.log(
                step,
                {
                    "train/loss": stats["loss"] / n,
                    "train/grad_norm": stats["grad_norm"] / n,
                    "train/learning_rate": lr,
                    "train/epoch": cursor.progress,
                    "train/tokens_per_second": stats["tokens"] / max(now - clock, 1e-9),
                },
            )
            stats = {"loss": 0.0, "tokens": 0.0, "grad_norm": 0.0, "n": 0}
            clock = now
        if ctx.tick(step, snapshot):
            break
    ctx.finish(step, snapshot())


# ----------------------------------------------------------------------------------------------------
# Evaluation and loading


def evaluate(
    cfg: SFTConfig,
    policy: LMPolicy,
    *,
    split: str = "validation",
    samples: int | None = None,
    limit: int | None = None,
    seed: int | None = None,
    temperature: float | None = None,
) -> dict[str, Any]:
    """A text task: :func:`advantage.algos.llm.evaluation.evaluate` (accuracy, pass@K, maj@K). A preference
    task: on the first ``limit`` prompts of ``split``, the greedy responses' mean ``hidden_score`` (when the
    task has the synthetic rule; it is then ``return_mean``) and length, and ``nll``, the mean per-token
    negative log-likelihood of the held-out targets (``return_mean`` is ``-nll`` without a hidden score)."""
    if preference_targets(cfg.data) is None:
        return evaluate_verifier(
            cfg, policy, split=split, samples=samples, limit=limit, seed=seed, temperature=temperature
        )
    from advantage.algos.llm.preference_eval import greedy_options, greedy_responses

    greedy = "SFT on preference data evaluates greedy responses"
    examples = eval_examples(cfg, policy, split, limit, samples, greedy)
    d, bs = cfg.data, cfg.trainer.eval_batch_size
    prompts = [e.prompt for e in examples]
    texts, lengths = greedy_responses(policy.model, policy.tokenizer, prompts, **greedy_options(cfg))
    ps, rs = tokenize_examples(
        policy, demonstrations(examples, d), d.max_prompt_length, d.max_response_length
    )
    nll_sum, tokens = 0.0, float(sum(map(len, rs)))
    with eval_mode(policy.model):
        for i in range(0, len(ps), bs):
            mb = collate(ps[i : i + bs], rs[i : i + bs], policy.tokenizer.pad_token_id)
            nll_sum += float(sft_loss(policy.model, {k: v.to(policy.device) for k, v in mb.items()}, tokens))
    res: dict[str, Any] = {
        "split": split,
        "n": len(examples),
        "nll": nll_sum,
        "response_length": sum(lengths) / len(lengths),
        "return_mean": -nll_sum,
    }
    score = getattr(policy.task, "hidden_score", None)
    if score is not None:
        res["hidden_score"] = sum(score(p, y) for p, y in zip(prompts, texts, strict=True)) / len(texts)
        res["return_mean"] = res["hidden_score"]
    return res


# The policy of a checkpoint (a ``save_pretrained`` folder) with the run's task.
load_policy = partial(load_lm_policy, task_factory=make_task)


def check(cfg: SFTConfig) -> list[str]:
    """:func:`advantage.algos.llm.checks.check` with the task of :func:`make_task`; the targets must fit
    ``data.max_response_length``."""
    return check_run(
        cfg, make_task, lambda exs: [(e, x.target) for e in exs for x in demonstrations([e], cfg.data)]
    )
