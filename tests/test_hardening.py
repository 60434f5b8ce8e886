"""Hardening found by attacking every input surface: checkpoints verified wherever they are read, bounded
config and data files, a run-folder lock, environment state that cannot call functions, clean errors.

The code sandbox's attacks are in ``test_sandbox.py``; ``docs/reliability.md`` lists both.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import tracemalloc
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import advantage
from advantage.algos.llm.models import model_folder
from advantage.checkpoint import load_checkpoint, save_checkpoint
from advantage.config_sources import load_yaml
from advantage.envs import env_state, set_env_state
from advantage.envs.text.datasets import load_examples
from advantage.errors import CheckpointError, ConfigError, NonFiniteError, RunDirError
from advantage.run_folder import RunLock

TABULAR = {"trainer.total_steps": 2000, "trainer.tensorboard": False, "trainer.eval_episodes": 5}


def _rewrite(folder: Path, fname: str, data: bytes) -> None:
    """Replace ``fname`` and make the manifest agree (as a forger would), so only the checks of the
    content can catch it."""
    (folder / fname).write_bytes(data)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"][fname] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _lm_checkpoint(root: Path) -> Path:
    files = {"model.safetensors": b"weights" * 100, "config.json": b"{}"}
    return save_checkpoint(root / "checkpoints", 3, {"w": torch.ones(2)}, {"step": 3}, files=files)


# ---- model.path: a run's checkpoint is verified on every read ----------------------------------------


@pytest.mark.parametrize("given", ["run", "checkpoints", "step"])
def test_model_path_of_a_damaged_run_is_refused(tmp_path, given):
    folder = _lm_checkpoint(tmp_path)
    path = {"run": tmp_path, "checkpoints": tmp_path / "checkpoints", "step": folder}[given]
    assert model_folder(str(path)) == folder
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[10] ^= 0x01
    (folder / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="model.safetensors: SHA-256 does not match"):
        model_folder(str(path))
    (folder / "model.safetensors").write_bytes(bytes(data[:-1]))
    with pytest.raises(CheckpointError, match="model.safetensors: 699 bytes, manifest says 700"):
        model_folder(str(path))


def test_model_path_refuses_unlisted_and_pickle_weights(tmp_path):
    folder = _lm_checkpoint(tmp_path)
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")  # a pickle, next to the weights
    with pytest.raises(CheckpointError, match="pytorch_model.bin: not listed in the manifest"):
        model_folder(str(tmp_path))
    _rewrite(folder, "pytorch_model.bin", b"\x80\x04K\x01.")  # listed, hash matching
    with pytest.raises(CheckpointError, match="pytorch_model.bin: a pickle-based weights file"):
        model_folder(str(tmp_path))
    with pytest.raises(CheckpointError, match="pytorch_model.bin: a pickle-based weights file"):
        load_checkpoint(tmp_path / "checkpoints")


@pytest.mark.slow
def test_grpo_refuses_a_flipped_byte_in_an_sft_run(tmp_path):
    """The issue's reproduction: `advantage eval` rejected the SFT run, `train grpo` trained on it."""
    over = {"data.task": "addition", "data.digits": 2, "data.train_size": 32, "data.validation_size": 8}
    over |= {"data.test_size": 8, "trainer.eval_episodes": 4, "trainer.total_steps": 1}
    over |= {"trainer.tensorboard": False, "trainer.eval_every": 0}
    sft = advantage.train(
        "sft",
        quiet=True,
        **over,
        **{
            "model.hidden_size": 16,
            "model.layers": 1,
            "model.heads": 2,
            "trainer.run_dir": str(tmp_path / "s"),
        },
    )
    weights = sft.checkpoint.path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x01  # a weight's low bits: still a valid safetensors file
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="model.safetensors: SHA-256 does not match"):
        advantage.train(
            "grpo",
            quiet=True,
            **over,
            **{"worker.actor.model.path": str(sft.dir), "trainer.run_dir": str(tmp_path / "g")},
        )
    assert not (tmp_path / "g").exists()


