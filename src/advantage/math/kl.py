r"""Per-sample KL estimators (k1, k2, k3) and the adaptive KL coefficient of PPO-Penalty.

The estimators follow Schulman (2020), "Approximating KL Divergence" (http://joschu.net/blog/kl-approx.html).
Each takes the log-probs of *sampled* tokens/actions, ``a ~ π``, under the policy ``logp`` and under the
reference ``ref_logp`` (``[B, T]`` or ``[N]``) and returns a per-element estimate of

.. math::
    KL(\pi \| \pi_\text{ref}) = \mathbb E_{a\sim\pi}\left[\log\frac{\pi(a)}{\pi_\text{ref}(a)}\right]

(the "reverse" KL used as the RLHF / GRPO penalty), with :math:`r = \pi_\text{ref}(a)/\pi(a)`. Mask and
aggregate the result with :mod:`advantage.math.masked`.

What the tests (``tests/test_math_losses.py``) establish exactly, by enumerating a small categorical
distribution (expectations weighted by π, no sampling), for gradients w.r.t. π's logits θ, where
"expected gradient" means :math:`\mathbb E_{a\sim\pi}[\nabla_\theta k(a)]` — the gradient you get by putting
``k`` in the loss and backpropagating through the log-probs, with the sampling not differentiated:

- k1: unbiased, E[k1] = KL(π‖ref); takes negative values; expected gradient 0 (E[∇log π] = 0), so as a
  loss term it does not pull π towards π_ref at all.
- k2: biased, E[k2] ≠ KL(π‖ref) in general; non-negative; expected gradient = ∇θ KL(π‖ref), exactly.
- k3: unbiased, E[k3] = KL(π‖ref); non-negative; expected gradient = ∇θ KL(π_ref‖π) = π − π_ref (the
  gradient of the *forward* KL), which differs from ∇θ KL(π‖ref).

These are gradients of the *loss term*. The full derivative of the expectation,
:math:`\nabla_\theta \mathbb E_{a\sim\pi_\theta}[k(a)] = \mathbb E[\nabla k] + \mathbb E[k\,\nabla\log\pi]`
(score-function term included), is ∇θ KL(π‖ref) for both unbiased estimators k1 and k3; backprop of ``k`` in
a loss drops the second term (``tests/test_math_grpo.py`` checks both, and the sampled means).

The k2 identity needs the samples to come from the same π that is differentiated (the first PPO epoch);
on samples from an older π_old the tests show it fails, and holds again with the per-sample weight
``(π/π_old)`` detached. Using k1 as a detached *reward* (REINFORCE, :math:`\mathbb E[k_1 \nabla\log\pi]`)
also gives exactly ∇KL(π‖ref), which is why PPO-RLHF puts k1 in the reward and not in the loss.
Variance: k3 had lower variance than k1 on the nearby pair tested, but this is not general — for
π = (0.9, 0.1), π_ref = (0.1, 0.9) the tests find Var(k3) ≈ 1.8180 > Var(k1) ≈ 1.7380.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
from torch import Tensor

from advantage.math.registry import FunctionRegistry


# name -> estimator ``f(logp, ref_logp) -> [same shape]``; ``kl_k3`` is registered as ``k3``.
class KLEstimator(Protocol):
    """``(logp, ref_logp) -> per-token estimate``, any shape, the same."""

    def __call__(self, logp: Tensor, ref_logp: Tensor, /) -> Tensor: ...


KL_ESTIMATORS: FunctionRegistry[KLEstimator] = FunctionRegistry("KL estimator", prefix="kl_")


def _diff(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``log π − log π_ref`` in fp32 (fp64 for fp64 inputs)."""
    if logp.shape != ref_logp.shape:
        raise ValueError(
            f"ref_logp must have the shape of logp {tuple(logp.shape)}, got {tuple(ref_logp.shape)}"
        )
    dtype = torch.promote_types(torch.promote_types(logp.dtype, ref_logp.dtype), torch.float32)
    return logp.to(dtype) - ref_logp.to(dtype)


@KL_ESTIMATORS.register(summary="log-ratio, unbiased")
def kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    r"""k1 estimator of :math:`KL(\pi\|\pi_\text{ref})`: :math:`k_1 = \log\pi(a) - \log\pi_\text{ref}(a)`.

    Unbiased, but high variance, and negative whenever :math:`\pi_\text{ref}(a) > \pi(a)`. In a loss its
    gradient is :math:`\nabla\log\pi(a)`, whose expectation under π is exactly 0: as a loss term it does
    not pull π towards π_ref (only noise). Use it as a detached per-token reward penalty instead
    (PPO-RLHF, Stiennon et al. 2020), where
    :math:`\mathbb E[k_1\nabla\log\pi] = \nabla KL(\pi\|\pi_\text{ref})`. Samples a ~ π.

    Args:
        logp, ref_logp: ``[B, T]`` or ``[N]``, log-probs of the sampled actions.

    Returns:
        Shape of ``logp``, fp32 (fp64 for fp64 input).
    """
    return _diff(logp, ref_logp)


