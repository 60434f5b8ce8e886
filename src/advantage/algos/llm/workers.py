"""GRPO on Ray: generation and scoring in worker processes (``trainer.num_workers > 0``).

Each :class:`LMWorker` holds the run's task, a copy of the policy and, when the run has one, the reward
model; :class:`RemoteGenerator` is the learner's side, which sends the weights once per optimizer step and
splits each round's prompts across the workers. The pool of workers, its fault tolerance (a failed or hung
worker is replaced and asked again) and Ray's start-up are the environments' ones
(:mod:`advantage.rollout.remote`). Nothing here is imported, and Ray never is, with ``num_workers=0``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from advantage import kernels
from advantage.algos.llm.data import scored_task
from advantage.algos.llm.models import build_model
from advantage.algos.llm.policy import LMPolicy
from advantage.algos.llm.reward_models import load_reward
from advantage.algos.llm.scoring import score
from advantage.lm.generate import concat_generations
from advantage.rollout.remote import WorkerError, WorkerPool, import_ray

if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedModel

    from advantage.configs.grpo import GRPOConfig


class LMWorker:
    """One Ray actor for GRPO: the run's task, a copy of the policy (built like the learner's, then given
    the learner's weights every step) and, when the run has one, the reward model. :meth:`generate` samples
    ``G`` responses to each prompt it is given and scores them, so a slow verifier (the sandboxed ``code``
    task) or a reward model runs beside generation instead of after it."""

    def __init__(self, cfg: GRPOConfig):
        torch.set_num_threads(cfg.trainer.torch_threads)
        kernels.configure(cfg.trainer.kernels)  # this process serves one run: its fast paths
        task = scored_task(cfg.data)
        model, tok = build_model(cfg, task)
        self.policy = LMPolicy(model.to(cfg.trainer.device), tok, task, cfg)
        if cfg.worker.reward.model:
            self.policy.reward_model = load_reward(cfg, tok)
        self.examples = self.policy.examples("train")  # the learner's list: same task, seed and split

    def pid(self) -> int:
        return os.getpid()

    def generate(
        self,
        version: int,
        weights: dict[str, Tensor],
        idx: list[int],
        slots: list[int],
        G: int,
        sampling: dict,
    ) -> dict[str, Any]:
        """``G`` samples for each training prompt in ``idx`` (drawn from its slot's seed, as the learner
        would draw them) with ``weights``; rewards and correctness."""
        self.policy.model.load_state_dict(weights)
        exs = [self.examples[i] for i in idx]
        gen, texts = self.policy.complete([e.prompt for e in exs], samples=G, slots=slots, **sampling)
        rewards, correct = score(self.policy, exs, texts, G)
        return {
            "gen": gen.to("cpu"),
            "texts": texts,
            "rewards": rewards,
            "correct": correct,
            "version": version,
        }


class RemoteGenerator:
    """The learner's side for GRPO: ``trainer.num_workers`` :class:`LMWorker` actors; :meth:`generate`
    splits the prompts of one round across them (contiguous chunks, in order) and joins the results, so
    the rows are in the same prompt-major order as :meth:`~advantage.algos.llm.policy.LMPolicy.complete`
    gives."""

    def __init__(self, cfg: GRPOConfig, model: PreTrainedModel, pad_id: int):
        self.ray = import_ray(cfg.trainer.ray_address, cfg.trainer.num_workers)
        self.W, self.model, self.pad_id = cfg.trainer.num_workers, model, pad_id
        self.version = 0
        self.pool = WorkerPool(self.ray, LMWorker, lambda i, restarts: (cfg,), self.W, cfg.trainer)

    @property
    def restarts(self) -> int:
        return self.pool.restarts

    def push(self) -> Any:
        """Broadcast the current weights (once per optimizer step); returns the object-store reference."""
        self.version += 1
        return self.ray.put({k: v.detach().cpu() for k, v in self.model.state_dict().items()})

    def generate(
        self, weights_ref: Any, idx: list[int], slots: list[int], G: int, sampling: dict
    ) -> tuple[Any, list[str], Any, Any]:
        """``(Generation, texts, rewards [B], correct [B])`` for prompts ``idx`` at places ``slots`` in the
        stream of drawn prompts, G samples each: the samples the learner would draw itself."""
        n = min(self.W, len(idx))  # fewer prompts than workers (a last dynamic-sampling round): some rest
        parts_idx = np.array_split(np.arange(len(idx)), n)
        args = [
            (self.version, weights_ref, [idx[i] for i in c], [slots[i] for i in c], G, sampling)
            for c in parts_idx
        ]
        parts = self.pool.call("generate", args)
        for p in parts:
            if p["version"] != self.version:
                raise WorkerError(f"a worker used weights version {p['version']}, expected {self.version}")
        gen = concat_generations([p["gen"] for p in parts], self.pad_id)
        texts = [t for p in parts for t in p["texts"]]
        return gen, texts, torch.cat([p["rewards"] for p in parts]), torch.cat([p["correct"] for p in parts])

    def close(self) -> None:
        self.pool.close()
