"""Files inside a run folder: every name the program opens there is opened relative to the folder without
following a link (a planted link, FIFO or hard link is one line naming the file and changes nothing
outside); a refused ``train`` leaves no ``.lock``; ``trainer.run_dir`` that is a file or a kernel
interface; path options never read from the environment; ``metrics.jsonl`` rows of another shape; a
run's checkpoint folder without its manifest given as ``model.path``; messages that name a model file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import advantage
from advantage.algos.llm.models import model_folder
from advantage.checkpoint import save_checkpoint
from advantage.cli import final_line, main
from advantage.errors import CheckpointError, ConfigError, RunDirError
from advantage.monitoring.metrics import read_metrics, truncate_metrics
from advantage.resolve import PATH_OPTIONS, resolve_config
from advantage.safe_io import run_files

Q_RUN = {
    "trainer.total_steps": 2000,
    "trainer.eval_episodes": 5,
    "trainer.tensorboard": False,  # TensorBoard's writer names its own files (left to it)
    "trainer.keep_checkpoints": 1,  # every file left in the folder is one the next commands open
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished q_learning run; tests copy it."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    advantage.train("q_learning", quiet=True, **Q_RUN, **{"trainer.run_dir": str(run_dir)})
    return run_dir


def _entries(run_dir: Path) -> list[str]:
    """Every file and folder of a finished run (relative paths), as the program left them: the names it
    opens again on resume, plot and eval."""
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))


def _snapshot(path: Path) -> dict[str, bytes]:
    """The content of a file, or of every file under a folder (a victim must be left as it was)."""
    if path.is_file():
        return {"": path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _cli(args: list[str], capsys) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().err.strip()


def _victims(tmp_path: Path) -> tuple[Path, Path]:
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    folder = tmp_path / "victim_dir"
    folder.mkdir()
    (folder / "keep").write_text("the user's own folder\n")
    return victim, folder


def test_a_link_at_any_name_in_a_run_folder_is_refused_and_its_target_unchanged(trained, tmp_path, capsys):
    """A symbolic link planted at each name the program opens in a run folder (every entry of a finished
    run, files and folders): resume, plot and eval either do not need it or stop with exit 2 and one line
    naming it; the file or folder it points to is never changed. Each name is refused by at least one
    of them."""
    victim, victim_dir = _victims(tmp_path)
    before = {victim: _snapshot(victim), victim_dir: _snapshot(victim_dir)}
    names = _entries(trained)
    # the lock, the config, the metrics, the checkpoint (pointer, folder, files) and the plot are there
    assert {".lock", "config.yaml", "metrics.jsonl", "checkpoints/latest", "plots/learning_curve.png"} <= set(
        names
    )
    assert any(n.endswith("/state.json") for n in names) and any(n.endswith("/manifest.json") for n in names)
    for i, name in enumerate(names):
        run = tmp_path / f"run{i}"
        shutil.copytree(trained, run, symlinks=True)
        planted = run / name
        is_dir = planted.is_dir()
        shutil.rmtree(planted) if is_dir else planted.unlink()
        planted.symlink_to(victim_dir if is_dir else victim)
        refused = []
        for args in (
            ["resume", str(run), "trainer.total_steps=3000", "--quiet"],
            ["plot", str(run)],
            ["eval", str(run), "--episodes", "2"],
        ):
            code, err = _cli(args, capsys)
            assert code in (0, 2), (name, args, code, err)
            if code == 2:
                assert len(err.splitlines()) == 1 and "Traceback" not in err, (name, args, err)
                refused.append(err)
            assert planted.is_symlink(), (name, args)  # the link is refused, never replaced or followed
        assert any(Path(name).name in err for err in refused), (name, refused)
        assert {v: _snapshot(v) for v in before} == before, name


def test_a_hard_link_at_a_file_written_in_place_is_refused(trained, tmp_path, capsys):
    """The lock and the metrics log are written in place (not replaced): a second name for another file
    there would have that file overwritten or appended to."""
    from advantage.monitoring.writer import MetricsWriter

    victim, _ = _victims(tmp_path)
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (run / ".lock").unlink()
    os.link(victim, run / ".lock")
    code, err = _cli(["resume", str(run), "trainer.total_steps=3000", "--quiet"], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert ".lock: has 2 names (a hard link)" in err
    (run / "metrics.jsonl").unlink()
    os.link(victim, run / "metrics.jsonl")
    with pytest.raises(RunDirError, match=r"metrics.jsonl: has 3 names \(a hard link\)"):
        MetricsWriter(run, tensorboard=False).log(1, {"x": 1.0})
    assert victim.read_text() == "the user's own file\n"


@pytest.mark.parametrize("name", ["metrics.jsonl", ".lock"])
def test_a_fifo_in_a_run_folder_is_refused_without_blocking(trained, tmp_path, name):
    """A FIFO where the program appends (metrics) or locks: opened for writing it would block until a
    reader came, or fail deep inside; it is refused at once. (In a process of its own, with a time
    limit, so that a blocked open fails the test instead of hanging it.)"""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (run / name).unlink()
    os.mkfifo(run / name)
    code = "import sys; from advantage.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": str(Path(advantage.__file__).parents[1])}
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", code, "resume", str(run), "trainer.total_steps=3000", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert time.monotonic() - start < 15
    err = out.stderr.strip()
    assert out.returncode == 2 and len(err.splitlines()) == 1, err
    assert f"{name}: not a regular file" in err


def test_a_link_as_the_checkpoints_folder_of_a_young_run_is_refused(trained, tmp_path, capsys):
    """A run killed before its first checkpoint, with a link planted where its checkpoints will go:
    the resume (which starts it again from step 0) stops before writing a checkpoint through it."""
    _, victim_dir = _victims(tmp_path)
    run = tmp_path / "young"
    shutil.copytree(trained, run)
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").symlink_to(victim_dir)
    code, err = _cli(["resume", str(run), "--quiet"], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "checkpoints: a symbolic link" in err
    assert _snapshot(victim_dir) == {"keep": b"the user's own folder\n"}


def test_checkpoint_writes_never_go_through_a_link_in_the_checkpoints_folder(tmp_path):
    """A link at ``latest`` or at the next step's name: the save replaces or avoids the name, and the
    file or folder linked to is left as it was."""
    import torch

    victim, victim_dir = _victims(tmp_path)
    root = tmp_path / "checkpoints"
    save_checkpoint(root, 1, {"w": torch.ones(1)}, {})
    (root / "latest").unlink()
    (root / "latest").symlink_to(victim)
    with pytest.raises(CheckpointError, match="latest: a symbolic link"):
        save_checkpoint(root, 2, {"w": torch.ones(1)}, {})
    (root / "latest").unlink()
    (root / "step_000000000003").symlink_to(victim_dir)  # the folder a save of step 3 would use
    save_checkpoint(root, 3, {"w": torch.ones(1)}, {}, keep=1)
    assert advantage.checkpoint.load_checkpoint(root).path.name == "step_000000000003-1"
    assert victim.read_text() == "the user's own file\n" and _snapshot(victim_dir) == {
        "keep": b"the user's own folder\n"
    }


# ---- a refused train leaves the folder as it was ---------------------------------------------------------


def test_train_into_a_non_empty_folder_leaves_no_lock_behind(trained, tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("mine")
    code, err = _cli(["train", "q_learning", f"trainer.run_dir={taken}"], capsys)
    assert code == 2 and "already exists and is not empty" in err
    assert sorted(p.name for p in taken.iterdir()) == ["mine.txt"]
    # only a lock this process created is removed: a run's own lock file stays
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    code, _ = _cli(["train", "q_learning", f"trainer.run_dir={run}"], capsys)
    assert code == 2 and (run / ".lock").is_file()


# ---- trainer.run_dir that cannot hold a run ----------------------------------------------------------------


@pytest.mark.parametrize(
    "where, message",
    [
        ("file", "'{}' is a file, not a folder"),
        ("file/sub", "is inside a file, not a folder"),
        ("/proc/self/advantage-run", "it is under /proc, a kernel interface"),
        ("/proc", "it is under /proc, a kernel interface"),
        ("/sys/advantage-run", "it is under /sys, a kernel interface"),
    ],
)
def test_run_dir_that_is_a_file_or_a_kernel_interface_is_one_line(tmp_path, where, message, capsys):
    (tmp_path / "file").write_text("x")
    run_dir = where if where.startswith("/") else str(tmp_path / where)
    start = time.monotonic()
    code, err = _cli(["train", "q_learning", f"trainer.run_dir={run_dir}", "trainer.total_steps=100"], capsys)
    assert time.monotonic() - start < 5
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert message.format(run_dir) in err
    assert (tmp_path / "file").read_text() == "x"
    assert not Path(run_dir).exists() or where in ("file", "/proc")


def test_a_pseudo_filesystem_is_found_from_the_mount_table(tmp_path, monkeypatch):
    """A kernel filesystem mounted somewhere other than /proc or /sys is refused by its type."""
    mounted = tmp_path / "elsewhere"
    mounted.mkdir()
    table = tmp_path / "mountinfo"
    escaped = str(mounted).replace(" ", "\\040")  # as the kernel writes a space in a mount point
    table.write_text(
        "22 27 0:21 / / rw,relatime - ext4 /dev/sda1 rw\n"
        f"23 27 0:22 / {escaped} rw,relatime - sysfs sysfs rw\n"
    )
    monkeypatch.setattr(run_files, "_MOUNTINFO", str(table))
    assert run_files.filesystem_type(mounted / "run") == "sysfs"
    assert "on a sysfs filesystem" in run_files.pseudo_filesystem(mounted / "run")
    assert run_files.pseudo_filesystem(tmp_path / "run") is None
    with pytest.raises(RunDirError, match="cannot hold a run: it is on a sysfs filesystem"):
        advantage.train("q_learning", quiet=True, **{"trainer.run_dir": str(mounted / "run")})
    assert not (mounted / "run").exists()


# ---- path options never take a value from the environment ------------------------------------------------

_PATH_KEYS = {
    "trainer.run_dir": "q_learning",
    "algorithm.policy": "policy_evaluation",
    "model.path": "sft",
    "data.path": "sft",
    "data.validation_path": "sft",
    "data.test_path": "sft",
    "worker.actor.model.path": "grpo",
    "worker.reward.model": "grpo",
}


@pytest.mark.parametrize("key", sorted(PATH_OPTIONS))  # each with an algorithm that has it
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prefix=st.text("abc/_-.", max_size=8),
    suffix=st.text("abc/_-.", max_size=8),
    secret=st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=6, max_size=20),
    through=st.booleans(),
)
def test_a_path_option_read_from_the_environment_is_refused_and_never_shown(
    key, prefix, suffix, secret, through, monkeypatch
):
    """``${oc.env:VAR}`` in a path option, directly or through another key, is a config error that shows
    the interpolation and never the value (which would otherwise be the run folder's name, printed)."""
    secret = "s3cr3t" + secret
    monkeypatch.setenv("ADVANTAGE_TEST_PATH_SECRET", secret)
    over = {"trainer.total_steps": 100}
    if through:
        over["trainer.note"] = "${oc.env:ADVANTAGE_TEST_PATH_SECRET}"
        over[key] = f"{prefix}${{trainer.note}}{suffix}"
    else:
        over[key] = f"{prefix}${{oc.env:ADVANTAGE_TEST_PATH_SECRET}}{suffix}"
    with pytest.raises(ConfigError) as info:
        resolve_config(_PATH_KEYS[key], None, over)
    text = str(info.value)
    assert secret not in text
    assert f"{key}=" in text and "takes no value from the environment" in text


def test_a_path_from_the_environment_creates_nothing_and_prints_nothing(tmp_path, monkeypatch, capfd):
    secret = "tok-" + os.urandom(6).hex()
    monkeypatch.setenv("ADVANTAGE_TEST_PATH_SECRET", secret)
    code = main(["train", "q_learning", "trainer.run_dir=runs/${oc.env:ADVANTAGE_TEST_PATH_SECRET}"])
    out, err = capfd.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert secret not in out + err and "${oc.env:ADVANTAGE_TEST_PATH_SECRET}" in err
    assert not Path("runs").exists()
    # a path built from another key of the config (no resolver) is still allowed
    over = {
        "trainer.total_steps": 100,
        "trainer.seed": 7,
        "trainer.run_dir": str(tmp_path / "s${trainer.seed}"),
    }
    assert advantage.train("q_learning", quiet=True, **over).dir == tmp_path / "s7"


# ---- metrics.jsonl rows of another shape ------------------------------------------------------------------

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_ROWS = st.one_of(
    _JSON,  # anything at all
    st.fixed_dictionaries(  # a row of the right shape, mostly, with any value for a metric
        {"step": st.one_of(st.integers(-5, 2**64), _JSON)},
        optional={
            "time": _JSON,
            "eval/return_mean": _JSON,
            "eval/return_std": _JSON,
            "train/episode_return": _JSON,
            "eval/success_rate": _JSON,
        },
    ),
)


def _write_rows(run_dir: Path, good: list[dict], bad) -> int:
    """``metrics.jsonl`` with the good rows, then ``bad``; returns ``bad``'s line number."""
    lines = [json.dumps(r) for r in good] + [json.dumps(bad)]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return len(lines)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad=_ROWS)
