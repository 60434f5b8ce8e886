"""The collector of an actor-critic run (PPO, TRPO, A2C): the :class:`Collector` interface the trainers
call, which :class:`~advantage.rollout.onpolicy.OnPolicyCollector` (one process) and
:class:`~advantage.rollout.remote.RemoteCollector` (Ray env workers) both satisfy; :func:`make_collector`,
which picks one; and the start (:func:`resume_or_reset`) and checkpoint (:func:`actor_critic_snapshot`) of
a run through it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import gymnasium as gym
from torch import Tensor

from advantage.nn import ActorCritic, ActorCriticPolicy, ObsNormalizer
from advantage.rollout.onpolicy import Batch, OnPolicyCollector, Targets
from advantage.torch_state import LearnerState

if TYPE_CHECKING:
    from advantage.context import RunContext, Snapshot
    from advantage.rollout.onpolicy import ActorCriticConfig


class Collector(Protocol):
    """What the actor-critic trainers call on a collector: :class:`OnPolicyCollector` in this process, or
    :class:`advantage.rollout.remote.RemoteCollector` over Ray workers (:func:`make_collector`)."""

    obs_norm: ObsNormalizer  # the observation statistics the trained policy reads with

    def reset(self, seed: int) -> None:
        """Start fresh, the envs reset with ``seed``."""
        ...

    def collect(
        self, step: int, gae_lambda: float, targets: Targets | None = None, env_major: bool = False
    ) -> tuple[Batch, int]:
        """One rollout as a :class:`Batch` and the new global step count."""
        ...

    def tensors(self) -> dict[str, Tensor]:
        """What a checkpoint stores as tensors."""
        ...

    def state(self) -> Any:
        """What a checkpoint stores as JSON."""
        ...

    def metrics(self) -> dict[str, float]:
        """The collector's entries of the training row."""
        ...

    def load(self, tensors: dict[str, Tensor], state: Any, seed: int, step: int = 0) -> None:
        """Restore :meth:`tensors` and :meth:`state` of a checkpoint."""
        ...

    def close(self) -> None:
        """Release what the collector holds beyond the run's envs (the Ray workers)."""
        ...


def make_collector(
    env: gym.vector.VectorEnv, model: ActorCritic, cfg: ActorCriticConfig, n_steps: int, ctx: RunContext
) -> Collector:
    """The run's collector: :class:`OnPolicyCollector` in this process, or, with
    ``trainer.num_workers > 0``, :class:`advantage.rollout.remote.RemoteCollector` over Ray workers
    (imported only then)."""
    a = cfg.algorithm
    common: dict[str, Any] = {
        "gamma": a.gamma,
        "normalize_obs": a.normalize_obs,
        "clip_obs": a.clip_obs,
        "normalize_reward": getattr(a, "normalize_reward", False),
        "ctx": ctx,
    }
    if cfg.trainer.num_workers > 0:
        from advantage.envs import flatten_observations
        from advantage.rollout.remote import RemoteCollector

        return RemoteCollector(
            cfg.env,
            cfg.model,
            model,
            n_steps,
            cfg.trainer,
            obs_space=env.single_observation_space,
            flatten_obs=flatten_observations(cfg),
            **common,
        )
    return OnPolicyCollector(env, model, n_steps, **common)


def resume_or_reset(
    collector: Collector, learner: LearnerState, ctx: RunContext, seed: int
) -> tuple[int, dict[str, Any]]:
    """The run's first step and its saved algorithm state: ``(0, {})`` with fresh envs (reset with
    ``seed``), or the checkpoint's, with ``learner`` and ``collector`` restored from it."""
    if ctx.restored is None:
        collector.reset(seed)
        return 0, {}
    ck, s = ctx.restored, ctx.restored.state["algo"]
    learner.load(ck.tensors, s, str(ck.path))
    collector.load(ck.tensors, s["env"], seed, ck.step)
    return ck.step, s


def actor_critic_snapshot(
    model: ActorCritic, collector: Collector, learner: LearnerState, **state: Any
) -> Snapshot:
    """A checkpoint of an actor-critic run: the learner's and the collector's tensors, the policy with the
    collector's observation statistics, and ``state`` beside the optimizers' and the envs' state."""
    from advantage.context import Snapshot

    tensors, meta = learner.save()
    return Snapshot(
        ActorCriticPolicy(model, collector.obs_norm),
        {**tensors, **collector.tensors()},
        {**meta, "env": collector.state(), **state},
    )
