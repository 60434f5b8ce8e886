"""How the language-model trainers lay out a batch: prompts left-padded and responses right-padded in one
``[B, P + T]`` sequence (:func:`collate`, SFT's and DPO's), the rows of a sampled batch without the columns
that are padding in all of them (:func:`trimmed`). The denominator of one optimizer step is
:func:`advantage.math.masked.step_normalizer`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from advantage.lm.generate import Generation


def collate(prompts: list[list[int]], responses: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Prompts left-padded to P, responses right-padded to T: ``input_ids``/``attention_mask`` [B, P+T],
    ``response_mask`` [B, T] (float), ``P``."""
    B = len(prompts)
    P, T = max(map(len, prompts)), max(map(len, responses))
    ids = torch.full((B, P + T), pad_id, dtype=torch.long)
    attn = torch.zeros((B, P + T), dtype=torch.long)
    rmask = torch.zeros((B, T))
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        ids[i, P - len(p) : P] = torch.tensor(p)
        ids[i, P : P + len(r)] = torch.tensor(r)
        attn[i, P - len(p) : P + len(r)] = 1
        rmask[i, : len(r)] = 1.0
    return {"input_ids": ids, "attention_mask": attn, "response_mask": rmask, "P": torch.tensor(P)}


def trimmed(gen: Generation, rows: Tensor) -> tuple[Tensor, Tensor, int, int]:
    """``(input_ids, attention_mask, P_r, T_r)`` of ``rows`` without the columns that are padding in
    every one of them: prompts cut to their longest (``P_r``), responses to their longest (``T_r``, EOS
    included). Log-probs are unchanged (positions come from the mask; padding is masked out)."""
    P = gen.prompt_ids.shape[1]
    p_len = max(int(gen.prompt_mask[rows].sum(-1).max()), 1)
    t_len = max(int(gen.lengths[rows].max()), 1)
    ids = torch.cat([gen.prompt_ids[rows, P - p_len :], gen.response_ids[rows, :t_len]], dim=1)
    attn = torch.cat(
        [gen.prompt_mask[rows, P - p_len :].to(gen.response_mask.dtype), gen.response_mask[rows, :t_len]],
        dim=1,
    )
    return ids, attn, p_len, t_len