# ---- checkpoint files that are not what they claim ------------------------------------------------------


def _manifest_edit(key, value):
    def edit(folder: Path) -> None:
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest[key] = value
        (folder / "manifest.json").write_text(json.dumps(manifest))

    return edit


def _raw_manifest(text: str):
    def edit(folder: Path) -> None:
        (folder / "manifest.json").write_text(text)

    return edit


DAMAGE = {
    "step 1e999": (_raw_manifest('{"format": 1, "step": 1e999, "files": {}}'), "step must be an integer"),
    "step -5": (_manifest_edit("step", -5), "step must be an integer >= 0"),
    "step 2.5": (_manifest_edit("step", 2.5), "step must be an integer >= 0"),
    "files a string": (_manifest_edit("files", "tensors.safetensors"), "files must map"),
    "files a list": (_manifest_edit("files", ["tensors.safetensors", "state.json"]), "files must map"),
    "entry without bytes": (
        _manifest_edit("files", {"tensors.safetensors": {}, "state.json": {}}),
        "entry of 'tensors.safetensors' needs bytes and sha256",
    ),
    "200k-deep manifest": (_raw_manifest("[" * 200_000), "not a valid manifest"),
    "state.json a list": (lambda f: _rewrite(f, "state.json", b"[1, 2]"), "state.json: not a JSON object"),
    "state.json 200k deep": (
        lambda f: _rewrite(f, "state.json", b"[" * 200_000),
        "state.json: not valid JSON",
    ),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_manifest_or_state_is_an_error_naming_the_file(tmp_path, case):
    edit, message = DAMAGE[case]
    folder = save_checkpoint(tmp_path, 7, {"w": torch.ones(3)}, {"a": 1})
    edit(folder)
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint(tmp_path)
    assert str(folder) in str(info.value)


def test_latest_pointer_is_confined_to_the_run_folder_and_never_echoed(tmp_path):
    save_checkpoint(tmp_path, 1, {"w": torch.ones(1)}, {})
    secret = tmp_path.parent / f"{tmp_path.name}-secret.txt"
    secret.write_text("step_000000000001\nroot:x:0:0:SECRET-LINE:/root:/bin/bash\n")
    pointer = tmp_path / "latest"
    for make in (
        lambda: pointer.write_bytes(b"\xff\xfe\x00garbage"),  # not text
        lambda: pointer.symlink_to(secret),  # a link to another file
        lambda: pointer.write_text("step_" + "9" * 300),  # too long
    ):
        pointer.unlink()
        make()
        with pytest.raises(CheckpointError, match="latest: not a pointer to a checkpoint folder") as info:
            load_checkpoint(tmp_path)
        assert "SECRET" not in str(info.value) and "garbage" not in str(info.value)
    pointer.unlink()
    pointer.write_text("step_000000000099\n")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (tmp_path / "step_000000000099").symlink_to(outside)  # a step folder that resolves elsewhere
    with pytest.raises(CheckpointError, match="which is not a checkpoint folder in"):
        load_checkpoint(tmp_path)


def test_a_tensors_file_of_the_wrong_size_is_refused_before_it_is_read(tmp_path):
    folder = save_checkpoint(tmp_path, 1, {"w": torch.ones(3)}, {})
    with open(folder / "tensors.safetensors", "r+b") as f:
        f.truncate(2 * 2**30)  # a sparse 2 GiB file: reading it would allocate 2 GiB
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=r"tensors.safetensors: 2147483648 bytes, manifest says"):
            load_checkpoint(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak


# ---- resume: state that does not fit, a run killed before its first checkpoint ------------------------


def _q_run(tmp_path: Path) -> advantage.Run:
    return advantage.train("q_learning", quiet=True, **TABULAR, **{"trainer.run_dir": str(tmp_path / "r")})


def _edit_state(run: advantage.Run, change) -> None:
    folder = run.checkpoint.path
    state = json.loads((folder / "state.json").read_text())
    change(state)
    _rewrite(folder, "state.json", json.dumps(state).encode())


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s["run"].__setitem__("elapsed", float("nan")), "run.elapsed must be a finite number"),
        (lambda s: s["run"].__setitem__("episodes", "many"), "run.episodes must be an integer"),
        (lambda s: s["algo"].__setitem__("rng", "mersenne"), "does not fit this run"),
        (lambda s: s["algo"].pop("obs"), "does not fit this run"),
    ],
    ids=["elapsed NaN", "episodes a string", "rng a string", "obs missing"],
)
def test_resume_with_a_state_that_does_not_fit_names_state_json(tmp_path, change, message):
    run = _q_run(tmp_path)
    rows = len(run.metrics)
    _edit_state(run, change)
    # the edited file is hashed into the manifest: only the meaning of its content can be wrong
    with pytest.raises(CheckpointError, match=f"state.json: {message}"):
        advantage.resume(run.dir, quiet=True, **{"trainer.total_steps": 3000})
    assert len(advantage.Run(run.dir).metrics) == rows  # nothing written


