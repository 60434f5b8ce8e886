r"""Networks for continuous (``Box``) actions, shared by DDPG, TD3 and SAC.

Every network here works in the *normalized* action space :math:`[-1, 1]^A`; the trainers map actions to
the environment's bounds with :func:`to_env_action` (as Stable-Baselines3 does, so exploration noise and
TD3's target smoothing noise are in the same units whatever the bounds).

* :class:`EnsembleQ` — ``K`` independent Q-networks :math:`Q_k(s, a)` (``K = 2``: TD3's and SAC's twin
  critics) evaluated in one batched pass, so two critics cost one chain of kernels instead of two.
* :class:`DeterministicActor` — :math:`\mu(s) = \tanh(f(s))` (DDPG, TD3).
* :class:`SquashedGaussianActor` — :math:`a = \tanh(u)`, :math:`u \sim N(\mu(s), \sigma(s)^2)` (SAC), with
  the change-of-variables correction of :func:`squashed_gaussian_log_prob`.

Layers use PyTorch's default ``nn.Linear`` initialisation, :math:`U(\pm 1/\sqrt{\text{fan\_in}})` for
weights and biases, as the TD3 and SAC reference implementations and Stable-Baselines3 do.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from torch import Tensor, nn

__all__ = [
    "DeterministicActor",
    "EnsembleQ",
    "SquashedGaussianActor",
    "squashed_gaussian_log_prob",
    "tanh_log_det_jacobian",
    "to_env_action",
]

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_LOG2 = math.log(2.0)


def tanh_log_det_jacobian(u: Tensor) -> Tensor:
    r""":math:`\sum_i \log\big(1 - \tanh(u_i)^2\big)` over the last dimension, ``[..., A] -> [...]``.

    Computed as :math:`2\,(\log 2 - u - \operatorname{softplus}(-2u))`, which is exact and stays finite
    where :math:`\tanh(u)^2` rounds to 1 (|u| ≳ 9 in float32); Stable-Baselines3 and CleanRL instead add
    ``1e-6`` inside the log, which biases the density of saturated actions.
    """
    return (2.0 * (_LOG2 - u - nn.functional.softplus(-2.0 * u))).sum(-1)


def squashed_gaussian_log_prob(u: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    r"""Log-density of :math:`a = \tanh(u)`, :math:`u \sim N(\text{mean}, \exp(\text{log\_std})^2)`, at
    the pre-squash sample ``u`` (Haarnoja et al. 2018, appendix C):

    .. math::
        \log \pi(a \mid s) = \sum_i \Big[\log N(u_i; \mu_i, \sigma_i) - \log\big(1 - \tanh(u_i)^2\big)\Big]

    Args:
        u, mean, log_std: ``[..., A]``.

    Returns:
        ``[...]``, the log-density with respect to Lebesgue measure on :math:`(-1, 1)^A`.
    """
    z = (u - mean) * torch.exp(-log_std)
    gaussian = (-0.5 * z * z - log_std - _HALF_LOG_2PI).sum(-1)
    return gaussian - tanh_log_det_jacobian(u)


def to_env_action(action: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Map normalized actions in ``[-1, 1]`` to ``[low, high]`` (affine; clipped against rounding)."""
    return np.clip(low + (action + 1.0) * 0.5 * (high - low), low, high)


