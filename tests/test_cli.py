"""The CLI as a user types it: exit codes, one-line errors, nothing half-written."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from advantage.cli import main


def _run(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "advantage.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def test_train_eval_plot_list_resume(tmp_path, capsys):
    assert (
        main(
            [
                "train",
                "q_learning",
                "preset=frozenlake",
                "trainer.total_steps=4000",
                "trainer.run_dir=r1",
                "trainer.eval_every=2000",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "run folder: r1" in out
    run = Path("r1")
    for name in ("config.yaml", "metrics.jsonl", "checkpoints/latest", "plots/learning_curve.png"):
        assert (run / name).exists(), name
    assert list(run.glob("events.out.tfevents.*"))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all("step" in r and "time" in r for r in rows)
    assert [r["step"] for r in rows if "eval/return_mean" in r] == [2000, 4000]

    assert main(["eval", "r1", "--episodes", "7", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["episodes"] == 7 and {"return_mean", "return_std", "success_rate"} <= res.keys()

    assert main(["train", "--config", "r1/config.yaml", "trainer.progress=none"]) == 0
    r2 = capsys.readouterr().out.split("run folder: ")[1].split()[0]
    assert r2.startswith("runs/q_learning-FrozenLake-v1-")
    assert main(["plot", "r1", r2, "--out", "both.png"]) == 0
    assert Path("both.png").stat().st_size > 1000

    assert main(["resume", "r1", "trainer.total_steps=6000"]) == 0
    assert (Path("r1/checkpoints") / Path("r1/checkpoints/latest").read_text().strip()).name.endswith("6000")

    assert main(["list"]) == 0
    listing = capsys.readouterr().out
    for algo in (
        "q_learning",
        "sarsa",
        "expected_sarsa",
        "mc_control",
        "mc_prediction",
        "value_iteration",
        "policy_iteration",
        "policy_evaluation",
    ):
        assert algo in listing
    assert main(["list", "q_learning"]) == 0
    assert "algorithm.gamma" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["train", "q_learnin"],
            "unknown algorithm 'q_learnin'; did you mean q_learning or semi_gradient_q_learning?",
        ),
        (
            ["train", "q_learning", "env.id=CartPole-v1"],
            "q_learning needs a Discrete observation space; CartPole-v1 has Box(4,)",
        ),
        (["train", "q_learning", "env.id=FrozenLak-v1"], "did you mean FrozenLake-v1"),
        (["train", "q_learning", "algorithm.gamma=1.5"], "algorithm.gamma must be in [0, 1], got 1.5"),
        (
            ["train", "q_learning", "trainer.total_steps=abc"],
            "trainer.total_steps must be an integer, got 'abc'",
        ),
        (["train", "q_learning", "algorithm.gama=0.9"], "did you mean algorithm.gamma?"),
        (["train", "q_learning", "preset=nope"], "preset 'nope' is not a preset of q_learning"),
        (["train", "q_learning", "--config", "missing.yaml"], "no such file"),
        (["train", "value_iteration", "env.id=CartPole-v1"], "needs a Discrete observation space"),
        (["eval", "no_such_run"], "run folder 'no_such_run' does not exist"),
        (["eval", "."], "is not a run folder"),
        (["plot", "nowhere"], "nowhere is not a run folder"),
        (["resume", "nowhere"], "does not exist"),
        (["train", "--bogus"], "unrecognized arguments: --bogus"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        code = main(args)
        raise SystemExit(code)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    assert not Path("runs").exists()


def test_several_config_problems_listed_together(capsys):
    assert main(["train", "q_learning", "algorithm.gamma=2", "algorithm.alpha=0", "trainer.seed=-1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "error: 3 config problems:"
    assert len(err) == 4


def test_existing_run_dir_is_refused(capsys):
    Path("taken").mkdir()
    Path("taken/file").write_text("mine")
    assert main(["train", "trainer.run_dir=taken"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert Path("taken/file").read_text() == "mine"


def test_corrupt_checkpoint_eval_names_the_file(capsys):
    assert (
        main(
            [
                "train",
                "q_learning",
                "preset=frozenlake",
                "trainer.total_steps=500",
                "trainer.run_dir=r",
                "trainer.progress=none",
                "trainer.tensorboard=false",
            ]
        )
        == 0
    )
    ck = next(Path("r/checkpoints").glob("step_*"))
    t = ck / "tensors.safetensors"
    t.write_bytes(t.read_bytes()[:-3])
    capsys.readouterr()
    assert main(["eval", "r"]) == 2
    err = capsys.readouterr().err
    assert "tensors.safetensors" in err and "truncated" in err


def test_help_everywhere():
    for cmd in ([], ["train"], ["eval"], ["plot"], ["list"], ["resume"]):
        out = _run(*cmd, "--help")
        assert out.returncode == 0 and "usage:" in out.stdout


def test_sigterm_checkpoints_and_exits_143(tmp_path):
    """SIGTERM mid-training: checkpoint at the next step boundary, exit 143 (128 + 15, as a shell reports
    it) with the step and the resume command, and `resume` finishes the run."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "advantage.cli",
            "train",
            "q_learning",
            "trainer.total_steps=5000000",
            "trainer.run_dir=big",
            "trainer.progress=none",
            "trainer.eval_every=0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert "run folder: big" in p.stdout.readline()
    time.sleep(2.0)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    latest = Path("big/checkpoints/latest").read_text().strip()
    step = int(latest.split("_")[1])
    assert 0 < step < 5_000_000
    resume_hint = f"stopped at step {step} (checkpoint saved); continue with advantage resume big"
    assert out.splitlines()[-1] == resume_hint
    rows = [json.loads(x) for x in Path("big/metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["run/stopped_by"] == "SIGTERM"
    done = _run("resume", "big", "trainer.total_steps=" + str(step + 1000), "--quiet")
    assert done.returncode == 0, done.stderr
    assert Path("big/checkpoints/latest").read_text().strip().endswith(str(step + 1000))


def test_eval_video_writes_an_mp4(capsys):
    assert (
        main(
            [
                "train",
                "q_learning",
                "preset=frozenlake",
                "trainer.total_steps=3000",
                "trainer.run_dir=v",
                "trainer.progress=none",
                "trainer.tensorboard=false",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["eval", "v", "--episodes", "1", "--json", "--video"]) == 0
    res = json.loads(capsys.readouterr().out)
    video = Path(res["video"])
    assert video.parent == Path("v/videos") and video.suffix == ".mp4"
    assert video.read_bytes()[4:8] == b"ftyp"  # an MP4 container


def test_default_algorithm_is_ppo_on_cartpole():
    from advantage.resolve import resolve_config

    spec, cfg = resolve_config()
    assert spec.name == "ppo" and cfg.env.id == "CartPole-v1"


def test_list_piped_prints_option_names_whole():
    """Piped, ``advantage list`` had 80 columns and cut long names (``data.max_response_leng…``); now every
    row is one line with the whole name."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "advantage", "list", "grpo", "data.task=math"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "…" not in out
    for key in (
        "data.max_response_length",
        "worker.actor.model.max_position_embeddings",
        "data.timeout_seconds",
    ):
        (line,) = [x for x in out.splitlines() if f" {key} " in x]
        assert len(line.split("│")) >= 4  # option, default and meaning on that one line
