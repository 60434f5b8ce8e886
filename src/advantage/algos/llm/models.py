"""The models of a language-model run: the policy's model and tokenizer (a scratch model with a character
tokenizer over the task's alphabet, or a local ``save_pretrained`` folder, optionally with LoRA), the model
folder a path names (verified when it is a run's checkpoint), the frozen reference, the scalar head of reward
models and critics, and what a checkpoint keeps of a model (its trainable tensors, its ``save_pretrained``
files). The ``model`` config section is :class:`advantage.configs.llm.LMModelConfig`.

A language model is a policy whose state is the prompt plus the tokens generated so far and whose action is
the next token (see ``docs/algorithms/language_models.md``). A batch is laid out as everywhere else in
advantage: prompts left-padded to ``P`` tokens, responses right-padded to ``T`` tokens, and every
per-token quantity (log-probs, rewards, advantages, the response mask) is ``[B, T]``.
"""

from __future__ import annotations

import copy
import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch

from advantage.checkpoint import Checkpoint

if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from advantage.config import LMRunConfig
    from advantage.envs.text.core import Task


# ----------------------------------------------------------------------------------------------------
# Model folders


def model_folder(path: str) -> Path:
    """``model.path`` as a model folder: a run folder (``runs/<run>``) means its latest checkpoint, which
    is a ``save_pretrained`` folder; a run's ``checkpoints`` folder its latest; a checkpoint folder
    itself. Each is verified against its manifest first (:func:`advantage.checkpoint.verify_checkpoint`),
    as every read of a run's checkpoint is. A plain model folder (no manifest) is the user's own model
    and is returned as it is -- unless it is a run's checkpoint whose manifest is gone (it sits in a
    run's ``checkpoints`` folder, or holds a checkpoint's own files): deleting the manifest must not be a
    way to skip the verification, so it is refused. The folder's JSON, tokenizer and template files are
    checked by the bounded reader before transformers parses them
    (:func:`advantage.safe_io.read.check_model_folder`)."""
    from advantage.checkpoint import LATEST, MANIFEST, STATE, TENSORS, latest_checkpoint, verify_checkpoint
    from advantage.errors import CheckpointError
    from advantage.safe_io.read import check_model_folder
    from advantage.safe_io.run_files import Folder

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


# ----------------------------------------------------------------------------------------------------
# The policy's model, the reference, heads


def build_model(cfg: LMRunConfig, task: Task) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The policy model and tokenizer: ``model.path`` loaded from disk, or a scratch model of
    ``model.arch`` with a character tokenizer over the task's alphabet. LoRA wraps it when
    ``model.lora.rank > 0``."""
    from advantage.lm.model import build_char_tokenizer, build_scratch_model, load_pretrained

    m = cfg.model
    dtype = getattr(torch, m.dtype)
    if m.pretrained:
        folder = model_folder(cast(str, m.path))  # model.pretrained: the path is set
        model, tok = load_pretrained(
            folder, trust_remote_code=m.trust_remote_code, dtype=dtype, pad_to_eos=m.pad_to_eos
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
    cfg: LMRunConfig, task: Task, restored: Checkpoint | None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model to train and its tokenizer: :func:`build_model` for a new run; on resume the
    checkpoint folder (a ``save_pretrained`` folder) or, with LoRA, the rebuilt base model with the
    checkpoint's ``adapter.*`` tensors put back."""
    m = cfg.model
    if restored is not None and m.lora.rank == 0:
        from advantage.lm.model import load_pretrained
        from advantage.safe_io.read import check_model_folder

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


def frozen_reference(cfg: LMRunConfig, task: Task, model: PreTrainedModel | None) -> PreTrainedModel:
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


# ----------------------------------------------------------------------------------------------------
# What a checkpoint keeps of a model


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