def test_an_env_state_that_cannot_be_restored_resumes_with_fresh_episodes_and_says_so(tmp_path, capfd):
    """An env RNG naming the bit generator "test" (which would run numpy's test suite) is never called:
    the env cannot be put back, so the run goes on from the checkpoint with fresh episodes, one line on
    stderr and a row in events.jsonl (a resume never stops on the env it cannot capture)."""
    run = _q_run(tmp_path)
    _edit_state(
        run,
        lambda s: s["algo"]["env"][-1]["attrs"].__setitem__(
            "_np_random", {"rng": {"bit_generator": "test", "state": {}}}
        ),
    )
    assert advantage.resume(run.dir, quiet=True, **{"trainer.total_steps": 3000}).step == 3000
    err = capfd.readouterr().err
    assert "could not be restored exactly at step 2000" in err and "unknown bit generator 'test'" in err
    events = [json.loads(line) for line in (run.dir / "events.jsonl").read_text().splitlines()]
    assert events == [{"step": 2000, "event": "env_restarted", "reason": events[0]["reason"]}]


def test_resume_of_a_run_killed_before_its_first_checkpoint_starts_it_from_its_config(tmp_path):
    run = _q_run(tmp_path)
    # what SIGKILL before the first checkpoint leaves: the config, perhaps some metrics, no checkpoint
    import shutil

    shutil.rmtree(run.dir / "checkpoints")
    with pytest.raises(RunDirError, match="already exists and is not empty"):
        advantage.train("q_learning", quiet=True, **TABULAR, **{"trainer.run_dir": str(run.dir)})
    resumed = advantage.resume(run.dir, quiet=True)
    assert resumed.step == 2000 and resumed.checkpoint.step == 2000
    steps = [r["step"] for r in resumed.metrics if "train/episode_return" in r]
    assert steps == sorted(set(steps))  # the old rows are gone, not duplicated


# ---- the run-folder lock ------------------------------------------------------------------------------


def test_a_second_writer_of_a_run_folder_exits_naming_the_holder(tmp_path):
    run = _q_run(tmp_path)
    lock = RunLock(run.dir)  # as a running `advantage resume` holds it
    try:
        with pytest.raises(RunDirError, match=f"in use by another advantage process \\(pid {os.getpid()}\\)"):
            advantage.resume(run.dir, quiet=True, **{"trainer.total_steps": 3000})
        empty = tmp_path / "empty"
        empty.mkdir()
        other = RunLock(empty)
        try:  # a `train` into a folder another `train` has just claimed (still empty)
            with pytest.raises(RunDirError, match="in use by another advantage process"):
                advantage.train("q_learning", quiet=True, **TABULAR, **{"trainer.run_dir": str(empty)})
        finally:
            other.release()
        cmd = [sys.executable, "-m", "advantage.cli", "resume", str(run.dir), "trainer.total_steps=3000"]
        code = "import sys; from advantage.cli import main; sys.exit(main(sys.argv[1:]))"
        env = {**os.environ, "PYTHONPATH": str(Path(advantage.__file__).parents[1])}
        out = subprocess.run([sys.executable, "-c", code, *cmd[3:]], capture_output=True, text=True, env=env)
        assert out.returncode == 2, out
        assert f"pid {os.getpid()}" in out.stderr
    finally:
        lock.release()
    assert advantage.resume(run.dir, quiet=True, **{"trainer.total_steps": 3000}).step == 3000


