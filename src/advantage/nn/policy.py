"""The trained actor-critic policy for evaluation, and observation normalisation shared by the trainers."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from advantage.nn.actor_critic import ActorCritic
from advantage.torch_state import RunningMeanStd, load_module


class ObsNormalizer:
    """Observation normalisation (identity when disabled)."""

    def __init__(self, shape: tuple[int, ...], enabled: bool, clip: float):
        self.rms, self.enabled, self.clip = RunningMeanStd(shape), enabled, clip

    def __call__(self, obs: np.ndarray, update: bool = False) -> np.ndarray:
        if not self.enabled:
            return obs
        if update:
            self.rms.update(obs)
        return np.clip((obs - self.rms.mean) / np.sqrt(self.rms.var + 1e-8), -self.clip, self.clip)


class ActorCriticPolicy:
    """The trained policy for evaluation: one observation in, one action out."""

    def __init__(self, model: ActorCritic, obs_norm: ObsNormalizer):
        self.model, self.obs_norm = model, obs_norm

    def act(self, obs: Any, deterministic: bool = True) -> Any:
        x = self.obs_norm(np.asarray(obs, dtype=np.float64)[None])
        action, _, _ = self.model.act(torch.as_tensor(x, dtype=torch.float32), deterministic)
        a = self.model.head.to_env(action)[0]
        return a.item() if a.ndim == 0 else a

    def act_batch(self, obs: np.ndarray) -> list[Any]:
        """Deterministic actions for a batch of observations ``[N, ...]`` (side-by-side evaluation)."""
        x = self.obs_norm(np.asarray(obs, dtype=np.float64))
        action, _, _ = self.model.act(torch.as_tensor(x, dtype=torch.float32), True)
        return [a.item() if a.ndim == 0 else a for a in self.model.head.to_env(action)]

    @classmethod
    def from_checkpoint(
        cls, model: ActorCritic, normalize_obs: bool, clip_obs: float, tensors: dict[str, torch.Tensor]
    ) -> ActorCriticPolicy:
        """The policy of a checkpoint saved as ``model.*`` (+ ``obs_rms.*``) tensors."""
        load_module("model", model, tensors)
        obs_norm = ObsNormalizer(tuple(model.obs_shape), normalize_obs, clip_obs)
        obs_norm.rms.load("obs_rms", tensors)
        return cls(model, obs_norm)
