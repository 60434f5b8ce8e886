"""Scale-out on Ray: rollout workers that step vectorized environments, replaced when they die or hang.

``trainer.num_workers=N`` (N ≥ 1) makes PPO, TRPO and A2C collect with :class:`RemoteCollector` instead of
:class:`~advantage.rollout.onpolicy.OnPolicyCollector`. Both are a
:class:`~advantage.rollout.collector.Collector`, so the trainers do not change. With
``num_workers=0`` (the default) nothing here is imported and Ray never is. GRPO's workers, which
generate and score language-model samples, are :mod:`advantage.algos.llm.workers`; they use the
:class:`WorkerPool` of this module.

What crosses the network, per rollout:

* learner → each worker: the policy's weights (one ``ray.put`` shared by all workers, tagged with a
  version number), and the observation-normalisation statistics frozen for the rollout;
* worker → learner: ``T`` steps of its envs as numpy arrays (normalised and raw observations, actions,
  log-probs, values, raw rewards, terminated/truncated/valid flags), the finished episodes and the
  weights version it used (checked: a rollout of stale weights is an error).

``env.num_envs`` is split evenly across the workers (it must be divisible by ``num_workers``), so the
batch has the same shape as in one process and the step budget means the same. Reward scaling and the
observation statistics are updated on the learner, step by step in the same order as the local
collector. One difference from one process: a worker normalises observations with the statistics
frozen at the start of the rollout rather than updated at every step.

Fault tolerance (``trainer.fault_tolerance=true``, the default): a worker that raises, dies (e.g.
SIGKILL) or does not answer within ``trainer.worker_timeout`` seconds is killed and replaced by a new
one (its envs reseeded), and its share of the rollout is collected again with the same weights;
``train/worker_restarts`` counts the replacements. With ``fault_tolerance=false`` the run stops with a
:class:`WorkerError` naming the worker and the cause.

Checkpoints keep the learner's state (weights, optimizer, statistics); the workers' envs restart from
fresh resets on resume, so a resumed distributed run is not bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from advantage.errors import AdvantageError
from advantage.nn import ObsNormalizer
from advantage.rollout.envsteps import EnvSteps, check_finite
from advantage.rollout.onpolicy import Batch, Rollout, Targets, build_batch
from advantage.torch_state import RunningMeanStd

if TYPE_CHECKING:
    from advantage.config import TrainerConfig, VecEnvConfig
    from advantage.configs.models import ActorCriticModel
    from advantage.context import RunContext
    from advantage.nn import ActorCritic

MAX_ATTEMPTS = 3  # replacements of one worker within one rollout before the run stops


class WorkerError(AdvantageError, RuntimeError):
    """A rollout worker failed and fault tolerance is off (or a worker cannot be started)."""


def import_ray(address: str | None, num_workers: int) -> Any:
    """``ray``, initialised: joins ``address`` (``auto`` or ``host:port``) or starts a local instance with
    one CPU per worker plus one for the learner."""
    try:
        import ray
    except ImportError:
        raise WorkerError(
            "trainer.num_workers > 0 needs Ray: pip install 'advantage[ray]' (or set trainer.num_workers=0)"
        ) from None
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=num_workers + 1, include_dashboard=False, log_to_driver=False)
    return ray


class EnvWorker:
    """One Ray actor: ``n`` envs of the run's env config and a copy of the policy, stepped ``T`` steps per
    :meth:`rollout`. Runs in its own process; everything it returns is numpy."""

    def __init__(
        self,
        env_cfg: VecEnvConfig,
        model_cfg: ActorCriticModel,
        spec: gym.envs.registration.EnvSpec | None,
        seed: int,
        flatten_obs: bool = False,
    ):
        from advantage.envs import make_vec_env

        torch.set_num_threads(1)
        if spec is not None and spec.id not in gym.registry:  # an env registered only in the driver
            gym.register(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.init})
        torch.manual_seed(seed)
        self.env = make_vec_env(env_cfg, flatten_obs=flatten_obs)  # observations as the learner's
        self.model = model_cfg.build(self.env.single_observation_space, self.env.single_action_space)
        self.raw, _ = self.env.reset(seed=seed)
        self.steps = EnvSteps(env_cfg.num_envs)

    def pid(self) -> int:
        return os.getpid()

    def rollout(self, version: int, weights: dict[str, Tensor], norm: tuple | None, T: int) -> dict[str, Any]:
        """``T`` steps with ``weights``; ``norm = (mean, var, clip)`` or None."""
        self.model.load_state_dict(weights)

        def normalise(raw: np.ndarray) -> np.ndarray:
            if norm is None:
                return np.ascontiguousarray(raw, dtype=np.float64)
            mean, var, clip = norm
            return np.ascontiguousarray(np.clip((raw - mean) / np.sqrt(var + 1e-8), -clip, clip))

        n = self.steps.autoreset.shape[0]
        obs_shape = self.env.single_observation_space.shape
        assert obs_shape is not None  # a Box
        out: dict[str, Any] = {
            "obs": np.zeros((T, n, *obs_shape), dtype=np.float32),
            "raw_next": np.zeros((T, n, *obs_shape)),
            "logp": np.zeros((T, n), dtype=np.float32),
            "values": np.zeros((T, n), dtype=np.float32),
            "rewards": np.zeros((T, n)),
            "term": np.zeros((T, n), dtype=bool),
            "trunc": np.zeros((T, n), dtype=bool),
            "valid": np.zeros((T, n), dtype=bool),
        }
        actions = []
        episodes = _Episodes()  # (t, return, length); the learner counts the steps and checks the values
        for t in range(T):
            obs_t = torch.as_tensor(normalise(self.raw), dtype=torch.float32)
            action, logp, value = self.model.act(obs_t)
            raw_next, reward, term, trunc, _ = self.env.step(self.model.head.to_env(action))
            episodes.t = t
            _, valid, _ = self.steps.record(0, reward, raw_next, term, trunc, episodes, check=False)
            out["obs"][t], out["raw_next"][t] = obs_t.numpy(), raw_next
            out["logp"][t], out["values"][t] = logp.numpy(), value.numpy()
            out["rewards"][t], out["term"][t], out["trunc"][t], out["valid"][t] = reward, term, trunc, valid
            actions.append(action.numpy())
            self.raw = raw_next
        out["actions"] = np.stack(actions)
        out["last_obs"] = normalise(self.raw).astype(np.float32)
        out["episodes"], out["version"] = list(episodes), version
        return out


class _Episodes(list):
    """A worker's finished episodes as ``(t, return, length)``, ``t`` the rollout step they ended at."""

    t = 0

    def episode(self, step: int, ret: float, length: int) -> None:
        self.append((self.t, ret, length))


