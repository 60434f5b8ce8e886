r"""Preference losses: reward models from comparisons, and DPO and its variants.

Stiennon et al. 2020 (the reward model's loss :math:`-\log\sigma(r_\text{chosen} - r_\text{rejected})`),
Bradley & Terry 1952, Ouyang et al. 2022 (InstructGPT's K-wise comparisons) and Rafailov et al. 2023 (DPO
from the KL-regularised objective). All inputs are per-comparison scalars: reward-model scores, or
*sequence* log-probs (the sum of a response's per-token log-probs over its mask) for DPO.
"""

from __future__ import annotations

import itertools
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from advantage.math.registry import FunctionRegistry


# name -> DPO loss ``f(chosen_logp, rejected_logp, ref_chosen_logp, ref_rejected_logp, beta, ...)``;
# ``dpo_ipo`` is registered as ``ipo``.
class DPOLoss(Protocol):
    """``(chosen_logp, rejected_logp, ref_chosen_logp, ref_rejected_logp, beta, label_smoothing) -> [B]``."""

    def __call__(
        self,
        chosen_logp: Tensor,
        rejected_logp: Tensor,
        ref_chosen_logp: Tensor,
        ref_rejected_logp: Tensor,
        /,
        beta: float = ...,
        label_smoothing: float = ...,
    ) -> Tensor: ...


DPO_LOSSES: FunctionRegistry[DPOLoss] = FunctionRegistry("DPO loss", prefix="dpo_")


def bradley_terry_loss(chosen: Tensor, rejected: Tensor) -> Tensor:
    r"""Pairwise reward-model loss (Bradley & Terry 1952; Ouyang et al. 2022).

    .. math::
        \ell = -\log\sigma(r_w - r_l) = \operatorname{softplus}(r_l - r_w)

    :math:`P(w \succ l) = \sigma(r_w - r_l)` is the Bradley–Terry model with strengths
    :math:`e^{r}`; the loss is its negative log-likelihood, computed stably with softplus.

    Args:
        chosen, rejected: ``[B]`` scores of the preferred and the other response.

    Returns:
        ``[B]`` per-pair losses.
    """
    return F.softplus(rejected - chosen)


def kwise_ranking_loss(scores: Tensor, valid: Tensor | None = None) -> Tensor:
    r"""InstructGPT's K-wise ranking loss (Ouyang et al. 2022, eq. 1): every one of the :math:`\binom K2`
    pairs of a ranking is a Bradley–Terry comparison, and the prompt's loss is their mean.

    .. math::
        \ell = -\frac{1}{\binom K2}\sum_{i<j}\log\sigma(s_i - s_j)

    Args:
        scores: ``[N, K]`` scores of each prompt's K responses, **ranked best first**.
        valid: optional ``[N, K]`` bool; a prompt with fewer responses masks the missing ones (only pairs
            of valid responses count, and each prompt is averaged over its own pairs).

    Returns:
        ``[N]`` per-prompt losses.
    """
    K = scores.shape[-1]
    if K < 2:
        raise ValueError(f"a ranking needs at least 2 responses, got K={K}")
    i, j = zip(*itertools.combinations(range(K), 2), strict=True)
    ii, jj = torch.tensor(i), torch.tensor(j)
    pair_loss = F.softplus(scores[:, jj] - scores[:, ii])  # [N, C(K,2)]; i ranked above j
    if valid is None:
        return pair_loss.mean(dim=-1)
    pair_valid = (valid[:, ii] & valid[:, jj]).to(pair_loss.dtype)
    count = pair_valid.sum(dim=-1)
    if bool((count == 0).any()):
        raise ValueError("every ranking needs at least 2 valid responses")
    return (pair_loss * pair_valid).sum(dim=-1) / count


