"""What DDPG, TD3 and SAC share: the environment side of an off-policy run on ``Box`` actions.

:class:`Experience` owns the vector environment, the replay buffer, the observation normalizer and the
bookkeeping of a run (step counter, unfinished episodes, the exploration generator) and knows how to save
and restore all of it. Each algorithm keeps its own loop visible (``act → experience.step → updates →
log → tick``) and its own update; this module holds no learning code.

Conventions:

1. Actions are *normalized* to ``[-1, 1]^A`` everywhere inside the learner (networks, replay buffer,
   noise); :func:`advantage.nn.continuous.to_env_action` maps them to the env's bounds. This is
   Stable-Baselines3's convention, so a noise scale means the same thing for every environment.
2. The replay buffer stores *raw* observations; with ``algorithm.normalize_obs`` they are normalized when
   sampled, with the running statistics of that moment (Stable-Baselines3's ``VecNormalize`` does the
   same for off-policy algorithms), so old transitions are never stuck with stale statistics.
3. Before ``algorithm.learning_starts`` steps, actions are uniform in ``[-1, 1]^A`` (SB3, CleanRL and the
   TD3 reference code: the first data come from a policy that covers the action space).
4. A truncated episode bootstraps from its final observation (the buffer stores ``terminated=False``);
   Gymnasium's ``NEXT_STEP`` autoreset step is not stored.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeAlias, cast

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from advantage import optim
from advantage.configs.ddpg import DDPGConfig
from advantage.configs.dqn import DQNConfig
from advantage.configs.sac import SACConfig
from advantage.configs.td3 import TD3Config
from advantage.context import RunContext, Snapshot
from advantage.data import PrioritizedReplayBuffer, ReplayBuffer
from advantage.envs import describe_space, env_state, make_vec_env, require_space
from advantage.envs.make import flatten_observations, require_vector_observations
from advantage.envs.replay import restore_or_restart
from advantage.errors import ConfigError, EnvError, NonFiniteError
from advantage.nn.continuous import to_env_action
from advantage.nn.policy import ObsNormalizer
from advantage.rollout.envsteps import EnvSteps, setup_torch
from advantage.torch_state import LearnerState, load_module

ContinuousConfig: TypeAlias = SACConfig | TD3Config | DDPGConfig
"""The config of an off-policy trainer on Box actions (DDPG, TD3, SAC)."""


def check_env(cfg: ContinuousConfig, env: gym.Env, algo: str) -> None:
    """Raise :class:`EnvError` unless ``env`` has a bounded ``Box`` action space (the actor's ``tanh``
    output is mapped onto ``[low, high]``, which must be finite) and observations with a vector encoding
    (``env`` made with :func:`~advantage.envs.flatten_observations`)."""
    space, env_id = env.action_space, cfg.env.id
    require_space(algo, env_id, "action", space, gym.spaces.Box, other=env.unwrapped.observation_space)
    assert isinstance(space, gym.spaces.Box)
    if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
        raise EnvError(
            f"{algo} needs a bounded Box action space (finite low and high: the tanh-squashed actor is "
            f"rescaled to them); {env_id} has {describe_space(space)}. Wrap the env with "
            "gymnasium.wrappers.RescaleAction or give the space finite bounds"
        )
    require_vector_observations(algo, env_id, env.observation_space, space)
    check_buffer_memory(cfg, env, stored_obs_dtype(env.observation_space))


def stored_obs_dtype(space: gym.Space) -> np.dtype:
    """How the replay buffer stores observations of ``space`` (encoded as a vector): one byte each when
    the space's are bytes (one-hots, bits, image pixels: exact, and a quarter of float32's memory),
    float32 otherwise."""
    return np.dtype(np.uint8 if space.dtype == np.uint8 else np.float32)


def check_buffer_memory(cfg: ContinuousConfig | DQNConfig, env: gym.Env, obs_dtype: Any = np.float32) -> None:
    """:class:`ConfigError` before anything runs when ``algorithm.buffer_size`` transitions of ``env``
    (observations stored as ``obs_dtype``) would not fit in the memory available.

    The default size (a million transitions, the papers' and SB3's) is a choice for vector observations:
    of 96x96x3 images it would need 51 GiB. Left at its default, it becomes the largest round size that
    fits in half the memory available, said in one line and recorded in the run's ``config.yaml`` (so the
    run reproduces from it); a size the user chose is never changed."""
    from advantage.data.replay import available_memory, memory_problem, replay_bytes

    obs, act = cast(gym.spaces.Box, env.observation_space), env.action_space
    n = cfg.algorithm.buffer_size
    need = replay_bytes(n, obs.shape, obs_dtype, act.shape or (), np.float32)
    problem = memory_problem(f"algorithm.buffer_size={n}: the replay buffer", need)
    if problem and n == type(cfg.algorithm)().buffer_size:
        per = replay_bytes(1, obs.shape, obs_dtype, act.shape or (), np.float32)
        fits = available_memory() // 2 // per
        step = 10 ** max(0, len(str(fits)) - 2)  # two significant digits
        size = fits // step * step
        if size >= 1000:
            print(
                f"algorithm.buffer_size: the default {n:,} transitions of {describe_space(obs)} need "
                f"{need / 2**30:.3g} GiB; using {size:,} (half the memory available); set "
                "algorithm.buffer_size to choose",
                file=sys.stderr,
            )
            cfg.algorithm.buffer_size = size
            return
    if problem:
        raise ConfigError(problem)


class ContinuousPolicy:
    """A trained policy for evaluation: raw observation in, env-scaled action out (deterministic: the
    actor's mean / deterministic output; otherwise the trainer's ``explore`` function)."""

    def __init__(self, actor: nn.Module, obs_norm: ObsNormalizer, action_space: gym.spaces.Box):
        self.actor, self.obs_norm = actor, obs_norm
        self.low, self.high = action_space.low.astype(np.float64), action_space.high.astype(np.float64)
        self.shape = action_space.shape

    def act(self, obs: Any, deterministic: bool = True) -> np.ndarray:
        return self.act_batch(np.asarray(obs, np.float64)[None], deterministic)[0]

    @torch.inference_mode()
    def act_batch(self, obs: np.ndarray, deterministic: bool = True) -> list[np.ndarray]:
        """Actions for a batch of observations ``[N, ...]`` (side-by-side evaluation: deterministic)."""
        x = torch.as_tensor(self.obs_norm(np.asarray(obs, np.float64)), dtype=torch.float32).flatten(1)
        if not hasattr(self.actor, "mode"):
            a = self.actor(x)
        else:  # SAC: tanh(mean) when deterministic, a sample otherwise
            a = self.actor.mode(x) if deterministic else self.actor(x)[0]  # type: ignore[operator]  # SAC actor: has mode()
        low, high = self.low.ravel(), self.high.ravel()
        return [
            to_env_action(row.numpy().astype(np.float64), low, high).reshape(self.shape).astype(np.float32)
            for row in a
        ]


def load_policy(
    actor_cls: Callable[[int, int, list[int]], nn.Module], cfg: ContinuousConfig, env: gym.Env, tensors: Any
) -> ContinuousPolicy:
    """The evaluation policy of a checkpoint holding ``actor.*`` (and ``obs_rms.*``) tensors: an
    ``actor_cls(obs_dim, act_dim, model.actor_hidden)`` for ``env``'s spaces."""
    obs_space, act_space = cast(gym.spaces.Box, env.observation_space), cast(gym.spaces.Box, env.action_space)
    actor = actor_cls(
        int(np.prod(obs_space.shape)), int(np.prod(act_space.shape)), list(cfg.model.actor_hidden)
    )
    load_module("actor", actor, tensors)
    a = cfg.algorithm
    obs_norm = ObsNormalizer(obs_space.shape, a.normalize_obs, a.clip_obs)
    if a.normalize_obs:
        obs_norm.rms.load("obs_rms", tensors)
    return ContinuousPolicy(actor, obs_norm, act_space)