@KL_ESTIMATORS.register(summary="half squared log-ratio")
def kl_k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    r"""k2 estimator: :math:`k_2 = \tfrac12 (\log\pi(a) - \log\pi_\text{ref}(a))^2`, a ~ π.

    Biased for the KL value (the bias is third order in the log-ratio, small for nearby policies), low
    variance, non-negative. Its expected gradient under samples from the π being differentiated equals
    the gradient of the true reverse KL exactly (verified numerically in the tests):

    .. math::
        \mathbb E_\pi[(\log\pi - \log\pi_\text{ref})\nabla\log\pi]
        = \sum_a \nabla\pi(a)\log\frac{\pi(a)}{\pi_\text{ref}(a)} = \nabla_\theta KL(\pi\|\pi_\text{ref})

    On samples from an older policy this identity needs the importance weight π/π_old (detached).

    Args:
        logp, ref_logp: ``[B, T]`` or ``[N]``.

    Returns:
        Shape of ``logp``, fp32 (fp64 for fp64 input).
    """
    return 0.5 * _diff(logp, ref_logp) ** 2


@KL_ESTIMATORS.register(summary="ratio - 1 - log-ratio, unbiased and positive")
def kl_k3(logp: Tensor, ref_logp: Tensor, log_ratio_clamp: float = 20.0) -> Tensor:
    r"""k3 estimator: :math:`k_3 = (r - 1) - \log r`, :math:`r = \pi_\text{ref}(a)/\pi(a)`, a ~ π.

    Unbiased (E[r] = 1), non-negative (:math:`x - 1 \ge \log x`), and usually lower variance than k1 for
    nearby policies (not always; see the module docstring). Its gradient is *not* ∇KL(π‖π_ref): per
    sample it is :math:`(1 - r)\nabla\log\pi`, with expectation
    :math:`-\sum_a \pi_\text{ref}(a)\nabla\log\pi(a) = \nabla_\theta KL(\pi_\text{ref}\|\pi)`, the gradient of
    the *forward* KL (for softmax logits: π − π_ref). The GRPO paper's KL loss term is this estimator.

    ``log r`` is clamped to ``[-log_ratio_clamp, log_ratio_clamp]`` before ``exp`` (fp32), so a token the
    policy finds far less likely than the reference does not overflow (gradient 0 where clamped).

    Args:
        logp, ref_logp: ``[B, T]`` or ``[N]``.
        log_ratio_clamp: c > 0.

    Returns:
        Shape of ``logp``, fp32 (fp64 for fp64 input).
    """
    if log_ratio_clamp <= 0:
        raise ValueError(f"log_ratio_clamp must be > 0, got {log_ratio_clamp}")
    log_r = (-_diff(logp, ref_logp)).clamp(-log_ratio_clamp, log_ratio_clamp)
    return torch.exp(log_r) - log_r - 1.0


def k3_from_ratio(log_ratio: Tensor, ratio: Tensor) -> Tensor:
    r"""k3 from a ratio already at hand: :math:`k_3 = (\rho - 1) - \log\rho` with
    :math:`\rho = \pi_\theta(a)/\pi_\text{old}(a)`, a ~ π_old, estimates
    :math:`KL(\pi_\text{old}\|\pi_\theta)` (Schulman, "Approximating KL divergence", 2020).

    PPO-Penalty (:func:`advantage.math.policy_losses.ppo_penalty`, and PPO's logged ``train/kl``) has
    ``log ρ`` (masked, clamped) and ``ρ = exp(log ρ)`` from its surrogate; this reuses both, so the penalty
    and the surrogate share one ``exp`` and one gradient path. :func:`kl_k3` is the same estimator from two
    log-probs. ``log_ratio`` and ``ratio``: any shape, the same; returns that shape.
    """
    return (ratio - 1.0) - log_ratio


def _check_beta_target(beta: float, target: float) -> None:
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if not target > 0:
        raise ValueError(f"target must be > 0, got {target}")


def adaptive_kl_beta(beta: float, kl: float | Tensor, target: float) -> float:
    r"""One step of PPO-Penalty's adaptive coefficient (Schulman et al. 2017 §4).

    .. math::
        \beta \leftarrow \begin{cases} \beta/2, & d < d_\text{targ}/1.5 \\
        \beta, & d_\text{targ}/1.5 \le d \le 1.5\, d_\text{targ} \\
        2\beta, & d > 1.5\, d_\text{targ} \end{cases}

    Both boundaries leave β unchanged. ``kl`` is the measured mean :math:`KL(\pi_\text{old}\|\pi)` after
    the iteration's updates (e.g. the ``approx_kl`` metric). A tensor is read with ``float()`` — one
    host sync per iteration, which is why this lives in the loop, not in a loss.

    Raises:
        ValueError: ``beta < 0``, ``target <= 0`` or a non-finite ``kl``.
    """
    d = float(kl)
    _check_beta_target(beta, target)
    if not math.isfinite(d):
        raise ValueError(f"kl must be finite, got {d}")
    if d < target / 1.5:
        return beta / 2.0
    if d > 1.5 * target:
        return beta * 2.0
    return float(beta)


class AdaptiveKLController:
    """Holds β for PPO-Penalty and applies :func:`adaptive_kl_beta` once per iteration.

    >>> ctl = AdaptiveKLController(beta=1.0, target=0.01)
    >>> ctl.update(0.05)  # 0.05 > 1.5 * 0.01
    2.0
    """

    def __init__(self, beta: float, target: float) -> None:
        _check_beta_target(beta, target)
        self.beta = float(beta)
        self.target = float(target)

    def update(self, kl: float | Tensor) -> float:
        """Adapt β to the measured KL and return the new β."""
        self.beta = adaptive_kl_beta(self.beta, kl, self.target)
        return self.beta

    def __repr__(self) -> str:
        return f"AdaptiveKLController(beta={self.beta}, target={self.target})"