# ---- environment state ----------------------------------------------------------------------------------


def test_env_state_restores_only_plain_attributes_and_numpy_bit_generators():
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    env.step(0)
    saved = env_state(env)
    fresh = gym.make("CartPole-v1")
    fresh.reset(seed=1)
    set_env_state(fresh, json.loads(json.dumps(saved)))  # the real thing restores
    assert np.array_equal(fresh.unwrapped.state, env.unwrapped.state)

    def edited(change):
        state = json.loads(json.dumps(saved))
        change(state)
        target = gym.make("CartPole-v1")
        target.reset(seed=1)
        return target, state

    base = len(saved) - 1  # the CartPoleEnv layer
    for change, message in [
        (lambda s: s[base]["attrs"]["_np_random"]["rng"].__setitem__("bit_generator", "test"), "unknown bit"),
        (lambda s: s[0]["attrs"].__setitem__("step", {"v": 1}), "no saved attribute 'step'"),
        (lambda s: s[0]["attrs"].__setitem__("__class__", {"v": 1}), "no saved attribute '__class__'"),
        (lambda s: s[0]["attrs"].__setitem__("unwrapped", {"v": 1}), "no saved attribute 'unwrapped'"),
        (lambda s: s[base]["attrs"].__setitem__("gravity", {"v": "heavy"}), "gravity: a str"),
        (lambda s: s[base]["attrs"].__setitem__("state", {"v": "up"}), "state: a str"),
        (lambda s: s[base]["attrs"]["state"].__setitem__("nd", "|O"), "state: not a numeric array"),
        (lambda s: s[base]["attrs"].__setitem__("observation_space", {"v": 1}), "holds a Box there"),
    ]:
        target, state = edited(change)
        before = target.unwrapped.gravity
        with pytest.raises(ValueError, match=message):
            set_env_state(target, state)
        assert target.unwrapped.gravity == before  # nothing half-applied to that layer


def test_env_state_never_sets_render_mode():
    """A saved render_mode ("human" would open a window) is a constructor's choice: skipped, never set."""
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    state = json.loads(json.dumps(env_state(env)))
    assert all("render_mode" not in layer["attrs"] for layer in state)  # not saved
    state[-1]["attrs"]["render_mode"] = {"v": "human"}  # as an older version or a forger wrote it
    set_env_state(env, state)
    assert env.unwrapped.render_mode is None


def test_env_state_keeps_a_state_held_as_a_tuple_of_numbers():
    """MountainCar holds its state as a tuple (position, velocity) after a step: the snapshot keeps it, and
    a fresh copy restored from it steps exactly as the original (the DQN overestimation probe and exact
    resume rely on this). A sequence holding anything but numbers is refused."""
    env = gym.make("MountainCar-v0")
    env.reset(seed=0)
    for t in range(30):
        env.step(t % 3)
    saved = json.loads(json.dumps(env_state(env)))
    copy = gym.make("MountainCar-v0")  # never reset: restored alone
    set_env_state(copy, saved)
    assert isinstance(copy.unwrapped.state, tuple)
    for t in range(60):
        a, b = env.step(t % 3), copy.step(t % 3)
        assert np.array_equal(a[0], b[0]) and a[1:4] == b[1:4], t
    base = len(saved) - 1
    for bad in ({"seq": "tuple", "v": [{"rng": {}}]}, {"seq": "dict", "v": []}, {"seq": "tuple", "v": "x"}):
        state = json.loads(json.dumps(saved))
        state[base]["attrs"]["state"] = bad
        with pytest.raises(ValueError, match=r"state(\[0\])?: (not a short tuple|a random generator)"):
            set_env_state(gym.make("MountainCar-v0"), state)


