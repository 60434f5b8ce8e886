"""DQN: bad inputs, exact resume, learning CartPole, overestimation logging."""

import pytest

import advantage
from advantage.errors import ConfigError, EnvError

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