def start(cfg: ContinuousConfig) -> Experience:
    """What every off-policy trainer does first: :func:`~advantage.rollout.envsteps.setup_torch`, then the
    run's :class:`Experience`."""
    setup_torch(cfg.trainer)
    return Experience(cfg)


def run(
    cfg: ContinuousConfig,
    ctx: RunContext,
    exp: Experience,
    learner: LearnerState,
    actor: nn.Module,
    explore: Callable[[torch.Tensor], np.ndarray],
    update: Callable[[bool], dict[str, torch.Tensor]],
    extra: Callable[[], tuple[dict[str, torch.Tensor], dict[str, Any]]],
) -> None:
    """The loop of DDPG, TD3 and SAC, each with its own update: act (uniform before
    ``algorithm.learning_starts``, then ``explore(obs)``) and step the envs; from ``learning_starts`` on,
    ``gradient_steps`` calls of ``update(log)`` every ``train_freq`` steps (``log``: a metrics row is due,
    one per ``trainer.log_every`` steps); checkpoints of ``learner``, ``exp`` and ``extra()`` (the
    algorithm's own tensors and state, which it restores itself from ``ctx.restored``)."""
    a, t = cfg.algorithm, cfg.trainer
    next_train = a.learning_starts
    if ctx.restored is not None:
        ck, s = ctx.restored, ctx.restored.state["algo"]
        learner.load(ck.tensors, s["learner"], str(ck.path))
        exp.restore(ck.step, ck.tensors, s["experience"], ctx)
        next_train = s["next_train"]

    def snapshot() -> Snapshot:
        tensors, meta = learner.save()
        own_tensors, own_state = extra()
        state = {"learner": meta, "experience": exp.state(), "next_train": next_train, **own_state}
        policy = ContinuousPolicy(actor, exp.obs_norm, exp.action_space)
        return Snapshot(policy, tensors | exp.tensors() | own_tensors, state)

    metrics: dict[str, torch.Tensor] = {}
    next_log = exp.step - exp.step % t.log_every + t.log_every  # metrics are read on these steps only
    while exp.step < t.total_steps:
        if exp.step < a.learning_starts:
            actions = exp.random_actions()
        else:
            with torch.inference_mode():
                actions = explore(exp.obs_tensor())
        exp.env_step(actions, ctx)
        while exp.step >= next_train:
            next_train += a.train_freq
            # learning_starts below batch_size (the zoo's 0): the batches are drawn with replacement from the
            # transitions stored so far, as SB3 does; only an empty buffer (n-step windows not yet closed)
            # skips the update
            if len(exp.buffer) == 0:
                continue
            for _ in range(a.gradient_steps):
                metrics |= update(exp.step >= next_log)
        if metrics and exp.step >= next_log:
            next_log = exp.step - exp.step % t.log_every + t.log_every
            ctx.log(exp.step, {k: float(v) for k, v in metrics.items()})
            metrics = {}
        if ctx.tick(exp.step, snapshot):
            break
    ctx.finish(exp.step, snapshot())
    exp.close()


