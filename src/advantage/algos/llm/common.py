"""What every language-model algorithm shares: building the policy (a scratch model with a local tokenizer,
or a local ``save_pretrained`` folder, optionally with LoRA), its checkpoint files, and evaluation by
greedy accuracy, pass@K and maj@K. The ``data``, ``model`` and ``trainer`` config sections are in
:mod:`advantage.configs.llm`.

A language model is a policy whose state is the prompt plus the tokens generated so far and whose action is
the next token (see ``docs/algorithms/language_models.md``). A batch is laid out as everywhere else in
advantage: prompts left-padded to ``P`` tokens, responses right-padded to ``T`` tokens, and every
per-token quantity (log-probs, rewards, advantages, the response mask) is ``[B, T]``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from advantage.checkpoint import Checkpoint
from advantage.config import rebase
from advantage.configs.llm import DataConfig
from advantage.errors import ConfigError
from advantage.schedules import warmup_decay
from advantage.torch_state import LearnerState

if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from advantage.context import Snapshot
    from advantage.envs.text.core import Example, Task

SPLITS = ("train", "validation", "test")


# ----------------------------------------------------------------------------------------------------
# Task, model and tokenizer


def make_task(data: DataConfig) -> Task:
    """The task named by ``data.task`` with its options (:func:`advantage.envs.text.make_task`)."""
    from advantage.envs.text import make_task as _make

    return _make(data.task, **data.kwargs)


def preference_task(data: Any) -> Any:
    """The preference task named by ``data.task`` with its options
    (:func:`advantage.envs.text.preference.make_preference_task`)."""
    from advantage.envs.text.preference import make_preference_task

    return make_preference_task(data.task, **data.kwargs)


def split_size(d: Any, split: str, task: Task) -> int:
    """``data.<split>_size``, or when unset: every row of the split for a task read from a file (it has
    ``split_sizes``), else the config's ``GENERATED_SIZES``."""
    size = getattr(d, f"{split}_size")
    if size is not None:
        return int(size)
    sizes = getattr(task, "split_sizes", None)
    if sizes is not None:
        return int(sizes[split])
    return type(d).GENERATED_SIZES[SPLITS.index(split)] if hasattr(type(d), "GENERATED_SIZES") else 0


# An evaluation split of a file with fewer rows than this is reported: its accuracy moves in steps of
# more than 5 points (2 test prompts of a 40-row GSM8K file: 0, 50 or 100 %).
SMALL_SPLIT = 20


def resolve_sizes(cfg: Any, task: Any) -> None:  # a Task; a file task has split_sizes and path
    """Fill the unset ``data.*_size`` from the task (:func:`split_size`), so the saved config says what ran.
    Of a file: an empty train split is an error naming the file; an empty or small validation or test
    split is one warning line (``cfg._warnings``, printed by ``train``, see :func:`_evaluation_warning`):
    training goes on, without evaluations when there is no evaluation row at all (verl's own train file:
    every row ``extra_info.split == "train"``), and ``advantage eval`` of an empty split is the error. A
    validation split smaller than ``trainer.eval_episodes`` lowers it to the split's size."""
    d = cfg.data
    sizes = getattr(task, "split_sizes", None)
    unset = [split for split in SPLITS if getattr(d, f"{split}_size") is None]
    for split in unset:
        n = split_size(d, split, task)
        if n == 0 and split == "train":
            where = getattr(task, "where", f"data.path {str(task.path)!r}")
            origin = getattr(task, "split_origin", "the 'split' column, else 90/5/5 by a hash of the prompt")
            total = sum((sizes or {}).values())
            raise ConfigError(
                f"{where}: the train split is empty (0 of {total} rows; rows go to a split by {origin}): add "
                "a 'split' column or more rows"
            )
        if n == 0:
            continue  # left unset: the saved config reads the data again, as this run did
        setattr(d, f"{split}_size", n)
        if split == "validation" and cfg.trainer.eval_episodes > n:
            cfg.trainer.eval_episodes = n
    if sizes is not None:
        line = _evaluation_warning(task, [s for s in unset if s != "train"])
        if line:
            cfg.__dict__.setdefault("_warnings", []).append(line)


