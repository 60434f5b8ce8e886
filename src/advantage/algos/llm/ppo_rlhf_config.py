"""The checks ``ppo_rlhf`` makes before any compute (:func:`check`: the reward model exists, is one, and
shares the policy's tokenizer; :mod:`advantage.algos.llm.grpo` uses them too). The config itself is
:mod:`advantage.configs.ppo_rlhf` (re-exported here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from advantage.algos.llm import common
from advantage.configs.ppo_rlhf import (  # noqa: F401  (their old place)
    DEFAULTS,
    PRESETS,
    PPOActor,
    PPOAlgorithm,
    PPOCritic,
    PPOData,
    PPORef,
    PPOReward,
    PPORLHFConfig,
    PPORollout,
    PPOWorker,
)
from advantage.errors import ConfigError

# ----------------------------------------------------------------------------------------------------
# Checks before any compute: the task, the policy's folder, the reward model and the two tokenizers


def make_task(data: Any) -> Any:
    """The preference task whose prompts PPO answers (``data.task`` with its options)."""
    from advantage.envs.text.preference import make_preference_task

    return make_preference_task(data.task, **data.kwargs)


def reward_folder(cfg: PPORLHFConfig) -> Path:
    """The checkpoint folder of ``worker.reward.model``; missing, absent or not a reward model: an error."""
    path = cfg.worker.reward.model
    if not path:
        raise ConfigError(
            "worker.reward.model is required: a reward_model run folder or checkpoint "
            "(train one with `advantage train reward_model data.task=synthetic`)"
        )
    if not Path(path).exists():
        raise ConfigError(f"worker.reward.model={path!r} does not exist")
    from advantage.algos.llm.reward_model import HEAD_FILE

    folder = common.model_folder(path)
    if not (folder / HEAD_FILE).is_file():
        raise ConfigError(
            f"worker.reward.model={path!r} is not a reward model: {str(folder)!r} has no {HEAD_FILE} "
            "(a policy or SFT run?)"
        )
    return folder


def check_tokenizers(policy_tok: Any, reward_tok: Any, policy_src: str, reward_src: str) -> None:
    """The reward model must read responses with the policy's tokenizer: same vocabulary and special ids."""
    va, vb = policy_tok.get_vocab(), reward_tok.get_vocab()
    specials = ("pad_token_id", "eos_token_id")
    if va == vb and all(getattr(policy_tok, s) == getattr(reward_tok, s) for s in specials):
        return
    differ = sorted(set(va.items()) ^ set(vb.items()))[:3]
    raise ConfigError(
        f"the reward model {reward_src!r} uses a different tokenizer from the policy {policy_src!r} "
        f"({len(vb)} vs {len(va)} tokens; e.g. {differ}): train the reward model from the same base model "
        "or task alphabet as the policy"
    )


def _policy_tokenizer(cfg: PPORLHFConfig, task: Any) -> tuple[Any, str]:
    from advantage.nn.lm import build_char_tokenizer, load_tokenizer

    m = cfg.model
    if m.pretrained:
        folder = common.model_folder(m.path)
        return load_tokenizer(folder, trust_remote_code=m.trust_remote_code, pad_to_eos=m.pad_to_eos), m.path
    return build_char_tokenizer(task.alphabet, extra_tokens=task.special_tokens), "scratch model"


def check(cfg: PPORLHFConfig) -> list[str]:
    """:func:`advantage.algos.llm.common.check` with the preference task, plus the reward model: set,
    existing, a reward model, and on the policy's tokenizer — all before the run folder is created."""
    problems = common.check(cfg, make_task)
    path = cfg.worker.reward.model
    try:
        folder = reward_folder(cfg)
        from advantage.nn.lm import load_tokenizer

        policy_tok, src = _policy_tokenizer(cfg, make_task(cfg.data))
        check_tokenizers(policy_tok, load_tokenizer(folder), src, str(path))
    except ConfigError as e:
        problems.extend(e.problems)
    return problems