class Experience:
    """The environment side of an off-policy run: vector env, replay buffer, observation normalizer.

    Built from the config: the ``env`` section; ``algorithm.buffer_size`` (replay capacity in transitions),
    ``gamma`` (the discount stored per transition, see :class:`advantage.data.ReplayBuffer`),
    ``normalize_obs`` and ``clip_obs`` (normalization by running mean/std, clipped to ±``clip_obs``);
    ``trainer.seed`` seeds the env, the buffer's sampler and the exploration generator ``self.rng``.
    """

    def __init__(self, cfg: ContinuousConfig):
        a, seed = cfg.algorithm, cfg.trainer.seed
        self.env = make_vec_env(cfg.env, flatten_obs=flatten_observations(cfg))
        self.seed = seed
        self.N = cfg.env.num_envs
        obs_space, act_space = (
            self.env.single_observation_space,
            cast(gym.spaces.Box, self.env.single_action_space),
        )
        assert obs_space.shape is not None  # a Box
        self.obs_shape, self.act_shape = obs_space.shape, act_space.shape
        self.obs_dim, self.act_dim = int(np.prod(obs_space.shape)), int(np.prod(act_space.shape))
        self.low = act_space.low.astype(np.float64).reshape(-1)
        self.high = act_space.high.astype(np.float64).reshape(-1)
        self.action_space = act_space
        self.buffer = ReplayBuffer(
            capacity=a.buffer_size,
            obs_shape=(self.obs_dim,),
            obs_dtype=stored_obs_dtype(obs_space),
            action_shape=(self.act_dim,),
            action_dtype=np.float32,
            num_envs=self.N,
            gamma=a.gamma,
            seed=seed,
        )
        self.obs_norm = ObsNormalizer((self.obs_dim,), a.normalize_obs, a.clip_obs)
        self.rng = np.random.default_rng(seed)
        self.step = 0
        obs, _ = self.env.reset(seed=seed)
        self.obs = self._flat(obs)
        self.obs_norm(self.obs, update=True)
        self.steps = EnvSteps(self.N)

    def _flat(self, obs: np.ndarray) -> np.ndarray:
        return np.asarray(obs, np.float32).reshape(self.N, self.obs_dim)

    # ---- acting -------------------------------------------------------------------------------------
    def obs_tensor(self) -> torch.Tensor:
        """The current (normalized) observations, float32 ``[N, O]``, for the actor."""
        return torch.from_numpy(np.asarray(self.obs_norm(self.obs), np.float32))

    def random_actions(self) -> np.ndarray:
        """Uniform normalized actions ``[N, A]`` (the warm-up before ``learning_starts``)."""
        return self.rng.uniform(-1.0, 1.0, size=(self.N, self.act_dim)).astype(np.float32)

    def gaussian_noise(self, actions: np.ndarray, std: float) -> np.ndarray:
        """``clip(actions + N(0, std²), -1, 1)``: DDPG's and TD3's exploration, in normalized units."""
        noisy = actions + std * self.rng.standard_normal(actions.shape)
        return np.clip(noisy, -1.0, 1.0).astype(np.float32)

    def env_step(self, actions: np.ndarray, ctx: RunContext) -> None:
        """Step every env with normalized ``actions`` ``[N, A]``; store the transitions, count the steps,
        report finished episodes to ``ctx``."""
        env_actions = to_env_action(actions.astype(np.float64), self.low, self.high)
        next_obs, reward, term, trunc, _ = self.env.step(
            env_actions.reshape(self.N, *self.act_shape).astype(self.action_space.dtype)
        )
        next_obs = self._flat(next_obs)
        self.step, valid, _ = self.steps.record(self.step, reward, next_obs, term, trunc, ctx)
        self.buffer.add(self.obs, actions, reward, next_obs, term, trunc, valid=valid)
        self.obs = next_obs
        if self.obs_norm.enabled:  # the reset step's observation is a real new one too
            self.obs_norm(next_obs, update=True)

    # ---- learning -----------------------------------------------------------------------------------
    def sample(self, batch_size: int) -> tuple[torch.Tensor, ...]:
        """A uniform batch ``(obs [B, O], actions [B, A], rewards [B], next_obs [B, O], terminated [B],
        discounts [B])`` as tensors (zero-copy views of the sampled numpy arrays)."""
        b = self.buffer.sample(batch_size)
        obs, next_obs = b["obs"], b["next_obs"]
        if self.obs_norm.enabled:
            obs = self.obs_norm(obs).astype(np.float32)
            next_obs = self.obs_norm(next_obs).astype(np.float32)
        elif obs.dtype != np.float32:  # stored as bytes (stored_obs_dtype)
            obs, next_obs = obs.astype(np.float32), next_obs.astype(np.float32)
        columns = (obs, b["actions"], b["rewards"], next_obs, b["terminated"], b["discounts"])
        return tuple(torch.from_numpy(x) for x in columns)

    # ---- checkpoints --------------------------------------------------------------------------------
    def tensors(self) -> dict[str, torch.Tensor]:
        out = buffer_state(self.buffer)[0]
        if self.obs_norm.enabled:
            out.update(self.obs_norm.rms.tensors("obs_rms"))
        return out | {"obs": torch.as_tensor(self.obs), **self.steps.tensors()}

    def state(self) -> dict[str, Any]:
        return {
            "buffer": buffer_state(self.buffer)[1],
            "rng": self.rng.bit_generator.state,
            "env": env_state(self.env),
        }

    def restore(self, step: int, tensors: Any, state: dict[str, Any], ctx: Any = None) -> None:
        load_buffer(self.buffer, tensors, state["buffer"])
        if self.obs_norm.enabled:
            self.obs_norm.rms.load("obs_rms", tensors)
        self.rng.bit_generator.state = state["rng"]
        self.env.reset(seed=self.seed)
        self.step = step
        self.obs = tensors["obs"].numpy().copy()
        self.steps.load(tensors)
        fresh = restore_or_restart(self.env, state["env"], self.seed, step, ctx)
        if fresh is not None:
            self.obs = self._flat(fresh)
            self.steps.restart()

    def close(self) -> None:
        self.env.close()