def _evaluation_warning(task: Any, splits: list[str]) -> str:
    """One line on the evaluation splits of a file task that are empty or small (under
    :data:`SMALL_SPLIT` rows) among ``splits`` (those the config leaves to the data), or ``""``: which
    one stands in for the other (``task.stand_ins``), what an empty one means for the run, how coarse a
    small one's accuracy is, and the keys that give more rows."""
    sizes, stand_ins = task.split_sizes, getattr(task, "stand_ins", {})
    parts, seen = [], set()
    for split in splits:
        n, other = sizes[split], stand_ins.get(split)
        if other is not None:
            parts.append(f"no {split} rows: the {other} rows stand in (as verl validates on its test files)")
        elif n == 0:
            use = "no evaluation during training" if split == "validation" else "advantage eval has no test"
            parts.append(f"no {split} rows: {use}")
        if 0 < n < SMALL_SPLIT and (other or split) not in seen:
            seen.add(other or split)
            parts.append(f"{other or split} has {n} rows, so its accuracy moves in steps of {100 / n:.3g} %")
    if not parts:
        return ""
    where = getattr(task, "where", f"data.path {str(task.path)!r}")
    return (
        f"warning: {where}: " + "; ".join(parts) + " (give data.validation_path or data.test_path files, as "
        "verl's data.val_files, a 'split' column or more rows)"
    )


def _where(e: Any, split: str, k: int) -> str:
    return getattr(e, "origin", "") or f"{split} prompt {k}"


def check_lengths(
    cfg: Any,
    examples: dict[str, list[Any]],
    tok: PreTrainedTokenizerBase,
    responses: Callable[[list[Any]], list[tuple[Any, str]]] | None = None,
) -> list[str]:
    """Measure every prompt of ``examples`` (split → examples) as the model sees it, with the policy's
    tokenizer ``tok``: an unset ``data.max_prompt_length`` becomes the longest; a set one shorter than
    the longest prompt is a problem naming that prompt (file and row), its length and the key to raise.
    ``responses(examples) -> [(example, text)]`` gives the training responses (SFT targets, preference
    responses), checked against ``data.max_response_length`` with their EOS."""
    d = cfg.data
    chat = getattr(d, "chat_template", False)
    problems: list[str] = []
    longest: tuple[int, str] = (0, "")
    for split, exs in examples.items():
        if not exs:
            continue
        try:
            texts = prompt_texts(tok, [e.prompt for e in exs], chat)
        except ConfigError as err:
            return [f"{err} (the prompts of {d.task!r})"]
        for k, (e, ids) in enumerate(
            zip(exs, tok(texts, add_special_tokens=False)["input_ids"], strict=True)
        ):
            if not ids:
                problems.append(
                    f"{_where(e, split, k)}: the prompt is empty (0 tokens); generation needs one"
                )
            if len(ids) > longest[0]:
                longest = (len(ids), _where(e, split, k))
    n, where = longest
    if d.max_prompt_length is None:
        d.max_prompt_length = max(n, 1)
    elif n > d.max_prompt_length:
        problems.append(
            f"{where}: the prompt has {n} tokens with the policy's tokenizer, longer than "
            f"data.max_prompt_length={d.max_prompt_length} (the longest prompt); raise "
            f"data.max_prompt_length to {n} or more, or leave it unset to measure it"
        )
    if responses is not None:
        worst: tuple[int, str] = (0, "")
        for split, exs in examples.items():
            pairs = responses(exs)
            ids = tok([r for _, r in pairs], add_special_tokens=False)["input_ids"] if pairs else []
            for k, ((e, _), r) in enumerate(zip(pairs, ids, strict=True)):
                if len(r) + 1 > worst[0]:
                    worst = (len(r) + 1, _where(e, split, k))
        if worst[0] > d.max_response_length:
            problems.append(
                f"{worst[1]}: a response has {worst[0]} tokens with its EOS, longer than "
                f"data.max_response_length={d.max_response_length} (the longest response); raise "
                f"data.max_response_length to {worst[0]} or more"
            )
    return problems


