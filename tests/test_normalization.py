"""P8: observation normalisation and reward scaling of the on-policy collector (PPO, A2C, TRPO), against
two-pass numpy references computed from the very stream the environments returned."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from advantage.configs.models import ActorCriticModel
from advantage.rollout.onpolicy import OnPolicyCollector
from advantage.torch_state import RunningMeanStd

PRIOR = 1e-4  # RunningMeanStd starts as a pseudo-sample of this weight with mean 0 and variance 1


def two_pass(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and (population) variance of the rows of ``x`` pooled with RunningMeanStd's prior, two passes:
    the mean first, then the squared deviations from it."""
    n = x.shape[0] + PRIOR
    mean = x.sum(axis=0) / n
    m2 = PRIOR * (1.0 + mean**2) + ((x - mean) ** 2).sum(axis=0)
    return mean, m2 / n


class Record(gym.vector.VectorWrapper):
    """Keeps every observation, reward and episode flag the vector env returns."""

    def __init__(self, env):
        super().__init__(env)
        self.obs, self.rewards, self.dones = [], [], []

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.obs.append(np.array(obs, dtype=np.float64))
        return obs, info

    def step(self, actions):
        obs, reward, term, trunc, info = self.env.step(actions)
        self.obs.append(np.array(obs, dtype=np.float64))
        self.rewards.append(np.array(reward, dtype=np.float64))
        self.dones.append(term | trunc)
        return obs, reward, term, trunc, info


class Episodes:
    def episode(self, step, ret, length):
        pass


def test_running_mean_std_equals_the_two_pass_reference_over_uneven_batches():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 5.0, size=(1000, 3)) * np.array([1.0, 100.0, 1e-3])
    rms = RunningMeanStd((3,))
    for batch in np.split(x, [1, 2, 10, 11, 400, 999]):  # sizes 1, 1, 8, 1, 389, 599, 1
        rms.update(batch)
    mean, var = two_pass(x)
    np.testing.assert_allclose(rms.mean, mean, rtol=1e-12)
    np.testing.assert_allclose(rms.var, var, rtol=1e-10)
    assert rms.count == pytest.approx(1000 + PRIOR, rel=1e-15)
    # The plain sample statistics agree to the prior's weight (a variance of 1 at weight 1e-4 in 1000).
    np.testing.assert_allclose(rms.var, x.var(axis=0), rtol=1e-5, atol=2 * PRIOR / 1000)


def test_a_one_row_update_is_the_batch_formula_bit_for_bit():
    """The one-env shortcut (the row is the batch mean, the batch variance is 0) gives exactly the numbers of
    the general update with numpy's reductions."""
    rng = np.random.default_rng(1)
    rms, mean, var, count = RunningMeanStd((3,)), np.zeros(3), np.ones(3), PRIOR
    for row in rng.normal(2.0, 3.0, size=(50, 1, 3)):
        rms.update(row)
        b_mean, b_var = row.mean(axis=0), row.var(axis=0)
        delta, total = b_mean - mean, count + 1
        mean = mean + delta * 1 / total
        var = (var * count + b_var * 1 + delta**2 * count * 1 / total) / total
        count = total
        assert np.array_equal(rms.mean, mean) and np.array_equal(rms.var, var) and rms.count == count


@pytest.fixture(scope="module")
def collected():
    """Three rollouts of 16 steps of 4 Pendulum envs (time limit 25: episodes end inside rollouts)."""
    torch.manual_seed(0)
    env = Record(gym.make_vec("Pendulum-v1", num_envs=4, vectorization_mode="sync", max_episode_steps=25))
    model = ActorCriticModel().build(env.single_observation_space, env.single_action_space)
    gamma = 0.9
    c = OnPolicyCollector(
        env, model, 16, gamma=gamma, normalize_obs=True, clip_obs=10.0, normalize_reward=True, ctx=Episodes()
    )
    c.reset(seed=0)
    step = 0
    for _ in range(3):
        _, step = c.collect(step, 0.95)
    yield c, env, gamma
    env.close()


def test_observation_statistics_match_the_two_pass_reference(collected):
    c, env, _ = collected
    stream = np.concatenate(env.obs)  # every observation returned, the reset steps' included
    assert stream.shape == (4 * (1 + 48), 3)
    mean, var = two_pass(stream)
    np.testing.assert_allclose(c.obs_norm.rms.mean, mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(c.obs_norm.rms.var, var, rtol=1e-10)
    # Each observation the policy saw is normalised with the statistics including it.
    for i in range(1, 17):  # the last rollout's obs_buf[i - 1] came from the env output 32 + i - 1
        k = 32 + i
        m, v = two_pass(np.concatenate(env.obs[:k]))
        want = np.clip((env.obs[k - 1] - m) / np.sqrt(v + 1e-8), -10, 10)
        np.testing.assert_allclose(c.obs_buf[i - 1].numpy(), want, rtol=1e-5, atol=1e-6)  # float32 buffer
    m, v = two_pass(stream)
    np.testing.assert_allclose(c.obs, np.clip((env.obs[-1] - m) / np.sqrt(v + 1e-8), -10, 10), rtol=1e-10)


def test_reward_scaling_divides_by_the_running_std_of_the_discounted_return(collected):
    """r_t / sqrt(Var[R] + 1e-8) with R_t = γ R_{t−1} + r_t per env, restarted after an episode ends, and
    Var over every R of a valid step so far (an env's reset step is not a transition)."""
    c, env, gamma = collected
    rewards, dones = np.stack(env.rewards), np.stack(env.dones)  # [48, 4]
    assert dones.any()
    ret, seen, scaled = np.zeros(4), [], []
    valid = np.ones(4, dtype=bool)
    for r, done in zip(rewards, dones, strict=True):
        ret = gamma * ret + r
        seen.append(ret[valid])
        _, var = two_pass(np.concatenate(seen)[:, None])
        scaled.append(r / np.sqrt(var[0] + 1e-8) * valid)
        ret[done] = 0.0
        valid = ~done
    np.testing.assert_allclose(c.rew_np, np.stack(scaled)[-16:], rtol=1e-10)
    _, var = two_pass(np.concatenate(seen)[:, None])
    np.testing.assert_allclose(c.ret_rms.var, var[0], rtol=1e-10)
    # Not the std of the rewards themselves: the test could tell the two apart.
    assert abs(np.sqrt(var[0]) - rewards.std()) > 0.1 * rewards.std()
