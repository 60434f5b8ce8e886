r"""Trust-region helpers for TRPO (Schulman et al. 2015, "Trust Region Policy Optimization", ICML).

TRPO solves, at each update,

.. math::
    \theta_{k+1} = \arg\max_\theta \mathcal L_{\theta_k}(\theta) \quad \text{s.t.} \quad
    \overline D_\mathrm{KL}(\theta_k \| \theta) \le \delta,

with the surrogate
:math:`\mathcal L_{\theta_k}(\theta) = \mathbb E[\frac{\pi_\theta(a|s)}{\pi_{\theta_k}(a|s)} \hat A(s, a)]`
and the mean KL over states visited by :math:`\pi_{\theta_k}`. Linearising
:math:`\mathcal L` (gradient :math:`g`) and taking the KL to second order (its Hessian at
:math:`\theta_k` is the Fisher information :math:`F`) gives the natural-gradient step

.. math::
    s = F^{-1} g, \qquad \Delta\theta = \sqrt{\frac{2\delta}{s^\top F s}}\; s,

whose quadratic KL model is exactly δ. :func:`conjugate_gradient` finds :math:`s` from Fisher-vector
products alone (:func:`fisher_vector_product`: the Hessian of the mean KL times a vector, by double
backprop, never the matrix), and :func:`line_search` backtracks along :math:`\Delta\theta` until the real
surrogate improves and the real mean KL is at most δ, since both models are only local.

Conventions follow the paper's appendix C and Spinning Up's TRPO (damping added to :math:`F`, 10 CG
iterations, backtracking factor 0.8, at most 10 backtracks).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn


def flat_grad(
    output: Tensor,
    params: Sequence[nn.Parameter],
    *,
    create_graph: bool = False,
    retain_graph: bool | None = None,
) -> Tensor:
    """:math:`\\nabla_\\theta` ``output`` as one flat vector ``[P]`` (zeros for unused parameters)."""
    grads = torch.autograd.grad(
        output, list(params), create_graph=create_graph, retain_graph=retain_graph, allow_unused=True
    )
    return torch.cat(
        [(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(params, grads, strict=True)]
    )


def conjugate_gradient(
    avp: Callable[[Tensor], Tensor], b: Tensor, iters: int = 10, residual_tol: float = 1e-10
) -> Tensor:
    r"""Solve :math:`A x = b` for symmetric positive-definite :math:`A` given only ``avp(v) = A v``.

    Standard CG (Hestenes & Stiefel 1952; Nocedal & Wright, algorithm 5.2) from :math:`x_0 = 0`: at most
    ``iters`` products, stopping early once :math:`\|r\|^2 <` ``residual_tol``. In exact arithmetic it
    solves an ``n``-dimensional system in ``n`` iterations; TRPO stops at 10, which is enough for a
    descent direction that the line search then checks.

    Args:
        avp: ``v [P] -> A v [P]``.
        b: ``[P]`` right-hand side.
    Returns:
        ``x [P]``.
    """
    x = torch.zeros_like(b)
    r = b.clone()  # residual b - A x with x = 0
    p = b.clone()
    rr = torch.dot(r, r)
    for _ in range(iters):
        if float(rr) < residual_tol:
            break
        ap = avp(p)
        alpha = rr / torch.dot(p, ap)
        x += alpha * p
        r -= alpha * ap
        rr_new = torch.dot(r, r)
        p = r + (rr_new / rr) * p
        rr = rr_new
    return x


def fisher_vector_product(
    kl: Tensor, params: Sequence[nn.Parameter], damping: float = 0.0
) -> Callable[[Tensor], Tensor]:
    r"""``v -> (H + damping·I) v`` with :math:`H = \nabla^2_\theta \overline D_\mathrm{KL}` at the current θ.

    ``kl`` must be the mean KL from a *detached* copy of the old policy to the current one, evaluated at
    the current parameters (so it is 0 there and its gradient is 0): its Hessian there is the Fisher
    information matrix of the policy averaged over the states (Schulman et al. 2015, appendix C.1).
    Computed by double backprop, :math:`H v = \nabla_\theta\big((\nabla_\theta \overline D_\mathrm{KL})^\top
    v\big)`: one extra backward pass per product, no ``[P, P]`` matrix. ``damping`` (Spinning Up uses 0.1)
    keeps CG stable where :math:`F` is nearly singular.
    """
    grad = flat_grad(kl, params, create_graph=True)

    def fvp(v: Tensor) -> Tensor:
        hv = flat_grad(torch.dot(grad, v), params, retain_graph=True)
        return hv + damping * v

    return fvp


def natural_step(step_dir: Tensor, fvp: Callable[[Tensor], Tensor], max_kl: float) -> Tensor:
    r""":math:`\sqrt{2\delta / (s^\top F s)}\, s`: the step along ``s`` whose quadratic KL model is δ."""
    shs = float(torch.dot(step_dir, fvp(step_dir)))
    if not math.isfinite(shs) or shs <= 0:
        raise FloatingPointError(f"s^T F s = {shs}: the Fisher-vector product is not positive along s")
    return math.sqrt(2 * max_kl / shs) * step_dir


@dataclass
class LineSearchResult:
    accepted: bool  # a step was taken (else the parameters are back at θ_k)
    fraction: float  # the fraction of the full step taken (0 when rejected)
    backtracks: int  # candidate steps rejected before the accepted one (all of them when rejected)
    improvement: float  # L(θ_new) - L(θ_k) (0 when rejected)
    kl: float  # mean KL(θ_k ‖ θ_new) (0 when rejected)


def line_search(
    evaluate: Callable[[], tuple[float, float]],
    params: Sequence[nn.Parameter],
    full_step: Tensor,
    max_kl: float,
    *,
    backtrack_coef: float = 0.8,
    max_backtracks: int = 10,
) -> LineSearchResult:
    r"""Try :math:`\theta_k + \alpha^j \Delta\theta` for :math:`j = 0, 1, \dots` (``backtrack_coef`` α) and
    keep the first step with a **positive surrogate improvement and mean KL ≤ δ**; with none among
    ``max_backtracks + 1`` tries, restore :math:`\theta_k` (the update is skipped).

    ``evaluate()`` returns ``(surrogate, mean_kl)`` at the parameters currently in ``params`` (no grad).
    The parameters are changed in place: at θ_new when accepted, at θ_k otherwise.
    """
    with torch.no_grad():
        old = torch.nn.utils.parameters_to_vector(params).clone()
        base, _ = evaluate()
        for j in range(max_backtracks + 1):
            fraction = backtrack_coef**j
            _assign(params, old + fraction * full_step)
            surrogate, kl = evaluate()
            improvement = surrogate - base
            if math.isfinite(kl) and kl <= max_kl and improvement > 0:
                return LineSearchResult(True, fraction, j, improvement, kl)
        _assign(params, old)
    return LineSearchResult(False, 0.0, max_backtracks + 1, 0.0, 0.0)


def _assign(params: Sequence[nn.Parameter], flat: Tensor) -> None:
    """Copy ``flat`` into the parameters' own storage. (``vector_to_parameters`` would instead make each
    parameter a view into ``flat``: at another memory alignment, CPU matmul kernels may sum in another
    order, and a run resumed from a checkpoint would drift from an uninterrupted one in the last bits.)"""
    offset = 0
    for p in params:
        p.copy_(flat[offset : offset + p.numel()].view_as(p))
        offset += p.numel()