def preference_responses(examples: list[Any]) -> list[tuple[Any, str]]:
    """Every ranked response of preference ``examples``, for :func:`check_lengths`."""
    return [(e, r) for e in examples for r in e.responses]


def check(
    cfg: Any,
    task_factory: Callable[[DataConfig], Any] | None = None,
    responses: Callable[[list[Any]], list[tuple[Any, str]]] | None = None,
) -> list[str]:
    """Problems found before any compute (so before the run folder exists): the task and its options
    (every split is generated or read; unset split sizes and ``data.max_prompt_length`` are measured from
    the data, :func:`resolve_sizes` and :func:`check_lengths`), the model's context and folder, the
    evaluation size. ``task_factory(cfg.data)`` builds the task (default :func:`make_task`; preference
    algorithms pass theirs); ``responses`` see :func:`check_lengths`."""
    problems: list[str] = []
    d, m = cfg.data, cfg.model
    task, examples = None, None
    try:
        task = (task_factory or make_task)(d)
        resolve_sizes(cfg, task)
        # Generating (or reading) every split now turns "too few problems" into a config error.
        examples = {split: task.examples(split, split_size(d, split, task), d.seed) for split in SPLITS}
    except ConfigError as e:
        problems.extend(e.problems)
    folder = model_folder(m.path) if m.pretrained and m.path else None
    tok = None
    try:
        if folder is not None:
            from advantage.lm.model import load_tokenizer

            tok = load_tokenizer(folder, trust_remote_code=m.trust_remote_code, pad_to_eos=m.pad_to_eos)
        elif task is not None and not m.pretrained:
            from advantage.lm.model import build_char_tokenizer

            tok = build_char_tokenizer(task.alphabet, extra_tokens=task.special_tokens)
    except ConfigError as e:
        # Name the key as the user wrote it (grpo and ppo_rlhf: worker.actor.model.path).
        keys = [f.name for f in dataclasses.fields(m)]
        problems.extend(rebase(p, model_prefix(cfg), keys) for p in e.problems)
    if examples is not None and tok is not None:
        problems.extend(check_lengths(cfg, examples, tok, responses))
    context = m.max_position_embeddings
    if folder is not None and (folder / "config.json").is_file():
        from advantage.safe_read import MODEL_JSON_MAX_BYTES, load_json

        try:  # model_folder checked it; read again within the same bounds
            config = load_json(folder / "config.json", MODEL_JSON_MAX_BYTES, expect=dict)
            context = config.get("max_position_embeddings")
        except ConfigError:
            context = None  # load_tokenizer above named the unreadable file
    if isinstance(context, int) and (d.max_prompt_length or 0) + d.max_response_length > context:
        problems.append(
            f"data.max_prompt_length={d.max_prompt_length} + data.max_response_length="
            f"{d.max_response_length} exceeds the model's context of {context} tokens"
        )
    if d.validation_size is not None and cfg.trainer.eval_episodes > d.validation_size:
        problems.append(
            f"trainer.eval_episodes={cfg.trainer.eval_episodes} is more than "
            f"data.validation_size={cfg.data.validation_size}"
        )
    return problems


def model_prefix(cfg: Any) -> str:
    """Where the policy's model section is in the user's keys: ``model.`` or ``worker.actor.model.``."""
    return "worker.actor.model." if hasattr(cfg, "worker") and hasattr(cfg.worker, "actor") else "model."