class WorkerPool:
    """``n`` Ray actors of ``actor_cls`` with replacement on failure (module docstring, "Fault tolerance").

    ``make_args(i, restarts)`` gives worker ``i``'s constructor arguments (a replacement gets a new
    ``restarts`` count, so it can reseed); :meth:`call` runs one method on every worker and returns the
    results in worker order."""

    def __init__(
        self,
        ray: Any,
        actor_cls: type,
        make_args: Callable[[int, int], tuple],
        n: int,
        trainer: TrainerConfig,
    ):
        self.ray, self.n, self.make_args = ray, n, make_args
        self.timeout, self.fault_tolerance = trainer.worker_timeout, trainer.fault_tolerance
        self.actor_cls = ray.remote(num_cpus=1, max_restarts=0)(actor_cls)
        self.restarts = 0
        self.workers = [self._start(i) for i in range(n)]

    def _start(self, i: int) -> Any:
        return self.actor_cls.remote(*self.make_args(i, self.restarts))

    def close(self) -> None:
        for w in self.workers:
            self.ray.kill(w)
        self.workers = []

    def call(self, method: str, args: list[tuple]) -> list[Any]:
        """``worker[i].method(*args[i])`` for the first ``len(args)`` workers; failed or hung workers are
        replaced and asked again (at most :data:`MAX_ATTEMPTS` times each), or, without fault tolerance,
        the run stops. Results in worker order."""

        def ask(i: int) -> Any:
            return getattr(self.workers[i], method).remote(*args[i])

        pending = {i: ask(i) for i in range(len(args))}
        results: dict[int, Any] = {}
        attempts = dict.fromkeys(range(len(args)), 0)
        while pending:
            ready, _ = self.ray.wait(list(pending.values()), num_returns=len(pending), timeout=self.timeout)
            by_ref = {ref: i for i, ref in pending.items()}
            failed: dict[int, str] = {}
            for ref in ready:
                i = by_ref[ref]
                try:
                    results[i] = self.ray.get(ref)
                except Exception as e:  # the actor died (ActorDiedError) or raised (RayTaskError)
                    failed[i] = _cause(e)
                del pending[i]
            for i in list(pending):  # not ready within the timeout: hung
                failed[i] = f"no answer within trainer.worker_timeout={self.timeout} s"
                del pending[i]
            for i, why in failed.items():
                if not self.fault_tolerance:
                    raise WorkerError(f"rollout worker {i} failed ({why}); trainer.fault_tolerance=false")
                attempts[i] += 1
                if attempts[i] > MAX_ATTEMPTS:  # a worker that can never work (e.g. an env it cannot build)
                    raise WorkerError(
                        f"rollout worker {i} failed {attempts[i]} times in a row in one rollout; last: {why}"
                    )
                print(
                    f"warning: rollout worker {i} failed ({why}); replacing it", file=sys.stderr, flush=True
                )
                self.ray.kill(self.workers[i])
                self.restarts += 1
                self.workers[i] = self._start(i)
                pending[i] = ask(i)
        return [results[i] for i in range(len(args))]