def buffer_state(
    buffer: ReplayBuffer | PrioritizedReplayBuffer,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A replay buffer's state for a checkpoint: its arrays as tensors ``buffer.<name>`` and the rest
    (cursor, size, sampler) as JSON."""
    arrays, meta = {}, {}
    for k, v in buffer.state_dict().items():
        if isinstance(v, np.ndarray):
            arrays[f"buffer.{k}"] = torch.as_tensor(v)
        else:
            meta[k] = v
    return arrays, meta


def load_buffer(buffer: ReplayBuffer | PrioritizedReplayBuffer, tensors: Any, meta: dict[str, Any]) -> None:
    """Restore what :func:`buffer_state` saved."""
    arrays = {k[len("buffer.") :]: v.numpy() for k, v in tensors.items() if k.startswith("buffer.")}
    buffer.load_state_dict(arrays | meta)


def minimize(opt: torch.optim.Optimizer, loss: torch.Tensor, step: int, what: str) -> None:
    """One step of ``opt`` down ``loss``, refused first when it is NaN/inf (:func:`check_loss_finite`: the run
    stops at ``step`` naming ``what``, and the weights are not updated)."""
    check_loss_finite(step, what, loss)
    optim.zero_grad(opt.param_groups[0]["params"])
    loss.backward()
    optim.step(opt)


def check_loss_finite(step: int, what: str, value: torch.Tensor) -> None:
    """Stop before the optimizer step when a loss is NaN/inf, so a bad batch never reaches the weights.
    (On CPU this ``float()`` is a read, not a device synchronisation.)"""
    v = float(value.detach())
    if v != v or v in (float("inf"), float("-inf")):
        raise NonFiniteError(f"step {step}: {what} is {v}; weights not updated")
