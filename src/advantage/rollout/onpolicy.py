"""On-policy rollouts from vectorized Gymnasium envs for the actor-critic trainers (PPO, TRPO, A2C).

:class:`OnPolicyCollector` steps ``N`` envs for ``T`` steps with an :class:`~advantage.nn.ActorCritic`,
keeps the episode bookkeeping (:class:`~advantage.rollout.envsteps.EnvSteps`) and the optional
observation / reward normalisation, and returns a :class:`Batch` (:func:`build_batch`): the valid
transitions flattened, with GAE advantages and returns (:func:`advantage.math.gae`). Everything it
carries between rollouts (current observation, autoreset flags, episode counters, normalisation
statistics, env state) is in :meth:`OnPolicyCollector.tensors` / :meth:`OnPolicyCollector.state`, so a
checkpoint resumes it exactly. It is one :class:`~advantage.rollout.collector.Collector`, the Ray one
(:class:`advantage.rollout.remote.RemoteCollector`) the other.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from advantage.envs import env_state
from advantage.envs.replay import restore_or_restart
from advantage.math import gae
from advantage.nn import ActorCritic, ActorCriticPolicy, ObsNormalizer
from advantage.rollout.envsteps import EnvSteps
from advantage.torch_state import RunningMeanStd

if TYPE_CHECKING:
    from advantage.configs.a2c import A2CConfig
    from advantage.configs.ppo import PPOConfig
    from advantage.configs.trpo import TRPOConfig
    from advantage.context import RunContext

    ActorCriticConfig: TypeAlias = PPOConfig | TRPOConfig | A2CConfig
    """The config of an actor-critic trainer: ``env``, ``model`` (an ``ActorCriticModel``), ``trainer``
    and the algorithm's ``gamma``, ``normalize_obs``, ``clip_obs`` and (PPO, TRPO) ``normalize_reward``."""


@dataclass
class Batch:
    """The valid transitions of one rollout, flattened to ``[n]`` (``n`` ≤ N·T)."""

    obs: Tensor  # [n, *obs_shape] float32 (normalised when normalisation is on)
    actions: Tensor  # [n] long (Discrete), [n, K] long (MultiDiscrete), [n, K] float (MultiBinary; Box: the
    # raw pre-squash sample)
    logp: Tensor  # [n] log π_old(a|s)
    values: Tensor  # [n] V_old(s)
    advantages: Tensor  # [n] GAE(γ, λ)
    returns: Tensor  # [n] advantages + values (the value regression target)


Targets = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]
"""``targets(rewards, values, next_values, terminated, truncated, advantages) -> returns``, all ``[N, T]``:
the critic's regression targets when they are not ``advantages + values`` (A2C's ``mc``)."""


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
        obs_space = env.single_observation_space
        assert obs_space.shape is not None  # a Box (other spaces arrive encoded as vectors)
        self.obs_norm = ObsNormalizer(obs_space.shape, normalize_obs, clip_obs)
        self.ret_rms = RunningMeanStd(())
        T, N = n_steps, self.N
        # Storage is [T, N] (time first while collecting); what the env returns stays in numpy until
        # the rollout ends: one conversion per rollout, not one per step. Actions as the head samples
        # them: [T, N] long (Discrete), [T, N, K] long (MultiDiscrete), [T, N, K] float (MultiBinary, Box).
        self.obs_buf = torch.zeros((T, N, *obs_space.shape))
        head = model.head
        self.act_buf = torch.zeros((T, N, *head.action_shape), dtype=head.action_dtype)
        self.logp_buf, self.val_buf = torch.zeros((T, N)), torch.zeros((T, N))
        self.rew_np = np.zeros((T, N))
        self.term_np, self.trunc_np, self.mask_np = (np.zeros((T, N), dtype=bool) for _ in range(3))
        self.obs = np.zeros((N, *obs_space.shape))
        self.steps = EnvSteps(N)
        self.disc_ret = np.zeros(N)  # the discounted return whose std scales the rewards

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
            **self.steps.tensors(),
            "disc_ret": torch.as_tensor(self.disc_ret),
        }

    def state(self) -> list[dict[str, Any]]:
        """What a checkpoint stores as JSON (the envs' own state)."""
        return env_state(self.env)

    def metrics(self) -> dict[str, float]:
        """Collector metrics for the training row (none in one process)."""
        return {}

    def close(self) -> None:
        """Nothing to release: the envs are the trainer's, closed by it."""

    def load(self, tensors: dict[str, Tensor], state: list[dict[str, Any]], seed: int, step: int = 0) -> None:
        """Restore :meth:`tensors` and :meth:`state` (the envs are reset with ``seed`` first). Envs that
        cannot be put back exactly start fresh episodes (:func:`restore_or_restart`)."""
        self.obs_norm.rms.load("obs_rms", tensors)
        if "disc_ret" in tensors:  # A2C's checkpoints before it used this collector had no reward scaling
            self.ret_rms.load("ret_rms", tensors)
            self.disc_ret = tensors["disc_ret"].numpy().copy()
        self.env.reset(seed=seed)
        self.obs = tensors["obs"].numpy().copy()
        self.steps.load(tensors)
        fresh = restore_or_restart(self.env, state, seed, step, self.ctx)
        if fresh is not None:
            self.obs = np.ascontiguousarray(self.obs_norm(fresh))
            self.steps.restart()
            self.disc_ret[:] = 0.0

    # ---- collection ---------------------------------------------------------------------------------

    def collect(
        self, step: int, gae_lambda: float, targets: Targets | None = None, env_major: bool = False
    ) -> tuple[Batch, int]:
        """``T`` steps of every env; returns the batch (:func:`build_batch`: advantages with GAE(γ,
        ``gae_lambda``), value targets by ``targets`` or, by default, ``advantages + values``) and the new
        global step count (valid transitions only)."""
        model, env, T = self.model, self.env, self.T
        obs = self.obs
        for i in range(T):
            obs_t = torch.as_tensor(obs, dtype=torch.float32)
            action, logp, value = model.act(obs_t)
            raw_next, reward, term, trunc, _ = env.step(model.head.to_env(action))
            step, valid, done = self.steps.record(step, reward, raw_next, term, trunc, self.ctx)
            r = reward
            if self.normalize_reward:
                self.disc_ret = self.disc_ret * self.gamma + reward
                self.ret_rms.update(self.disc_ret[valid])
                r = reward / math.sqrt(self.ret_rms.var + 1e-8)
                self.disc_ret[done] = 0.0
            self.obs_buf[i], self.act_buf[i], self.logp_buf[i], self.val_buf[i] = obs_t, action, logp, value
            self.rew_np[i], self.term_np[i] = r * valid, term & valid
            self.trunc_np[i], self.mask_np[i] = trunc & valid, valid
            obs = self._normalize(raw_next)
        self.obs = obs
        with torch.no_grad():
            last_value = self.model.value(torch.as_tensor(self.obs, dtype=torch.float32))
        rollout = Rollout(
            self.obs_buf,
            self.act_buf,
            self.logp_buf,
            self.val_buf,
            self.rew_np,
            self.term_np,
            self.trunc_np,
            self.mask_np,
        )
        return build_batch(rollout, last_value, self.gamma, gae_lambda, targets, env_major), step