def test_a_metrics_row_of_any_shape_is_read_or_named_by_file_and_line(trained, tmp_path, bad):
    """Every reader of ``metrics.jsonl`` (the rows, truncation on resume, the final line of a command)
    either takes the row or stops with one line naming the file and the row's line."""
    run = tmp_path / "run"
    if not run.exists():
        shutil.copytree(trained, run)
    good = read_metrics(trained)
    line = _write_rows(run, good, bad)
    try:
        rows = read_metrics(run)
    except RunDirError as e:
        assert str(e).startswith(f"{run / 'metrics.jsonl'}:{line}: ") and "\n" not in str(e)
        with pytest.raises(RunDirError, match=f"metrics.jsonl:{line}: "):
            truncate_metrics(run, 10**9)
        return
    assert all(isinstance(r, dict) and isinstance(r["step"], int) for r in rows)
    final_line(advantage.Run(run), rows[-1]["step"])
    truncate_metrics(run, 1000)
    assert all(r["step"] <= 1000 for r in read_metrics(run))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad=_ROWS)
def test_plot_takes_any_row_it_reads(trained, tmp_path, bad):
    from advantage.monitoring.plotting import plot_runs

    run = tmp_path / "run"
    if not run.exists():
        shutil.copytree(trained, run)
    _write_rows(run, read_metrics(trained), bad)
    try:
        read_metrics(run)
    except RunDirError:
        return
    assert plot_runs([run], run / "plots" / "learning_curve.png", inside=run).is_file()