def test_replay_buffer_state_names_only_numpy_bit_generators():
    from advantage.data.replay import ReplayBuffer

    buffer = ReplayBuffer(8, (2,), np.float32, (), np.int64)
    state = buffer.state_dict()
    state["rng"] = {**state["rng"], "bit_generator": "test"}  # would run numpy's test suite
    with pytest.raises(ValueError, match="unknown bit generator 'test'"):
        ReplayBuffer(8, (2,), np.float32, (), np.int64).load_state_dict(state)


# ---- config files and values ------------------------------------------------------------------------------

BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{n}: &{n} [{','.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    assert len(BOMB) < 600
    with pytest.raises(
        ConfigError, match="bomb.yaml': more than 100000 values once its aliases are expanded"
    ):
        load_yaml(bomb)
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 100 + "]" * 100 + "\n")
    with pytest.raises(ConfigError, match="deep.yaml': nested deeper than 64 levels"):
        load_yaml(deep)
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 200_000)
    with pytest.raises(ConfigError, match="big.yaml' is over 1048576 bytes"):
        load_yaml(big)
    with pytest.raises(ConfigError, match="bomb.yaml': more than"):
        advantage.train(config=bomb, quiet=True)


@pytest.mark.parametrize(
    "algo, key, value, message",
    [
        ("ppo", "algorithm.gamma", math.nan, "algorithm.gamma must be a finite number, got nan"),
        ("ppo", "algorithm.clip_range", math.nan, "algorithm.clip_range must be a finite number"),
        ("ppo", "algorithm.learning_rate", math.inf, "algorithm.learning_rate must be a finite number"),
        ("ppo", "env.num_envs", 10**8, r"env.num_envs must be in \[1, 4096\]"),
        ("ppo", "trainer.seed", 2**70, r"trainer.seed must be in \[0, 2147483647\]"),
        ("ppo", "trainer.torch_threads", 10**5, r"trainer.torch_threads must be in \[1, "),
        ("ppo", "algorithm.n_steps", 10**9, "one rollout needs .* GiB of memory, but only"),
        ("a2c", "algorithm.n_steps", 10**9, "one rollout needs .* GiB of memory, but only"),
        ("dqn", "algorithm.buffer_size", 10**12, "the replay buffer needs .* GiB of memory, but only"),
    ],
)
def test_non_finite_and_huge_values_are_refused_before_the_run_folder_exists(
    tmp_path, algo, key, value, message
):
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match=message):
        advantage.train(algo, quiet=True, **{key: value, "trainer.run_dir": str(run_dir)})
    assert not run_dir.exists()


def test_a_value_from_an_environment_variable_is_never_echoed(monkeypatch):
    secret = "tok-" + os.urandom(8).hex()
    monkeypatch.setenv("ADVANTAGE_TEST_SECRET", secret)
    with pytest.raises(ConfigError) as info:
        advantage.train(
            "ppo",
            quiet=True,
            **{
                "algorithm.gamma": "${oc.env:ADVANTAGE_TEST_SECRET}",
                "env.id": "${oc.env:ADVANTAGE_TEST_SECRET}",
            },
        )
    text = str(info.value)
    assert "algorithm.gamma must be a number" in text and "env.id" in text
    assert secret not in text and "${oc.env:ADVANTAGE_TEST_SECRET}" in text


