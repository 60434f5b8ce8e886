"""On-policy rollouts from vectorized Gymnasium envs for the actor-critic trainers (PPO, TRPO).

:class:`OnPolicyCollector` steps ``N`` envs for ``T`` steps with an :class:`~advantage.nn.ActorCritic`,
keeps the episode bookkeeping and the optional observation / reward normalisation, and returns a
:class:`Batch`: the valid transitions flattened, with GAE advantages and returns
(:func:`advantage.math.gae`). Everything it carries between rollouts (current observation, autoreset
flags, episode counters, normalisation statistics, env state) is in :meth:`OnPolicyCollector.tensors` /
:meth:`OnPolicyCollector.state`, so a checkpoint resumes it exactly.

Details, as in "The 37 implementation details of PPO" (Huang et al. 2022) where they coincide:

* Gymnasium's ``NEXT_STEP`` autoreset: the step after an episode end only resets the env; it is stored
  with ``mask = 0`` and left out of the batch (``valid``), so the batch is ``[N, T]`` plus a mask.
* GAE: ``terminated`` → bootstrap 0; ``truncated`` or the rollout end → bootstrap with V of the next
  observation. The next observation of step t is the one step t + 1 acted on, so
  ``next_values[t] = values[t + 1]`` and ``next_values[T-1] = V(obs after the rollout)``.
* Reward scaling: rewards divided by the running std of the discounted return (the scaled reward is
  what GAE sees; episode returns are logged unscaled).
* A NaN or inf reward or observation stops the run at that step, naming it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from advantage.envs import env_state, set_env_state
from advantage.errors import NonFiniteError
from advantage.math import gae
from advantage.nn import ActorCritic, ObsNormalizer
from advantage.torch_state import RunningMeanStd

if TYPE_CHECKING:
    from advantage.context import RunContext

_COUNTERS = ("ep_ret", "ep_len", "disc_ret")


@dataclass
class Batch:
    """The valid transitions of one rollout, flattened to ``[n]`` (``n`` ≤ N·T)."""

    obs: Tensor  # [n, *obs_shape] float32 (normalised when normalisation is on)
    actions: Tensor  # [n] long (Discrete) or [n, *action_shape] (Box, the raw pre-squash sample)
    logp: Tensor  # [n] log π_old(a|s)
    values: Tensor  # [n] V_old(s)
    advantages: Tensor  # [n] GAE(γ, λ)
    returns: Tensor  # [n] advantages + values (the value regression target)


class OnPolicyCollector:
    """Steps ``env`` (a Gymnasium vector env with ``NEXT_STEP`` autoreset) with ``model`` for ``T`` steps
    per :meth:`collect`.

    ``ctx`` receives every finished episode (``ctx.episode(step, return, length)``); ``gamma`` is the
    discount of the reward-scaling return (the same γ as the algorithm's)."""

    def __init__(
        self,
        env: gym.vector.VectorEnv,
        model: ActorCritic,
        n_steps: int,
        *,
        gamma: float,
        normalize_obs: bool,
        clip_obs: float,
        normalize_reward: bool,
        ctx: RunContext,
    ):
        self.env, self.model, self.T, self.N = env, model, n_steps, env.num_envs
        self.gamma, self.normalize_reward, self.ctx = gamma, normalize_reward, ctx
        obs_space, act_space = env.single_observation_space, env.single_action_space
        assert obs_space.shape is not None and act_space.shape is not None  # Box or Discrete
        self.obs_norm = ObsNormalizer(obs_space.shape, normalize_obs, clip_obs)
        self.ret_rms = RunningMeanStd(())
        self.discrete = isinstance(act_space, gym.spaces.Discrete)
        T, N = n_steps, self.N
        # Storage is [T, N] (time first while collecting); what the env returns stays in numpy until
        # the rollout ends: one conversion per rollout, not one per step.
        self.obs_buf = torch.zeros((T, N, *obs_space.shape))
        self.act_buf = (
            torch.zeros((T, N), dtype=torch.long) if self.discrete else torch.zeros((T, N, *act_space.shape))
        )
        self.logp_buf, self.val_buf = torch.zeros((T, N)), torch.zeros((T, N))
        self.rew_np = np.zeros((T, N))
        self.term_np, self.trunc_np, self.mask_np = (np.zeros((T, N), dtype=bool) for _ in range(3))
        self.obs = np.zeros((N, *obs_space.shape))
        self.autoreset = np.zeros(N, dtype=bool)
        self.ep_ret, self.ep_len, self.disc_ret = np.zeros(N), np.zeros(N, dtype=np.int64), np.zeros(N)

    # ---- state --------------------------------------------------------------------------------------

    def reset(self, seed: int) -> None:
        """Start fresh: reset the envs with ``seed`` and normalise the first observation."""
        raw_obs, _ = self.env.reset(seed=seed)
        self.obs = self._normalize(raw_obs)

    def _normalize(self, raw_obs: np.ndarray) -> np.ndarray:
        """Normalised (when on) and C-contiguous. Gymnasium's vectorized CartPole returns a transposed
        view; a network fed a non-contiguous batch takes another matmul path, which rounds differently
        from the contiguous copy a checkpoint restores, so a resumed run would drift in the last bits."""
        return np.ascontiguousarray(self.obs_norm(raw_obs, update=True))

    def tensors(self) -> dict[str, Tensor]:
        """What a checkpoint stores as tensors (statistics, current observation, episode counters)."""
        return {
            **self.obs_norm.rms.tensors("obs_rms"),
            **self.ret_rms.tensors("ret_rms"),
            "obs": torch.as_tensor(self.obs),
            "autoreset": torch.as_tensor(self.autoreset),
            **{k: torch.as_tensor(getattr(self, k)) for k in _COUNTERS},
        }

    def state(self) -> list[dict[str, Any]]:
        """What a checkpoint stores as JSON (the envs' own state)."""
        return env_state(self.env)

    def metrics(self) -> dict[str, float]:
        """Collector metrics for the training row (none in one process)."""
        return {}

    def load(self, tensors: dict[str, Tensor], state: list[dict[str, Any]], seed: int) -> None:
        """Restore :meth:`tensors` and :meth:`state` (the envs are reset with ``seed`` first)."""
        self.obs_norm.rms.load("obs_rms", tensors)
        self.ret_rms.load("ret_rms", tensors)
        self.env.reset(seed=seed)
        set_env_state(self.env, state)
        self.obs = tensors["obs"].numpy().copy()
        self.autoreset = tensors["autoreset"].numpy().copy()
        for k in _COUNTERS:
            setattr(self, k, tensors[k].numpy().copy())

    # ---- collection ---------------------------------------------------------------------------------

    def collect(self, step: int, gae_lambda: float) -> tuple[Batch, int]:
        """``T`` steps of every env; returns the batch (advantages with GAE(γ, ``gae_lambda``)) and the
        new global step count (valid transitions only)."""
        model, env, T = self.model, self.env, self.T
        obs, autoreset = self.obs, self.autoreset
        ep_ret, ep_len = self.ep_ret, self.ep_len
        for i in range(T):
            obs_t = torch.as_tensor(obs, dtype=torch.float32)
            action, logp, value = model.act(obs_t)
            raw_next, reward, term, trunc, _ = env.step(model.head.to_env(action))
            valid = ~autoreset
            step += int(valid.sum())
            if not (np.isfinite(reward).all() and np.isfinite(raw_next).all()):
                what = "reward" if not np.isfinite(reward).all() else "observation"
                bad = reward[~np.isfinite(reward)][0] if what == "reward" else "NaN or inf"
                raise NonFiniteError(f"step {step}: {what} from the environment is {bad}")
            ep_ret += reward * valid
            ep_len += valid
            done = term | trunc
            r = reward
            if self.normalize_reward:
                self.disc_ret = self.disc_ret * self.gamma + reward
                self.ret_rms.update(self.disc_ret[valid])
                r = reward / math.sqrt(self.ret_rms.var + 1e-8)
                self.disc_ret[done] = 0.0
            self.obs_buf[i], self.act_buf[i], self.logp_buf[i], self.val_buf[i] = obs_t, action, logp, value
            self.rew_np[i], self.term_np[i] = r * valid, term & valid
            self.trunc_np[i], self.mask_np[i] = trunc & valid, valid
            if done.any():
                for j in np.flatnonzero(done & valid):
                    self.ctx.episode(step, float(ep_ret[j]), int(ep_len[j]))
                    ep_ret[j], ep_len[j] = 0.0, 0
            autoreset = done
            obs = self._normalize(raw_next)
        self.obs, self.autoreset = obs, autoreset
        return self._batch(gae_lambda), step

    def _batch(self, gae_lambda: float) -> Batch:
        T, N = self.T, self.N
        with torch.no_grad():
            last_value = self.model.value(torch.as_tensor(self.obs, dtype=torch.float32))
        val = self.val_buf
        next_values = torch.cat([val[1:], last_value[None]])
        rew = torch.as_tensor(self.rew_np, dtype=torch.float32)
        term, trunc = torch.as_tensor(self.term_np), torch.as_tensor(self.trunc_np)
        adv = gae(rew.T, val.T, next_values.T, term.T, trunc.T, self.gamma, gae_lambda).T
        returns = adv + val
        idx = torch.as_tensor(self.mask_np).flatten().nonzero().squeeze(-1)
        return Batch(
            obs=self.obs_buf.reshape(T * N, *self.obs_buf.shape[2:])[idx],
            actions=self.act_buf.reshape(T * N, *self.act_buf.shape[2:])[idx],
            logp=self.logp_buf.flatten()[idx],
            values=val.flatten()[idx],
            advantages=adv.flatten()[idx],
            returns=returns.flatten()[idx],
        )


def make_collector(
    env: gym.vector.VectorEnv, model: ActorCritic, cfg: Any, n_steps: int, ctx: RunContext
) -> Any:
    """The run's collector: :class:`OnPolicyCollector` in this process, or, with
    ``trainer.num_workers > 0``, :class:`advantage.rollout.remote.RemoteCollector` over Ray workers
    (imported only then). ``cfg`` has ``env``, ``model``, ``trainer`` and the algorithm's ``gamma``,
    ``normalize_obs``, ``clip_obs`` and ``normalize_reward``."""
    a = cfg.algorithm
    common = {
        "gamma": a.gamma,
        "normalize_obs": a.normalize_obs,
        "clip_obs": a.clip_obs,
        "normalize_reward": a.normalize_reward,
        "ctx": ctx,
    }
    if cfg.trainer.num_workers > 0:
        from advantage.rollout.remote import RemoteCollector

        return RemoteCollector(
            cfg.env, cfg.model, model, n_steps, cfg.trainer, obs_space=env.single_observation_space, **common
        )
    return OnPolicyCollector(env, model, n_steps, **common)
