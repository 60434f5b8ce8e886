r"""PPO from a learned reward model (RLHF): the last stage of InstructGPT's pipeline (pretrain → SFT → reward
model → PPO; Ouyang et al. 2022), after Ziegler et al. 2019 and Stiennon et al. 2020.

Seed 002's walkthrough: **four models** — the *actor* (the policy being trained), the *reference* (the SFT
model, frozen), the *reward model* (prompt + response → one score) and the *critic* (a value head giving
:math:`V(s_t)` for every response token; it may share the actor's trunk). One rollout:

1. the actor samples a response :math:`y` to each prompt :math:`x`; the reward model scores it,
   :math:`s = r_\phi(x, y)`;
2. actor and reference give each response token's log-prob (``old_logp``, ``ref_logp``) and the critic
   its value (``old_values``), all ``[B, T]``;
3. the **per-token reward** is the KL penalty on every token plus the score on the last one
   (seed 002: *reward = score − β·KL*):

   .. math::
       r_t = -\beta\,\mathrm{KL}_t + \mathbb 1[t = T_b - 1]\, s, \qquad
       \mathrm{KL}_t = \log\pi_\text{old}(y_t|x, y_{<t}) - \log\pi_\text{ref}(y_t|x, y_{<t})

   (:func:`token_rewards`; :math:`T_b` the response length with its EOS; k1 by default);
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
2. The reward model is a ``reward_model`` run (:func:`advantage.algos.llm.reward_model.load_reward_model`)
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

TRL's ``PPOTrainer`` and OpenRLHF implement the same recipe; this file follows the papers and seed 002.
"""

from __future__ import annotations

import copy
import math
import time
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from advantage.algos.llm import common
from advantage.algos.llm.common import LMPolicy
from advantage.algos.llm.grpo import step_normalizer, trimmed
from advantage.algos.llm.ppo_rlhf_config import (  # noqa: F401  (re-exported: the config is part of the API)
    DEFAULTS,
    PRESETS,
    PPOActor,
    PPOAlgorithm,
    PPOCritic,
    PPOData,
    PPORLHFConfig,
    check,
    check_tokenizers,
    make_task,
    reward_folder,
)
from advantage.context import RunContext, Snapshot
from advantage.errors import ConfigError, NonFiniteError
from advantage.math import KL_ESTIMATORS, VALUE_LOSSES, AdaptiveKLController, aggregate, gae, ppo_clip
from advantage.math.masked import masked_mean, masked_var, masked_whiten
from advantage.torch_state import load_module, load_optimizer, module_tensors, optimizer_state

# ----------------------------------------------------------------------------------------------------
# Per-token rewards and advantages (pure functions of [B, T] tensors)


def last_token(mask: Tensor) -> Tensor:
    """``[B]`` index of each row's last valid response token (the EOS, or the last token of a truncated
    response). Response masks are contiguous from position 0, so it is ``Σ mask − 1``."""
    return (mask.sum(-1).long() - 1).clamp(min=0)


def token_rewards(scores: Tensor, kl: Tensor, mask: Tensor, beta: float) -> Tensor:
    r"""Per-token rewards :math:`r_t = -\beta\,\mathrm{KL}_t + \mathbb 1[t = \text{last}]\,s` (Ziegler et
    al. 2019 eq. 2 spread over tokens; Stiennon et al. 2020; seed 002), 0 on padding.

    Args:
        scores: ``[B]`` reward-model scores.
        kl: ``[B, T]`` per-token KL estimates (e.g. k1 = ``old_logp − ref_logp``), no grad.
        mask: ``[B, T]`` response mask.
        beta: KL coefficient β ≥ 0.
    """
    rewards = torch.where(mask != 0, -beta * kl, torch.zeros_like(kl))
    rows = torch.arange(len(scores), device=kl.device)
    rewards[rows, last_token(mask)] += scores.to(rewards.dtype)
    return rewards


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


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """:math:`1 - \\mathrm{Var}(R - V) / \\mathrm{Var}(R)` over the valid tokens (1: perfect critic; ≤ 0: no
    better than a constant)."""
    var = float(masked_var(returns, mask))
    return float("nan") if var == 0 else 1.0 - float(masked_var(returns - values, mask)) / var


