"""DQN: bad inputs, exact resume, learning CartPole, overestimation logging, one update vs a reference."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import advantage
from advantage.algos.dqn import (
    DQNAlgorithm,
    DQNModel,
    QNetwork,
    clip_grad_norm,
    gradient_step,
    strided_returns,
    update_batches,
)
from advantage.algos.offpolicy_common import LeanAdam
from advantage.data import PrioritizedReplayBuffer, ReplayBuffer
from advantage.errors import ConfigError, EnvError
from advantage.math import double_q_target, reward_to_go, td_target

FAST = {"trainer.tensorboard": False, "trainer.eval_episodes": 2, "trainer.eval_every": 0}


def test_continuous_actions_rejected_with_the_space():
    with pytest.raises(
        EnvError, match=r"dqn needs a Discrete action space; Pendulum-v1 has Box\(-2.0, 2.0, \(1,\)\)"
    ):
        advantage.train("dqn", quiet=True, **{"env.id": "Pendulum-v1"})


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("algorithm.buffer_size", -5, "algorithm.buffer_size must be >= 1, got -5"),
        ("algorithm.n_step", 0, "algorithm.n_step must be >= 1, got 0"),
        ("algorithm.epsilon_end", 1.5, "algorithm.epsilon_end must be in [0, 1], got 1.5"),
        ("algorithm.learning_starts", 10, "algorithm.learning_starts (10) must be >= algorithm.batch_size"),
    ],
)
def test_invalid_options_are_config_errors(key, value, message):
    with pytest.raises(
        ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        advantage.train("dqn", quiet=True, **{key: value})


@pytest.mark.parametrize("preset", ["dqn", "rainbow_lite"])
def test_resume_is_exact(assert_resume_exact, preset):
    common = {
        **FAST,
        "preset": preset,
        "trainer.total_steps": 1500,
        "env.num_envs": 2,
        "algorithm.learning_starts": 200,
        "algorithm.train_freq": 64,
        "algorithm.gradient_steps": 4,
        "algorithm.buffer_size": 1000,
    }
    assert_resume_exact("dqn", common, at=700)


def test_overestimation_is_logged():
    run = advantage.train(
        "dqn",
        quiet=True,
        **FAST,
        **{
            "trainer.total_steps": 3000,
            "algorithm.learning_starts": 500,
            "algorithm.train_freq": 256,
            "algorithm.gradient_steps": 8,
        },
    )
    rows = [r for r in run.metrics if "train/overestimation" in r]
    assert rows
    r = rows[-1]
    assert r["train/overestimation"] == pytest.approx(r["train/q_predicted"] - r["train/q_realized"])


@pytest.mark.parametrize(
    "double, dueling, prioritized", [(False, "none", False), (True, "mean", False), (True, "mean", True)]
)
def test_an_update_takes_the_steps_of_the_per_batch_reference(double, dueling, prioritized):
    """update_batches + gradient_step (all batches and target-network values of an update in one pass,
    LeanAdam, the fused clip) take the steps of the textbook loop: per batch, Q_target on its next states,
    td_target / double_q_target, Huber loss, torch's clip_grad_norm_ and torch.optim.Adam."""
    torch.manual_seed(0)
    space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    model, a = (
        DQNModel(hidden_sizes=[32, 32], dueling=dueling),
        DQNAlgorithm(double=double, max_grad_norm=0.05),
    )
    q, q_target = QNetwork(space, 2, model), QNetwork(space, 2, model)
    ref = copy.deepcopy(q)
    args = (500, (4,), np.float32, (), np.int64, 2, 3, 0.99, 0)
    buffer = PrioritizedReplayBuffer(*args, beta_steps=8) if prioritized else ReplayBuffer(*args)
    g = np.random.default_rng(0)
    for _ in range(200):
        obs, next_obs = g.normal(size=(2, 2, 4)).astype(np.float32)
        buffer.add(
            obs, g.integers(0, 2, 2), g.normal(size=2), next_obs, g.random(2) < 0.05, g.random(2) < 0.02
        )
    opt, ref_opt = LeanAdam(q.parameters(), 1e-3), torch.optim.Adam(ref.parameters(), lr=1e-3, fused=True)
    clipped = 0
    for b in update_batches(buffer, q_target, 8, 32, double):
        _, td_error = gradient_step(q, opt, b, a)
        if prioritized:
            buffer.update_priorities(b["indices"].numpy(), td_error.numpy())
        with torch.no_grad():
            next_q = q_target(b["next_obs"])
            if double:
                y = double_q_target(b["rewards"], ref(b["next_obs"]), next_q, b["terminated"], b["discounts"])
            else:
                y = td_target(b["rewards"], next_q, b["terminated"], b["discounts"])
        pred = ref(b["obs"]).gather(1, b["actions"][:, None]).squeeze(1)
        loss = (F.smooth_l1_loss(pred, y, reduction="none") * b.get("weights", 1.0)).mean()
        ref_opt.zero_grad()
        loss.backward()
        clipped += float(torch.nn.utils.clip_grad_norm_(ref.parameters(), a.max_grad_norm)) > a.max_grad_norm
        ref_opt.step()
    assert clipped  # the clip was active (test_clip_grad_norm_is_torchs_arithmetic: both regimes)
    for p, r in zip(q.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, r, rtol=1e-5, atol=1e-6)