def model_folder(path: str) -> Path:
    """``model.path`` as a model folder: a run folder (``runs/<run>``) means its latest checkpoint, which
    is a ``save_pretrained`` folder; a run's ``checkpoints`` folder its latest; a checkpoint folder
    itself. Each is verified against its manifest first (:func:`advantage.checkpoint.verify_checkpoint`),
    as every read of a run's checkpoint is. A plain model folder (no manifest) is the user's own model
    and is returned as it is -- unless it is a run's checkpoint whose manifest is gone (it sits in a
    run's ``checkpoints`` folder, or holds a checkpoint's own files): deleting the manifest must not be a
    way to skip the verification, so it is refused. The folder's JSON, tokenizer and template files are
    checked by the bounded reader before transformers parses them
    (:func:`advantage.safe_read.check_model_folder`)."""
    from advantage.checkpoint import LATEST, MANIFEST, STATE, TENSORS, latest_checkpoint, verify_checkpoint
    from advantage.errors import CheckpointError
    from advantage.runfiles import Folder
    from advantage.safe_read import check_model_folder

    folder = Path(path)
    if not folder.is_dir():
        return folder  # load_tokenizer says what it is instead
    with Folder.open(folder, error=CheckpointError) as given:
        if given.exists("checkpoints"):
            with given.child("checkpoints") as checkpoints:
                if checkpoints.exists(LATEST):
                    return check_model_folder(verify_checkpoint(latest_checkpoint(checkpoints)))
        if given.exists(LATEST):
            return check_model_folder(verify_checkpoint(latest_checkpoint(given)))
        if given.exists(MANIFEST):
            return check_model_folder(verify_checkpoint(given))
        own_files = {TENSORS, STATE} <= set(given.names())
    run = _run_of_checkpoint(folder)
    if run is not None or own_files:
        where = f" of the run {str(run)!r}" if run is not None else ""
        raise CheckpointError(
            f"{folder / MANIFEST}: manifest missing; {str(folder)!r} is a checkpoint folder{where}, which is "
            "never loaded unverified (refused)"
        )
    return check_model_folder(folder)


def _run_of_checkpoint(folder: Path) -> Path | None:
    """The run folder around ``folder`` when ``folder`` is in a run's ``checkpoints`` folder (named so, in
    a folder holding the run's ``config.yaml``, or holding a ``latest`` pointer), else None."""
    from advantage.checkpoint import LATEST

    parent = folder.resolve().parent
    if parent.name != "checkpoints":
        return None
    run = parent.parent
    if os.path.lexists(run / "config.yaml") or os.path.lexists(parent / LATEST):
        return run
    return None


def build_model(cfg: Any, task: Task) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The policy model and tokenizer: ``model.path`` loaded from disk, or a scratch model of
    ``model.arch`` with a character tokenizer over the task's alphabet. LoRA wraps it when
    ``model.lora.rank > 0``."""
    from advantage.lm.model import build_char_tokenizer, build_scratch_model, load_pretrained

    m = cfg.model
    dtype = getattr(torch, m.dtype)
    if m.pretrained:
        model, tok = load_pretrained(
            model_folder(m.path), trust_remote_code=m.trust_remote_code, dtype=dtype, pad_to_eos=m.pad_to_eos
        )
    else:
        tok = build_char_tokenizer(task.alphabet, extra_tokens=task.special_tokens)
        # The scratch model's sizes: model.<name> is build_scratch_model's argument of the same name.
        sizes = ("hidden_size", "layers", "heads", "kv_heads", "intermediate_size", "max_position_embeddings")
        kwargs = {name: getattr(m, name) for name in sizes}
        model = build_scratch_model(m.arch, tok, seed=cfg.trainer.seed, **kwargs).to(dtype)
    if m.lora.rank > 0:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(
            r=m.lora.rank,
            lora_alpha=m.lora.alpha,
            lora_dropout=m.lora.dropout,
            target_modules=list(m.lora.target_modules),
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, lora)
    return model.to(cfg.trainer.device), tok


def policy_model(
    cfg: Any, task: Task, restored: Checkpoint | None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model to train and its tokenizer: :func:`build_model` for a new run; on resume the
    checkpoint folder (a ``save_pretrained`` folder) or, with LoRA, the rebuilt base model with the
    checkpoint's ``adapter.*`` tensors put back."""
    m = cfg.model
    if restored is not None and m.lora.rank == 0:
        from advantage.lm.model import load_pretrained
        from advantage.safe_read import check_model_folder

        model, tok = load_pretrained(check_model_folder(restored.path), dtype=getattr(torch, m.dtype))
        return model.to(cfg.trainer.device), tok
    model, tok = build_model(cfg, task)
    if restored is not None:
        named = dict(model.named_parameters())
        with torch.no_grad():
            for name, value in restored.tensors.items():
                if name.startswith("adapter."):
                    named[name[len("adapter.") :]].copy_(value)
    return model, tok