# ----------------------------------------------------------------------------------------------------
# The critic


class ValueHead(nn.Module):
    """``Linear(hidden, 1)`` in fp32 on hidden states ``[B, T, H]`` → values ``[B, T]``. Initialised as
    the reward model's head (:math:`\\mathcal N(0, 1/(H+1))`, zero bias), deterministic in ``seed``."""

    def __init__(self, hidden: int, seed: int = 0):
        super().__init__()
        self.linear = nn.Linear(hidden, 1, dtype=torch.float32)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            nn.init.normal_(self.linear.weight, std=1.0 / math.sqrt(hidden + 1))
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.linear(hidden.float()).squeeze(-1)


def token_hidden(model: nn.Module, ids: Tensor, attn: Tensor, response_start: int) -> Tensor:
    """Final-norm hidden states ``[B, T, H]`` at positions ``P-1 .. L-2`` (the states in which the response
    tokens are chosen), from the transformer without its LM head."""
    from advantage.nn.lm import position_ids_from_mask

    out = model.base_model(
        input_ids=ids, attention_mask=attn, position_ids=position_ids_from_mask(attn), use_cache=False
    )
    return out.last_hidden_state[:, response_start - 1 : ids.shape[1] - 1]


class Models:
    """The trained models: actor, critic (a value head on a separate trunk or on the actor's) and how to
    run them on a micro-batch."""

    def __init__(self, actor: nn.Module, critic_trunk: nn.Module | None, head: ValueHead, temperature: float):
        self.actor, self.critic_trunk, self.head, self.temperature = actor, critic_trunk, head, temperature

    def forward(self, ids: Tensor, attn: Tensor, p_len: int) -> tuple[Tensor, Tensor]:
        """``(logp, values)``, both ``[b, T]``: one pass through a shared trunk, or one per model."""
        from advantage.nn.lm import sequence_logprobs

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
        per_token_v = VALUE_LOSSES["mse"](values, old_values, returns, mask)
    else:
        per_token_v = VALUE_LOSSES["clipped"](values, old_values, returns, mask, clip=critic.value_clip)
        with torch.no_grad():  # where the clipped branch is the larger one (no gradient there)
            v_clip = old_values + (values - old_values).clamp(-critic.value_clip, critic.value_clip)
            metrics["value_clipfrac"] = masked_mean(
                ((v_clip - returns) ** 2 > (values - returns) ** 2).float(), mask
            )
    vf = aggregate(per_token_v, mask, "token_mean", normalizer=tokens)
    metrics["entropy"] = masked_mean(-logp.detach(), mask)
    return pg, vf, metrics


# ----------------------------------------------------------------------------------------------------
# The reward model and the reference


def load_reward(cfg: PPORLHFConfig, policy_tok: Any) -> Any:
    """The reward model of ``worker.reward.model``, checked against the policy's tokenizer, frozen."""
    from advantage.algos.llm.reward_model import load_reward_model

    folder = reward_folder(cfg)
    src = cfg.model.path or "scratch model"
    rm = load_reward_model(folder, device=cfg.trainer.device)
    check_tokenizers(policy_tok, rm.tokenizer, src, cfg.worker.reward.model)
    return rm.requires_grad_(False)


def _reference(cfg: PPORLHFConfig, task: Any, model: nn.Module | None) -> nn.Module:
    """The frozen reference: a copy of the starting policy, or rebuilt as it was at the start."""
    ref = copy.deepcopy(model) if model is not None else common.build_model(cfg, task)[0]
    return ref.eval().requires_grad_(False)


# ----------------------------------------------------------------------------------------------------
# Training