def test_clip_grad_norm_is_torchs_arithmetic():
    torch.manual_seed(0)
    for scale in (0.01, 100.0):  # below and above the max norm
        params = [torch.nn.Parameter(torch.randn(s)) for s in ((16, 4), (16,), (2, 16))]
        theirs = [torch.nn.Parameter(p.detach().clone()) for p in params]
        for p, t in zip(params, theirs, strict=True):
            p.grad = scale * torch.randn_like(p)
            t.grad = p.grad.clone()
        torch.nn.utils.clip_grad_norm_(theirs, 1.0)
        clip_grad_norm(params, 1.0)
        assert all(torch.equal(p.grad, t.grad) for p, t in zip(params, theirs, strict=True))


@pytest.mark.parametrize("length", [1, 7, 8, 9, 500])
def test_strided_returns_are_every_strideth_reward_to_go(length):
    rewards = np.random.default_rng(length).normal(size=length)
    want = reward_to_go(torch.tensor(rewards), 0.99).numpy()[::8]
    np.testing.assert_allclose(strided_returns(list(rewards), 0.99, 8), want, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dqn_default_solves_cartpole_within_50k_steps(seed):
    run = advantage.train(
        "dqn",
        quiet=True,
        **{
            "trainer.seed": seed,
            "trainer.eval_every": 2500,
            "trainer.eval_episodes": 10,
            "trainer.stop_at_return": 475,
            "trainer.tensorboard": False,
        },
    )
    evals = [r["eval/return_mean"] for r in run.metrics if "eval/return_mean" in r]
    assert max(evals) >= 475 and run.step <= 50_000, evals


def test_atari_id_without_the_extra_names_it(monkeypatch):
    import builtins

    import gymnasium as gym

    if "ALE/Pong-v5" in gym.registry:
        pytest.skip("ALE ids already registered in this process")
    real_import = builtins.__import__

    def no_ale(name, *args, **kwargs):
        if name == "ale_py":
            raise ImportError("no ale_py")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ale)
    with pytest.raises(ConfigError, match=r"needs the Atari extra: pip install 'advantage\[atari\]'"):
        advantage.train("dqn", quiet=True, **{"preset": "atari"})


@pytest.mark.slow
def test_atari_preset_runs_10k_steps_of_pong_on_cpu():
    pytest.importorskip("ale_py", reason="the atari extra (part of dev) is not installed")
    run = advantage.train(
        "dqn",
        quiet=True,
        **{
            "preset": "atari",
            "env.id": "ALE/Pong-v5",
            "trainer.total_steps": 10_000,
            "algorithm.learning_starts": 9_000,
            "algorithm.buffer_size": 10_000,
            "trainer.eval_every": 0,
            "trainer.eval_episodes": 1,
            "trainer.tensorboard": False,
        },
    )
    assert run.step == 10_000
    q = run.checkpoint.tensors
    assert q["q.trunk.net.0.weight"].shape == (32, 4, 8, 8)  # Nature CNN on 4 stacked 84x84 frames
    evals = [r for r in run.metrics if "eval/return_mean" in r]
    assert -21 <= evals[-1]["eval/return_mean"] <= 21  # a real Pong score, unclipped
    assert any("train/loss" in r for r in run.metrics)
