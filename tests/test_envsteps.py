"""The env-stepping core (:mod:`advantage.rollout.envsteps`): step counts, episode returns and lengths under
``NEXT_STEP`` autoreset by hand, the NaN/inf check naming the value, and the Ray workers' learner-side check
(run in this process, without Ray)."""

from __future__ import annotations

import types

import gymnasium as gym
import numpy as np
import pytest
import torch

from advantage.config import TrainerConfig, VecEnvConfig
from advantage.configs.models import ActorCriticModel
from advantage.errors import NonFiniteError
from advantage.rollout import remote
from advantage.rollout.envsteps import EnvSteps, check_finite


class _Episodes:
    def __init__(self):
        self.seen: list[tuple[int, float, int]] = []

    def episode(self, step: int, ret: float, length: int) -> None:
        self.seen.append((step, ret, length))


def _b(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=bool)


def test_steps_episodes_and_reset_steps_by_hand():
    """Two envs. Env 0 terminates at its 2nd step, so its 3rd is a reset step (reward 0, not counted, not
    in the episode); env 1 is truncated at its 3rd step."""
    steps, out = EnvSteps(2), _Episodes()
    obs = np.zeros((2, 3))
    step, valid, done = steps.record(10, np.array([1.0, 2.0]), obs, _b(0, 0), _b(0, 0), out)
    assert (step, valid.tolist(), done.tolist()) == (12, [True, True], [False, False])
    step, valid, done = steps.record(step, np.array([3.0, 4.0]), obs, _b(1, 0), _b(0, 0), out)
    assert (step, out.seen) == (14, [(14, 4.0, 2)])  # env 0: 1 + 3 over 2 steps
    step, valid, done = steps.record(step, np.array([0.0, 5.0]), obs, _b(0, 0), _b(0, 1), out)
    assert (step, valid.tolist(), done.tolist()) == (15, [False, True], [False, True])
    assert out.seen[1:] == [(15, 11.0, 3)]  # env 1: 2 + 4 + 5; env 0's reset step is not counted
    step, valid, _ = steps.record(step, np.array([6.0, 0.0]), obs, _b(0, 0), _b(0, 0), out)
    assert (step, valid.tolist()) == (16, [True, False])
    assert steps.ep_ret.tolist() == [6.0, 0.0] and steps.ep_len.tolist() == [1, 0]
    saved = steps.tensors()
    assert set(saved) == {"autoreset", "ep_ret", "ep_len"}  # the key names checkpoints have always had
    again = EnvSteps(2)
    again.load(saved)
    assert again.autoreset.tolist() == [False, False] and again.ep_ret.tolist() == [6.0, 0.0]


def test_inactive_envs_are_neither_counted_nor_checked():
    """REINFORCE's quotas: an env past its quota keeps stepping, uncounted, and its values are not judged."""
    steps, out = EnvSteps(2), _Episodes()
    reward, obs = np.array([1.0, np.nan]), np.zeros((2, 3))
    step, valid, _ = steps.record(0, reward, obs, _b(1, 1), _b(0, 0), out, active=_b(1, 0))
    assert (step, valid.tolist(), out.seen) == (1, [True, False], [(1, 1.0, 1)])
    with pytest.raises(NonFiniteError):
        EnvSteps(2).record(0, reward, obs, _b(0, 0), _b(0, 0), out)


@pytest.mark.parametrize(
    "reward, obs, message",
    [
        ([1.0, np.inf], [[0.0, 0.0], [0.0, 0.0]], "step 7: reward from the environment is inf (env 1)"),
        ([1.0, 1.0], [[0.0, 0.0], [0.0, np.nan]], "step 7: observation from the environment is nan (env 1)"),
        (
            [-np.inf, np.nan],
            [[np.nan, 0.0], [0.0, 0.0]],
            "step 7: reward from the environment is -inf (env 0)",
        ),
    ],
)
def test_a_non_finite_value_is_named_with_its_env(reward, obs, message):
    with pytest.raises(NonFiniteError) as info:
        check_finite(7, np.array(reward), np.array(obs))
    assert str(info.value) == message
    check_finite(7, np.array([1.0, 1.0]), np.zeros((2, 2)))  # finite: nothing


# ---- the Ray workers' learner, with the workers run in this process ------------------------------------


class _BadReward(gym.Env):
    """Reward 1 per step, episodes of 4 steps; the env created ``bad``-th gives ``value`` at its 3rd step."""

    created = 0
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, bad: int = 3, value: float = float("-inf")):
        self.index, self.bad, self.value, self.t = _BadReward.created, bad, value, 0
        _BadReward.created += 1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        reward = self.value if (self.index == self.bad and self.t == 3) else 1.0
        return np.zeros(3, np.float32), reward, self.t % 4 == 0, False, {}


gym.register("AdvantageBadReward-v0", entry_point=_BadReward)


class _InProcessPool:
    """:class:`advantage.rollout.remote.WorkerPool`'s ``call``, on workers in this process."""

    def __init__(self, workers):
        self.workers, self.restarts = workers, 0

    def call(self, method, args):
        return [getattr(w, method)(*a) for w, a in zip(self.workers, args, strict=True)]


def test_a_non_finite_reward_from_a_worker_stops_the_run_naming_the_value(monkeypatch):
    """The learner checks what the workers send, step by step; the error names the value and the env (the
    check in ``remote.py`` used to say only "NaN or inf")."""
    monkeypatch.setattr(remote, "import_ray", lambda address, n: types.SimpleNamespace(put=lambda x: x))
    threads = torch.get_num_threads()
    _BadReward.created = 0
    env_cfg = VecEnvConfig(id="AdvantageBadReward-v0", num_envs=4)
    model_cfg = ActorCriticModel()
    space = _BadReward.observation_space
    collector = remote.RemoteCollector(
        env_cfg,
        model_cfg,
        model_cfg.build(space, _BadReward.action_space),
        4,
        TrainerConfig(num_workers=2),
        gamma=0.99,
        normalize_obs=False,
        clip_obs=10.0,
        normalize_reward=False,
        ctx=_Episodes(),
        obs_space=space,
    )
    try:
        collector.pool = _InProcessPool(
            [remote.EnvWorker(collector.env_cfg, model_cfg, None, i) for i in range(2)]
        )
        with pytest.raises(NonFiniteError, match=r"^step 12: reward from the environment is -inf \(env 3\)$"):
            collector.collect(0, 0.95)
    finally:
        torch.set_num_threads(threads)  # a worker sets one thread for its process: this one