def dpo_implicit_reward(logp: Tensor, ref_logp: Tensor, beta: float) -> Tensor:
    r"""DPO's implicit reward :math:`\hat r = \beta\log\frac{\pi_\theta(y|x)}{\pi_\text{ref}(y|x)}`
    (Rafailov et al. 2023): the reward for which :math:`\pi_\theta` is the optimum of the KL-regularised
    objective, up to a function of :math:`x`. ``[B]`` sequence log-probs in, ``[B]`` out."""
    return beta * (logp - ref_logp)


def _margin(chosen_logp: Tensor, rejected_logp: Tensor, ref_chosen: Tensor, ref_rejected: Tensor) -> Tensor:
    # h = log π(y_w)/π_ref(y_w) - log π(y_l)/π_ref(y_l), in fp32 at least
    dtype = torch.promote_types(chosen_logp.dtype, torch.float32)
    return (chosen_logp.to(dtype) - ref_chosen.to(dtype)) - (rejected_logp.to(dtype) - ref_rejected.to(dtype))


@DPO_LOSSES.register(summary="DPO")
def dpo_sigmoid(
    chosen_logp: Tensor,
    rejected_logp: Tensor,
    ref_chosen_logp: Tensor,
    ref_rejected_logp: Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> Tensor:
    r"""DPO (Rafailov et al. 2023): :math:`-\log\sigma(\beta h)` with
    :math:`h = \log\frac{\pi(y_w)}{\pi_\text{ref}(y_w)} - \log\frac{\pi(y_l)}{\pi_\text{ref}(y_l)}`.

    ``label_smoothing`` ε (conservative DPO, Mitchell 2023) assumes labels are flipped with probability
    ε: :math:`-(1-\varepsilon)\log\sigma(\beta h) - \varepsilon\log\sigma(-\beta h)`. All ``[B]``."""
    h = _margin(chosen_logp, rejected_logp, ref_chosen_logp, ref_rejected_logp)
    loss = F.softplus(-beta * h)
    if label_smoothing:
        loss = (1 - label_smoothing) * loss + label_smoothing * F.softplus(beta * h)
    return loss


@DPO_LOSSES.register(summary="IPO")
def dpo_ipo(
    chosen_logp: Tensor,
    rejected_logp: Tensor,
    ref_chosen_logp: Tensor,
    ref_rejected_logp: Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> Tensor:
    r"""IPO (Azar et al. 2023): :math:`(h - \frac{1}{2\beta})^2` — a squared loss that stops pushing the
    margin once it reaches :math:`1/(2\beta)`, so deterministic preferences do not drive it to infinity.
    (TRL feeds IPO length-averaged log-probs; pass those here for the same behaviour.) All ``[B]``."""
    h = _margin(chosen_logp, rejected_logp, ref_chosen_logp, ref_rejected_logp)
    return (h - 1.0 / (2.0 * beta)) ** 2


@DPO_LOSSES.register(summary="SLiC hinge")
def dpo_hinge(
    chosen_logp: Tensor,
    rejected_logp: Tensor,
    ref_chosen_logp: Tensor,
    ref_rejected_logp: Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> Tensor:
    r"""Hinge (SLiC, Zhao et al. 2023): :math:`\max(0, 1 - \beta h)`. All ``[B]``."""
    h = _margin(chosen_logp, rejected_logp, ref_chosen_logp, ref_rejected_logp)
    return torch.relu(1.0 - beta * h)


def dpo_metrics(
    chosen_logp: Tensor,
    rejected_logp: Tensor,
    ref_chosen_logp: Tensor,
    ref_rejected_logp: Tensor,
    beta: float,
) -> dict[str, Tensor]:
    """Implicit rewards of the chosen and rejected responses, their margin and the preference accuracy
    (fraction of pairs whose chosen implicit reward is higher), means over the batch, detached."""
    with torch.no_grad():
        rc = dpo_implicit_reward(chosen_logp, ref_chosen_logp, beta)
        rr = dpo_implicit_reward(rejected_logp, ref_rejected_logp, beta)
        return {
            "rewards_chosen": rc.mean(),
            "rewards_rejected": rr.mean(),
            "reward_margin": (rc - rr).mean(),
            "reward_accuracy": (rc > rr).float().mean(),
        }