def _no_grad_forward(
    models: Models, ref: nn.Module, gen: Any, micro: int, ref_micro: int
) -> tuple[Tensor, ...]:
    """``old_logp``, ``old_values`` and ``ref_logp``, ``[B, T]`` each, without grad."""
    from advantage.nn.lm import sequence_logprobs

    ids, attn = gen.sequences()
    P = gen.prompt_ids.shape[1]
    rows = torch.arange(len(ids))
    old_logp, old_values, ref_logp = [], [], []
    with torch.no_grad():
        for j in range(0, len(rows), micro):
            r = rows[j : j + micro]
            lp, v = models.forward(ids[r], attn[r], P)
            old_logp.append(lp)
            old_values.append(v)
        for j in range(0, len(rows), ref_micro):
            r = rows[j : j + ref_micro]
            ref_logp.append(
                sequence_logprobs(ref, ids[r], attn[r], response_start=P, temperature=models.temperature)
            )
    return torch.cat(old_logp), torch.cat(old_values), torch.cat(ref_logp)


def train(cfg: PPORLHFConfig, ctx: RunContext) -> None:
    a, t, d = cfg.algorithm, cfg.trainer, cfg.data
    actor, critic, roll = cfg.worker.actor, cfg.worker.critic, cfg.worker.rollout
    torch.set_num_threads(t.torch_threads)
    torch.manual_seed(t.seed)
    task = make_task(d)
    restored = ctx.restored
    model, tok = common.policy_model(cfg, task, restored)
    ref = _reference(cfg, task, None if restored is not None else model)
    rm = load_reward(cfg, tok)
    hidden = model.config.hidden_size
    # The critic starts as a copy of the starting policy (seed 002: actor and critic may share a trunk).
    trunk = None if critic.shared else copy.deepcopy(ref).requires_grad_(True).train()
    models = Models(model, trunk, ValueHead(hidden, seed=t.seed).to(t.device), roll.temperature)
    policy = LMPolicy(model, tok, task, cfg)
    policy.reference, policy.reward_model = ref, rm  # evaluation uses them
    examples = policy.examples("train")
    actor_params = [p for p in model.parameters() if p.requires_grad]
    critic_params = models.critic_parameters()
    opt = torch.optim.AdamW(
        [{"params": actor_params}, {"params": critic_params}],
        lr=actor.learning_rate,
        weight_decay=actor.weight_decay,
    )
    gen_rng = torch.Generator(device=policy.device).manual_seed(t.seed)
    kl_ctl = AdaptiveKLController(a.kl_coef, a.kl_target) if a.adaptive_kl else None
    beta = a.kl_coef
    step, epoch, pos = 0, 0, 0
    if restored is not None:
        s = restored.state["algo"]
        load_module("value_head", models.head, restored.tensors)
        if trunk is not None:
            load_module("critic", trunk, restored.tensors)
        load_optimizer("optim", opt, restored.tensors, s["optim"])
        torch.set_rng_state(restored.tensors["torch_rng"])
        gen_rng.set_state(restored.tensors["gen_rng"])
        step, epoch, pos, beta = restored.step, s["epoch"], s["pos"], s["beta"]
        if kl_ctl is not None:
            kl_ctl.beta = beta
    cursor = common.DataCursor(len(examples), t.seed, epoch, pos)

    def snapshot() -> Snapshot:
        opt_tensors, opt_meta = optimizer_state("optim", opt)
        tensors = {**opt_tensors, "torch_rng": torch.get_rng_state(), "gen_rng": gen_rng.get_state()}
        tensors.update(module_tensors("value_head", models.head))
        if trunk is not None:
            tensors.update(module_tensors("critic", trunk))
        state = {"optim": opt_meta, "beta": beta, **cursor.state()}
        return Snapshot(policy, tensors, state, files=lambda: common.hf_files(model, tok))

    hidden_score = getattr(task, "hidden_score", None)
    model.train()
    while step < t.total_steps:
        lr = common.learning_rate(actor, step, t.total_steps)
        opt.param_groups[0]["lr"] = lr
        opt.param_groups[1]["lr"] = lr * critic.learning_rate / actor.learning_rate  # the actor's schedule
        m: dict[str, float] = {}
        # -- rollout: generate, score, per-token rewards, advantages --------------------------------
        t0 = time.perf_counter()
        exs = [examples[i] for i in cursor.next(d.rollout_batch_size)]
        prompts = [e.prompt for e in exs]
        gen, texts = policy.complete(
            prompts, temperature=roll.temperature, generator=gen_rng, top_p=roll.top_p, top_k=roll.top_k
        )
        t1 = time.perf_counter()
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
        micro = actor.micro_batch_size or n_rows
        old_logp, old_values, ref_logp = _no_grad_forward(
            models, ref, gen, micro, cfg.worker.ref.micro_batch_size or n_rows
        )
        kl = KL_ESTIMATORS[a.kl_estimator](old_logp, ref_logp)  # [B, T]
        rewards = token_rewards(scores, kl, mask, beta)  # [B, T]
        advantages = token_gae(rewards, old_values, mask, a.gamma, a.lam)  # [B, T]
        returns = advantages + old_values * mask  # [B, T], the critic's targets
        if a.whiten_advantages:
            advantages = masked_whiten(advantages, mask)
        kl_seq = (kl * mask).sum(-1)  # [B] KL to the reference per response
        m.update(
            {
                "score/mean": float(scores.mean()),
                "score/std": float(scores.std()) if n_rows > 1 else 0.0,
                "kl_ref": float(kl_seq.mean()),
                "beta": beta,
                "reward/total_mean": float((rewards * mask).sum(-1).mean()),
                "response/length_mean": float(gen.lengths.float().mean()),
                "response/truncated_frac": float(gen.truncated.float().mean()),
                "explained_variance": explained_variance(old_values, returns, mask),
                "value/mean": float(masked_mean(old_values, mask)),
                "return/mean": float(masked_mean(returns, mask)),
            }
        )
        if a.kl_target is not None:
            m["kl_target"] = a.kl_target
        if hidden_score is not None:
            m["hidden_score/mean"] = sum(map(hidden_score, prompts, texts)) / n_rows
        # -- learn: epochs × mini-batches × micro-batches -------------------------------------------
        t3 = time.perf_counter()
        mini = actor.mini_batch_size or n_rows
        stats: dict[str, list[float]] = {}
        for _ in range(actor.ppo_epochs):
            perm = torch.randperm(n_rows)
            for start in range(0, n_rows, mini):
                rows_mb = perm[start : start + mini]
                Z = max(step_normalizer(mask[rows_mb], actor.loss_agg), 1.0)
                tokens = max(float(mask[rows_mb].sum()), 1.0)
                opt.zero_grad(set_to_none=True)
                totals = [0.0, 0.0]
                for j in range(0, len(rows_mb), micro):
                    r = rows_mb[j : j + micro]
                    ids, attn, p_len, t_len = trimmed(gen, r)
                    logp, values = models.forward(ids, attn, p_len)  # [b, t_len] each
                    sl = (r, slice(0, t_len))
                    pg, vf, lm = ppo_rlhf_loss(
                        logp,
                        old_logp[sl],
                        advantages[sl],
                        values,
                        old_values[sl],
                        returns[sl],
                        mask[sl],
                        actor,
                        critic,
                        Z,
                        tokens,
                    )
                    # A separate critic's graph is disjoint from the actor's: the sum backpropagates each
                    # loss into its own model; a shared trunk weighs the value loss by vf_coef.
                    (pg + (critic.vf_coef if critic.shared else 1.0) * vf).backward()
                    totals[0] += float(pg.detach())
                    totals[1] += float(vf.detach())
                    for k, v in lm.items():
                        stats.setdefault(k, []).append(float(v))
                if not all(map(math.isfinite, totals)):
                    raise NonFiniteError(f"step {step + 1}: PPO-RLHF losses are {totals}; stopping")
                stats.setdefault("policy_loss", []).append(totals[0])
                stats.setdefault("value_loss", []).append(totals[1])
                for name, params, clip in (
                    ("grad_norm", actor_params, actor.max_grad_norm),
                    ("critic_grad_norm", critic_params, critic.max_grad_norm),
                ):
                    if clip > 0:
                        stats.setdefault(name, []).append(float(torch.nn.utils.clip_grad_norm_(params, clip)))
                opt.step()
        if kl_ctl is not None:  # Ziegler et al. adapt β to the KL of the rollout just collected
            beta = kl_ctl.update(m["kl_ref"])
        step += 1
        m.update({"time/generate": t1 - t0, "time/score": t2 - t1, "time/prepare": t3 - t2})
        m["time/learn"] = time.perf_counter() - t3
        # Generated tokens over the whole step (generate, score, learn), as grpo reports it.
        m["tokens_per_second"] = float(gen.lengths.sum()) / max(time.perf_counter() - t0, 1e-9)
        row = {f"train/{k}": v for k, v in m.items()}
        row.update({f"train/{k}": sum(v) / len(v) for k, v in stats.items()})
        row["train/learning_rate"] = lr
        row["train/epoch"] = cursor.progress
        ctx.log(step, row)
        if ctx.tick(step, snapshot):
            break
    ctx.finish(step, snapshot())