@pytest.mark.parametrize(
    "bad, message",
    [
        ([1, 2], "not a metrics row (a JSON object with an integer step), got a JSON array"),
        ({"step": "x", "time": 1}, "step must be an integer >= 0, got a JSON string"),
        ({"step": 2.5}, "step must be an integer >= 0, got 2.5"),
        (
            {"step": 3, "eval/return_mean": 10**30},
            "the value of 'eval/return_mean' is an integer out of range",
        ),
    ],
)
def test_resume_and_plot_name_the_file_and_line_of_a_bad_row(trained, tmp_path, bad, message, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 99, "ti')  # a torn last line (a killed writer) is skipped, as before
    assert read_metrics(run) == read_metrics(trained)
    line = _write_rows(run, read_metrics(trained), bad)
    for args in (["resume", str(run), "trainer.total_steps=3000", "--quiet"], ["plot", str(run)]):
        code, err = _cli(args, capsys)
        assert code == 2 and len(err.splitlines()) == 1, err
        assert f"metrics.jsonl:{line}: {message}" in err


def test_a_huge_metrics_line_is_refused_without_reading_it_whole(trained, tmp_path):
    import tracemalloc

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 1, "x": "' + "y" * (8 << 20) + '"}\n')
    tracemalloc.start()
    try:
        with pytest.raises(RunDirError, match=r"metrics.jsonl:\d+: line over 1048576 bytes"):
            read_metrics(run)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak


