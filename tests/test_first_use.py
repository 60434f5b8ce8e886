"""What a new user trips on, through the CLI: a stopped run's exit code and last line, the device check, what
the progress display and the last line say for each kind of run, --quiet, sweeps run twice, and the
messages for common mistakes. Runs are tiny; a subprocess where the exit code or the printed output is
the point."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from advantage.cli import main

FROZEN = ["q_learning", "preset=frozenlake", "trainer.tensorboard=false"]
LM_TINY = [
    "data.train_size=64",
    "data.validation_size=16",
    "data.test_size=16",
    "trainer.eval_episodes=8",
    "trainer.eval_every=0",
    "trainer.tensorboard=false",
    "trainer.log_every=1",
]
SMALL_LM = ["model.hidden_size=32", "model.layers=1", "model.heads=2", "algorithm.batch_size=8"]


def _cli(*args, env=None, timeout=180):
    return subprocess.run(
        [sys.executable, "-m", "advantage.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _latest_step(run: str | Path) -> int:
    return int(Path(run, "checkpoints", "latest").read_text().strip().split("_")[1].split("-")[0])


# ---- 1. a stopped run ------------------------------------------------------------------------------------


def test_ctrl_c_stops_with_a_checkpoint_exit_130_and_says_how_to_resume():
    args = ["train", *FROZEN, "trainer.total_steps=5000000", "trainer.run_dir=big", "trainer.eval_every=0"]
    p = subprocess.Popen(
        [sys.executable, "-m", "advantage.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert "run folder: big" in p.stdout.readline()
    time.sleep(1.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    step = _latest_step("big")
    assert 0 < step < 5_000_000
    assert (
        out.splitlines()[-1]
        == f"stopped at step {step} (checkpoint saved); continue with advantage resume big"
    )
    assert "done:" not in out


# ---- 2. trainer.device -----------------------------------------------------------------------------------


def test_unknown_device_exits_2_before_a_run_folder_exists():
    res = _cli("train", "ppo", "trainer.device=banana", "trainer.total_steps=2000")
    assert res.returncode == 2
    assert "trainer.device='banana'" in res.stderr and "CPU only" in res.stderr
    assert not Path("runs").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["ppo", "trainer.device=gpu"], "trainer.device='gpu': this algorithm trains on the CPU only"),
        (["dqn", "trainer.device=cuda:0"], "trainer.device='cuda:0': this algorithm trains on the CPU only"),
        (["sft", "trainer.device=gpu"], "trainer.device must be cpu, cuda, cuda:N or mps; got 'gpu'"),
        (
            ["sft", "trainer.device=cuda"],
            "trainer.device=cuda: this torch (2.13.0+cpu) is built without CUDA",
        ),
        (
            ["grpo", "trainer.device=cuda:3"],
            "trainer.device=cuda:3: this machine has 1 CUDA device(s) (cuda:0)",
        ),
        (["sft", "trainer.device=cuda:0"], None),  # exists: validation passes (the run is stopped after it)
    ],
)
def test_device_is_validated(args, message, monkeypatch, capsys):
    import torch

    import advantage.runs

    if "cuda:3" in args[1] or "cuda:0" in args[1]:  # a machine with one GPU
        monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    else:  # a CPU-only build of torch, whatever this machine has
        monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: False)
        monkeypatch.setattr(torch, "__version__", "2.13.0+cpu")

    def no_run(*a, **k):
        raise SystemExit("validated")

    monkeypatch.setattr(advantage.runs, "_check_spaces", no_run)
    if message is None:
        with pytest.raises(SystemExit, match="validated"):
            main(["train", *args])
        return
    assert main(["train", *args]) == 2
    assert message in capsys.readouterr().err
    assert not Path("runs").exists()


def test_every_algorithm_lists_the_device_it_can_use():
    from advantage.config import describe
    from advantage.registry import all_algorithms
    from advantage.resolve import resolve_config

    for name, algo in all_algorithms().items():
        help_ = {k: h for k, _, h in describe(algo.config)}["trainer.device"]
        if algo.uses_env:
            assert help_.startswith("cpu only"), name
            with pytest.raises(Exception, match="trains on the CPU only"):
                resolve_config(name, overrides={"trainer.device": "cuda"})
        else:
            assert "cuda" in help_, name


# ---- 3-4. progress and the last line ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "algo, args, shown",
    [
        ("sft", [*SMALL_LM, "trainer.total_steps=3"], ("loss ", "tok/s ")),
        (
            "grpo",
            [
                "data.rollout_batch_size=4",
                "data.max_response_length=6",
                "worker.rollout.n=4",
                "worker.actor.model.hidden_size=32",
                "worker.actor.model.layers=1",
                "worker.actor.model.heads=2",
                "worker.actor.kl_coef=0.1",
                "trainer.total_steps=2",
            ],
            ("loss ", "reward ", "acc ", "kl ", "tok/s "),
        ),
        ("dpo", [*SMALL_LM, "trainer.total_steps=2"], ("loss ", "margin ", "acc ")),
    ],
)
def test_lm_progress_and_last_line_show_what_the_algorithm_logs(algo, args, shown, capsys):
    assert main(["train", algo, *LM_TINY, *args, "trainer.run_dir=r", "trainer.progress=lines"]) == 0
    out, err = capsys.readouterr()
    lines = [x for x in err.splitlines() if x.startswith("[")]
    assert lines and all(all(s in x for s in shown) and "return" not in x for x in lines), lines
    assert "eval acc " in lines[-1]  # the final evaluation
    last = out.splitlines()[-1]
    assert re.match(r"done: step \d, eval/accuracy \d\.\d{3}", last) and "return_mean" not in last, last


def test_eta_counts_from_the_first_step_not_from_the_setup(monkeypatch):
    """100 s of setup (building models, loading data), then 1 step/s: 90 steps left is 90 s."""
    from advantage.monitoring import progress

    now = [1000.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    out = io.StringIO()
    p = progress.Progress(100, mode="lines", stream=out)
    now[0] += 100.0  # setup
    for step in range(1, 21):
        now[0] += 1.0 if step <= 10 else 0.5  # twice as fast from step 11: the ETA follows
        p.update(step)
    first, second = out.getvalue().splitlines()
    assert first.endswith("eta 90s") and "step 10/100" in first
    assert second.endswith("eta 40s") and "step 20/100" in second


def test_return_column_is_the_latest_logged_return(capsys):
    args = [*FROZEN, "trainer.total_steps=2000", "trainer.log_every=200", "trainer.eval_every=0"]
    assert main(["train", *args, "trainer.run_dir=f", "trainer.progress=lines"]) == 0
    err = capsys.readouterr().err
    rows = map(json.loads, Path("f/metrics.jsonl").read_text().splitlines())
    logged = {r["step"]: r["train/episode_return"] for r in rows if "train/episode_return" in r}
    shown = re.findall(r"step (\d+)/\d+ \| [^|]+ \| return ([-\d.e+]+)", err)
    assert len(shown) >= 9
    for step, value in shown:
        latest = max(s for s in logged if s <= int(step))
        assert value == f"{logged[latest]:.3g}", (step, value, logged[latest])


def test_progress_never_passes_100_percent(capsys):
    """PPO collects whole rollouts (2 envs x 64 steps): a budget of 300 steps ends at 384."""
    args = ["ppo", "env.num_envs=2", "algorithm.n_steps=64", "algorithm.minibatch_size=64"]
    args += ["trainer.total_steps=300", "trainer.eval_episodes=1", "trainer.progress=lines"]
    assert main(["train", *args, "trainer.run_dir=p", "trainer.tensorboard=false"]) == 0
    lines = re.findall(r"\[\s*(\d+)%\] step (\d+)/(\d+) .* eta (\S+)", capsys.readouterr().err)
    assert lines
    for pct, step, total, _ in lines:
        assert int(pct) <= 100 and int(step) <= int(total)
    pct, step, total, eta = lines[-1]
    assert (pct, eta) == ("100", "0s") and int(step) == int(total) == _latest_step("p") > 300


# ---- 5. --quiet ------------------------------------------------------------------------------------------


def test_quiet_drops_only_the_progress():
    res = _cli("train", *FROZEN, "trainer.total_steps=1000", "trainer.run_dir=q", "--quiet")
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert out[0] == "run folder: q" and out[-1].startswith("done: step 1000, eval/return_mean ")
    assert "step" not in res.stderr


# ---- 7. sweep --------------------------------------------------------------------------------------------


def test_sweep_reports_each_trial_and_a_second_sweep_gets_a_fresh_folder(capsys):
    argv = ["sweep", *FROZEN, "trainer.total_steps=300", "trainer.eval_episodes=2", "trainer.eval_every=0"]
    argv += ["--grid", "algorithm.gamma=0.9,0.99"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "sweep folder: runs/sweep-q_learning"
    assert "trial 1/2 algorithm.gamma=0.9 seed=0 started" in err
    assert re.search(r"trial 2/2 algorithm.gamma=0.99 seed=0 done: .* 2/2 done, best so far", err)
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "sweep folder: runs/sweep-q_learning-1"
    assert len(json.loads(Path("runs/sweep-q_learning-1/summary.json").read_text())["trials"]) == 2


def test_a_signal_stops_the_whole_sweep(monkeypatch, capsys):
    from advantage.context import RunContext

    original = RunContext.tick

    def tick(self, step, snapshot):
        if step >= 100:
            signal.raise_signal(signal.SIGTERM)  # delivered to the trial's own handler
        return original(self, step, snapshot)

    monkeypatch.setattr(RunContext, "tick", tick)
    argv = ["sweep", *FROZEN, "trainer.total_steps=300", "trainer.eval_episodes=2", "--quiet"]
    assert main([*argv, "--grid", "algorithm.gamma=0.9,0.99"]) == 143
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("sweep stopped during trial 1 at step 100 (checkpoint saved; continue it with ")
    assert sorted(p.name for p in Path("runs/sweep-q_learning").glob("trial-*")) == ["trial-000"]


# ---- 8. messages -----------------------------------------------------------------------------------------


def test_a_config_file_given_as_the_algorithm_hints_at_config(capsys):
    Path("my.yaml").write_text("algo: q_learning\n")
    assert main(["train", "my.yaml"]) == 2
    assert "pass it with --config, e.g. advantage train --config my.yaml" in capsys.readouterr().err


def test_a_key_without_its_section_suggests_the_section(capsys):
    assert main(["train", "ppo", "total_steps=100"]) == 2
    assert "unknown key total_steps; did you mean trainer.total_steps?" in capsys.readouterr().err
    assert main(["train", "ppo", "algorithm.total_steps=100"]) == 2
    assert "did you mean trainer.total_steps?" in capsys.readouterr().err


def test_nested_model_keys_are_named_in_full(capsys):
    assert main(["train", "grpo", "worker.actor.model.path=runs/nope"]) == 2
    assert "worker.actor.model.path 'runs/nope' does not exist" in capsys.readouterr().err
    assert main(["train", "grpo", "worker.actor.model.init=pretrained"]) == 2
    err = capsys.readouterr().err
    assert "worker.actor.model.path is required when worker.actor.model.init=pretrained" in err


def test_a_yaml_syntax_error_names_the_file(capsys):
    Path("bad.yaml").write_text("algo: ppo\ntrainer:\n  total_steps: [1\n")
    assert main(["train", "--config", "bad.yaml"]) == 2
    err = capsys.readouterr().err
    assert 'in "bad.yaml", line 3' in err and "<unicode string>" not in err


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == "advantage 0.1.0"


@pytest.fixture(scope="module")
def slippery_run(tmp_path_factory):
    """A q_learning run on slippery FrozenLake (evaluation means that need rounding), made once."""
    import advantage

    over = {"preset": "frozenlake_slippery", "trainer.total_steps": 3000, "trainer.eval_every": 0}
    over.update({"trainer.eval_episodes": 7, "trainer.tensorboard": False})
    folder = tmp_path_factory.mktemp("slippery") / "e"
    return advantage.train("q_learning", quiet=True, **over, **{"trainer.run_dir": str(folder)}).dir


def test_resume_refuses_another_env_id_before_anything_runs(slippery_run, capsys):
    before = ((slippery_run / "config.yaml").read_text(), _latest_step(slippery_run))
    assert main(["resume", str(slippery_run), "env.id=CliffWalking-v1", "trainer.total_steps=4000"]) == 2
    out, err = capsys.readouterr()
    assert "env.id cannot change on resume: the checkpoint was trained with 'FrozenLake-v1'" in err
    assert "resuming" not in out
    assert ((slippery_run / "config.yaml").read_text(), _latest_step(slippery_run)) == before


def test_eval_rounds_the_numbers_it_prints(slippery_run, capsys):
    assert main(["eval", str(slippery_run), "--episodes", "7"]) == 0
    rows = [line.split(": ", 1) for line in capsys.readouterr().out.splitlines()]
    table = {k.strip(): v.strip() for k, v in rows}
    assert float(table["length_mean"]) != int(float(table["length_mean"]))  # a mean that needs rounding
    for key in ("return_mean", "return_std", "length_mean"):
        digits = re.sub(r"^[-0.]+|\.|e.*$", "", table[key])
        assert len(digits) <= 4, (key, table[key])
    assert main(["eval", str(slippery_run), "--episodes", "7", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)  # --json keeps full precision
    assert res["length_mean"] == pytest.approx(float(table["length_mean"]), rel=1e-3)


def test_eval_video_prints_no_display_noise(slippery_run):
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "SDL_VIDEODRIVER")}
    res = _cli("eval", str(slippery_run), "--episodes", "1", "--video", env=env)
    assert res.returncode == 0 and "XDG_RUNTIME_DIR" not in res.stderr, res.stderr
    assert (slippery_run / "videos" / "step_3000.mp4").stat().st_size > 0


def test_an_env_whose_extra_is_missing_names_the_extra_to_install(monkeypatch):
    """LunarLander without Box2D (and MuJoCo tasks without mujoco): the error says which extra of this
    package installs it, beside Gymnasium's own message."""
    import gymnasium as gym

    from advantage.config import EnvConfig
    from advantage.envs.make import make_env
    from advantage.errors import EnvError

    def missing(*args, **kwargs):
        raise gym.error.DependencyNotInstalled("Box2D is not installed")

    monkeypatch.setattr(gym, "make", missing)
    hint = r"Box2D is not installed; install it with: pip install 'advantage\[box2d\]'"
    with pytest.raises(EnvError, match=hint):
        make_env(EnvConfig(id="LunarLander-v3"))
    with pytest.raises(EnvError, match=r"pip install 'advantage\[mujoco\]'"):
        make_env(EnvConfig(id="Hopper-v5"))
    with pytest.raises(EnvError, match=r"cannot make env.id 'CartPole-v1': Box2D is not installed$"):
        make_env(EnvConfig(id="CartPole-v1"))
