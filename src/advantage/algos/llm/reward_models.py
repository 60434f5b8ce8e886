"""The reward model as the other trainers use it: :class:`RewardModel` (a causal-LM backbone with a scalar
head on the last real token), its checkpoint files and :func:`load_reward_model`; and for a run scored by
one (``worker.reward.model`` of ``grpo`` and ``ppo_rlhf``): its folder, the check that it reads the
policy's tokenizer, and loading it frozen (:func:`load_reward`). Training one is
:mod:`advantage.algos.llm.reward_model`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn

from advantage.algos.llm.models import eval_mode, hf_files, model_folder, scalar_head
from advantage.algos.llm.policy import prompt_text
from advantage.errors import ConfigError
from advantage.lm.packing import PackedPrompts, packable, packed_hidden

if TYPE_CHECKING:  # transformers is the optional `llm` extra
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from advantage.algos.llm.run_config import SampledRunConfig
    from advantage.envs.text.core import Task

HEAD_FILE, META_FILE = "value_head.safetensors", "reward_model.json"


# ----------------------------------------------------------------------------------------------------
# The model


def last_token_index(attention_mask: Tensor) -> Tensor:
    """``[S]`` index of the last 1 in each row of ``attention_mask`` ``[S, L]``: the last real token
    under left, right or mixed (prompt left, response right) padding."""
    if bool((attention_mask.sum(-1) == 0).any()):
        raise ValueError("every sequence needs at least one real token")
    # argmax returns the first maximum: in the flipped mask, the last real token.
    return attention_mask.shape[-1] - 1 - attention_mask.flip(-1).long().argmax(-1)


class RewardModel(nn.Module):
    """A causal LM backbone and a scalar head on the last real token
    (:mod:`advantage.algos.llm.reward_model`, detail 1).

    ``forward(input_ids, attention_mask)`` gives ``[S]`` rewards; :meth:`score` takes text."""

    def __init__(
        self, backbone: PreTrainedModel, tokenizer: Any, *, chat_template: bool = False, seed: int = 0
    ):
        super().__init__()
        self.backbone, self.tokenizer, self.chat_template = backbone, tokenizer, chat_template
        self.head = scalar_head(self._base().config.hidden_size, seed)

    def _base(self) -> PreTrainedModel:
        return self.backbone.get_base_model() if hasattr(self.backbone, "get_base_model") else self.backbone

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Rewards ``[S]`` (fp32) of sequences ``[S, L]``, any padding side."""
        from advantage.lm.lean import lean_decoder, padded_causal_mask
        from advantage.lm.model import position_ids_from_mask

        decoder = self._base().base_model  # the transformer without the LM head: final-norm hidden states
        positions = position_ids_from_mask(attention_mask)
        lean = lean_decoder(decoder)
        if lean is not None:  # the same function with less framework work per call (advantage.lm.lean)
            mask = padded_causal_mask(attention_mask, decoder.embed_tokens.weight.dtype)
            hidden = lean.hidden(input_ids, positions, mask)
        else:
            hidden = decoder(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, use_cache=False
            ).last_hidden_state
        idx = last_token_index(attention_mask)  # [S]
        h = hidden[torch.arange(len(idx), device=idx.device), idx]  # [S, H]
        return self.head(h.float()).squeeze(-1)

    def packable(self) -> bool:
        """Whether training batches can be packed (:func:`~advantage.lm.packing.packable` backbone)."""
        return packable(self._base())

    def forward_packed(self, packed: PackedPrompts) -> Tensor:
        """Rewards ``[S]`` (fp32) of the responses of a :func:`~advantage.lm.packing.pack_prompts` batch:
        the head on the hidden state of each response's last token."""
        h = packed_hidden(self._base().base_model, packed, packed.last)  # [S, H]
        return self.head(h.float()).squeeze(-1)

    def encode(self, prompt: str, response: str) -> tuple[list[int], list[int]]:
        """Token ids of the prompt (as the model sees it) and of the response followed by EOS."""
        tok = self.tokenizer
        p = tok(prompt_text(tok, prompt, self.chat_template), add_special_tokens=False)["input_ids"]
        r = tok(response, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        return p, r

    @torch.no_grad()
    def score(self, prompts: Sequence[str], responses: Sequence[str], batch_size: int = 64) -> Tensor:
        """Rewards ``[B]`` (fp32, on the model's device) of ``responses[i]`` to ``prompts[i]``."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        seqs = [[*ids, *rest] for ids, rest in map(self.encode, prompts, responses)]
        out = []
        with eval_mode(self):
            for i in range(0, len(seqs), batch_size):
                ids, mask = collate_sequences(seqs[i : i + batch_size], self.tokenizer.pad_token_id)
                out.append(self(ids.to(self.device), mask.to(self.device)))
        return torch.cat(out) if out else torch.zeros(0, device=self.device)

    def files(self) -> dict[str, bytes]:
        """The checkpoint files: the backbone's ``save_pretrained`` files, the head, and the settings."""
        from safetensors.torch import save

        head = {k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()}
        meta = {"format": 1, "head": HEAD_FILE, "chat_template": self.chat_template, "append_eos": True}
        return {
            **hf_files(self.backbone, self.tokenizer),
            HEAD_FILE: save(head),
            META_FILE: json.dumps(meta, indent=1).encode(),
        }


def collate_sequences(seqs: Sequence[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """Sequences right-padded: ``input_ids`` and ``attention_mask`` ``[S, L]``."""
    L = max(map(len, seqs))
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return ids, mask


def load_reward_model(
    path: str | Path, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> RewardModel:
    """The reward model of a checkpoint folder, or of a run folder (its latest checkpoint)."""
    from safetensors.torch import load_file

    from advantage.lm.model import load_pretrained

    folder = model_folder(str(path))
    if not (folder / HEAD_FILE).is_file():
        raise ConfigError(
            f"{str(folder)!r} is not a reward model folder: no {HEAD_FILE} (a policy or SFT checkpoint?)"
        )
    meta_path = folder / META_FILE
    if meta_path.is_file():
        from advantage.safe_io.read import MODEL_JSON_MAX_BYTES, load_json

        what = f"reward model file {str(meta_path)!r}"
        meta = load_json(meta_path, MODEL_JSON_MAX_BYTES, what, expect=dict)
    else:
        meta = {}
    backbone, tok = load_pretrained(folder, dtype=dtype)
    rm = RewardModel(backbone, tok, chat_template=bool(meta.get("chat_template", False)))
    rm.head.load_state_dict(load_file(folder / HEAD_FILE))
    return rm.to(device).eval()


# ----------------------------------------------------------------------------------------------------
# The reward model of a run


def reward_folder(cfg: SampledRunConfig) -> Path:
    """The checkpoint folder of ``worker.reward.model``; missing, absent or not a reward model: an error."""
    path = cfg.worker.reward.model
    if not path:
        raise ConfigError(
            "worker.reward.model is required: a reward_model run folder or checkpoint "
            "(train one with `advantage train reward_model data.task=synthetic`)"
        )
    if not Path(path).exists():
        raise ConfigError(f"worker.reward.model={path!r} does not exist")
    folder = model_folder(path)
    if not (folder / HEAD_FILE).is_file():
        raise ConfigError(
            f"worker.reward.model={path!r} is not a reward model: {str(folder)!r} has no {HEAD_FILE} "
            "(a policy or SFT run?)"
        )
    return folder


def check_tokenizers(
    policy_tok: PreTrainedTokenizerBase, reward_tok: PreTrainedTokenizerBase, policy_src: str, reward_src: str
) -> None:
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


def policy_tokenizer(cfg: SampledRunConfig, task: Task) -> tuple[PreTrainedTokenizerBase, str]:
    """The tokenizer the policy will have, without loading the model: ``(tokenizer, where it is from)``."""
    from advantage.lm.model import build_char_tokenizer, load_tokenizer

    m = cfg.model
    if m.pretrained:
        path = cast(str, m.path)  # model.pretrained: the path is set
        folder = model_folder(path)
        return load_tokenizer(folder, trust_remote_code=m.trust_remote_code, pad_to_eos=m.pad_to_eos), path
    return build_char_tokenizer(task.alphabet, extra_tokens=task.special_tokens), "scratch model"


def reward_model_problems(cfg: SampledRunConfig, make_task: Callable[[Any], Any]) -> list[str]:
    """The problems with ``worker.reward.model`` found before any compute: not set, missing, not a reward
    model, or not on the tokenizer the policy of ``make_task(cfg.data)`` will have (an empty list: none)."""
    path = cfg.worker.reward.model
    try:
        folder = reward_folder(cfg)
        from advantage.lm.model import load_tokenizer

        policy_tok, src = policy_tokenizer(cfg, make_task(cfg.data))
        check_tokenizers(policy_tok, load_tokenizer(folder), src, str(path))
    except ConfigError as e:
        return list(e.problems)
    return []


def load_reward(cfg: SampledRunConfig, policy_tok: PreTrainedTokenizerBase) -> RewardModel:
    """The reward model of ``worker.reward.model``, checked against the policy's tokenizer, frozen."""
    folder = reward_folder(cfg)
    src = cfg.model.path or "scratch model"
    rm = load_reward_model(folder, device=cfg.trainer.device)
    check_tokenizers(policy_tok, rm.tokenizer, src, cast(str, cfg.worker.reward.model))  # set: reward_folder
    return rm.requires_grad_(False)
