r"""PPO from a learned reward model (RLHF): the last stage of InstructGPT's pipeline (pretrain → SFT → reward
model → PPO; Ouyang et al. 2022), after Ziegler et al. 2019 and Stiennon et al. 2020.

Study notes' walkthrough: **four models** — the *actor* (the policy being trained), the *reference* (the SFT
model, frozen), the *reward model* (prompt + response → one score) and the *critic* (a value head giving
:math:`V(s_t)` for every response token; it may share the actor's trunk). One rollout:

1. the actor samples a response :math:`y` to each prompt :math:`x`; the reward model scores it,
   :math:`s = r_\phi(x, y)`;
2. actor and reference give each response token's log-prob (``old_logp``, ``ref_logp``) and the critic
   its value (``old_values``), all ``[B, T]``;
3. the **per-token reward** is the KL penalty on every token plus the score on the last one
   (Ziegler et al. 2019: *reward = score − β·KL*):

   .. math::
       r_t = -\beta\,\mathrm{KL}_t + \mathbb 1[t = T_b - 1]\, s, \qquad
       \mathrm{KL}_t = \log\pi_\text{old}(y_t|x, y_{<t}) - \log\pi_\text{ref}(y_t|x, y_{<t})

   (:func:`~advantage.math.rewards.token_rewards`; :math:`T_b` the response length with its EOS; k1 by
   default);
4. **GAE over tokens** (:func:`token_gae`): :math:`\delta_t = r_t + \gamma V_{t+1} - V_t`,
   :math:`\hat A_t = \delta_t + \gamma\lambda\hat A_{t+1}`, with :math:`V_{T_b} = 0` after the last
   token; the critic's targets are :math:`R_t = \hat A_t + V_t`; the advantages are then whitened over
   the valid tokens of the rollout;
5. ``ppo_epochs`` passes over the rollout in mini-batches: the actor minimises PPO-Clip
   (:func:`advantage.math.ppo_clip`, the function CartPole's PPO uses) and the critic the clipped value
   loss (:func:`advantage.math.value_losses.clipped`):

   .. math::
       L^\text{actor} = -\operatorname{mean}_t \min\big(\rho_t\hat A_t,
       \operatorname{clip}(\rho_t, 1-\epsilon, 1+\epsilon)\hat A_t\big), \qquad
       L^\text{critic} = \operatorname{mean}_t \tfrac12\max\big((V_t - R_t)^2,
       (V_t^\text{old} + \operatorname{clip}(V_t - V_t^\text{old}, \pm\epsilon_v) - R_t)^2\big)

6. optionally, β adapts once per rollout to the measured KL (:class:`advantage.math.AdaptiveKLController`).

Implementation details:

1. Batch units: ``data.rollout_batch_size`` prompts per rollout, one response each; one trainer step is
   one rollout and its ``ppo_epochs`` × (rollout / ``mini_batch_size``) optimizer steps. Each optimizer
   step's losses are divided by its global token count, so micro-batches add up to one big batch.
2. The reward model is a ``reward_model`` run (:func:`advantage.algos.llm.reward_models.load_reward_model`)
   and must use the policy's tokenizer (checked before the run starts: an error names both). It scores
   the decoded response + EOS, as it was trained. A truncated response (no EOS within
   ``data.max_response_length``) is scored as it stands and treated as terminal: the length limit is part
   of the environment, nothing follows the last token.
3. The reference is the starting policy (``worker.actor.model``), frozen; it is rebuilt from the same
   folder on resume. The critic is a value head (``Linear(hidden, 1)`` in fp32) on the final-norm hidden
   state :math:`h_{P-1+t}` — the state in which :math:`y_t` is chosen — of a separate copy of the
   starting policy, or of the actor itself (``worker.critic.shared``; loss
   :math:`L^\text{actor} + c_v L^\text{critic}`).
4. Log-probs are those of the sampling distribution (logits / ``worker.rollout.temperature``) for actor,
   π_old and reference alike; ``old_logp`` and ``old_values`` are recomputed by a forward pass after
   generation, not taken from the sampler.
5. Metrics each step: reward-model score, hidden score of the samples (synthetic task), KL to the
   reference (mean per response, ``kl_ref``) beside ``kl_target``, β, policy and value loss, clip
   fractions, approx KL to π_old, entropy (Monte Carlo: mean −log π of the sampled tokens), explained
   variance of the values, response length, seconds per phase. Evaluation (:func:`evaluate`): greedy
   hidden score, reward-model score, win rate against the reference's greedy responses
   (:mod:`advantage.algos.llm.preference_eval`), and the KL of sampled responses to the reference.

TRL's ``PPOTrainer`` and OpenRLHF implement the same recipe; this file follows the papers and the study notes.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn

from advantage import distributed, optim
from advantage.algos.llm import data_parallel
from advantage.algos.llm.batches import trimmed
from advantage.algos.llm.checks import check as check_run
from advantage.algos.llm.data import DataCursor, preference_task
from advantage.algos.llm.evaluation import evaluate_preference
from advantage.algos.llm.models import frozen_reference, hf_files, policy_model, scalar_head
from advantage.algos.llm.policy import LMPolicy
from advantage.algos.llm.policy import load_policy as load_lm_policy
from advantage.algos.llm.reward_models import load_reward, reward_model_problems
from advantage.algos.llm.training import learning_rate
from advantage.algos.llm.training import snapshot as lm_snapshot
from advantage.checkpoint import Checkpoint
from advantage.configs.ppo_rlhf import PPOActor, PPOCritic, PPORLHFConfig
from advantage.context import RunContext, Snapshot
from advantage.errors import NonFiniteError
from advantage.math import KL_ESTIMATORS, AdaptiveKLController, aggregate, gae, ppo_clip
from advantage.math.masked import masked_mean, step_normalizer, token_mean
from advantage.math.rewards import last_token, token_rewards
from advantage.math.value_losses import clipped, explained_variance, mse
from advantage.schedules import schedule_total
from advantage.torch_state import LearnerState

make_task = preference_task  # the preference task whose prompts PPO answers


def check(cfg: PPORLHFConfig) -> list[str]:
    """:func:`advantage.algos.llm.checks.check` with the preference task, plus the reward model: set,
    existing, a reward model, and on the policy's tokenizer — all before the run folder is created
    (:func:`advantage.algos.llm.reward_models.reward_model_problems`)."""
    return check_run(cfg, make_task) + reward_model_problems(cfg, make_task)


if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedModel

    from advantage.lm.generate import Generation

# ----------------------------------------------------------------------------------------------------
# Per-token rewards and advantages (pure functions of [B, T] tensors)


def token_gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> Tensor:
    r"""GAE over response tokens with :func:`advantage.math.gae`: the state after the last valid token is
    terminal (:math:`V = 0` there), so padding never leaks into the valid tokens. ``[B, T]`` in and out,
    0 on padding. The critic's targets are ``advantages + values``.

    .. math::
        \delta_t = r_t + \gamma V_{t+1}\mathbb 1[t < T_b - 1] - V_t, \qquad
        \hat A_t = \delta_t + \gamma\lambda\hat A_{t+1}
    """
    valid = mask != 0
    values = torch.where(valid, values, torch.zeros_like(values))
    next_values = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], dim=1)
    terminated = torch.zeros_like(valid)
    terminated[torch.arange(len(mask), device=mask.device), last_token(mask)] = True
    adv = gae(rewards, values, next_values, terminated, torch.zeros_like(valid), gamma, lam)
    return torch.where(valid, adv, torch.zeros_like(adv))


# ----------------------------------------------------------------------------------------------------
# The critic


class ValueHead(nn.Module):
    """``Linear(hidden, 1)`` in fp32 on hidden states ``[B, T, H]`` → values ``[B, T]``. Initialised as
    the reward model's head (:math:`\\mathcal N(0, 1/(H+1))`, zero bias), deterministic in ``seed``."""

    def __init__(self, hidden: int, seed: int = 0):
        super().__init__()
        self.linear = scalar_head(hidden, seed)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.linear(hidden.float()).squeeze(-1)