class EnsembleQ(nn.Module):
    r"""``K`` Q-networks :math:`Q_k(s, a)`, MLPs on ``[obs, action]`` evaluated together.

    The members share no parameters, so this is exactly ``K`` separate MLPs (Fujimoto et al. 2018's twin
    critics when ``K = 2``; DDPG's single critic when ``K = 1``), computed with fewer, larger kernels: the
    first layer, whose input all members share, is one ``addmm`` against the members' weights side by side
    (``first_weight`` ``[D, K·H]``); every later layer ``l`` is one ``baddbmm`` with stacked weights
    ``weight_l`` ``[K, in, out]`` and biases ``[K, 1, out]``.

    Args:
        obs_dim, act_dim: input sizes (``D = obs_dim + act_dim``).
        hidden: hidden layer widths (at least one).
        n: ``K``, the number of members.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], n: int = 2):
        super().__init__()
        sizes = [obs_dim + act_dim, *hidden, 1]
        self.n, self.width = n, hidden[0]

        def uniform(fan_in: int, *shape: int) -> nn.Parameter:
            bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default: kaiming_uniform(a=√5) == U(±1/√fan_in)
            return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))

        self.first_weight: Tensor = uniform(sizes[0], sizes[0], n * hidden[0])
        self.first_bias: Tensor = uniform(sizes[0], n * hidden[0])
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(sizes[1:]):
            self.weights.append(uniform(fan_in, n, fan_in, fan_out))
            self.biases.append(uniform(fan_in, n, 1, fan_out))
        # Plain list of the same Parameter objects: iterating a ParameterList costs a getattr per item.
        # (load_state_dict copies into these objects in place, so the list stays valid.)
        self._layers = list(zip(self.weights, self.biases, strict=True))

    def forward(self, obs: Tensor, action: Tensor, first_only: bool = False, detach: bool = False) -> Tensor:
        """``Q`` values ``[K, B]`` (``[1, B]`` with ``first_only``) for ``obs [B, O]``, ``action [B, A]``.

        ``detach=True`` uses detached weights: gradients reach ``obs``/``action`` (the actor's loss) but the
        critic's parameters get none, which saves the weight-gradient matmuls of that backward pass.
        """
        x = torch.cat((obs, action), dim=-1)  # [B, D]
        k = 1 if first_only else self.n
        w0, b0 = self.first_weight, self.first_bias
        if first_only:
            w0, b0 = w0[:, : self.width], b0[: self.width]
        if detach:
            w0, b0 = w0.detach(), b0.detach()
        h = torch.relu(torch.addmm(b0, x, w0))  # [B, K·H]
        h = h.view(x.shape[0], k, self.width).transpose(0, 1)  # [K, B, H]
        last = len(self._layers) - 1
        for i, (w, b) in enumerate(self._layers):
            if first_only:
                w, b = w[:1], b[:1]
            if detach:
                w, b = w.detach(), b.detach()
            h = torch.baddbmm(b, h, w)
            if i < last:
                h = torch.relu(h)
        return h.squeeze(-1)


class _MLP(nn.Module):
    """``Linear → ReLU → … → Linear`` (PyTorch's default initialisation), called functionally: one
    ``F.linear`` per layer, without a module call per layer (a measurable share of a small net's step)."""

    def __init__(self, sizes: list[int], relu_last: bool = False):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(i, o) for i, o in itertools.pairwise(sizes))
        self.relu_last = relu_last

    def forward(self, x: Tensor) -> Tensor:
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = nn.functional.linear(x, layer.weight, layer.bias)  # type: ignore[arg-type]  # nn.Linear: ModuleList items are typed Module
            if i < last or self.relu_last:
                x = torch.relu(x)
        return x


class DeterministicActor(nn.Module):
    r""":math:`\mu_\phi(s) = \tanh(f_\phi(s)) \in [-1, 1]^A` (Lillicrap et al. 2016; Fujimoto et al. 2018)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int]):
        super().__init__()
        self.net = _MLP([obs_dim, *hidden, act_dim])

    def forward(self, obs: Tensor) -> Tensor:
        """``[B, O] -> [B, A]``."""
        return torch.tanh(self.net(obs))


class SquashedGaussianActor(nn.Module):
    r"""SAC's policy (Haarnoja et al. 2018): :math:`u = \mu_\phi(s) + \sigma_\phi(s)\,\varepsilon`,
    :math:`\varepsilon \sim N(0, I)`, :math:`a = \tanh(u)`.

    One linear head outputs ``[mean, log_std]`` (the same function as two separate heads). ``log_std`` is
    clamped to ``[-20, 2]``, the bounds of the SAC reference code and Stable-Baselines3, so σ can neither
    vanish nor explode.
    """

    LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int]):
        super().__init__()
        self.trunk = _MLP([obs_dim, *hidden], relu_last=True)
        self.head = nn.Linear(hidden[-1], 2 * act_dim)

    def dist(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """``(mean, log_std)``, each ``[B, A]``, of the pre-squash Gaussian."""
        out = nn.functional.linear(self.trunk(obs), self.head.weight, self.head.bias)
        mean, log_std = out.chunk(2, dim=-1)
        return mean, log_std.clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)

    def noise(self, n: int | None = None) -> None:
        """No exploration matrix: every sample draws its own noise (see :class:`StateDependentActor`)."""
        return None

    def forward(self, obs: Tensor, noise: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """A reparameterized sample ``(a [B, A] in (-1, 1), log π(a|s) [B])``; gradients flow through both.
        (``noise`` is for the state-dependent actor's interface; this actor draws per sample.)"""
        mean, log_std = self.dist(obs)
        eps = torch.randn_like(mean)
        u = mean + log_std.exp() * eps
        # log N(u; μ, σ) with (u − μ)/σ = ε exactly: no division, same value as squashed_gaussian_log_prob.
        logp = (-0.5 * eps * eps - log_std - _HALF_LOG_2PI).sum(-1) - tanh_log_det_jacobian(u)
        return torch.tanh(u), logp

    def mode(self, obs: Tensor) -> Tensor:
        """The deterministic action :math:`\\tanh(\\mu(s))`, ``[B, A]``, used for evaluation."""
        return torch.tanh(self.dist(obs)[0])


class StateDependentActor(nn.Module):
    r"""SAC's policy with generalized state-dependent exploration (gSDE; Raffin, Kober & Stulp 2022,
    "Smooth Exploration for Robotic Reinforcement Learning").

    The noise is a linear function of the actor's last hidden features :math:`z(s)` ``[H]``:
    :math:`u = \mu(s) + z(s)^\top\theta`, :math:`a = \tanh(u)`, with the exploration matrix
    :math:`\theta \sim N(0, \sigma^2)` ``[H, A]`` (:math:`\sigma = e^{\log\sigma}`, a learned parameter
    matrix) drawn once per exploration period while acting and once per gradient step while learning, not
    once per action: nearby states get nearly the same perturbation, so an episode's actions are smooth
    (exploration that white noise gives only weakly, e.g. pushing MountainCarContinuous' car up the hill).
    For one draw of :math:`\theta`, :math:`u` is Gaussian with variance
    :math:`\hat\sigma_j^2(s) = \sum_i z_i(s)^2 \sigma_{ij}^2 + 10^{-6}`; its log-density with the tanh
    correction is :math:`\log\pi(a|s)`.

    As Stable-Baselines3's ``use_sde`` for SAC: the mean is clipped to ``[-2, 2]`` before the squash,
    :math:`\log\sigma` starts at ``log_std_init`` (SB3's SAC default: -3), :math:`\theta` is a
    reparameterized sample, so the actor loss trains :math:`\log\sigma` through both the noise and
    :math:`\hat\sigma`, and with ``learn_features`` (SB3's SAC sets its ``learn_features=True``) it trains
    :math:`z` through them too; ``learn_features=False`` detaches :math:`z` there (gradients reach it through
    the mean only, SB3's default for its on-policy algorithms).
    """

    MEAN_CLIP = 2.0
    VAR_EPS = 1e-6

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: list[int],
        log_std_init: float = -3.0,
        learn_features: bool = True,
    ):
        super().__init__()
        self.learn_features = learn_features
        self.trunk = _MLP([obs_dim, *hidden], relu_last=True)
        self.mu = nn.Linear(hidden[-1], act_dim)
        self.log_std = nn.Parameter(torch.full((hidden[-1], act_dim), float(log_std_init)))

    def noise(self, n: int | None = None) -> Tensor:
        r"""A draw of the exploration matrix :math:`\theta \sim N(0, \sigma^2)`: ``[H, A]``, or ``[n, H, A]``
        (one per environment). Reparameterized: differentiable in :math:`\log\sigma`."""
        std = self.log_std.exp()
        shape = std.shape if n is None else (n, *std.shape)
        return std * torch.randn(shape, dtype=std.dtype, device=std.device)

    def _mean(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        z = self.trunk(obs)
        mean = nn.functional.linear(z, self.mu.weight, self.mu.bias).clamp(-self.MEAN_CLIP, self.MEAN_CLIP)
        return mean, z

    def forward(self, obs: Tensor, noise: Tensor | None = None) -> tuple[Tensor, Tensor]:
        r"""``(a [B, A] in (-1, 1), log π(a|s) [B])`` with the exploration matrix ``noise`` (``[H, A]`` shared
        by the batch, or ``[B, H, A]`` one per row; a fresh ``[H, A]`` draw when ``None``)."""
        mean, z = self._mean(obs)
        if not self.learn_features:
            z = z.detach()
        theta = self.noise() if noise is None else noise
        eps = z @ theta if theta.dim() == 2 else torch.bmm(z.unsqueeze(1), theta).squeeze(1)  # [B, A]
        u = mean + eps
        std = ((z * z) @ self.log_std.exp().square() + self.VAR_EPS).sqrt()  # [B, A]
        logp = (-0.5 * (eps / std) ** 2 - std.log() - _HALF_LOG_2PI).sum(-1) - tanh_log_det_jacobian(u)
        return torch.tanh(u), logp

    def mode(self, obs: Tensor) -> Tensor:
        r"""The deterministic action :math:`\tanh(\mu(s))`, ``[B, A]``, used for evaluation."""
        return torch.tanh(self._mean(obs)[0])
