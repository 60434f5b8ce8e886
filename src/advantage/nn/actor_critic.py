"""Actor-critic networks for vector observations.

* :class:`CategoricalHead` — Discrete actions, π(a|s) = softmax(logits).
* :class:`GaussianHead` — Box actions, a Gaussian with a state-independent log-std (PPO paper; SB3 and
  CleanRL do the same). With ``squash=True`` the sample ``u`` goes through ``tanh`` and is rescaled to
  the action bounds; the log-density then carries the change-of-variables correction
  ``log π(a) = log N(u) − Σ log(1 − tanh(u)²)`` (Haarnoja et al. 2018, appendix C), computed in the
  stable form ``2·(log 2 − u − softplus(−2u))``. Without squashing the env gets ``clip(u, low, high)``.

Both heads are evaluated on the *raw* sample ``u`` that the rollout stored, so importance ratios never
need ``atanh`` of a saturated action.
"""

from __future__ import annotations

import math
from typing import cast

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from advantage.configs.models import ActorCriticModel  # noqa: F401  (its old place)

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


class MLP(nn.Sequential):
    """An ``nn.Sequential`` of ``Linear`` and activation layers whose forward calls ``F.linear``,
    ``torch.relu`` and ``torch.tanh`` itself instead of calling each layer as a module: the same function and
    parameters (and ``state_dict`` keys), without a module call per layer, which on the one-row batches of
    acting costs more than the arithmetic. Other layer types are called as modules; hooks registered on the
    inner layers are not run."""

    def forward(self, x: Tensor) -> Tensor:
        for m in self:
            kind = type(m)
            if kind is nn.Linear:
                lin = cast(nn.Linear, m)
                x = nn.functional.linear(x, lin.weight, lin.bias)
            elif kind is nn.ReLU:
                x = torch.relu(x)
            elif kind is nn.Tanh:
                x = torch.tanh(x)
            else:
                x = m(x)
        return x


