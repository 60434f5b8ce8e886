r"""Reward models from comparisons: a causal-LM backbone with a scalar head, trained with the Bradley–Terry
loss on pairs or InstructGPT's K-wise ranking loss.

InstructGPT (the reward model reads the hidden state of the last token of question + answer and outputs one
number; loss :math:`-\log\sigma(r_\text{chosen} - r_\text{rejected})`) and Bradley & Terry 1952 (team
strengths, :math:`P(i \succ j) = \frac{e^{r_i}}{e^{r_i} + e^{r_j}} = \sigma(r_i - r_j)`; InstructGPT ranks K
responses and averages the :math:`\binom K2` pair losses of a prompt).

.. math::
    L_\text{pairwise} = \frac{1}{N}\sum_{n} -\log\sigma\big(r(x_n, y_n^w) - r(x_n, y_n^l)\big), \qquad
    L_\text{kwise} = \frac{1}{N}\sum_{n} \frac{1}{\binom{K_n}{2}}\sum_{i<j} -\log\sigma\big(r(x_n, y_{n,i}) -
    r(x_n, y_{n,j})\big)

Implementation details:

1. :math:`r(x, y)` is ``head(h_last)``: a linear layer ``hidden → 1`` (fp32, init
   :math:`\mathcal N(0, 1/(H+1))`, zero bias, as in OpenAI's lm-human-preferences) on the final-norm hidden
   state of the **last real token** of prompt + response + EOS. The EOS makes the read-out token the same
   for every sequence; the index is that of the last 1 in the attention mask
   (:func:`~advantage.algos.llm.reward_models.last_token_index`), so left, right and mixed padding all
   pool the right position, and position ids come from the mask, so a padded row scores as the same row
   alone (tested to 1e-5). One forward pass per micro-batch. Training
   packs each comparison as one segment *prompt, response 1, response 2, ...* (:func:`advantage.lm.packing.
   pack_prompts`): every response attends to the prompt and to itself only, at the positions it would have
   after the prompt, so the prompt is computed once per comparison and short segments share a row instead
   of being padded; the rewards equal the padded batch's
   (:meth:`~advantage.algos.llm.reward_models.RewardModel.forward`, used by
   :meth:`~advantage.algos.llm.reward_models.RewardModel.score` and for backbones
   :func:`~advantage.lm.packing.packable` refuses) to float rounding. The model itself, its files and
   its loading are in :mod:`advantage.algos.llm.reward_models`.
2. ``algorithm.loss=pairwise`` trains on pairs: a K-wise example gives its :math:`\binom K2` pairs as
   separate items, shuffled independently. ``kwise`` trains on rankings: one prompt's K responses are in
   the same micro-batch and its pair losses are averaged first (InstructGPT: each prompt counts once, which
   the paper found to overfit less). For K = 2 the two are the same computation.
3. ``algorithm.batch_size`` counts comparisons per optimizer step — pairs (``pairwise``) or rankings
   (``kwise``); each micro-batch's loss sum is divided by that global count, so gradient accumulation gives
   the gradient of one big batch.
4. ``algorithm.center_rewards_coef`` c adds :math:`c\cdot\bar r^2` per comparison, :math:`\bar r` the mean
   reward of its responses (Eisenstein et al. 2023; TRL's term :math:`(r_w + r_l)^2` is 4 × this for a
   pair): rewards of a prompt are pushed to average zero, which Bradley–Terry leaves free.
5. AdamW, warm-up then cosine/linear/constant, global gradient-norm clipping, per-epoch shuffles seeded by
   (``trainer.seed``, epoch): a resumed run sees exactly the batches of an uninterrupted one.
6. A checkpoint folder is the backbone's ``save_pretrained`` folder plus ``value_head.safetensors`` and
   ``reward_model.json``; :func:`~advantage.algos.llm.reward_models.load_reward_model` reads it (or a
   run folder: its latest checkpoint) for later trainers. The head is also in the checkpoint tensors,
   with the optimizer and RNG state.
7. Evaluation: pairwise accuracy on held-out comparisons (every :math:`\binom K2` pair counts; it is also
   ``return_mean``, for ``trainer.stop_at_return``), the mean margin, and for the synthetic task the
   agreement with its noise-free hidden score.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

import torch
from torch import Tensor

from advantage import distributed, optim
from advantage.algos.llm import data_parallel
from advantage.algos.llm.checks import check as check_run
from advantage.algos.llm.data import TaskExamples, preference_responses, preference_task
from advantage.algos.llm.evaluation import eval_examples
from advantage.algos.llm.models import policy_model
from advantage.algos.llm.reward_models import RewardModel, collate_sequences, load_reward_model
from advantage.algos.llm.training import resume, set_learning_rate
from advantage.algos.llm.training import snapshot as lm_snapshot
from advantage.checkpoint import Checkpoint
from advantage.configs.reward_model import RMConfig, RMDataConfig
from advantage.context import RunContext, Snapshot
from advantage.envs.text.preference import PreferenceExample
from advantage.errors import ConfigError, NonFiniteError
from advantage.lm.packing import long_tensor, pack_prompts
from advantage.math.preference import bradley_terry_loss, kwise_ranking_loss
from advantage.schedules import schedule_total
from advantage.torch_state import LearnerState

# ----------------------------------------------------------------------------------------------------
# The trained model as a policy


class RewardPolicy(TaskExamples):
    """A trained reward model with its task: ``act((prompt, response))`` — or ``act(text)``, a response
    to the empty prompt — is the reward, a float; :meth:`examples` gives the task's comparisons."""

    def __init__(self, model: RewardModel, task: Any, cfg: RMConfig):
        self.model, self.task, self.cfg = model, task, cfg
        self._examples = {}

    def act(self, obs: Any, deterministic: bool = True) -> float:
        prompt, response = ("", obs) if isinstance(obs, str) else obs
        return float(self.model.score([prompt], [response])[0])


