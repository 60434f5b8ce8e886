"""DQN's overestimation probe (SPEC V4): ``max_a Q(s, a)`` at sampled states against the discounted return
the greedy policy of Q actually earns from them.

Every ``algorithm.overestimation_every`` environment steps :func:`advantage.algos.dqn.train` asks the
:class:`OverestimationProbe` for ``train/q_predicted``, ``train/q_realized`` and ``train/overestimation``:
states sampled from ε-greedy episodes in an environment of the probe's own, each saved with
:func:`advantage.envs.env_state` and restored into a fresh copy, from which the greedy policy is rolled out
(:func:`greedy_returns`) to termination or to the horizon of :func:`greedy_horizon`. Training is untouched:
the probe has its own environments and random generator. :func:`make_probe` builds it from a run's config.

Q is any ``[K, *obs_shape]`` float32 → ``[K, A]`` callable (the DQN's ``QNetwork``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Discrete

from advantage.config import EnvConfig
from advantage.configs.dqn import DQNConfig
from advantage.envs import env_state, make_env, set_env_state
from advantage.envs.make import flatten_observations
from advantage.errors import EnvError

QFunction = Callable[[torch.Tensor], torch.Tensor]
"""``Q(s, ·)``: observations ``[K, *obs_shape]`` float32 → action values ``[K, A]``."""


def greedy_horizon(gamma: float, tolerance: float) -> int:
    r"""The smallest horizon :math:`H \ge 1` with :math:`\gamma^H \le` ``tolerance``, for γ < 1.

    A rollout cut at H misses at most :math:`\gamma^H R_\max / (1 - \gamma)` of the return: with
    γ = 0.99 and the default 1e-3, H = 688 and CartPole's missing tail is at most 0.1 (of ≤ 100).
    """
    if not 0 <= gamma < 1:
        raise ValueError(f"greedy_horizon needs 0 <= gamma < 1, got {gamma}")
    if not 0 < tolerance < 1:
        raise ValueError(f"greedy_horizon needs 0 < tolerance < 1, got {tolerance}")
    if gamma == 0:
        return 1
    h = max(1, math.ceil(math.log(tolerance) / math.log(gamma)))
    while gamma**h > tolerance:  # guard the float rounding of the logs
        h += 1
    while h > 1 and gamma ** (h - 1) <= tolerance:
        h -= 1
    return h


def greedy_returns(
    q: QFunction,
    envs: list[gym.Env],
    states: list[Any],
    obs: np.ndarray,
    gamma: float,
    horizon: int,
) -> np.ndarray:
    r"""Monte Carlo discounted returns of the greedy policy :math:`\pi_Q(s) = \arg\max_a Q(s, a)` from
    K saved states, ``[K]`` float64:

    .. math::
        \hat G(s) = \sum_{t=0}^{\min(H, T)-1} \gamma^t r_t, \qquad s_0 = s,\ a_t = \pi_Q(s_t)

    ``T`` is the step that terminates. Each of the K environments (built like the one the states come
    from) is restored to its state (:func:`advantage.envs.set_env_state`) and stepped with the greedy
    action of its observation, all K in lockstep with one batched forward pass of ``q`` per step. A time
    limit's truncation does not stop a rollout (the environment is stepped on; the targets bootstrap at
    truncations, so Q values the task without the cut). In a deterministic environment
    :math:`\hat G(s)` is exactly :math:`V^{\pi_Q}_H(s)`, the value of the greedy policy over H steps.

    Args:
        q: ``[K, *obs_shape]`` float32 → ``[K, A]``.
        envs: K environments.
        states: K :func:`advantage.envs.env_state` snapshots.
        obs: ``[K, *obs_shape]`` the observation of each saved state.
        gamma: discount γ; horizon: H >= 1.
    """
    if not len(envs) == len(states) == len(obs):
        raise ValueError(
            f"need as many envs, states and observations, got {len(envs)}, {len(states)}, {len(obs)}"
        )
    for env, state in zip(envs, states, strict=True):
        set_env_state(env, state)
    obs = np.array(obs, copy=True)
    returns = np.zeros(len(envs))
    alive = np.ones(len(envs), dtype=bool)
    discount = 1.0
    for _ in range(horizon):
        live = np.flatnonzero(alive)
        if live.size == 0:
            break
        with torch.inference_mode():
            actions = q(torch.as_tensor(obs[live], dtype=torch.float32)).argmax(-1).tolist()
        for i, action in zip(live.tolist(), actions, strict=True):
            o, reward, terminated, _, _ = envs[i].step(
                action + int(getattr(envs[i].action_space, "start", 0))
            )
            returns[i] += discount * float(reward)
            obs[i] = o
            alive[i] = not terminated
        discount *= gamma
    return returns


class OverestimationProbe:
    r"""V4 measured as the issue asks: the *greedy* policy's discounted return from sampled states against
    the prediction :math:`\max_a Q(s, a)` there.

    States: every ``stride``-th state of episodes of the ε-greedy policy (the training ε) in an
    environment of the probe's own, reset with the measurement's seed; ``stride`` spreads the K states
    over one time limit's worth of steps (whole episodes of a good policy, several of a poor one). Each is
    saved with :func:`advantage.envs.env_state`; :func:`greedy_returns` rolls the greedy policy out from
    each. Nothing is shared with training (environments, random generators), so a run trains the same
    with the probe on or off.

    Environments whose state :func:`advantage.envs.env_state` cannot capture (an emulator, as in Atari)
    are refused at construction: a saved and restored copy must step exactly as the original does.
    """

    def __init__(
        self, env_cfg: EnvConfig, states: int, gamma: float, tolerance: float, flatten_obs: bool = False
    ):
        self.gamma, self.k = gamma, states
        self.horizon = greedy_horizon(gamma, tolerance)
        self.env = make_env(env_cfg, flatten_obs=flatten_obs)  # observations as the Q-network takes them
        self.copies = [make_env(env_cfg, flatten_obs=flatten_obs) for _ in range(states)]
        spec = getattr(self.env, "spec", None)
        self.limit = (
            int(spec.max_episode_steps) if spec is not None and spec.max_episode_steps else self.horizon
        )
        self.stride = max(1, math.ceil(self.limit / states))
        try:
            self._check_restore(env_cfg.id)
        except (EnvError, ValueError):
            self.close()
            raise

    def _check_restore(self, env_id: str) -> None:
        """A copy restored from a snapshot steps as the original: same observations and rewards."""
        probe, copy = self.env, self.copies[0]
        probe.reset(seed=0)
        copy.reset(seed=1)
        state = env_state(probe)
        space = cast(Discrete, probe.action_space)
        actions = [int(space.start) + i * 7 % int(space.n) for i in range(1, 9)]  # a fixed mix of actions
        ours = []
        for action in actions:
            ours.append(probe.step(action)[:3])
            if ours[-1][2]:
                break
        set_env_state(copy, state)
        for action, (o, r, term) in zip(actions, ours, strict=False):
            o2, r2, term2 = copy.step(action)[:3]
            if not (np.array_equal(o, o2) and r == r2 and term == term2):
                raise EnvError(
                    f"algorithm.overestimation_every: a copy of {env_id} restored from a saved state does "
                    "not step as the original (its state is not all in plain attributes, e.g. an "
                    "emulator's), so greedy rollouts from saved states cannot be made; set "
                    "algorithm.overestimation_every=0"
                )

    def sample_states(self, q: QFunction, epsilon: float, seed: int) -> tuple[np.ndarray, list[Any]]:
        """K observations ``[K, *obs_shape]`` and their snapshots, from ε-greedy episodes started with
        ``seed`` (episodes end at termination or at the time limit)."""
        rng = np.random.default_rng(seed)
        env = self.env
        obs, _ = env.reset(seed=seed % 2**31)
        n_actions, start = (
            int(cast(Discrete, env.action_space).n),
            int(cast(Discrete, env.action_space).start),
        )
        states: list[Any]
        observations, states, t, ep_t = [], [], 0, 0
        while len(states) < self.k:
            if t % self.stride == 0:
                observations.append(np.array(obs, copy=True))
                states.append(env_state(env))
            if rng.random() < epsilon:
                action = int(rng.integers(n_actions))
            else:
                with torch.inference_mode():
                    action = int(q(torch.as_tensor(np.asarray(obs)[None], dtype=torch.float32)).argmax(-1))
            obs, _, terminated, truncated, _ = env.step(action + start)
            t, ep_t = t + 1, ep_t + 1
            if terminated or truncated or ep_t >= self.limit:
                obs, _ = env.reset()
                ep_t = 0
        return np.stack(observations), states

    def measure(self, q: QFunction, epsilon: float, seed: int) -> dict[str, float]:
        r"""``train/q_predicted`` (mean :math:`\max_a Q(s, a)`), ``train/q_realized`` (mean greedy return)
        and ``train/overestimation`` (their difference) over K sampled states."""
        obs, states = self.sample_states(q, epsilon, seed)
        with torch.inference_mode():
            predicted = q(torch.as_tensor(obs, dtype=torch.float32)).max(-1).values.double().numpy()
        realized = greedy_returns(q, self.copies, states, obs, self.gamma, self.horizon)
        return {
            "train/q_predicted": float(predicted.mean()),
            "train/q_realized": float(realized.mean()),
            "train/overestimation": float(predicted.mean() - realized.mean()),
        }

    def close(self) -> None:
        for env in [self.env, *self.copies]:
            env.close()


AUTO_EVERY = 10_000  # overestimation_every=-1: measured this often where it can be


def make_probe(cfg: DQNConfig) -> tuple[OverestimationProbe | None, int]:
    """The overestimation probe and its period. ``-1`` (the default) measures every :data:`AUTO_EVERY`
    steps where greedy rollouts from saved states can be made (γ < 1, an env whose state
    :func:`advantage.envs.env_state` captures), and is off elsewhere (Box2D, an emulator), so the default
    trains on any env; an explicit period on such an env is an error."""
    a = cfg.algorithm
    every = a.overestimation_every
    if every == 0 or (every < 0 and a.gamma >= 1):
        return None, 0
    try:
        probe = OverestimationProbe(
            cfg.env,
            a.overestimation_states,
            a.gamma,
            a.overestimation_tolerance,
            flatten_obs=flatten_observations(cfg),
        )
    except (EnvError, ValueError) as e:
        if every > 0:
            raise EnvError(str(e)) from None
        return None, 0
    return probe, every if every > 0 else AUTO_EVERY
