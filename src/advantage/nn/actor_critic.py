"""Actor-critic networks for vector observations (other observation spaces reach them encoded as one
vector, :func:`advantage.envs.make.encode_observations`; a Box of several dimensions is flattened here).

* :class:`CategoricalHead` — Discrete actions, π(a|s) = softmax(logits).
* :class:`MultiCategoricalHead` — MultiDiscrete actions: one independent categorical per entry,
  π(a|s) = Π_k softmax(logits_k)[a_k], so log π and the entropy are sums over the entries.
* :class:`BernoulliHead` — MultiBinary actions: one independent Bernoulli per bit, p_k = σ(logit_k),
  log π(a|s) = Σ_k a_k log p_k + (1 − a_k) log(1 − p_k).
* :class:`GaussianHead` — Box actions, a Gaussian with a state-independent log-std (PPO paper; SB3 and
  CleanRL do the same). With ``squash=True`` the sample ``u`` goes through ``tanh`` and is rescaled to
  the action bounds; the log-density then carries the change-of-variables correction
  ``log π(a) = log N(u) − Σ log(1 − tanh(u)²)`` (Haarnoja et al. 2018, appendix C), computed in the
  stable form ``2·(log 2 − u − softplus(−2u))``. Without squashing the env gets ``clip(u, low, high)``.

Every head is evaluated on the sample the rollout stored (the raw ``u`` for a Gaussian, so importance
ratios never need ``atanh`` of a saturated action; indices from 0 for the categoricals, whatever the
space's ``start``); ``to_env`` turns it into the env's action (its dtype, shape and ``start`` offset).
``action_shape`` and ``action_dtype`` say how a rollout stores one sample.
"""

from __future__ import annotations

import math
from typing import cast

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

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


def _gumbel_max(logp_all: Tensor) -> Tensor:
    """A sample of the categorical with log-probabilities ``logp_all [..., n]``: ``argmax(log p + G)`` with
    ``G = −log E``, ``E ~ Exp(1)`` (Gumbel-max: two ops per step, no Distribution object)."""
    return (logp_all - torch.empty_like(logp_all).exponential_().log()).argmax(dim=-1)