def token_hidden(model: PreTrainedModel, ids: Tensor, attn: Tensor, response_start: int) -> Tensor:
    """Final-norm hidden states ``[B, T, H]`` at positions ``P-1 .. L-2`` (the states in which the response
    tokens are chosen), from the transformer without its LM head."""
    from advantage.lm.model import position_ids_from_mask

    out = model.base_model(
        input_ids=ids, attention_mask=attn, position_ids=position_ids_from_mask(attn), use_cache=False
    )
    return out.last_hidden_state[:, response_start - 1 : ids.shape[1] - 1]


class Models(nn.Module):
    """The trained models: actor, critic (a value head on a separate trunk or on the actor's) and how to
    run them on a micro-batch. One module, so ``trainer.strategy=fsdp`` shards it as a whole (its
    ``forward`` gathers what the root holds: embeddings, final norms, the LM and value heads)."""

    def __init__(
        self,
        actor: PreTrainedModel,
        critic_trunk: PreTrainedModel | None,
        head: ValueHead,
        temperature: float,
    ):
        super().__init__()
        self.actor, self.critic_trunk, self.head, self.temperature = actor, critic_trunk, head, temperature

    def forward(self, ids: Tensor, attn: Tensor, p_len: int) -> tuple[Tensor, Tensor]:
        """``(logp, values)``, both ``[b, T]``: one pass through a shared trunk, or one per model."""
        from advantage.lm.model import sequence_logprobs

        if self.critic_trunk is None:
            logp, hidden = sequence_logprobs(
                self.actor, ids, attn, response_start=p_len, temperature=self.temperature, return_hidden=True
            )
            return logp, self.head(hidden)
        logp = sequence_logprobs(self.actor, ids, attn, response_start=p_len, temperature=self.temperature)
        return logp, self.head(token_hidden(self.critic_trunk, ids, attn, p_len))

    def critic_parameters(self) -> list[nn.Parameter]:
        trunk = [] if self.critic_trunk is None else list(self.critic_trunk.parameters())
        return trunk + list(self.head.parameters())


