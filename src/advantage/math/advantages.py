r"""Group-relative advantages for GRPO and its variants: one scalar reward per completion → one advantage.

A batch holds ``B = P × G`` completions: P prompts, each sampled G times, the G completions of a prompt in
consecutive rows (``rewards.view(P, G)``; row ``b`` belongs to group ``b // G``). The baseline of a
completion is built from the other completions of its own prompt, so no value network is needed
(Shao et al. 2024, "DeepSeekMath", §4.1). One signature for the whole registry::

    adv, metrics = GROUP_ADVANTAGES[name](rewards, group_size=8)     # [B] -> [B]
    token_adv = adv[:, None] * mask                                  # outcome supervision: [B, T]

With outcome supervision every token of a completion shares its advantage (Shao et al. §4.1.2; study
notes: "同一个回答中的所有 tokens 共用这个回答的归一化 reward"); :func:`process_advantages` is the
process-supervision variant, one reward per reasoning step.

A group whose G rewards are all equal (all correct or all wrong with a 0/1 verifier) carries no signal:
every mode returns exactly 0 there (not ``0/ε`` rounding noise) and counts it in ``zero_std_frac``
(the study notes: "有限 group 若全对或全错，会出现 σ_r = 0，实现中需要显式处理"). Advantages are constants for
the policy loss; rewards are expected to carry no gradient. Computation is in float32 (float64 for
float64 rewards); the metrics are detached scalars.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from advantage.math.masked import masked_mean, masked_var, masked_whiten
from advantage.math.registry import FunctionRegistry
from advantage.math.returns import reward_to_go


# name -> estimator. Metadata: ``groups`` (needs G >= 2 samples of a prompt), ``batch`` (a statistic of
# the whole batch: with several ranks, computed over every rank's rows), ``process`` (the divisor
# :func:`process_advantages` uses for it under process supervision; absent: not offered there),
# ``per_token`` (a :class:`TokenAdvantage`: per-token rewards ``[B, T]`` and a mask in, ``[B, T]`` out).
class OutcomeAdvantage(Protocol):
    """``(rewards [B], group_size, eps) -> (advantages [B], metrics)``: one reward per completion."""

    def __call__(
        self, rewards: Tensor, group_size: int, eps: float = ..., /
    ) -> tuple[Tensor, dict[str, Tensor]]: ...


class TokenAdvantage(Protocol):
    """``(rewards [B, T], mask [B, T], group_size, eps) -> (advantages [B, T], metrics)``: per-token rewards
    (the ``per_token`` metadata)."""

    def __call__(
        self, rewards: Tensor, mask: Tensor, group_size: int, eps: float = ..., /
    ) -> tuple[Tensor, dict[str, Tensor]]: ...


GROUP_ADVANTAGES: FunctionRegistry[OutcomeAdvantage | TokenAdvantage] = FunctionRegistry("group advantage")


def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    """``rewards [B]`` as ``[P, G]`` in fp32/fp64, after checking the shapes."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [B], got shape {tuple(rewards.shape)}")
    if group_size < 2:
        raise ValueError(f"group-normalized advantages need group_size >= 2, got {group_size}")
    if rewards.shape[0] % group_size != 0:
        raise ValueError(
            f"the batch size must be a multiple of group_size, got batch size {rewards.shape[0]} "
            f"and group_size {group_size}"
        )
    dtype = torch.promote_types(rewards.dtype, torch.float32)
    return rewards.to(dtype).view(-1, group_size)


def constant_groups(values: Tensor, group_size: int) -> Tensor:
    r"""Which groups hold G equal values, exactly: ``[B]`` → ``[P]`` bool, :math:`\max_i v_i = \min_i v_i`.

    The one "all equal" test of the GRPO family: the advantages are zeroed where it holds, and DAPO's
    dynamic sampling drops those groups. It compares values, not a computed spread: the float32 std of
    eight rewards of 0.1 is about 1e-8, not 0, because their mean is inexact, so ``std == 0`` keeps such a
    group although its advantages are all 0. A group holding a NaN is not constant.

    Args:
        values: ``[B]`` (rewards, or correctness as 0/1), groups of ``group_size`` consecutive rows.
        group_size: G >= 1.

    Returns:
        ``[P]`` bool, ``P = B / G``.
    """
    if values.dim() != 1:
        raise ValueError(f"values must be 1-D [B], got shape {tuple(values.shape)}")
    if group_size < 1 or values.shape[0] % group_size != 0:
        raise ValueError(
            f"the batch size must be a positive multiple of group_size, got batch size {values.shape[0]} "
            f"and group_size {group_size}"
        )
    return _all_equal(values.view(-1, group_size))


