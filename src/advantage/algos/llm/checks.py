"""The checks a language-model run makes before any compute (so before its run folder exists): the task and
its options (every split generated or read; unset split sizes and ``data.max_prompt_length`` measured
from the data), the prompts' and responses' lengths with the policy's tokenizer, the model's context and
folder, the evaluation size. Each trainer's ``check`` calls :func:`check` with its own task."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from advantage.algos.llm.data import SPLITS, make_task, resolve_sizes, split_size
from advantage.algos.llm.models import model_folder
from advantage.algos.llm.policy import prompt_texts
from advantage.config import rebase
from advantage.configs.llm import DataConfig
from advantage.errors import ConfigError

if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedTokenizerBase

    from advantage.config import LMRunConfig


def _where(e: Any, split: str, k: int) -> str:
    return getattr(e, "origin", "") or f"{split} prompt {k}"


def check_lengths(
    cfg: LMRunConfig,
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


def check(
    cfg: LMRunConfig,
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
    context: object = m.max_position_embeddings
    if folder is not None and (folder / "config.json").is_file():
        from advantage.safe_io.read import MODEL_JSON_MAX_BYTES, load_json

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


def model_prefix(cfg: LMRunConfig) -> str:
    """Where the policy's model section is in the user's keys: ``model.`` or ``worker.actor.model.``."""
    return "worker.actor.model." if hasattr(cfg, "worker") and hasattr(cfg.worker, "actor") else "model."