# ----------------------------------------------------------------------------------------------------
# Evaluation and loading


def evaluate(
    cfg: PPORLHFConfig,
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
    from advantage.algos.llm.preference_eval import greedy_responses, win_rate
    from advantage.nn.lm import sequence_logprobs

    if limit is not None and limit < 1:
        raise ConfigError(f"limit must be >= 1, got {limit}")
    if samples not in (None, 1):
        raise ConfigError(f"ppo_rlhf evaluates greedy responses; --samples must be 1, got {samples}")
    d, t = cfg.data, cfg.trainer
    examples = policy.examples(split, limit or (t.eval_episodes if split == "validation" else None))
    prompts = [e.prompt for e in examples]
    ref = getattr(policy, "reference", None) or _reference(cfg, policy.task, None).to(policy.device)
    rm = getattr(policy, "reward_model", None) or load_reward(cfg, policy.tokenizer)
    policy.reference, policy.reward_model = ref, rm
    opts = {
        "max_prompt_length": d.max_prompt_length,
        "max_response_length": d.max_response_length,
        "chat_template": d.chat_template,
        "batch_size": t.eval_batch_size,
    }
    texts, lengths = greedy_responses(policy.model, policy.tokenizer, prompts, **opts)
    ref_texts, _ = greedy_responses(ref, policy.tokenizer, prompts, **opts)
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
    rule = getattr(policy.task, "hidden_score", None)
    if rule is not None:
        hs = [rule(p, y) for p, y in zip(prompts, texts, strict=True)]
        ref_hs = [rule(p, y) for p, y in zip(prompts, ref_texts, strict=True)]
        res.update({"hidden_score": sum(hs) / len(hs), "reference_hidden_score": sum(ref_hs) / len(ref_hs)})
        res.update({k: v for k, v in win_rate(hs, ref_hs).items()})
        res["win_rate_by"] = "hidden_score"
    else:
        res.update(win_rate(rm_scores, ref_rm))
        res["win_rate_by"] = "reward_model"
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


def load_policy(cfg: PPORLHFConfig, ckpt: Any) -> LMPolicy:
    """The actor of a checkpoint (a ``save_pretrained`` folder) with the run's prompts."""
    from advantage.nn.lm import load_pretrained

    model, tok = load_pretrained(ckpt.path, dtype=getattr(torch, cfg.model.dtype))
    return LMPolicy(model.to(cfg.trainer.device), tok, make_task(cfg.data), cfg)
