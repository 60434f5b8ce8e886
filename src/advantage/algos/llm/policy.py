"""A language model as a policy: the text the model sees for a prompt (raw, or through the chat template),
:class:`LMPolicy` (a model with its tokenizer and task: batched, seeded sampling and greedy acting) and
:func:`load_policy` (the policy of a checkpoint)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from advantage.algos.llm.data import TaskExamples, make_task
from advantage.checkpoint import Checkpoint
from advantage.errors import ConfigError

if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from advantage.algos.llm.reward_models import RewardModel
    from advantage.config import LMRunConfig
    from advantage.envs.text.core import Example, Task


# ----------------------------------------------------------------------------------------------------
# Prompts


def prompt_text(tokenizer: PreTrainedTokenizerBase, prompt: str, chat_template: bool) -> str:
    """The text the model sees: the raw prompt, or the chat template with the generation prompt. A
    :class:`~advantage.envs.text.core.ChatPrompt` (a dataset's list of chat messages) always goes through
    the template, with all its messages."""
    return prompt_texts(tokenizer, [prompt], chat_template)[0]


def prompt_texts(
    tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], chat_template: bool
) -> list[str]:
    """:func:`prompt_text` of each prompt. The template is the model folder's own code, so it is rendered
    within bounds of time, output and memory (:mod:`advantage.chat_template`), all the prompts in one
    round trip."""
    from advantage.chat_template import render_chats
    from advantage.envs.text.core import ChatPrompt

    chats = [i for i, p in enumerate(prompts) if chat_template or isinstance(p, ChatPrompt)]
    if not chats:
        return list(prompts)
    if not getattr(tokenizer, "chat_template", None):
        if any(isinstance(p, ChatPrompt) for p in prompts):
            raise ConfigError(
                "the prompts are chat messages, but the tokenizer has no chat template to render them"
            )
        raise ConfigError("data.chat_template=true, but the tokenizer has no chat template")
    conversations = [
        list(p.messages) if isinstance(p, ChatPrompt) else [{"role": "user", "content": p}]
        for p in (prompts[i] for i in chats)
    ]
    texts = list(prompts)
    rendered = render_chats(tokenizer, conversations, add_generation_prompt=True)
    for i, text in zip(chats, rendered, strict=True):
        texts[i] = text
    return texts


# ----------------------------------------------------------------------------------------------------
# The policy


class LMPolicy(TaskExamples):
    """A trained language model with its tokenizer and task: ``act(prompt)`` is the greedy completion,
    :meth:`complete` batches and samples, :meth:`examples` gives the task's prompts."""

    # Set by the trainers and evaluations that use them (DPO, PPO-RLHF, GRPO with a reward model);
    # declared, not assigned: an LMPolicy without them has no such attribute.
    reference: PreTrainedModel
    reward_model: RewardModel  # frozen

    def __init__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, task: Task, cfg: LMRunConfig
    ):
        self.model, self.tokenizer, self.task, self.cfg = model, tokenizer, task, cfg
        self._mode: bool | None = None  # see _mode_matters
        self._examples: dict[tuple[str, int], list[Example]] = {}

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def complete(
        self,
        prompts: Sequence[str],
        *,
        temperature: float = 0.0,
        samples: int = 1,
        generator: torch.Generator | None = None,
        top_p: float = 1.0,
        top_k: int = 0,
        min_new_tokens: int = 0,
        slots: Sequence[int] | None = None,
    ) -> tuple[Any, list[str]]:
        """Generate ``samples`` completions per prompt (rows ``[p0 × samples, p1 × samples, ...]``);
        returns the :class:`~advantage.lm.generate.Generation` and the decoded texts. With ``slots``
        (the prompts' places in the run's stream of drawn prompts) each prompt's samples come from draws
        seeded by ``trainer.seed`` and its slot (:func:`~advantage.lm.generate.slot_uniforms`), not
        from ``generator``: they do not depend on which rank or worker draws it, nor on the other prompts."""
        from advantage.lm.generate import SamplingParams, encode_prompts, generate, slot_uniforms

        if slots is not None and len(slots) != len(prompts):
            raise ValueError(f"slots must give one place per prompt: {len(slots)} for {len(prompts)} prompts")
        d = self.cfg.data
        texts = prompt_texts(self.tokenizer, prompts, d.chat_template)
        try:  # each prompt once, then repeated: the tokenizer is a visible share of a small model's step
            ids, mask = encode_prompts(self.tokenizer, texts, max_length=d.max_prompt_length)  # None: no cap
        except ConfigError as e:  # name the setting to change, not the sampler's argument
            raise ConfigError(f"{e} (data.max_prompt_length={d.max_prompt_length}; raise it)") from None
        if samples > 1:
            ids, mask = ids.repeat_interleave(samples, 0), mask.repeat_interleave(samples, 0)
        params = SamplingParams(
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            max_new_tokens=d.max_response_length,
            min_new_tokens=min_new_tokens,
        )
        was_training = self.model.training
        if was_training and self._mode_matters():  # eval() walks every module: only when it changes anything
            self.model.eval()
        try:
            gen = generate(
                self.model,
                ids.to(self.device),
                mask.to(self.device),
                params,
                eos_id=self.tokenizer.eos_token_id,
                pad_id=self.tokenizer.pad_token_id,
                generator=None if slots is not None else generator,
                shared_prompts=samples,
                uniforms=None
                if slots is None
                else slot_uniforms(self.cfg.trainer.seed, slots, samples, params.max_new_tokens),
            )
        finally:
            if self.model.training != was_training:
                self.model.train(was_training)
        return gen, gen.texts(self.tokenizer)

    def _mode_matters(self) -> bool:
        """Whether the model's train/eval mode changes what it computes: a dropout with ``p > 0`` (LoRA's
        included), attention dropout in the config, or gradient checkpointing (no KV cache in training)."""
        if self._mode is None:
            m = self.model
            checkpointing = getattr(m, "is_activation_checkpointing", None)  # renamed in transformers 5
            if checkpointing is None:
                checkpointing = getattr(m, "is_gradient_checkpointing", False)
            self._mode = bool(
                checkpointing
                or getattr(getattr(m, "config", None), "attention_dropout", 0.0) > 0
                or any(isinstance(x, torch.nn.Dropout) and x.p > 0 for x in m.modules())
            )
        return self._mode

    def act(self, obs: str, deterministic: bool = True) -> str:
        _, texts = self.complete([obs], temperature=0.0 if deterministic else 1.0)
        return texts[0]


def load_policy(
    cfg: LMRunConfig, ckpt: Checkpoint, task_factory: Callable[[Any], Any] = make_task
) -> LMPolicy:
    """The policy of a checkpoint: its folder is a ``save_pretrained`` model folder; its task is
    ``task_factory(cfg.data)`` (default :func:`make_task`; the trainers bind theirs)."""
    from advantage.lm.model import load_pretrained
    from advantage.safe_io.read import check_model_folder

    folder = check_model_folder(ckpt.path)
    model, tok = load_pretrained(folder, trust_remote_code=False, dtype=getattr(torch, cfg.model.dtype))
    return LMPolicy(model.to(cfg.trainer.device), tok, task_factory(cfg.data), cfg)