def mlp(sizes: list[int], activation: str = "tanh", out_gain: float = 1.0, orthogonal: bool = True) -> MLP:
    """``Linear → act → … → Linear`` with orthogonal init (gain √2 inside, ``out_gain`` on the last layer,
    zero biases), the initialisation of the PPO implementation details (Huang et al. 2022);
    ``orthogonal=False`` keeps PyTorch's default init of ``nn.Linear`` (``out_gain`` unused)."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        lin = nn.Linear(sizes[i], sizes[i + 1])
        last = i == len(sizes) - 2
        if orthogonal:
            nn.init.orthogonal_(lin.weight, gain=out_gain if last else math.sqrt(2))
            nn.init.zeros_(lin.bias)
        layers.append(lin)
        if not last:
            layers.append(_ACTIVATIONS[activation]())
    return MLP(*layers)


class CategoricalHead(nn.Module):
    """Discrete actions. ``sample`` uses the Gumbel-max trick on the log-softmax (no Distribution object:
    cheaper per environment step)."""

    def __init__(self, hidden: int, n: int, orthogonal: bool = True):
        super().__init__()
        self.logits = mlp([hidden, n], out_gain=0.01, orthogonal=orthogonal)

    def sample(self, h: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        logp_all = torch.log_softmax(self.logits(h), dim=-1)
        if deterministic:
            action = logp_all.argmax(dim=-1)
        else:
            # argmax(log p + G) with G = −log E, E ~ Exp(1), is a Gumbel-max sample: two ops per step.
            action = (logp_all - torch.empty_like(logp_all).exponential_().log()).argmax(dim=-1)
        return action, logp_all.gather(-1, action.unsqueeze(-1)).squeeze(-1)

    def log_prob_entropy(self, h: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        logp_all = torch.log_softmax(self.logits(h), dim=-1)
        logp = logp_all.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy

    def to_env(self, action: Tensor) -> np.ndarray:
        return action.numpy()


class GaussianHead(nn.Module):
    """Box actions: N(μ(s), diag σ²) with state-independent log σ; optional tanh squashing."""

    low: Tensor  # buffers (registered in __init__)
    high: Tensor

    def __init__(
        self,
        hidden: int,
        space: gym.spaces.Box,
        log_std_init: float = 0.0,
        squash: bool = False,
        orthogonal: bool = True,
    ):
        super().__init__()
        dim = int(np.prod(space.shape))
        self.mean = mlp([hidden, dim], out_gain=0.01, orthogonal=orthogonal)
        self.log_std = nn.Parameter(torch.full((dim,), float(log_std_init)))
        self.squash = squash
        self.shape = space.shape
        self.register_buffer("low", torch.as_tensor(space.low, dtype=torch.float32).flatten())
        self.register_buffer("high", torch.as_tensor(space.high, dtype=torch.float32).flatten())

    def _log_prob(self, mu: Tensor, u: Tensor) -> Tensor:
        log_std = self.log_std.expand_as(mu)
        logp = (-0.5 * ((u - mu) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        if self.squash:  # change of variables a = tanh(u): subtract Σ log(1 − tanh(u)²)
            logp = logp - (2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
        return logp

    def sample(self, h: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        mu = self.mean(h)
        u = mu if deterministic else mu + self.log_std.exp() * torch.randn_like(mu)
        return u, self._log_prob(mu, u)

    def log_prob_entropy(self, h: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        mu = self.mean(h)
        # Entropy of the Gaussian before squashing (the squashed one has no closed form); used only as
        # the exploration bonus.
        entropy = (self.log_std + 0.5 * (1 + math.log(2 * math.pi))).sum().expand(mu.shape[0])
        return self._log_prob(mu, u), entropy

    def to_env(self, u: Tensor) -> np.ndarray:
        if self.squash:
            a = self.low + (torch.tanh(u) + 1) * 0.5 * (self.high - self.low)
        else:
            a = torch.maximum(torch.minimum(u, self.high), self.low)
        return a.reshape(-1, *self.shape).numpy()


class ActorCritic(nn.Module):
    """Policy and value networks (separate trunks by default, as SB3/CleanRL for MuJoCo-style tasks;
    ``shared=True`` shares one trunk). ``orthogonal``: orthogonal weights and zero biases, gain √2 in the
    trunks but 1 on their last layer, 0.01 on the policy head, 1 on the value head (SB3's ``ortho_init=True``
    and the PPO implementation details use √2 on every hidden layer);
    ``False`` keeps PyTorch's default ``nn.Linear`` init everywhere (SB3's ``ortho_init=False``)."""

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        hidden: list[int],
        activation: str = "tanh",
        shared: bool = False,
        log_std_init: float = 0.0,
        squash: bool = False,
        orthogonal: bool = True,
    ):
        super().__init__()
        assert obs_space.shape is not None, "observation spaces here have a shape (Box, Discrete)"
        self.obs_shape = tuple(obs_space.shape)
        obs_dim = int(np.prod(obs_space.shape))

        def trunk() -> nn.Sequential:  # the hidden layers, each followed by the activation
            return mlp([obs_dim, *hidden], activation, orthogonal=orthogonal).append(
                _ACTIVATIONS[activation]()
            )

        self.pi_body = trunk()
        self.shared = shared
        self.v_body = self.pi_body if shared else trunk()
        self.value_head = mlp([hidden[-1], 1], out_gain=1.0, orthogonal=orthogonal)
        if isinstance(action_space, gym.spaces.Discrete):
            self.head: CategoricalHead | GaussianHead = CategoricalHead(
                hidden[-1], int(action_space.n), orthogonal
            )
        else:
            box = cast(gym.spaces.Box, action_space)
            self.head = GaussianHead(hidden[-1], box, log_std_init, squash, orthogonal)

    def value(self, obs: Tensor) -> Tensor:
        return self.value_head(self.v_body(obs)).squeeze(-1)

    @torch.inference_mode()
    def act(self, obs: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """``(action [N, ...], logp [N], value [N])`` for a batch of observations, without gradients."""
        h = self.pi_body(obs)
        action, logp = self.head.sample(h, deterministic)
        v = self.value_head(h if self.shared else self.v_body(obs)).squeeze(-1)
        return action, logp, v

    def evaluate(self, obs: Tensor, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(logp [N], entropy [N], value [N])`` of stored actions, with gradients."""
        h = self.pi_body(obs)
        logp, entropy = self.head.log_prob_entropy(h, action)
        v = self.value_head(h if self.shared else self.v_body(obs)).squeeze(-1)
        return logp, entropy, v