def load_policy(cfg: RMConfig, ckpt: Checkpoint) -> RewardPolicy:
    rm = load_reward_model(ckpt.path, device=cfg.trainer.device, dtype=getattr(torch, cfg.model.dtype))
    return RewardPolicy(rm, preference_task(cfg.data), cfg)


# ----------------------------------------------------------------------------------------------------
# Loss

RANK_LOSSES = {
    "pairwise": lambda scores, valid: bradley_terry_loss(scores[:, 0], scores[:, 1]),  # [N, 2] → [N]
    "kwise": kwise_ranking_loss,  # [N, K] best first → [N]
}


def rm_loss(
    model: RewardModel,
    seqs: Sequence[list[int]],
    index: Tensor,
    normalizer: float,
    *,
    loss: str = "pairwise",
    center_coef: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """The micro-batch's summed comparison losses divided by the step's comparison count ``normalizer``.

    ``seqs`` are the micro-batch's token sequences; ``index`` ``[N, K]`` says which sequence is each
    comparison's k-th best response (-1: none, for rankings shorter than K). One forward pass."""
    ids, mask = collate_sequences(seqs, model.tokenizer.pad_token_id)
    rewards = model(ids.to(model.device), mask.to(model.device))  # [S]
    loss_value, stats = rank_loss(rewards, index, normalizer, loss=loss, center_coef=center_coef)
    return loss_value, {k: float(v) for k, v in stats.items()}


def rank_loss(
    rewards: Tensor, index: Tensor, normalizer: float, *, loss: str = "pairwise", center_coef: float = 0.0
) -> tuple[Tensor, dict[str, Tensor]]:
    """:func:`rm_loss` from the rewards ``[S]`` of the micro-batch's sequences; the statistics are 0-d
    tensors (no conversion per micro-batch)."""
    complete = index.device.type == "cpu" and bool((index >= 0).all())  # every ranking has K responses
    index = index.to(rewards.device)
    valid = index >= 0  # [N, K]
    # (a complete batch skips the masking: the same values and gradients with two operations fewer)
    scores = rewards[index] if complete else torch.where(valid, rewards[index.clamp(min=0)], 0.0)  # [N, K]
    per = RANK_LOSSES[loss](scores, valid)  # [N]
    if center_coef:
        per = per + center_coef * ((scores * valid).sum(-1) / valid.sum(-1)) ** 2
    with torch.no_grad():  # every ranked pair (i above j) of the micro-batch, for the logs
        K = index.shape[1]
        i, j = torch.triu_indices(K, K, offset=1, device=rewards.device)
        diff = scores[:, i] - scores[:, j]  # [N, C(K, 2)]
        if complete:
            pairs = rewards.new_tensor(float(diff.numel()))
        else:
            both = valid[:, i] & valid[:, j]
            diff = diff[both]
            pairs = both.sum().float()
        stats = {
            "pairs": pairs,
            "correct": (diff > 0).sum().float(),
            "margin": diff.sum(),
            "reward": rewards.sum(),
            "reward_sq": (rewards**2).sum(),
            "sequences": rewards.new_tensor(float(len(rewards))),
        }
    return per.sum() / normalizer, stats


def build_items(examples: Sequence[PreferenceExample], loss: str) -> list[tuple[int, tuple[int, ...]]]:
    """Training items ``(example, responses best first)``: every pair (pairwise) or every ranking (kwise)."""
    if loss == "kwise":
        return [(e, tuple(range(len(ex.responses)))) for e, ex in enumerate(examples)]
    return [(e, (i, j)) for e, ex in enumerate(examples) for i, j in ex.pairs()]


def micro_batch(
    items: Sequence[tuple[int, tuple[int, ...]]], tokens: Sequence[tuple[list[int], list[list[int]]]]
) -> tuple[list[list[int]], Tensor]:
    """The sequences (prompt + response + EOS) of ``items`` and their ``[N, K]`` index (-1 padded): those
    of :func:`micro_groups`, each response joined to its prompt."""
    groups, index = micro_groups(items, tokens)
    return [prompt + r for prompt, responses in groups for r in responses], index


def micro_groups(
    items: Sequence[tuple[int, tuple[int, ...]]], tokens: Sequence[tuple[list[int], list[list[int]]]]
) -> tuple[list[tuple[list[int], list[list[int]]]], Tensor]:
    """:func:`micro_batch` for :func:`~advantage.lm.packing.pack_prompts`: ``(prompt, [responses in
    ranked order])`` per item, and the same ``[N, K]`` index (the packed responses are numbered in order)."""
    groups = []
    K = max(len(r) for _, r in items)
    index: list[int] = []  # built as a list: one conversion instead of a tensor op per item
    count = 0
    for e, ranked in items:
        prompt, responses = tokens[e]
        groups.append((prompt, [responses[r] for r in ranked]))
        index += [*range(count, count + len(ranked)), *[-1] * (K - len(ranked))]
        count += len(ranked)
    return groups, long_tensor(index).view(len(items), K)


def tokenize(model: RewardModel, examples: Sequence[PreferenceExample], d: RMDataConfig) -> list[Any]:
    """``(prompt ids, [response ids + EOS])`` per example; too long is a :class:`ConfigError`."""
    out = []
    for i, ex in enumerate(examples):
        pairs = [model.encode(ex.prompt, r) for r in ex.responses]
        p = pairs[0][0]
        if d.max_prompt_length is not None and len(p) > d.max_prompt_length:
            raise ConfigError(
                f"training prompt {i} is {len(p)} tokens, longer than "
                f"data.max_prompt_length={d.max_prompt_length}"
            )
        longest = max(len(r) for _, r in pairs)
        if longest > d.max_response_length:
            raise ConfigError(
                f"a response of training example {i} is {longest} tokens with EOS, longer than "
                f"data.max_response_length={d.max_response_length}"
            )
        out.append((p, [r for _, r in pairs]))
    return out


# ----------------------------------------------------------------------------------------------------
# Training


def train(cfg: RMConfig, ctx: RunContext) -> None:
    a, t, d = cfg.algorithm, cfg.trainer, cfg.data
    torch.set_num_threads(t.torch_threads)
    torch.manual_seed(t.seed)
    task = preference_task(d)
    restored = ctx.restored
    backbone, tok = policy_model(cfg, task, restored)
    model = RewardModel(backbone, tok, chat_template=d.chat_template, seed=t.seed).to(t.device)
    policy = RewardPolicy(model, task, cfg)
    examples = policy.examples("train")
    tokens = tokenize(model, examples, d)
    items = build_items(examples, a.loss)
    world = distributed.current()
    net = data_parallel.wrap(world, model)  # what this rank trains: the model, or its FSDP shards
    params = [p for p in net.parameters() if p.requires_grad]
    betas = (a.betas[0], a.betas[1])  # two: checked by the config
    opt = optim.adam(params, a.learning_rate, weight_decay=a.weight_decay, decoupled=True, betas=betas)
    learner = LearnerState({"value_head": model.head}, {"optim": data_parallel.optimizer(world, net, opt)})
    step, cursor = resume(learner, restored, len(items), t.seed)
    data_parallel.reshard(world, net, model)  # the restored value head
    lora = model.backbone if cfg.model.lora.rank > 0 else None
    save = partial(lm_snapshot, policy, learner, cursor, model.files, lora)

    def snapshot() -> Snapshot:
        data_parallel.unshard(world, net, model)  # the full weights, from every rank's shard
        return save()

    micro = a.micro_batch_size or a.batch_size
    packed = model.packable() and net is model  # packed rows bypass FSDP's root forward
    pad_id, mask_dtype = tok.pad_token_id, model.backbone.get_input_embeddings().weight.dtype
    net.train()
    names = ("loss", "grad_norm", "n", "pairs", "correct", "margin", "reward", "reward_sq", "sequences")
    totals = dict.fromkeys(names, 0.0)
    clock = time.perf_counter()
    while step < t.total_steps:
        idx = cursor.next(a.batch_size)
        share = world.share(idx)  # this rank's comparisons; the loss is normalized by all of idx
        lr = set_learning_rate(opt, a, step, schedule_total(t, step))
        optim.zero_grad(params)  # opt.zero_grad(set_to_none=True) without its profiler scope
        sums: dict[str, Tensor] = {}  # the step's loss and statistics, tensors until the step ends
        for j in range(0, len(share), micro):
            chunk = [items[i] for i in share[j : j + micro]]
            if packed:
                groups, index = micro_groups(chunk, tokens)
                rewards = net.forward_packed(pack_prompts(groups, pad_id, mask_dtype).to(model.device))
            else:
                seqs, index = micro_batch(chunk, tokens)
                ids, mask = collate_sequences(seqs, pad_id)
                rewards = net(ids.to(model.device), mask.to(model.device))
            loss, stats = rank_loss(
                rewards, index, float(len(idx)), loss=a.loss, center_coef=a.center_rewards_coef
            )
            loss.backward()
            for k, v in {"loss": loss.detach(), **stats}.items():
                sums[k] = sums[k] + v if k in sums else v
        values = dict(zip(sums, world.reduce(torch.stack(list(sums.values())).tolist()), strict=True))
        total = values.pop("loss")
        for k, x in values.items():
            totals[k] += x
        if not math.isfinite(total):
            raise NonFiniteError(
                f"step {step + 1}: reward-model loss is {total}; stopping (the last checkpoint is kept)"
            )
        grad_norm = world.clip_grad_norm(params, a.max_grad_norm)
        optim.step(opt)
        step += 1
        totals["loss"] += total
        totals["grad_norm"] += grad_norm
        totals["n"] += 1
        if step % t.log_every == 0 or step == t.total_steps:
            now = time.perf_counter()
            n, pairs, seqs_n = totals["n"], max(totals["pairs"], 1.0), max(totals["sequences"], 1.0)
            mean = totals["reward"] / seqs_n
            ctx.log(
                step,
                {
                    "train/loss": totals["loss"] / n,
                    "train/accuracy": totals["correct"] / pairs,
                    "train/margin": totals["margin"] / pairs,
                    "train/reward_mean": mean,
                    "train/reward_std": math.sqrt(max(totals["reward_sq"] / seqs_n - mean**2, 0.0)),
                    "train/grad_norm": totals["grad_norm"] / n,
                    "train/learning_rate": lr,
                    "train/epoch": cursor.progress,
                    "train/sequences_per_second": totals["sequences"] / max(now - clock, 1e-9),
                },
            )
            totals = dict.fromkeys(totals, 0.0)
            clock = now
        if ctx.tick(step, snapshot):
            break
    ctx.finish(step, snapshot())


# ----------------------------------------------------------------------------------------------------
# Evaluation and checks


def evaluate(
    cfg: RMConfig,
    policy: RewardPolicy,
    *,
    split: str = "validation",
    limit: int | None = None,
    samples: int | None = None,
    seed: int | None = None,
    temperature: float | None = None,
) -> dict[str, Any]:
    """Score every response of the first ``limit`` examples of ``split`` (default
    ``trainer.eval_episodes`` for validation, the whole split otherwise).

    * ``accuracy`` — the fraction of labelled pairs (all :math:`\\binom K2` of each ranking) the model
      orders the same way; ``return_mean`` is the same number (for ``trainer.stop_at_return``);
    * ``margin`` — the mean :math:`r_\\text{better} - r_\\text{worse}` over those pairs; ``reward_mean``,
      ``reward_std`` over all responses;
    * a task with a ``hidden_score`` (synthetic) adds ``hidden_agreement``, the fraction of pairs ordered
      as the noise-free hidden score orders them, and ``hidden_correlation``, Pearson's r of the rewards
      and the hidden scores.

    A reward model does not sample: ``samples`` must be None or 1; ``seed`` and ``temperature`` are
    accepted for the CLI's sake and unused."""
    examples = eval_examples(cfg, policy, split, limit, samples, "a reward model does not sample")
    prompts = [ex.prompt for ex in examples for _ in ex.responses]
    responses = [r for ex in examples for r in ex.responses]
    rewards = policy.model.score(prompts, responses, batch_size=cfg.trainer.eval_batch_size).cpu().double()
    pairs, start = [], 0  # every labelled pair (better, worse): indices into the flat list of responses
    for ex in examples:
        pairs += [(start + i, start + j) for i, j in ex.pairs()]
        start += len(ex.responses)
    better, worse = torch.tensor(pairs, dtype=torch.long).view(-1, 2).unbind(-1)
    diffs = (rewards[better] - rewards[worse]).tolist()
    res: dict[str, Any] = {
        "split": split,
        "n": len(examples),
        "pairs": len(diffs),
        "accuracy": sum(x > 0 for x in diffs) / len(diffs),
        "margin": sum(diffs) / len(diffs),
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std(unbiased=False)),
    }
    res["return_mean"] = res["accuracy"]
    score = getattr(policy.task, "hidden_score", None)
    if score is not None:
        hidden = torch.tensor(
            [score(p, y) for p, y in zip(prompts, responses, strict=True)], dtype=torch.float64
        )
        hd, rd = hidden[better] - hidden[worse], rewards[better] - rewards[worse]
        ordered = hd != 0  # the pairs the hidden score orders (it ties some that the noisy labels order)
        res["hidden_agreement"] = int((hd * rd > 0)[ordered].sum()) / max(int(ordered.sum()), 1)
        res["hidden_correlation"] = float(torch.corrcoef(torch.stack([rewards, hidden]))[0, 1])
    return res


# :func:`advantage.algos.llm.checks.check` with the preference task.
check = partial(check_run, task_factory=preference_task, responses=preference_responses)