def frozen_reference(cfg: Any, task: Task, model: PreTrainedModel | None) -> PreTrainedModel:
    """The frozen reference: a copy of the starting policy ``model``, or (None) rebuilt as it was at the
    start (a resumed run)."""
    ref = copy.deepcopy(model) if model is not None else build_model(cfg, task)[0]
    return ref.eval().requires_grad_(False)


def scalar_head(hidden: int, seed: int) -> torch.nn.Linear:
    """``Linear(hidden, 1)`` in fp32 with weights :math:`\\mathcal N(0, 1/(H+1))` drawn with ``seed`` (the
    global generator is left as it was) and a zero bias, as in OpenAI's lm-human-preferences: the head of
    a reward model and of PPO-RLHF's critic."""
    head = torch.nn.Linear(hidden, 1, dtype=torch.float32)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        torch.nn.init.normal_(head.weight, std=1.0 / math.sqrt(hidden + 1))
    torch.nn.init.zeros_(head.bias)
    return head


def adapter_tensors(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """The LoRA parameters for a checkpoint, as :func:`policy_model` reads them back."""
    return {f"adapter.{k}": v for k, v in trainable_tensors(model).items()}


def trainable_tensors(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """The parameters an optimizer updates (all of them, or only LoRA's), by name."""
    return {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}


def hf_files(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> dict[str, bytes]:
    """The ``save_pretrained`` files of the model (LoRA merged into the weights) and the tokenizer, as
    bytes for the checkpoint, so a checkpoint folder is itself a model folder."""
    if hasattr(model, "merge_and_unload"):  # peft: save a plain model a later run can load as is
        model = copy.deepcopy(model).merge_and_unload()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Writing model shards" bars would interleave with our progress
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        return {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir()) if p.is_file()}


# ----------------------------------------------------------------------------------------------------
# Schedules and data order


def learning_rate(a: Any, step: int, total: int) -> float:
    """:func:`advantage.schedules.warmup_decay` of an optimizer section (``learning_rate``,
    ``warmup_steps``, ``lr_schedule``, ``min_lr_ratio``)."""
    return warmup_decay(a.learning_rate, step, total, a.warmup_steps, a.lr_schedule, a.min_lr_ratio)


def set_learning_rate(opt: torch.optim.Optimizer, a: Any, step: int, total: int) -> float:
    """:func:`learning_rate` at ``step``, set on every parameter group of ``opt``; returned (to log)."""
    lr = learning_rate(a, step, total)
    for g in opt.param_groups:
        g["lr"] = lr
    return lr


def data_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The training set's order in ``epoch``: a permutation seeded by (seed, epoch), so a resumed run
    continues with exactly the batches of an uninterrupted one."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


class DataCursor:
    """Where a trainer is in its training set: the epoch and the offset into that epoch's order
    (:func:`data_order`). :meth:`next` hands out indices and crosses into the next epoch when one ends;
    ``epoch`` and ``pos`` are all a checkpoint needs to continue with exactly the same batches."""

    def __init__(self, n: int, seed: int, epoch: int = 0, pos: int = 0):
        self.n, self.seed, self.epoch, self.pos = n, seed, epoch, pos
        self.order = data_order(n, seed, epoch)

    def next(self, k: int) -> list[int]:
        idx: list[int] = []
        while len(idx) < k:
            take = self.order[self.pos : self.pos + k - len(idx)].tolist()
            idx += take
            self.pos += len(take)
            if self.pos >= self.n:
                self.epoch, self.pos = self.epoch + 1, 0
                self.order = data_order(self.n, self.seed, self.epoch)
        return idx

    @property
    def progress(self) -> float:
        """Epochs done, fractional (for the ``train/epoch`` metric)."""
        return self.epoch + self.pos / self.n

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos}


def resume(learner: LearnerState, restored: Checkpoint | None, n: int, seed: int) -> tuple[int, DataCursor]:
    """Where a trainer over a fixed training set of ``n`` items starts: step 0 at the start of the first
    epoch, or where ``restored`` stopped, with ``learner`` (optimizer moments, torch RNG, any modules)
    loaded from it. The algorithm state holds the learner's JSON (``optim``) and the cursor's ``epoch``
    and ``pos`` (:func:`snapshot`)."""
    if restored is None:
        return 0, DataCursor(n, seed)
    s = restored.state["algo"]
    learner.load(restored.tensors, s)
    return restored.step, DataCursor(n, seed, s["epoch"], s["pos"])


def snapshot(
    policy: Any, learner: LearnerState, part: Any, files: Callable[[], dict[str, bytes]], lora: Any = None
) -> Snapshot:
    """A checkpoint of a language-model trainer: the learner's tensors and JSON; the state of ``part``, the
    trainer's :class:`DataCursor` (as :func:`resume` reads it back) or its rollout, whose ``tensors()``
    join the learner's; with ``lora``, the adapter tensors of that model (:func:`policy_model` reads them
    back); and the model folder's ``files()``."""
    from advantage.context import Snapshot

    tensors, meta = learner.save()
    tensors.update(getattr(part, "tensors", dict)())
    if lora is not None:
        tensors.update(adapter_tensors(lora))
    return Snapshot(policy, tensors, {**meta, **part.state()}, files=files)


# ----------------------------------------------------------------------------------------------------
# Prompts and the policy


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


class TaskExamples:
    """A policy's examples of its task, ``self.task`` with ``self.cfg.data`` (its ``_examples`` dict, the
    cache, is set by its ``__init__``)."""

    task: Any
    cfg: Any
    _examples: dict[tuple[str, int], list[Any]]

    def examples(self, split: str, n: int | None = None) -> list[Any]:
        """The first ``n`` examples of ``split`` (cached; the same for every training seed)."""
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        d = self.cfg.data
        size = split_size(d, split, self.task)
        if (split, size) not in self._examples:
            self._examples[(split, size)] = self.task.examples(split, size, d.seed)
        return self._examples[(split, size)][: n or size]


class LMPolicy(TaskExamples):
    """A trained language model with its tokenizer and task: ``act(prompt)`` is the greedy completion,
    :meth:`complete` batches and samples, :meth:`examples` gives the task's prompts."""

    # Set by the trainers and evaluations that use them (DPO, PPO-RLHF, GRPO with a reward model);
    # declared, not assigned: an LMPolicy without them has no such attribute.
    reference: PreTrainedModel
    reward_model: Any  # a frozen reward_model.RewardModel

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, task: Task, cfg: Any):
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