class CategoricalHead(nn.Module):
    """Discrete actions. ``sample`` uses the Gumbel-max trick on the log-softmax (no Distribution object:
    cheaper per environment step). The stored action is the index ``a ∈ {0, …, n−1}``; the env gets
    ``start + a``."""

    action_shape: tuple[int, ...] = ()
    action_dtype = torch.long

    def __init__(self, hidden: int, n: int, orthogonal: bool = True, start: int = 0):
        super().__init__()
        self.logits = mlp([hidden, n], out_gain=0.01, orthogonal=orthogonal)
        self.start = int(start)

    def sample(self, h: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        logp_all = torch.log_softmax(self.logits(h), dim=-1)
        action = logp_all.argmax(dim=-1) if deterministic else _gumbel_max(logp_all)
        return action, logp_all.gather(-1, action.unsqueeze(-1)).squeeze(-1)

    def log_prob_entropy(self, h: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        logp_all = torch.log_softmax(self.logits(h), dim=-1)
        logp = logp_all.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy

    def log_probs(self, h: Tensor) -> Tensor:
        """``log π(·|s)`` ``[N, n]``: the distribution's parameters for an exact KL (TRPO)."""
        return torch.log_softmax(self.logits(h), dim=-1)

    def to_env(self, action: Tensor) -> np.ndarray:
        return (action + self.start).numpy() if self.start else action.numpy()


class MultiCategoricalHead(nn.Module):
    r"""MultiDiscrete actions with ``K`` entries, entry k one of ``nvec[k]`` values: independent
    categoricals on the slices of one logits layer ``[N, Σ nvec]``,

    .. math:: \log\pi(a|s) = \sum_k \log\mathrm{softmax}(z_k)[a_k], \qquad
        H = \sum_k -\sum_j p_{k,j}\log p_{k,j}

    (the log-probability and entropy of a product of independent factors are sums). The stored action is
    ``[N, K]`` long, indices from 0; the env gets ``start + a`` in the space's shape and dtype."""

    action_dtype = torch.long

    def __init__(self, hidden: int, space: gym.spaces.MultiDiscrete, orthogonal: bool = True):
        super().__init__()
        self.nvec = [int(n) for n in np.asarray(space.nvec).reshape(-1)]
        self.logits = mlp([hidden, sum(self.nvec)], out_gain=0.01, orthogonal=orthogonal)
        self.action_shape = (len(self.nvec),)
        self.shape, self.dtype = tuple(space.shape), space.dtype
        self.start = np.asarray(space.start).reshape(-1)

    def _log_probs(self, h: Tensor) -> list[Tensor]:
        """Each entry's ``log softmax(z_k)`` ``[N, nvec[k]]``."""
        return [torch.log_softmax(z, dim=-1) for z in self.logits(h).split(self.nvec, dim=-1)]

    def sample(self, h: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        parts = self._log_probs(h)
        action = torch.stack([lp.argmax(-1) if deterministic else _gumbel_max(lp) for lp in parts], dim=-1)
        return action, self._gather(parts, action)

    @staticmethod
    def _gather(parts: list[Tensor], action: Tensor) -> Tensor:
        """``Σ_k log p_k[a_k]`` ``[N]`` for actions ``[N, K]``."""
        return torch.stack(
            [lp.gather(-1, action[..., k : k + 1].long()).squeeze(-1) for k, lp in enumerate(parts)], dim=-1
        ).sum(-1)

    def log_prob_entropy(self, h: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        parts = self._log_probs(h)
        entropy = torch.stack([-(lp.exp() * lp).sum(-1) for lp in parts], dim=-1).sum(-1)
        return self._gather(parts, action), entropy

    def log_probs(self, h: Tensor) -> Tensor:
        """The entries' log-probabilities side by side, ``[N, Σ nvec]``: ``Σ p_old (log p_old − log p)``
        over them is the KL of the product, the sum of the entries' KLs (TRPO)."""
        return torch.cat(self._log_probs(h), dim=-1)

    def to_env(self, action: Tensor) -> np.ndarray:
        a = action.numpy() + self.start
        return a.astype(self.dtype).reshape(-1, *self.shape)


class BernoulliHead(nn.Module):
    r"""MultiBinary actions with ``K`` bits: independent Bernoullis with ``p_k = σ(z_k)``,

    .. math:: \log\pi(a|s) = \sum_k a_k\log\sigma(z_k) + (1 − a_k)\log\sigma(−z_k), \qquad
        H = \sum_k p_k\,\mathrm{softplus}(−z_k) + (1 − p_k)\,\mathrm{softplus}(z_k)

    (``log σ(z) = −softplus(−z)``). The stored action is ``[N, K]`` float (0 or 1); deterministic acting
    takes the more likely value of each bit (``z_k > 0``); the env gets the bits in the space's shape,
    int8."""

    action_dtype = torch.float32

    def __init__(self, hidden: int, space: gym.spaces.MultiBinary, orthogonal: bool = True):
        super().__init__()
        k = int(np.prod(space.shape))
        self.logits = mlp([hidden, k], out_gain=0.01, orthogonal=orthogonal)
        self.action_shape = (k,)
        self.shape, self.dtype = tuple(space.shape), space.dtype

    @staticmethod
    def _log_prob(z: Tensor, action: Tensor) -> Tensor:
        """``Σ_k log π(a_k)`` ``[N]``: minus the summed binary cross-entropy with logits."""
        bce = nn.functional.binary_cross_entropy_with_logits(z, action.to(z.dtype), reduction="none")
        return -bce.sum(-1)

    def sample(self, h: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        z = self.logits(h)
        action = (z > 0) if deterministic else (torch.rand_like(z) < torch.sigmoid(z))
        action = action.to(z.dtype)
        return action, self._log_prob(z, action)

    def log_prob_entropy(self, h: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        z = self.logits(h)
        p = torch.sigmoid(z)
        sp = nn.functional.softplus
        entropy = (p * sp(-z) + (1 - p) * sp(z)).sum(-1)
        return self._log_prob(z, action), entropy

    def log_probs(self, h: Tensor) -> Tensor:
        """``[log p_k, log(1 − p_k)]`` side by side, ``[N, 2K]``: ``Σ p_old (log p_old − log p)`` over them
        is the sum of the bits' KLs (TRPO)."""
        z = self.logits(h)
        return torch.cat([nn.functional.logsigmoid(z), nn.functional.logsigmoid(-z)], dim=-1)

    def to_env(self, action: Tensor) -> np.ndarray:
        return action.numpy().astype(self.dtype).reshape(-1, *self.shape)


class GaussianHead(nn.Module):
    """Box actions: N(μ(s), diag σ²) with state-independent log σ; optional tanh squashing."""

    low: Tensor  # buffers (registered in __init__)
    high: Tensor

    action_dtype = torch.float32

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
        self.action_shape = (dim,)
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


Head = CategoricalHead | MultiCategoricalHead | BernoulliHead | GaussianHead


def make_head(
    hidden: int,
    action_space: gym.Space,
    log_std_init: float = 0.0,
    squash: bool = False,
    orthogonal: bool = True,
) -> Head:
    """The policy head for ``action_space``: Discrete → :class:`CategoricalHead`, MultiDiscrete →
    :class:`MultiCategoricalHead`, MultiBinary → :class:`BernoulliHead`, Box → :class:`GaussianHead`
    (``log_std_init``, ``squash``: Box only). Another space is a ``ValueError`` (the trainers' space
    check refuses it first, by name)."""
    if isinstance(action_space, gym.spaces.Discrete):
        return CategoricalHead(hidden, int(action_space.n), orthogonal, int(action_space.start))
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return MultiCategoricalHead(hidden, action_space, orthogonal)
    if isinstance(action_space, gym.spaces.MultiBinary):
        return BernoulliHead(hidden, action_space, orthogonal)
    if isinstance(action_space, gym.spaces.Box):
        return GaussianHead(hidden, action_space, log_std_init, squash, orthogonal)
    raise ValueError(
        f"no policy head for a {type(action_space).__name__} action space "
        "(Discrete, MultiDiscrete, MultiBinary and Box have one)"
    )


class ActorCritic(nn.Module):
    """Policy and value networks (separate trunks by default, as SB3/CleanRL for MuJoCo-style tasks;
    ``shared=True`` shares one trunk). ``orthogonal``: orthogonal weights and zero biases, gain √2 in the
    trunks but 1 on their last layer, 0.01 on the policy head, 1 on the value head (SB3's ``ortho_init=True``
    and the PPO implementation details use √2 on every hidden layer);
    ``False`` keeps PyTorch's default ``nn.Linear`` init everywhere (SB3's ``ortho_init=False``).

    Observations ``[N, *obs_shape]`` of a Box: a Box of several dimensions (an image) is flattened to
    ``[N, Π obs_shape]`` before the first layer (the trainers' envs already give vectors,
    :func:`advantage.envs.make.encode_observations`)."""

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
        if not isinstance(obs_space, gym.spaces.Box):
            raise ValueError(
                f"ActorCritic takes Box observations, got {type(obs_space).__name__} (encode the others as "
                "vectors: advantage.envs.make.encode_observations)"
            )
        self.obs_shape = tuple(obs_space.shape)
        self._flatten = len(self.obs_shape) != 1  # an image (or a scalar): one vector per observation
        obs_dim = int(np.prod(obs_space.shape))

        def trunk() -> nn.Sequential:  # the hidden layers, each followed by the activation
            return mlp([obs_dim, *hidden], activation, orthogonal=orthogonal).append(
                _ACTIVATIONS[activation]()
            )

        self.pi_body = trunk()
        self.shared = shared
        self.v_body = self.pi_body if shared else trunk()
        self.value_head = mlp([hidden[-1], 1], out_gain=1.0, orthogonal=orthogonal)
        self.head: Head = make_head(hidden[-1], action_space, log_std_init, squash, orthogonal)

    def flat_obs(self, obs: Tensor) -> Tensor:
        """``[N, *obs_shape]`` → ``[N, obs_dim]`` (a view; nothing to do for vectors)."""
        return obs.reshape(obs.shape[0], -1) if self._flatten else obs

    def value(self, obs: Tensor) -> Tensor:
        return self.value_head(self.v_body(self.flat_obs(obs))).squeeze(-1)

    @torch.inference_mode()
    def act(self, obs: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """``(action [N, ...], logp [N], value [N])`` for a batch of observations, without gradients."""
        obs = self.flat_obs(obs)
        h = self.pi_body(obs)
        action, logp = self.head.sample(h, deterministic)
        v = self.value_head(h if self.shared else self.v_body(obs)).squeeze(-1)
        return action, logp, v

    def evaluate(self, obs: Tensor, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(logp [N], entropy [N], value [N])`` of stored actions, with gradients."""
        obs = self.flat_obs(obs)
        h = self.pi_body(obs)
        logp, entropy = self.head.log_prob_entropy(h, action)
        v = self.value_head(h if self.shared else self.v_body(obs)).squeeze(-1)
        return logp, entropy, v