# ---- model.path: a run's checkpoint without its manifest ---------------------------------------------------


def _model_folder(folder: Path) -> None:
    """A tiny save_pretrained folder (scratch model, character tokenizer): nothing is downloaded."""
    from advantage.lm.model import build_char_tokenizer, build_scratch_model

    tok = build_char_tokenizer("0123456789+=")
    build_scratch_model("qwen2", tok, hidden_size=16, layers=1, heads=2).save_pretrained(folder)
    tok.save_pretrained(folder)


def _lm_run(tmp_path: Path) -> Path:
    """A run folder whose checkpoint is also a model folder (as an LM run's is); returns its step folder."""
    import torch

    src = tmp_path / "hf-src"
    _model_folder(src)
    files = {p.name: p.read_bytes() for p in src.iterdir()}
    run = tmp_path / "lm-run"
    run.mkdir()
    (run / "config.yaml").write_text("algo: sft\n")
    return save_checkpoint(run / "checkpoints", 4, {"w": torch.ones(1)}, {}, files=files)


def test_a_run_checkpoint_without_its_manifest_is_refused_as_model_path(tmp_path):
    step = _lm_run(tmp_path)
    assert model_folder(str(step)) == step  # verified, with its manifest
    (step / "manifest.json").unlink()
    weights = bytearray((step / "model.safetensors").read_bytes())
    weights[-3] ^= 0x01
    (step / "model.safetensors").write_bytes(bytes(weights))
    with pytest.raises(
        CheckpointError, match="manifest.json: manifest missing; .* a checkpoint folder of the run"
    ):
        model_folder(str(step))
    moved = tmp_path / "moved"  # out of the run: still a checkpoint, by its own files
    shutil.copytree(step, moved)
    with pytest.raises(CheckpointError, match="is a checkpoint folder, which is never loaded unverified"):
        model_folder(str(moved))
    for name in ("state.json", "tensors.safetensors"):  # without them: a plain model folder, the user's
        (moved / name).unlink()
    assert model_folder(str(moved)) == moved
    cfg = resolve_config("grpo", None, {"worker.actor.model.path": str(moved)})[1]
    assert cfg.worker.actor.model.path == str(moved)  # loads as a user's own model does


def test_grpo_refuses_a_run_checkpoint_without_its_manifest_through_the_cli(tmp_path, capsys):
    step = _lm_run(tmp_path)
    (step / "manifest.json").unlink()
    capsys.readouterr()  # save_pretrained's progress bar
    code, err = _cli(
        ["train", "grpo", f"worker.actor.model.path={step}", f"trainer.run_dir={tmp_path / 'g'}"], capsys
    )
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "manifest.json: manifest missing" in err
    assert not (tmp_path / "g").exists()


def test_a_missing_weights_file_is_named_as_it_is_called(tmp_path):
    """The message names ``model.safetensors``, the file, not ``worker.actor.model.safetensors``."""
    folder = tmp_path / "my-model"
    _model_folder(folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(ConfigError) as info:
        resolve_config("grpo", None, {"worker.actor.model.path": str(folder)})
    text = str(info.value)
    assert "worker.actor.model.path" in text and "one of model.safetensors," in text
    assert "worker.actor.model.safetensors" not in text