# ----------------------------------------------------------------------------------------------------
# The loss


def ppo_rlhf_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    actor: PPOActor,
    critic: PPOCritic,
    normalizer: float,
    tokens: float,
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """``(policy loss, value loss, metrics)`` of one micro-batch, all inputs ``[b, T]``.

    The policy loss is :func:`advantage.math.ppo_clip` aggregated by ``actor.loss_agg`` over the step's
    ``normalizer``; the value loss the clipped (or plain) squared error summed over the step's ``tokens``.
    """
    policy_loss = partial(ppo_clip, clip_low=actor.clip_low, clip_high=actor.clip_high)
    per_token, metrics = policy_loss(logp, old_logp, advantages, mask)
    pg = aggregate(per_token, mask, actor.loss_agg, normalizer=normalizer, max_len=mask.shape[-1])
    if critic.value_clip is None:
        per_token_v = mse(values, old_values, returns, mask)
    else:
        per_token_v = clipped(values, old_values, returns, mask, clip=critic.value_clip)
        with torch.no_grad():  # where the clipped branch is the larger one (no gradient there)
            v_clip = old_values + (values - old_values).clamp(-critic.value_clip, critic.value_clip)
            metrics["value_clipfrac"] = masked_mean(
                ((v_clip - returns) ** 2 > (values - returns) ** 2).float(), mask
            )
    vf = token_mean(per_token_v, mask, normalizer=tokens)
    metrics["entropy"] = masked_mean(-logp.detach(), mask)
    return pg, vf, metrics


# ----------------------------------------------------------------------------------------------------
# Rollout: sample, score, per-token rewards, advantages


def _no_grad_forward(
    models: Models, ref: PreTrainedModel, gen: Generation, micro: int, ref_micro: int
) -> tuple[Tensor, ...]:
    """``old_logp``, ``old_values`` and ``ref_logp``, ``[B, T]`` each, without grad."""
    from advantage.lm.model import sequence_logprobs

    ids, attn = gen.sequences()
    P = gen.prompt_ids.shape[1]
    rows = torch.arange(len(ids))
    old_logp, old_values, ref_logp = [], [], []
    with torch.no_grad():
        for j in range(0, len(rows), micro):
            r = rows[j : j + micro]
            lp, v = models(ids[r], attn[r], P)
            old_logp.append(lp)
            old_values.append(v)
        for j in range(0, len(rows), ref_micro):
            r = rows[j : j + ref_micro]
            ref_logp.append(
                sequence_logprobs(ref, ids[r], attn[r], response_start=P, temperature=models.temperature)
            )
    return torch.cat(old_logp), torch.cat(old_values), torch.cat(ref_logp)


@dataclass
class RLHFBatch:
    """One rollout, ready to learn from: ``B`` = ``data.rollout_batch_size`` responses, all ``[B, T]``."""

    gen: Generation
    old_logp: Tensor  # log π_old of the sampled tokens
    old_values: Tensor  # V_old of the states they were chosen in
    advantages: Tensor  # GAE over tokens (whitened when algorithm.whiten_advantages)
    returns: Tensor  # the critic's targets, advantages (before whitening) + values
    started: float  # perf_counter() when the rollout began (tokens/s covers the whole step)
    times: dict[str, float] = field(default_factory=dict)  # seconds per phase: generate, score, prepare


