"""GRPO's sampling side: :class:`GRPORollout` fills one batch (:class:`GRPOBatch`) per step -- draw prompts
(in order, or by the hard-example curriculum), sample G completions of each, score them, shape the rewards,
compute the group advantages -- with dynamic sampling's refill rounds and adaptive difficulty's split, in this
process or on Ray workers; its cursor, pass counts and thresholds are in the checkpoint. Also the log-probs
of a batch's rows (the policy's, without grad, and the reference's). The algorithm (loss, learning, the
training loop) is :mod:`advantage.algos.llm.grpo`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor

from advantage import distributed
from advantage.algos.llm.data import DataCursor
from advantage.algos.llm.grpo_rewards import shape_rewards, step_tensors
from advantage.algos.llm.policy import LMPolicy
from advantage.algos.llm.scoring import score
from advantage.checkpoint import Checkpoint
from advantage.configs.grpo import GRPOConfig
from advantage.math.advantages import GROUP_ADVANTAGES, OutcomeAdvantage, TokenAdvantage, process_advantages
from advantage.math.curriculum import (
    difficulty_thresholds,
    grouped_order,
    sample_hard_prompts,
    split_by_difficulty,
)
from advantage.math.rewards import token_rewards

if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedModel

    from advantage.lm.generate import Generation

# ----------------------------------------------------------------------------------------------------
# One batch


@dataclass
class GRPOBatch:
    """One rollout batch: rows ``[p0 × G, p1 × G, ...]``, prompt by prompt (with adaptive difficulty an
    easy prompt has ``easy_samples`` rows and a hard one ``hard_samples``)."""

    gen: Generation
    prompt_idx: list[int]  # [P] training-set index of each prompt
    slots: list[int]  # [P] each prompt's place in the stream of drawn prompts (its sampling draws' seed)
    rewards: Tensor  # [B] scalar reward of each completion (shaped)
    correct: Tensor  # [B] bool
    advantages: Tensor  # [B] (one per completion) or [B, T] (per token: process supervision, REINFORCE++)
    texts: list[str] = field(default_factory=list)  # [B] decoded completions
    raw_rewards: Tensor | None = None  # [B] rewards before shaping

    def select(self, rows: Tensor, prompts: slice | Sequence[int] | None = None) -> GRPOBatch:
        """The rows ``rows`` (an index tensor) of every per-row field, and of the per-prompt fields the
        prompts ``prompts`` (positions, or a slice; None: all of them)."""
        if prompts is None:
            prompt_idx, slots = self.prompt_idx, self.slots
        elif isinstance(prompts, slice):
            prompt_idx, slots = self.prompt_idx[prompts], self.slots[prompts]
        else:
            prompt_idx, slots = [self.prompt_idx[j] for j in prompts], [self.slots[j] for j in prompts]
        return GRPOBatch(
            gen=self.gen.select(rows),
            prompt_idx=prompt_idx,
            slots=slots,
            rewards=self.rewards[rows],
            correct=self.correct[rows],
            advantages=self.advantages[rows],
            texts=[self.texts[r] for r in rows.tolist()],
            raw_rewards=None if self.raw_rewards is None else self.raw_rewards[rows],
        )

    @classmethod
    def cat(cls, parts: Sequence[GRPOBatch], pad_id: int) -> GRPOBatch:
        """``parts`` one after the other: their generations joined
        (:func:`~advantage.lm.generate.concat_generations`: prompts left-padded, responses right-padded to
        the longest) and per-token advantages padded with zeros to the joined width.
        Raw rewards only when every part has them."""
        from advantage.lm.generate import concat_generations

        gen = concat_generations([p.gen for p in parts], pad_id)
        width = gen.response_ids.shape[1]
        adv = [
            torch.nn.functional.pad(p.advantages, (0, width - p.advantages.shape[1]))
            if p.advantages.dim() == 2
            else p.advantages
            for p in parts
        ]
        raw = [p.raw_rewards for p in parts]
        return cls(
            gen=gen,
            prompt_idx=[i for p in parts for i in p.prompt_idx],
            slots=[s for p in parts for s in p.slots],
            rewards=torch.cat([p.rewards for p in parts]),
            correct=torch.cat([p.correct for p in parts]),
            advantages=torch.cat(adv),
            texts=[t for p in parts for t in p.texts],
            raw_rewards=None if any(r is None for r in raw) else torch.cat([r for r in raw if r is not None]),
        )


# ----------------------------------------------------------------------------------------------------
# Log-probs of a batch's rows


def rows_logprobs(model: PreTrainedModel, gen: Generation, rows: Tensor, temperature: float) -> Tensor:
    """``[len(rows), T_r]`` log-probs of the responses of ``rows`` (``T_r``: their longest, EOS included),
    the rows of one prompt packed with their shared prompt computed once
    (:func:`~advantage.lm.packing.generation_logprobs`; zeros after each response's end)."""
    from advantage.lm.packing import generation_logprobs

    prompts, responses = (gen.prompt_ids[rows], gen.prompt_mask[rows]), gen.response_ids[rows]
    return generation_logprobs(model, *prompts, responses, gen.lengths[rows], temperature)


def no_grad_logprobs(
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
        return no_grad_logprobs(ref_model, gen, rows, micro, temperature)
    with model.disable_adapter():  # LoRA: the base model is the reference
        return no_grad_logprobs(model, gen, rows, micro, temperature)


# ----------------------------------------------------------------------------------------------------
# The rollout


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
        # The estimator's registry entry: its kind (per-token rewards or one per completion) and whether
        # its statistics span the batch (then several ranks compute them over every rank's rows).
        self.estimator = GROUP_ADVANTAGES.spec(a.advantage)
        # Advantages [B, T] (one per token) rather than [B]: process supervision, or a per-token estimator.
        self.per_token = self.process or bool(self.estimator.get("per_token"))
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
        self.cursor = DataCursor(len(examples), t.seed, epoch, pos)
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
        """Shaped rewards ``[b]`` and advantages (``[b]``, or ``[b, T]`` when :attr:`per_token`) of rows in
        consecutive groups of ``n`` samples of the prompts ``idx``, and the shaping metrics.

        The KL to the reference in the reward (``kl_reward_coef`` β_r, k1 per token) is summed over the
        response and subtracted from the reward, except for a per-token estimator: there it stays on its
        token (:func:`~advantage.math.rewards.token_rewards`: the score on the last token, −β_r k1_t on
        every token)."""

        a, cfg = self.a, self.cfg
        token_estimator = bool(self.estimator.get("per_token"))
        kl_tok = None
        if a.kl_reward_coef > 0:
            rows = torch.arange(len(texts))
            micro = cfg.worker.actor.micro_batch_size or len(rows)
            lp = no_grad_logprobs(self.policy.model, gen, rows, micro, cfg.worker.rollout.temperature)
            kl_tok = (lp - self.ref_logprobs(gen, rows)) * gen.response_mask
        kl_seq = None if kl_tok is None else kl_tok.sum(-1)
        rewards, shaped = shape_rewards(raw, gen, cfg, None if token_estimator else kl_seq, n)
        metrics = {f"reward/{k}": v for k, v in shaped.items()}
        # batch-wide statistics on several ranks: computed over every rank's rows, this rank's kept
        # (group statistics need only the rank's own groups, which it holds whole).
        spread = bool(self.estimator.get("batch")) and self.world.size > 1 and not self.whole
        if self.process:  # [b, T]: each token, the normalised rewards of the steps from its own on
            exs = [self.examples[i] for i in idx]
            steps = step_tensors(self.policy.task, exs, texts, gen, self.policy.tokenizer, n, rewards - raw)
            T = gen.response_ids.shape[1]
            scale = str(self.estimator.get("process"))
            adv = process_advantages(*steps, T, n, a.std_eps, scale=scale)
            adv = adv.to(gen.response_mask.dtype) * gen.response_mask.cpu()  # rollout bookkeeping: CPU
            return rewards, adv, metrics
        if token_estimator:  # [b, T] per-token rewards: the score on the last token, the KL on each
            mask = gen.response_mask.cpu().to(rewards.dtype)
            kl = torch.zeros_like(mask) if kl_tok is None else kl_tok.cpu().to(rewards.dtype)
            if kl_seq is not None:
                metrics["reward/kl_reward"] = float(kl_seq.mean())
            tok = token_rewards(rewards, kl, mask, a.kl_reward_coef)
            fn = cast(TokenAdvantage, GROUP_ADVANTAGES[a.advantage])
            if spread:  # pad every rank's [b, T_rank] to the widest before gathering
                T = tok.shape[1]
                width = int(self.world.reduce([float(T)], op="max")[0])
                tok_all = self.world.gather(torch.nn.functional.pad(tok, (0, width - T)))
                mask_all = self.world.gather(torch.nn.functional.pad(mask, (0, width - T)))
                adv_all, am = fn(tok_all, mask_all, n, a.std_eps)
                adv = adv_all[self.world.rank * len(tok) : (self.world.rank + 1) * len(tok), :T]
            else:
                adv, am = fn(tok, mask, n, a.std_eps)
        else:
            outcome = cast(OutcomeAdvantage, GROUP_ADVANTAGES[a.advantage])
            adv, am = outcome(self.world.gather(rewards) if spread else rewards, n, a.std_eps)
            if spread:
                k = len(rewards)
                adv = adv[self.world.rank * k : (self.world.rank + 1) * k]
        if "reward_std_mean" in am:
            metrics["advantage/group_std_mean"] = float(am["reward_std_mean"])
        return rewards, adv, metrics

    # ---- one batch --------------------------------------------------------------------------------------

    def collect(self) -> tuple[GRPOBatch | None, dict[str, float]]:
        """One batch (None: every group was dropped, even after ``max_sampling_rounds``) and its metrics;
        with Ray workers, the current weights are sent to them first."""
        if self.remote is not None:
            self.weights_ref = self.remote.push()
        ro, m = self._collect()
        if self.remote is not None:
            m.update({"worker_restarts": self.remote.restarts, "weights_version": self.remote.version})
        return ro, m

    def _collect(self) -> tuple[GRPOBatch | None, dict[str, float]]:
        """Generate and score until the batch is full (one round unless dynamic sampling)."""
        from advantage.math.advantages import constant_groups

        a, G, B = self.a, self.G, self.cfg.data.rollout_batch_size
        kept: list[GRPOBatch] = []  # each round's kept groups
        m: dict[str, float] = {"time/generate": 0.0, "time/score": 0.0}
        all_r, all_c, all_len, all_trunc, zero_groups, dropped, groups = [], [], [], [], 0, 0, 0
        rounds = 0
        while sum(len(k.prompt_idx) for k in kept) < B and rounds < a.max_sampling_rounds:
            rounds += 1
            missing = B - sum(len(k.prompt_idx) for k in kept)
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
                adv.reshape(len(idx), -1).abs().amax(-1) == 0
                if self.per_token
                else constant_groups(rewards, G)
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
                batch = GRPOBatch(gen, idx, slots, rewards, correct, adv, texts, raw)
                kept.append(batch.select(rows, keep.nonzero().squeeze(-1).tolist()))
            if not a.dynamic_sampling:
                break
        if not kept:
            return None, m
        # Rounds differ in response width: per-token advantages are padded.
        joined = GRPOBatch.cat(kept, self.policy.tokenizer.pad_token_id)
        n_prompts = len(joined.prompt_idx)
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
        ro = joined.select(torch.arange(keep_rows), slice(0, keep_rows // G))
        if a.adaptive_difficulty:
            ro = self.adapt(ro, m)
        if self.whole:
            return self.rank_share(ro), m
        return ro, m

    def rank_share(self, ro: GRPOBatch) -> GRPOBatch | None:
        """This rank's contiguous share of a rollout every rank holds whole (dynamic sampling on several
        ranks): ``P // N`` prompts each. When the rounds ran out with fewer than ``B`` prompts and ``P`` is
        not a multiple of N, the last ``P mod N`` are left out (None: fewer prompts than ranks, a step
        with nothing to learn, as when every group is dropped)."""
        k = len(ro.prompt_idx) // self.world.size
        if k == 0:
            return None
        lo, G = self.world.rank * k, self.G
        # G rows per prompt (adaptive difficulty's batches, whose prompts have different row counts, are
        # not cut here)
        assert len(ro.rewards) == len(ro.prompt_idx) * G, "rank_share takes G rows per prompt"
        return ro.select(torch.arange(lo * G, (lo + k) * G), slice(lo, lo + k))

    def adapt(self, ro: GRPOBatch, m: dict[str, float]) -> GRPOBatch:
        """Adaptive difficulty on a batch of P prompts × G rows (prompt by prompt): update the thresholds
        with the prompts' difficulties (:func:`~advantage.math.curriculum.difficulty_thresholds`), split
        the prompts (:func:`~advantage.math.curriculum.split_by_difficulty`), keep ``easy_samples`` random
        rows of each easy prompt (advantages from its whole group of G) and give each hard prompt
        ``hard_samples - G`` more samples, its advantages then computed over all ``hard_samples`` of them.
        Rows stay prompt by prompt."""
        from advantage.lm.generate import concat_generations

        G, hard_n, pad_id = self.G, self.hard_n, self.policy.tokenizer.pad_token_id
        P = len(ro.prompt_idx)
        difficulty = ro.rewards.view(P, G).mean(-1)  # [P] mean shaped reward of each prompt's G samples
        a = self.a
        self.thresholds = difficulty_thresholds(
            self.thresholds,
            difficulty,
            hard_quantile=a.hard_quantile,
            easy_quantile=a.easy_quantile,
            rate=a.difficulty_rate,
        )
        easy, hard = split_by_difficulty(difficulty, self.thresholds)
        parts = [ro]
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
            h_correct = torch.cat([ro.correct[own], x_correct])[order]
            h_slots = [ro.slots[j] for j in hard_p]
            parts.append(GRPOBatch(h_gen, idx, h_slots, h_rewards, h_correct, h_adv, h_texts, h_raw))
            m["time/score"] += time.perf_counter() - t1
            m["time/generate"] += t1 - t0
        # The batch's P·G rows, then each hard prompt's hard_samples (per-token advantages padded to the
        # joined width).
        joined = GRPOBatch.cat(parts, pad_id)
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
        return joined.select(keep, slice(0, P))  # the batch's P prompts (a hard prompt's rows are its own)
