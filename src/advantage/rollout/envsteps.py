"""The bookkeeping of stepping a vector environment, written once for every trainer that steps one.

Gymnasium's vector envs autoreset with ``NEXT_STEP``: the step after an episode ends only resets that
env (its action is ignored, its reward is 0, its observation is the first of the next episode). Such a
reset step is not a transition: it is not counted, stored or learned from. :class:`EnvSteps` keeps, per
env, whether its next step is a reset step and the return and length of the episode it is playing;
:meth:`EnvSteps.record` takes what ``env.step`` returned and

1. marks the steps that count (``valid``: not a reset step and, optionally, of an env still ``active``),
2. advances the run's step counter by their number,
3. stops the run on a NaN or inf reward or observation (:func:`check_finite`: the step, the env and the
   value),
4. adds the rewards to the running episodes and reports each one that ended
   (``episodes.episode(step, return, length)``, the run context's method),
5. remembers which envs reset at their next step.

PPO's, TRPO's and A2C's collector, the Ray rollout workers, REINFORCE, DQN and the off-policy trainers
(SAC, TD3, DDPG) all step through it; its state is three arrays a checkpoint stores (:meth:`tensors`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from advantage.errors import NonFiniteError

if TYPE_CHECKING:
    from advantage.config import TrainerConfig


def setup_torch(trainer: TrainerConfig) -> None:
    """What every classic trainer does first: ``trainer.torch_threads`` CPU threads, denormals flushed
    (tiny Adam moments turn denormal and slow CPU math down several-fold) and the torch seed."""
    torch.set_num_threads(trainer.torch_threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(trainer.seed)


class EpisodeSink(Protocol):
    """Where finished episodes go: the run context, or a list a rollout worker sends back."""

    def episode(self, step: int, ret: float, length: int) -> None: ...


def check_finite(step: int, reward: np.ndarray, obs: np.ndarray, where: np.ndarray | None = None) -> None:
    """Raise :class:`NonFiniteError` when a reward ``[N]`` or an observation ``[N, ...]`` of the envs
    ``where`` (``[N]`` bool; default all) is NaN or inf, naming ``step``, the env and the value."""
    r, o = (x if where is None else x[where] for x in (np.asarray(reward), np.asarray(obs)))
    if np.isfinite(r).all() and np.isfinite(o).all():  # the common case: two vectorised checks
        return
    envs = np.arange(len(reward)) if where is None else np.flatnonzero(where)
    for what, x in (("reward", r), ("observation", o)):
        bad = ~np.isfinite(x.reshape(len(x), -1))  # [n, values per env]
        if bad.any():
            i = int(np.flatnonzero(bad.any(-1))[0])
            value = float(x.reshape(len(x), -1)[i][bad[i]][0])
            raise NonFiniteError(f"step {step}: {what} from the environment is {value} (env {envs[i]})")


class EnvSteps:
    """Per-env step bookkeeping of a vector env with ``NEXT_STEP`` autoreset (module docstring).

    ``autoreset [N]`` bool (the env's next step is a reset step), ``ep_ret [N]`` float64 and
    ``ep_len [N]`` int64 (the running episode's return and length)."""

    def __init__(self, num_envs: int):
        self.autoreset = np.zeros(num_envs, dtype=bool)
        self.ep_ret = np.zeros(num_envs)
        self.ep_len = np.zeros(num_envs, dtype=np.int64)

    def record(
        self,
        step: int,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        episodes: EpisodeSink,
        *,
        active: np.ndarray | None = None,
        check: bool = True,
    ) -> tuple[int, np.ndarray, np.ndarray]:
        """Book one ``env.step`` of every env; returns ``(step, valid, done)``: the step counter advanced
        by the valid steps, ``valid [N]`` (the steps that count) and ``done [N] = terminated | truncated``.

        ``active [N]`` (REINFORCE's quotas) leaves the steps of other envs uncounted and unchecked.
        ``check=False`` skips the finiteness check (a rollout worker: its learner checks, step by step,
        so that the run stops naming the step rather than replacing the worker)."""
        valid = ~self.autoreset if active is None else ~self.autoreset & active
        step += int(valid.sum())
        if check:
            check_finite(step, reward, next_obs, active)
        done = terminated | truncated
        self.ep_ret += np.where(valid, reward, 0.0)
        self.ep_len += valid
        for j in np.flatnonzero(done & valid):
            episodes.episode(step, float(self.ep_ret[j]), int(self.ep_len[j]))
            self.ep_ret[j], self.ep_len[j] = 0.0, 0
        self.autoreset = done
        return step, valid, done

    def tensors(self) -> dict[str, torch.Tensor]:
        """``autoreset``, ``ep_ret`` and ``ep_len`` for a checkpoint."""
        return {k: torch.as_tensor(getattr(self, k)) for k in ("autoreset", "ep_ret", "ep_len")}

    def restart(self) -> None:
        """Forget the episodes in progress (the envs were reset: :func:`restore_or_restart`)."""
        self.autoreset[:] = False
        self.ep_ret[:] = 0.0
        self.ep_len[:] = 0

    def load(self, tensors: Any) -> None:
        """Restore what :meth:`tensors` saved."""
        for k in ("autoreset", "ep_ret", "ep_len"):
            setattr(self, k, tensors[k].numpy().copy())