class RLHFRollout:
    """The sampling side of PPO-RLHF and its state in the checkpoint: the prompt cursor (``epoch``,
    ``pos``; sampling draws come from each prompt's slot in the stream, so the cursor fixes them) and the
    KL coefficient β (``beta``, moved by the adaptive controller when ``algorithm.adaptive_kl``).
    :meth:`collect` samples one response per prompt, scores it with the reward model and turns the scores
    into per-token rewards and advantages."""

    def __init__(
        self,
        cfg: PPORLHFConfig,
        policy: LMPolicy,
        models: Models,
        examples: list[Any],
        restored: Checkpoint | None,
    ):
        a, t = cfg.algorithm, cfg.trainer
        self.cfg, self.policy, self.models, self.examples = cfg, policy, models, examples
        # kl_target is set when adaptive_kl is (checked by the config)
        self.kl_ctl = AdaptiveKLController(a.kl_coef, cast(float, a.kl_target)) if a.adaptive_kl else None
        self.beta = a.kl_coef
        epoch, pos = 0, 0
        if restored is not None:
            s = restored.state["algo"]
            epoch, pos, self.beta = s["epoch"], s["pos"], s["beta"]
            if self.kl_ctl is not None:
                self.kl_ctl.beta = self.beta
        self.cursor = DataCursor(len(examples), t.seed, epoch, pos)

    def tensors(self) -> dict[str, Tensor]:
        return {}

    def state(self) -> dict[str, Any]:
        return {"beta": self.beta, **self.cursor.state()}

    def update_beta(self, kl_ref: float) -> None:
        """Ziegler et al. adapt β to the KL of the rollout just collected (with ``algorithm.adaptive_kl``)."""
        if self.kl_ctl is not None:
            self.beta = self.kl_ctl.update(kl_ref)

    def collect(self, step: int) -> tuple[RLHFBatch, dict[str, float]]:
        """One rollout of ``data.rollout_batch_size`` prompts and its metrics; ``step`` (done so far) names
        the step in errors."""
        cfg, policy, a, roll = self.cfg, self.policy, self.cfg.algorithm, self.cfg.worker.rollout
        t0 = time.perf_counter()
        first, world = self.cursor.epoch * self.cursor.n + self.cursor.pos, distributed.current()
        idx = self.cursor.next(cfg.data.rollout_batch_size)
        slots = list(range(first, first + len(idx)))  # each prompt's sampling draws come from its slot
        if world.group:  # this rank's prompts
            idx, slots = world.share(idx), world.share(slots)
        exs = [self.examples[i] for i in idx]
        prompts = [e.prompt for e in exs]
        gen, texts = policy.complete(prompts, slots=slots, **roll.sampling())
        t1 = time.perf_counter()
        rm = policy.reward_model
        scores = rm.score(prompts, texts, batch_size=cfg.worker.reward.batch_size).float().cpu()  # [B]
        if not bool(torch.isfinite(scores).all()):
            bad = int((~torch.isfinite(scores)).nonzero()[0])
            raise NonFiniteError(
                f"step {step + 1}: the reward model scored response {texts[bad]!r} to prompt "
                f"{prompts[bad]!r} as {float(scores[bad])}"
            )
        t2 = time.perf_counter()
        mask = gen.response_mask  # [B, T]
        n_rows = len(texts)
        micro = cfg.worker.actor.micro_batch_size or n_rows
        old_logp, old_values, ref_logp = _no_grad_forward(
            self.models, policy.reference, gen, micro, cfg.worker.ref.micro_batch_size or n_rows
        )
        kl = KL_ESTIMATORS[a.kl_estimator](old_logp, ref_logp)  # [B, T]
        rewards = token_rewards(scores, kl, mask, self.beta)  # [B, T]
        advantages = token_gae(rewards, old_values, mask, a.gamma, a.lam)  # [B, T]
        returns = advantages + old_values * mask  # [B, T], the critic's targets
        if a.whiten_advantages:  # over every rank's tokens
            advantages = data_parallel.whiten_across_ranks(distributed.current(), advantages, mask)
        kl_seq = (kl * mask).sum(-1)  # [B] KL to the reference per response
        m = {
            "score/mean": float(scores.mean()),
            "score/std": float(scores.std()) if n_rows > 1 else 0.0,
            "kl_ref": float(kl_seq.mean()),
            "beta": self.beta,
            "reward/total_mean": float((rewards * mask).sum(-1).mean()),
            "response/length_mean": float(gen.lengths.float().mean()),
            "response/truncated_frac": float(gen.truncated.float().mean()),
            "explained_variance": explained_variance(old_values, returns, mask),
            "value/mean": float(masked_mean(old_values, mask)),
            "return/mean": float(masked_mean(returns, mask)),
        }
        if a.kl_target is not None:
            m["kl_target"] = a.kl_target
        hidden_score = getattr(policy.task, "hidden_score", None)
        if hidden_score is not None:
            m["hidden_score/mean"] = sum(map(hidden_score, prompts, texts)) / n_rows
        times = {"time/generate": t1 - t0, "time/score": t2 - t1, "time/prepare": time.perf_counter() - t2}
        return RLHFBatch(gen, old_logp, old_values, advantages, returns, t0, times), m