class Rollout(NamedTuple):
    """One rollout as collected, time first: every field ``[T, N, ...]``, a tensor or a numpy array."""

    obs: Any  # the policy's input (normalised when normalisation is on)
    actions: Any
    logp: Any
    values: Any
    rewards: Any  # as GAE sees them (scaled when reward scaling is on), 0 at reset steps
    terminated: Any  # bool
    truncated: Any  # bool
    valid: Any  # bool: not a reset step


def build_batch(
    rollout: Rollout,
    last_value: Tensor,
    gamma: float,
    gae_lambda: float,
    targets: Targets | None = None,
    env_major: bool = False,
) -> Batch:
    """A rollout (``last_value [N]`` = V of the observation after it) → the :class:`Batch` of its valid
    steps, flattened time-major (step 0 of every env, then step 1, ...) or, with ``env_major``, env by env
    (A2C: its one gradient step sums the batch in that order; another order gives the same loss up to
    rounding).

    With ``NEXT_STEP`` autoreset the (masked) reset step's input is the final observation, so
    ``values[t + 1]`` is the bootstrap value of a truncated step t: ``next_values[t] = values[t + 1]``."""
    obs, actions, logp, values = (torch.as_tensor(x) for x in rollout[:4])
    valid = torch.as_tensor(rollout.valid)
    terminated, truncated = (torch.as_tensor(x) & valid for x in (rollout.terminated, rollout.truncated))
    rewards = torch.as_tensor(rollout.rewards, dtype=torch.float32)
    T, N = values.shape
    next_values = torch.cat([values[1:], last_value[None]])
    rew, val, next_val, term, trunc = rewards.T, values.T, next_values.T, terminated.T, truncated.T
    adv = gae(rew, val, next_val, term, trunc, gamma, gae_lambda)  # [N, T]
    returns = adv + val if targets is None else targets(rew, val, next_val, term, trunc, adv)
    order = (lambda x: x.transpose(0, 1)) if env_major else (lambda x: x)
    # every step valid (no reset step in the rollout, the common case): no index to gather with
    idx = None if bool(np.all(rollout.valid)) else order(valid).flatten().nonzero().squeeze(-1)

    def flat(x: Tensor) -> Tensor:  # [T, N, ...] → [n, ...], never a view of the collector's buffers
        x = order(x)
        x = x.reshape(T * N, *x.shape[2:])
        if idx is not None:
            return x[idx]
        return x.clone() if x._base is not None else x  # the next rollout overwrites what a view shows

    return Batch(
        obs=flat(obs),
        actions=flat(actions),
        logp=flat(logp),
        values=flat(values),
        advantages=flat(adv.T),
        returns=flat(returns.T),
    )


def actor_critic_policy(
    cfg: ActorCriticConfig, env: gym.Env, tensors: dict[str, Tensor]
) -> ActorCriticPolicy:
    """The trained policy of a PPO, TRPO or A2C checkpoint: ``cfg.model`` built for ``env``'s spaces, with
    the checkpoint's weights and observation statistics."""
    model = cfg.model.build(env.observation_space, env.action_space)
    a = cfg.algorithm
    return ActorCriticPolicy.from_checkpoint(model, a.normalize_obs, a.clip_obs, tensors)