def load_policy(cfg: Any, ckpt: Checkpoint, task_factory: Callable[[Any], Any] = make_task) -> LMPolicy:
    """The policy of a checkpoint: its folder is a ``save_pretrained`` model folder; its task is
    ``task_factory(cfg.data)`` (default :func:`make_task`; the trainers bind theirs)."""
    from advantage.lm.model import load_pretrained
    from advantage.safe_read import check_model_folder

    folder = check_model_folder(ckpt.path)
    model, tok = load_pretrained(folder, trust_remote_code=False, dtype=getattr(torch, cfg.model.dtype))
    return LMPolicy(model.to(cfg.trainer.device), tok, task_factory(cfg.data), cfg)


# ----------------------------------------------------------------------------------------------------
# Evaluation: greedy accuracy, pass@K, maj@K


def evaluate(
    cfg: Any,
    policy: LMPolicy,
    *,
    split: str = "validation",
    samples: int | None = None,
    limit: int | None = None,
    seed: int | None = None,
    temperature: float | None = None,
) -> dict[str, Any]:
    """Score ``policy`` on the first ``limit`` prompts of ``split`` (default ``trainer.eval_episodes`` for
    validation, the whole split otherwise).

    * ``accuracy`` — fraction of greedy completions the verifier marks correct; ``return_mean`` the mean
      verifier reward of those completions (what ``trainer.stop_at_return`` compares);
    * with ``samples = K > 1`` (default ``trainer.eval_samples``): K completions per prompt at
      ``temperature`` (default ``trainer.eval_temperature``); ``pass@1`` and ``pass@K`` by the unbiased
      estimator of Chen et al. (2021) with n = K, and ``maj@K``, majority vote over the extracted answers.
    """
    from advantage.math.pass_at_k import maj_at_k, pass_at_k

    t = cfg.trainer
    examples = eval_examples(cfg, policy, split, limit, samples)
    k = samples or t.eval_samples
    temp = t.eval_temperature if temperature is None else temperature
    bs = max(1, t.eval_batch_size)
    scores, correct, fmt, lengths = [], [], [], []
    for i in range(0, len(examples), bs):
        chunk = examples[i : i + bs]
        gen, texts = policy.complete([e.prompt for e in chunk], temperature=0.0)
        lengths.extend(gen.lengths.tolist())
        for e, text in zip(chunk, texts, strict=True):
            r = policy.task.verify(text, e)
            scores.append(r.score)
            correct.append(r.correct)
            fmt.append(r.format_ok)
    res: dict[str, Any] = {
        "split": split,
        "n": len(examples),
        "accuracy": sum(correct) / len(correct),
        "return_mean": sum(scores) / len(scores),
        "format_rate": sum(fmt) / len(fmt),
        "response_length": sum(lengths) / len(lengths),
    }
    if k > 1:
        g = torch.Generator(device=policy.device).manual_seed(t.seed if seed is None else seed)
        p1, pk, mk = [], [], []
        per = max(1, bs // k)
        for i in range(0, len(examples), per):
            chunk = examples[i : i + per]
            _, texts = policy.complete([e.prompt for e in chunk], temperature=temp, samples=k, generator=g)
            for j, e in enumerate(chunk):
                rs = [policy.task.verify(x, e) for x in texts[j * k : (j + 1) * k]]
                c = sum(r.correct for r in rs)
                p1.append(pass_at_k(k, c, 1))
                pk.append(pass_at_k(k, c, k))
                mk.append(maj_at_k([r.answer for r in rs], [r.correct for r in rs], k))
        res.update({"samples": k, "pass@1": _mean(p1), f"pass@{k}": _mean(pk), f"maj@{k}": _mean(mk)})
    return res


def eval_examples(
    cfg: Any, policy: Any, split: str, limit: int | None, samples: int | None, greedy: str = ""
) -> list[Any]:
    """The examples an evaluation scores: the first ``limit`` of ``split`` (default
    ``trainer.eval_episodes`` for validation, the whole split otherwise). A ``limit`` or ``samples``
    below 1 is an error; so is ``samples`` above 1 for an evaluation that does not sample, the error
    then starting with ``greedy`` (why not)."""
    if limit is not None and limit < 1:
        raise ConfigError(f"limit must be >= 1, got {limit}")
    if greedy and samples not in (None, 1):
        raise ConfigError(f"{greedy}; --samples must be 1, got {samples}")
    if samples is not None and samples < 1:
        raise ConfigError(f"samples must be >= 1, got {samples}")
    examples = policy.examples(split, limit or (cfg.trainer.eval_episodes if split == "validation" else None))
    if not examples:
        where = getattr(getattr(policy, "task", None), "where", "the data")
        other = "validation" if split == "test" else "test"
        raise ConfigError(
            f"{where}: the {split} split is empty, nothing to evaluate; give data.{split}_path=FILE when "
            f"training, or evaluate --split {other}"
        )
    return examples


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """``model`` in eval mode and without grad inside the block, back in the mode it was in after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs) if xs else float("nan")