# ----------------------------------------------------------------------------------------------------
# Learning and the training loop


def learn(
    cfg: PPORLHFConfig, models: Models, opt: torch.optim.Optimizer, b: RLHFBatch, step: int
) -> dict[str, list[float]]:
    """``worker.actor.ppo_epochs`` passes over the rollout in mini-batches of ``mini_batch_size`` rows
    (one optimizer step each) and micro-batches of ``micro_batch_size`` rows (one forward each); returns
    every micro-batch's metrics and every optimizer step's losses and gradient norms."""
    actor, critic = cfg.worker.actor, cfg.worker.critic
    actor_params, critic_params = opt.param_groups[0]["params"], opt.param_groups[1]["params"]
    world = distributed.current()
    mask = b.gen.response_mask  # [B, T]
    n_rows = mask.shape[0]  # this rank's; mini-batches are drawn from every rank's rows
    n_all = n_rows * world.size
    mini, micro = actor.mini_batch_size or n_all, actor.micro_batch_size or n_all
    stats: dict[str, list[float]] = {}
    for _ in range(actor.ppo_epochs):
        perm = data_parallel.global_permutation(world, n_rows)
        for start in range(0, n_all, mini):
            rows_mb = data_parallel.local_rows(world, perm[start : start + mini], n_rows)  # this rank's
            Z, tokens = world.reduce(
                [step_normalizer(mask[rows_mb], actor.loss_agg), float(mask[rows_mb].sum())]
            )
            Z, tokens = max(Z, 1.0), max(tokens, 1.0)  # of the global batch
            opt.zero_grad(set_to_none=True)
            totals = [0.0, 0.0]
            micros = [rows_mb[j : j + micro] for j in range(0, len(rows_mb), micro)]
            for r, real in data_parallel.even_micro_batches(world, micros, torch.arange(1)):
                ids, attn, p_len, t_len = trimmed(b.gen, r)
                logp, values = models(ids, attn, p_len)  # [b, t_len] each
                sl = (r, slice(0, t_len))
                pg, vf, lm = ppo_rlhf_loss(
                    logp,
                    b.old_logp[sl],
                    b.advantages[sl],
                    values,
                    b.old_values[sl],
                    b.returns[sl],
                    mask[sl],
                    actor,
                    critic,
                    Z,
                    tokens,
                )
                # A separate critic's graph is disjoint from the actor's: the sum backpropagates each
                # loss into its own model; a shared trunk weighs the value loss by vf_coef.
                loss = pg + (critic.vf_coef if critic.shared else 1.0) * vf
                if not real:  # a filler: the ranks make as many forwards and backwards, this one adds 0
                    (loss * 0.0).backward()
                    continue
                loss.backward()
                totals[0] += float(pg.detach())
                totals[1] += float(vf.detach())
                for k, v in lm.items():
                    stats.setdefault(k, []).append(float(v))
            totals = world.reduce(totals)
            if not all(map(math.isfinite, totals)):
                raise NonFiniteError(f"step {step + 1}: PPO-RLHF losses are {totals}; stopping")
            stats.setdefault("policy_loss", []).append(totals[0])
            stats.setdefault("value_loss", []).append(totals[1])
            for name, params, clip in (
                ("grad_norm", actor_params, actor.max_grad_norm),
                ("critic_grad_norm", critic_params, critic.max_grad_norm),
            ):
                norm = world.clip_grad_norm(params, clip)  # ddp: sums the ranks' gradients
                if clip > 0:
                    stats.setdefault(name, []).append(norm)
            optim.step(opt)
    return stats