# ---- data files -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, content, message",
    [
        (
            "long.jsonl",
            b'{"prompt": "' + b"x" * (2**20 + 10) + b'", "answer": "1"}\n',
            "long.jsonl:1: line over",
        ),
        ("utf8.jsonl", b'{"prompt": "\xff\xfe", "answer": "1"}\n', r"utf8.jsonl:1: not valid UTF-8"),
        (
            "digits.jsonl",
            b'{"prompt": "p", "answer": ' + b"9" * 5000 + b"}\n",
            "digits.jsonl:1: malformed JSON",
        ),
        ("deep.jsonl", b"[" * 100_000 + b"\n", "deep.jsonl:1: malformed JSON"),
        ("utf8.json", b'[{"prompt": "\xff", "answer": "1"}]', "utf8.json: not valid UTF-8"),
        ("deep.json", b"[" * 100_000, "deep.json: malformed JSON"),
        (
            "field.json",
            json.dumps([{"prompt": "x" * (2**20 + 1), "answer": "1"}]).encode(),
            "over 1048576 char",
        ),
    ],
)
def test_hostile_data_files_are_config_errors_naming_the_file(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        load_examples(path)


# ---- TRPO with rewards that overflow ----------------------------------------------------------------------


def test_trpo_with_rewards_of_1e30_raises_non_finite_error(tmp_path):
    import test_hostile_inputs  # registers AdvantageInject-v0 (the 1500th step's reward is replaced)

    with pytest.raises(NonFiniteError, match="weights not updated"):
        advantage.train(
            "trpo",
            quiet=True,
            **test_hostile_inputs.OVERFLOWING_REWARD,
            **{
                "algorithm.n_steps": 256,
                "trainer.total_steps": 3000,
                "trainer.eval_every": 0,
                "trainer.eval_episodes": 2,
                "trainer.tensorboard": False,
                "trainer.run_dir": str(tmp_path / "run"),
            },
        )
    assert test_hostile_inputs.BAD_STEP == 1500


# ---- a stop by SIGTERM, then resume: the same metrics rows as an uninterrupted run -------------------------


class SigtermAt(gym.Wrapper):
    """Sends SIGTERM to this process at its ``at``-th step (never when ``at`` < 0): a stop from outside
    at a moment that is not a log step."""

    def __init__(self, env, at: int):
        super().__init__(env)
        self.at, self.t = at, 0

    fired = False  # one stop per run: the sub-envs' counters drift apart (a reset step is no env step)

    def step(self, action):
        self.t += 1
        if self.t == self.at and not SigtermAt.fired:
            SigtermAt.fired = True
            os.kill(os.getpid(), signal.SIGTERM)
        return self.env.step(action)


gym.register(
    "AdvantageSigtermAt-v0", entry_point=lambda at, **kw: SigtermAt(gym.make("CartPole-v1", **kw), at)
)

_WALL_CLOCK = ("time", "train/steps_per_second", "eval/seconds", "train/time")


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [
        {k: v for k, v in r.items() if not k.startswith(_WALL_CLOCK)}
        for r in rows
        if "run/stopped_by" not in r
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    "algo, over, at",
    [
        ("ppo", {"env.num_envs": 2, "algorithm.n_steps": 32, "algorithm.minibatch_size": 32}, 777),
        (
            "dqn",
            {"env.num_envs": 1, "algorithm.learning_starts": 200},
            1234,
        ),
    ],
)
def test_resume_after_sigterm_logs_the_rows_of_an_uninterrupted_run(tmp_path, algo, over, at):
    common_over = {
        **over,
        "env.id": "AdvantageSigtermAt-v0",
        "trainer.total_steps": 2000,
        "trainer.log_every": 100,
        "trainer.eval_every": 0,
        "trainer.eval_episodes": 2,
        "trainer.tensorboard": False,
    }
    whole = advantage.train(
        algo, quiet=True, **common_over, **{"env.at": -1, "trainer.run_dir": str(tmp_path / "w")}
    )
    SigtermAt.fired = False
    stopped = advantage.train(
        algo, quiet=True, **common_over, **{"env.at": at, "trainer.run_dir": str(tmp_path / "s")}
    )
    assert 0 < stopped.step < 2000 and stopped.step % 100 != 0  # stopped between two log steps
    resumed = advantage.resume(stopped.dir, quiet=True)
    assert resumed.step == whole.step
    assert _rows(resumed.dir) == _rows(whole.dir)