class RemoteCollector:
    """The learner's side: ``num_workers`` :class:`EnvWorker` actors, each with ``env.num_envs /
    num_workers`` envs; :meth:`collect` gathers one rollout of ``T`` steps from all of them."""

    def __init__(
        self,
        env_cfg: VecEnvConfig,
        model_cfg: ActorCriticModel,
        model: ActorCritic,
        n_steps: int,
        trainer: TrainerConfig,
        *,
        gamma: float,
        normalize_obs: bool,
        clip_obs: float,
        normalize_reward: bool,
        ctx: RunContext,
        obs_space: gym.Space,
        flatten_obs: bool = False,
    ):
        self.ray = import_ray(trainer.ray_address, trainer.num_workers)
        self.flatten_obs = flatten_obs  # the workers' envs encode observations as the learner's does
        self.W, self.T = trainer.num_workers, n_steps
        self.N = env_cfg.num_envs
        self.per_worker = self.N // self.W
        self.env_cfg = dataclasses.replace(env_cfg, num_envs=self.per_worker)
        self.model_cfg, self.model, self.ctx = model_cfg, model, ctx
        self.gamma, self.normalize_reward, self.clip_obs = gamma, normalize_reward, clip_obs
        self.trainer = trainer
        assert obs_space.shape is not None  # a Box
        self.obs_norm = ObsNormalizer(obs_space.shape, normalize_obs, clip_obs)
        self.ret_rms = RunningMeanStd(())
        self.disc_ret = np.zeros(self.N)
        self.spec = gym.spec(env_cfg.id)
        self.version, self.seed = 0, 0
        self.pool: WorkerPool | None = None
        self._restarts = 0  # restored from a checkpoint, added to the pool's count

    @property
    def restarts(self) -> int:
        return self._restarts + (self.pool.restarts if self.pool is not None else 0)

    @property
    def workers(self) -> list[Any]:
        return self.pool.workers if self.pool is not None else []

    def reset(self, seed: int) -> None:
        self.seed = seed

        def args(i: int, restarts: int) -> tuple:
            # distinct, reproducible seeds per worker and per replacement
            seed_i = seed + 1_000_003 * (i + 1) + 7_919 * restarts
            return (self.env_cfg, self.model_cfg, self.spec, seed_i, self.flatten_obs)

        self.pool = WorkerPool(self.ray, EnvWorker, args, self.W, self.trainer)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()

    # ---- collection ---------------------------------------------------------------------------------

    def collect(
        self, step: int, gae_lambda: float, targets: Targets | None = None, env_major: bool = False
    ) -> tuple[Batch, int]:
        """As :meth:`advantage.rollout.onpolicy.OnPolicyCollector.collect`, from the workers' envs."""
        self.version += 1
        weights = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        norm = None
        if self.obs_norm.enabled:
            norm = (self.obs_norm.rms.mean.copy(), self.obs_norm.rms.var.copy(), self.clip_obs)
        assert self.pool is not None, "reset() or load() first"
        ref = self.ray.put(weights)
        parts = self.pool.call("rollout", [(self.version, ref, norm, self.T)] * self.W)
        for p in parts:
            if p["version"] != self.version:
                raise WorkerError(f"a worker used weights version {p['version']}, expected {self.version}")
        cat = {
            k: np.concatenate([p[k] for p in parts], axis=1)
            for k in parts[0]
            if k not in ("episodes", "version", "last_obs")
        }
        last_obs = np.concatenate([p["last_obs"] for p in parts], axis=0)
        T = self.T
        rewards = np.zeros((T, self.N))
        for t in range(T):  # the learner replays the per-step bookkeeping in time order
            valid, reward = cat["valid"][t], cat["rewards"][t]
            step += int(valid.sum())
            check_finite(step, reward, cat["raw_next"][t])
            for p in parts:
                for t_ep, ret, length in p["episodes"]:
                    if t_ep == t:
                        self.ctx.episode(step, ret, length)
            r = reward
            if self.normalize_reward:
                done = cat["term"][t] | cat["trunc"][t]
                self.disc_ret = self.disc_ret * self.gamma + reward
                self.ret_rms.update(self.disc_ret[valid])
                r = reward / math.sqrt(self.ret_rms.var + 1e-8)
                self.disc_ret[done] = 0.0
            rewards[t] = r * valid
            if self.obs_norm.enabled:
                self.obs_norm.rms.update(cat["raw_next"][t])
        with torch.no_grad():
            last_value = self.model.value(torch.as_tensor(last_obs))
        obs, actions, logp, values, term, trunc, valid = (
            cat[k] for k in ("obs", "actions", "logp", "values", "term", "trunc", "valid")
        )
        rollout = Rollout(obs, actions, logp, values, rewards, term, trunc, valid)
        return build_batch(rollout, last_value, self.gamma, gae_lambda, targets, env_major), step

    # ---- checkpoint state ---------------------------------------------------------------------------

    def tensors(self) -> dict[str, Tensor]:
        return {
            **self.obs_norm.rms.tensors("obs_rms"),
            **self.ret_rms.tensors("ret_rms"),
            "disc_ret": torch.as_tensor(self.disc_ret),
            "worker_restarts": torch.tensor(self.restarts),
        }

    def state(self) -> dict[str, Any]:
        return {"num_workers": self.W}

    def metrics(self) -> dict[str, float]:
        """``train/worker_restarts`` (cumulative) and ``train/weights_version`` (rollouts so far)."""
        return {"train/worker_restarts": self.restarts, "train/weights_version": self.version}

    def load(self, tensors: dict[str, Tensor], state: dict[str, Any], seed: int, step: int = 0) -> None:
        self.obs_norm.rms.load("obs_rms", tensors)
        self.ret_rms.load("ret_rms", tensors)
        self.disc_ret = tensors["disc_ret"].numpy().copy()
        self._restarts = int(tensors["worker_restarts"])
        self.reset(seed + 1)  # fresh envs: a resumed distributed run is not bit-identical


def _cause(e: BaseException) -> str:
    """One line: the Ray error's type and the worker-side exception that caused it (the last line of the
    remote traceback), without colour codes."""
    import re

    lines = [ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", str(e)).splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    cause = lines[-1] if len(lines) > 1 else ""
    return f"{type(e).__name__}: {lines[0][:200]}" + (f" ... {cause[:300]}" if cause else "")