def _all_equal(r: Tensor) -> Tensor:
    """``[P, G]`` → ``[P]``: max == min along the group (exact; False where a NaN is present)."""
    if r.dtype == torch.bool:
        r = r.to(torch.uint8)
    return r.amax(dim=-1) == r.amin(dim=-1)


def _finish(r: Tensor, adv: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Zero the advantages of constant groups exactly, flatten to ``[B]``, and compute the metrics."""
    constant = _all_equal(r)[:, None]  # [P, 1]
    adv = torch.where(constant, torch.zeros_like(adv), adv)
    with torch.no_grad():
        metrics = {
            "zero_std_frac": constant.to(r.dtype).mean(),
            "reward_std_mean": r.std(dim=1).mean(),  # unbiased per-group std, averaged over groups
            "reward_mean": r.mean(),
        }
    return adv.reshape(-1), metrics


@GROUP_ADVANTAGES.register(groups=True, process="group", summary="group mean and std")
def grpo(rewards: Tensor, group_size: int, eps: float = 1e-6) -> tuple[Tensor, dict[str, Tensor]]:
    r"""GRPO outcome advantages (Shao et al. 2024, DeepSeekMath §4.1.2).

    .. math::
        \hat A_i = \frac{r_i - \bar r}{\sigma_r + \epsilon}, \qquad
        \bar r = \frac1G\sum_{j=1}^G r_j, \quad
        \sigma_r = \sqrt{\tfrac{1}{G-1}\textstyle\sum_j (r_j-\bar r)^2}

    Group mean and Bessel-corrected (unbiased, ``torch.std``'s default, as in TRL) group std. Groups
    with equal rewards give exactly 0. For 0/1 rewards with success rate p the (population) weights are
    :math:`\sqrt{(1-p)/p}` for a correct and :math:`-\sqrt{p/(1-p)}` for a wrong answer: rare successes on
    hard prompts are pushed up hard, rare failures on easy prompts pushed down hard (Mroueh 2025; seed
    003 "GRPO with Binary Rewards"). Dividing by σ is what :func:`dr_grpo` removes.

    Args:
        rewards: ``[B]``, groups of ``group_size`` consecutive rows.
        group_size: G >= 2.
        eps: added to σ.

    Returns:
        ``(advantages [B], metrics)``: ``zero_std_frac``, ``reward_std_mean``, ``reward_mean``.
    """
    r = _grouped(rewards, group_size)
    std = r.std(dim=1, keepdim=True)
    return _finish(r, (r - r.mean(dim=1, keepdim=True)) / (std + eps))


@GROUP_ADVANTAGES.register(groups=True, process="none", summary="group mean, no std")
def dr_grpo(rewards: Tensor, group_size: int, eps: float = 1e-6) -> tuple[Tensor, dict[str, Tensor]]:
    r"""Dr. GRPO advantages (Liu et al. 2025, "Understanding R1-Zero-Like Training"): no std division.

    .. math::
        \hat A_i = r_i - \bar r

    Dividing by the group std up-weights prompts that are nearly always solved or nearly always failed
    (question-level difficulty bias); Dr. GRPO drops it, and pairs it with the fixed-constant
    aggregation ``seq_mean_token_sum_norm``. ``eps`` is unused (shared signature).

    Args:
        rewards: ``[B]``; group_size: G >= 2.

    Returns:
        ``(advantages [B], metrics)`` as :func:`grpo`.
    """
    r = _grouped(rewards, group_size)
    return _finish(r, r - r.mean(dim=1, keepdim=True))


@GROUP_ADVANTAGES.register(groups=True, summary="leave-one-out mean")
def rloo(rewards: Tensor, group_size: int, eps: float = 1e-6) -> tuple[Tensor, dict[str, Tensor]]:
    r"""REINFORCE leave-one-out advantages (Ahmadian et al. 2024, "Back to Basics"; Kool et al. 2019).

    .. math::
        \hat A_i = r_i - \frac{1}{G-1}\sum_{j\ne i} r_j = \frac{G}{G-1}\,(r_i - \bar r)

    The baseline excludes the completion itself, so it is independent of it and the policy gradient is
    unbiased (the plain group mean of :func:`dr_grpo` includes :math:`r_i`, a bias of factor
    :math:`(G-1)/G`). ``eps`` is unused (shared signature).

    Args:
        rewards: ``[B]``; group_size: G >= 2.

    Returns:
        ``(advantages [B], metrics)`` as :func:`grpo`.
    """
    r = _grouped(rewards, group_size)
    baseline = (r.sum(dim=1, keepdim=True) - r) / (group_size - 1)
    return _finish(r, r - baseline)


@GROUP_ADVANTAGES.register(
    groups=True, batch=True, process="batch", summary="group mean, batch std; Lite PPO"
)
def batch_std(rewards: Tensor, group_size: int, eps: float = 1e-6) -> tuple[Tensor, dict[str, Tensor]]:
    r"""Group mean, batch std: "Lite PPO" (Liu et al. 2025, "Part I: Tricks or Traps? A Deep Dive into RL
    for LLM Reasoning").

    .. math::
        \hat A_i = \frac{r_i - \bar r_{g(i)}}{\sigma_\text{batch} + \epsilon}

    with :math:`\sigma_\text{batch}` the (unbiased) std of all B rewards. The group mean keeps the
    per-prompt baseline; the batch-wide scale avoids the extreme up-weighting of low-variance groups that
    per-group std causes with sparse 0/1 rewards. One group (B = G) is :func:`grpo`.

    Args:
        rewards: ``[B]``; group_size: G >= 2; eps: added to :math:`\sigma_\text{batch}`.

    Returns:
        ``(advantages [B], metrics)`` as :func:`grpo`.
    """
    r = _grouped(rewards, group_size)
    return _finish(r, (r - r.mean(dim=1, keepdim=True)) / (r.std() + eps))


@GROUP_ADVANTAGES.register(per_token=True, batch=True, summary="discounted token returns, batch-whitened")
def reinforce_plus_plus(
    rewards: Tensor, mask: Tensor, group_size: int, eps: float = 1e-8, gamma: float = 1.0
) -> tuple[Tensor, dict[str, Tensor]]:
    r"""REINFORCE++ advantages (Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning Large
    Language Models"): per-token returns, whitened over the whole batch; no critic and no groups.

    .. math::
        G_{i,t} = \sum_{s \ge t} \gamma^{\,s-t}\, r_{i,s}, \qquad
        \hat A_{i,t} = \frac{G_{i,t} - \mu}{\sqrt{\sigma^2 + \epsilon}}

    with :math:`\mu, \sigma^2` the mean and (unbiased) variance of :math:`G` over every valid token of
    the batch (:func:`~advantage.math.masked.masked_whiten`). The per-token rewards are usually the
    score on the last token and a KL penalty on every token, :math:`r_{i,t} = -\beta\,k_{1,t} +
    \mathbb 1[t = \text{last}]\, s_i` (:func:`~advantage.math.rewards.token_rewards`); with
    :math:`\beta = 0` and :math:`\gamma = 1` every token of a response gets its score, whitened over the
    batch's tokens. The baseline is the batch mean: several samples of a prompt are not needed
    (``group_size`` is unused), and a response is compared with every response of the batch.

    Args:
        rewards: ``[B, T]`` per-token rewards; padding may hold anything.
        mask: ``[B, T]`` response mask, 1 on valid tokens (contiguous from position 0).
        group_size: unused (the registry's shared signature).
        eps: added to the variance.
        gamma: discount γ in [0, 1] (1: the undiscounted return, the usual choice for language models).

    Returns:
        ``(advantages [B, T], metrics)``: 0 on padding; ``return_mean`` and ``return_std`` over the valid
        tokens, ``reward_mean`` (the mean per-response sum of rewards).
    """
    if rewards.dim() != 2 or mask.shape != rewards.shape:
        raise ValueError(
            "rewards and mask must be [B, T] of one shape, got "
            f"{tuple(rewards.shape)} and {tuple(mask.shape)}"
        )
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    dtype = torch.promote_types(rewards.dtype, torch.float32)
    valid = (mask != 0).to(dtype)
    r = torch.where(valid != 0, rewards.to(dtype), torch.zeros((), dtype=dtype, device=rewards.device))
    returns = reward_to_go(r, gamma)  # the padding after a response adds 0
    adv = masked_whiten(returns, valid, eps=eps)
    with torch.no_grad():
        metrics = {
            "return_mean": masked_mean(returns, valid),
            "return_std": masked_var(returns, valid).sqrt(),
            "reward_mean": r.sum(-1).mean(),
        }
    return adv, metrics


PROCESS_SCALES = ("group", "none", "batch")  # the divisors process_advantages offers


def process_advantages(
    step_rewards: Tensor,
    step_mask: Tensor,
    step_end: Tensor,
    num_tokens: int,
    group_size: int,
    eps: float = 1e-6,
    scale: str = "group",
) -> Tensor:
    r"""GRPO with process supervision (Shao et al. 2024, DeepSeekMath §4.1.3).

    Response i of a group has reasoning steps :math:`s = 1..K_i` with rewards :math:`r_i^{(s)}` (from a
    process reward model); step s ends at token :math:`e_i^{(s)}`. All step rewards of the *group* are
    normalized together, then each token gets the sum of the normalized rewards of the steps that end at
    or after it:

    .. math::
        \tilde r_i^{(s)} = \frac{r_i^{(s)} - \operatorname{mean}(R)}{\operatorname{std}(R) + \epsilon},
        \quad R = \{r_j^{(s)}\}_{j \in \text{group},\, s \le K_j}, \qquad
        \hat A_{i,t} = \sum_{s:\, e_i^{(s)} \ge t} \tilde r_i^{(s)}

    std is Bessel-corrected, as in :func:`grpo`; a group whose valid step rewards are all equal (or that
    has a single valid step) gives 0. Tokens after the last step's end get 0; multiply by the token mask.
    ``scale`` picks the divisor as the outcome estimators do: ``group`` (the group std, above,
    :func:`grpo`), ``none`` (centred only, :func:`dr_grpo`) or ``batch`` (the std of every valid step
    reward of the batch, :func:`batch_std`); each estimator's ``process`` metadata names its divisor.

    Args:
        step_rewards: ``[B, S]`` float, S = the most steps of any response; padding may hold anything.
        step_mask: ``[B, S]`` float or bool, 1 for a real step.
        step_end: ``[B, S]`` long, index in ``[0, num_tokens)`` of the last token of each valid step.
        num_tokens: T, the response length of the token tensors.
        group_size: G >= 2; groups are consecutive rows.
        eps: added to the std.
        scale: ``group``, ``none`` or ``batch``.

    Returns:
        ``[B, T]`` advantages (fp32, fp64 for fp64 rewards).
    """
    if step_rewards.dim() != 2:
        raise ValueError(f"step_rewards must be 2-D [B, S], got shape {tuple(step_rewards.shape)}")
    for name, x in (("step_mask", step_mask), ("step_end", step_end)):
        if x.shape != step_rewards.shape:
            raise ValueError(
                f"{name} must have the shape of step_rewards {tuple(step_rewards.shape)}, "
                f"got {tuple(x.shape)}"
            )
    if group_size < 2:
        raise ValueError(f"group-normalized advantages need group_size >= 2, got {group_size}")
    if scale not in PROCESS_SCALES:
        raise ValueError(f"scale must be one of {PROCESS_SCALES}, got {scale!r}")
    B, S = step_rewards.shape
    if B % group_size != 0:
        raise ValueError(
            f"the batch size must be a multiple of group_size, got batch size {B} and group_size {group_size}"
        )
    dtype = torch.promote_types(step_rewards.dtype, torch.float32)
    valid = step_mask != 0
    r = torch.where(valid, step_rewards.to(dtype), torch.zeros((), dtype=dtype, device=valid.device))

    # Group statistics over every valid step of every response in the group: [P, G*S] rows.
    rg, vg = r.view(-1, group_size * S), valid.view(-1, group_size * S)
    n = vg.sum(dim=1, keepdim=True).to(dtype)
    mean = rg.sum(dim=1, keepdim=True) / n.clamp(min=1)
    ss = torch.where(vg, (rg - mean) ** 2, torch.zeros_like(rg)).sum(dim=1, keepdim=True)
    if scale == "group":
        denom = (ss / (n - 1).clamp(min=1)).sqrt() + eps
    elif scale == "batch":
        total = valid.sum().to(dtype)
        batch_mean = r.sum() / total.clamp(min=1)
        batch_ss = torch.where(valid, (r - batch_mean) ** 2, torch.zeros_like(r)).sum()
        denom = (batch_ss / (total - 1).clamp(min=1)).sqrt() + eps
    else:  # none: centred only (Dr.GRPO)
        denom = torch.ones((), dtype=dtype, device=rg.device)
    big = torch.where(vg, rg, -torch.inf).amax(dim=1, keepdim=True)
    small = torch.where(vg, rg, torch.inf).amin(dim=1, keepdim=True)
    constant = ~(big > small)  # all equal, a single step, or no step
    norm = torch.where(constant | ~vg, torch.zeros_like(rg), (rg - mean) / denom).view(B, S)

    # A[b, t] = Σ_s norm[b, s] · [step_end[b, s] >= t]
    t = torch.arange(num_tokens, device=step_end.device)
    ends_after = step_end[:, :, None] >= t  # [B, S, T]
    return (norm[:, :, None] * ends_after.to(dtype)).sum(dim=1)