def build(
    cfg: PPORLHFConfig, restored: Checkpoint | None
) -> tuple[LMPolicy, Models, Models, LearnerState, torch.optim.Optimizer]:
    """The policy (with its frozen reference and reward model), the models (actor, critic), what this rank
    trains of them (the same :class:`Models`, or with ``fsdp`` its sharded copy, whose full weights go
    back into the first by :func:`~advantage.algos.llm.data_parallel.unshard`) and the learner state (critic
    weights, the optimizer ``optim``, the torch RNG) and the optimizer, restored from ``restored``. Built
    in this order on purpose: the scratch models draw their initial weights from the global generator."""
    t, critic = cfg.trainer, cfg.worker.critic
    task = make_task(cfg.data)
    model, tok = policy_model(cfg, task, restored)
    ref = frozen_reference(cfg, task, None if restored is not None else model)
    rm = load_reward(cfg, tok)
    # The critic starts as a copy of the starting policy (actor and critic may share a trunk).
    trunk = None if critic.shared else copy.deepcopy(ref).requires_grad_(True).train()
    head = ValueHead(model.config.hidden_size, seed=t.seed).to(t.device)
    models = Models(model, trunk, head, cfg.worker.rollout.temperature)
    policy = LMPolicy(model, tok, task, cfg)
    policy.reference, policy.reward_model = ref, rm  # the rollout and evaluation use them
    policy.examples("train")  # the training prompts, read once here (cached for the rollout)
    world = distributed.current()
    net = data_parallel.wrap(world, models)  # Models itself, or its FSDP shards
    actor_params = [p for p in net.actor.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(
        [{"params": actor_params}, {"params": net.critic_parameters()}],
        lr=cfg.worker.actor.learning_rate,
        weight_decay=cfg.worker.actor.weight_decay,
    )
    # The critic's own weights travel as tensors; the policy's as the checkpoint's model folder.
    learner = LearnerState(
        {"value_head": head, **({"critic": trunk} if trunk is not None else {})},
        {"optim": data_parallel.optimizer(world, net, opt)},
    )
    if restored is not None:
        learner.load(restored.tensors, restored.state["algo"])
        data_parallel.reshard(world, net, models)  # fsdp: the restored critic into the shards
    return policy, models, net, learner, opt


def train(cfg: PPORLHFConfig, ctx: RunContext) -> None:
    t, actor, critic = cfg.trainer, cfg.worker.actor, cfg.worker.critic
    torch.set_num_threads(t.torch_threads)
    torch.manual_seed(t.seed)
    restored = ctx.restored
    policy, models, net, learner, opt = build(cfg, restored)
    rollout = RLHFRollout(cfg, policy, models, policy.examples("train"), restored)
    step = 0 if restored is None else restored.step
    world = distributed.current()
    files = partial(hf_files, policy.model, policy.tokenizer)
    save = partial(lm_snapshot, policy, learner, rollout, files)

    def snapshot() -> Snapshot:
        data_parallel.unshard(world, net, models)  # the full weights, from every rank's shard
        return save()

    net.train()
    while step < t.total_steps:
        lr = learning_rate(actor, step, schedule_total(t, step))
        opt.param_groups[0]["lr"] = lr
        opt.param_groups[1]["lr"] = lr * critic.learning_rate / actor.learning_rate  # the actor's schedule
        data_parallel.unshard(world, net, models, everywhere=True)  # fsdp: every rank samples and scores
        batch, m = rollout.collect(step)
        t_learn = time.perf_counter()
        stats = learn(cfg, net, opt, batch, step)
        rollout.update_beta(world.reduce([m["kl_ref"]])[0] / world.size)  # the rollout's mean KL
        step += 1
        m.update({**batch.times, "time/learn": time.perf_counter() - t_learn})
        # Generated tokens over the whole step (generate, score, learn), as grpo reports it.
        m["tokens_per_second"] = float(batch.gen.lengths.sum()) / max(
            time.perf_counter() - batch.started, 1e-9
        )
        row = {f"train/{k}": v for k, v in m.items()}
        row.update({f"train/{k}": sum(v) / len(v) for k, v in stats.items()})
        row["train/learning_rate"] = lr
        row["train/epoch"] = rollout.cursor.progress
        ctx.log(step, world.mean(row, summed=("train/tokens_per_second",)))
        if ctx.tick(step, snapshot):
            break
    ctx.finish(step, snapshot())


# ----------------------------------------------------------------------------------------------------
# Evaluation and loading

# Greedy hidden and reward-model scores, win rate against the reference, KL of samples to it.
evaluate = evaluate_preference


# The actor of a checkpoint (a ``save_pretrained`` folder) with the run's prompts.
load_policy = partial(load_lm_policy, task_factory=make_task)
