"""A run records what it ran on: every checkpoint's manifest holds the versions of Python, torch,
transformers, numpy, gymnasium and advantage, and so does ``RUN/versions.json``; a forged ``versions``
field is refused naming the manifest; a checkpoint from before the field loads; a resume under other
versions says so in one line and a row of ``events.jsonl``, and goes on."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import advantage
from advantage import versions
from advantage.checkpoint import load_checkpoint, save_checkpoint, verify_checkpoint
from advantage.errors import CheckpointError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "checkpoints"
Q_RUN = {"trainer.total_steps": 2000, "trainer.tensorboard": False, "trainer.eval_episodes": 5}
NAMES = {"python", "torch", "transformers", "numpy", "gymnasium", "advantage"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished 2,000-step q_learning run; tests copy it."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    advantage.train("q_learning", quiet=True, **Q_RUN, **{"trainer.run_dir": str(run_dir)})
    return run_dir


def _copy(trained: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    return run


def _edit_manifest(folder: Path, change) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    change(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


# ---- the manifest ----------------------------------------------------------------------------------------


def test_the_manifest_records_the_versions_and_load_returns_them(tmp_path):
    folder = save_checkpoint(tmp_path, 5, {"q": np.zeros((2, 2))}, {"a": 1})
    recorded = json.loads((folder / "manifest.json").read_text())["versions"]
    assert set(recorded) == NAMES
    assert recorded == versions.installed()
    assert recorded["python"] == ".".join(map(str, sys.version_info[:3]))
    assert recorded["advantage"] == advantage.__version__
    assert load_checkpoint(tmp_path).versions == recorded


def test_finding_the_versions_imports_no_library():
    """transformers (seconds to import) and torch are looked up in the package metadata, not imported."""
    code = (
        "import sys; from advantage import versions; v = versions.installed(); "
        "assert 'transformers' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules); "
        "print(v['torch'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    import torch

    assert out.stdout.strip() == torch.__version__


def test_a_checkpoint_without_versions_loads(tmp_path):
    folder = save_checkpoint(tmp_path, 5, {"q": np.zeros((2, 2))}, {"a": 1})
    _edit_manifest(folder, lambda m: m.pop("versions"))  # as written before the field existed
    assert load_checkpoint(tmp_path).versions is None
    verify_checkpoint(folder)
    _edit_manifest(folder, lambda m: m.__setitem__("versions", None))
    assert load_checkpoint(tmp_path).versions is None


def test_the_committed_fixture_checkpoints_load_without_versions():
    for run in sorted(FIXTURES.iterdir()):
        ckpt = load_checkpoint(run / "checkpoints")
        assert ckpt.versions is None, run.name


FORGED = {
    "a string": "2.13.0",
    "a list": ["torch", "2.13.0"],
    "a number as version": {"torch": 2.13},
    "a nested object": {"torch": {"version": "2.13.0"}},
    "a 100 kB version": {"torch": "9" * 100_000},
    "a 101-character version": {"torch": "1" * 101},
    "an escape sequence": {"torch": "2.13.0\x1b[2J"},
    "a newline": {"torch": "2.13.0\nresume: all is well"},
    "an empty name": {"": "1.0"},
    "a 33-character name": {"x" * 33: "1.0"},
    "33 entries": {f"lib{i}": "1.0" for i in range(33)},
}


@pytest.mark.parametrize("case", list(FORGED))
def test_a_forged_versions_field_is_refused_naming_the_manifest(tmp_path, case):
    folder = save_checkpoint(tmp_path, 5, {"q": np.zeros((2, 2))}, {"a": 1})
    _edit_manifest(folder, lambda m: m.__setitem__("versions", FORGED[case]))
    for read in (load_checkpoint, verify_checkpoint):
        with pytest.raises(CheckpointError, match="not a valid manifest \\(versions must map") as info:
            read(folder)
        message = str(info.value)
        assert str(folder / "manifest.json") in message and len(message) < 300
        assert "\x1b" not in message and "\n" not in message


def test_the_longest_valid_versions_field_loads(tmp_path):
    folder = save_checkpoint(tmp_path, 5, {"q": np.zeros((2, 2))}, {"a": 1})
    longest = {f"{i:02d}" + "x" * 30: "1" * 100 for i in range(32)} | {"31" + "x" * 30: None}
    _edit_manifest(folder, lambda m: m.__setitem__("versions", longest))
    assert load_checkpoint(folder).versions == longest


def test_changed_and_describe_name_only_the_libraries_that_differ():
    saved = {"python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "4.57.1", "numpy": "2.4.6"}
    now = {"python": "3.11.7", "torch": "2.15.0", "transformers": None, "numpy": "2.4.6", "new_lib": "1"}
    names = versions.changed(saved, now)
    assert names == ["torch", "transformers"]  # a name only one side records is not a difference
    assert versions.listing(names, saved) == "torch 2.13.0+cpu, transformers 4.57.1"
    assert versions.listing(names, now) == "torch 2.15.0, transformers (not installed)"
    assert versions.listing(["python"], saved) == "Python 3.11.7"


# ---- the run folder and resume ------------------------------------------------------------------------


def test_a_run_folder_records_its_versions(trained):
    recorded = json.loads((trained / versions.VERSIONS_FILE).read_text())
    assert recorded == versions.installed()
    assert load_checkpoint(trained / "checkpoints").versions == recorded


def test_resume_under_the_same_versions_says_nothing(trained, tmp_path, capsys):
    run = _copy(trained, tmp_path)
    assert advantage.resume(run, quiet=True, **{"trainer.total_steps": 3000}).step == 3000
    assert "resume:" not in capsys.readouterr().err
    assert not (run / "events.jsonl").exists()


def test_resume_under_another_torch_says_so_once_records_it_and_goes_on(
    trained, tmp_path, capsys, monkeypatch
):
    run = _copy(trained, tmp_path)
    real = versions.installed()
    other = {**real, "torch": "9.9.9"}
    monkeypatch.setattr(versions, "installed", lambda: dict(other))
    resumed = advantage.resume(run, quiet=True, **{"trainer.total_steps": 3000})
    assert resumed.step == 3000  # never refused
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("resume:")]
    assert lines == [
        f"resume: this checkpoint was written with torch {real['torch']}; now torch 9.9.9: the continuation "
        "may not be bit-identical to an uninterrupted run"
    ]
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert events == [
        {
            "step": 2000,
            "event": "versions_changed",
            "checkpoint": {"torch": real["torch"]},
            "now": {"torch": "9.9.9"},
        }
    ]
    # this session's versions: in the run folder and in the checkpoints it wrote
    assert json.loads((run / versions.VERSIONS_FILE).read_text()) == other
    assert resumed.checkpoint.versions == other


def test_resume_of_a_checkpoint_without_versions_says_nothing(trained, tmp_path, capsys, monkeypatch):
    run = _copy(trained, tmp_path)
    (folder,) = (run / "checkpoints").glob("step_*")
    _edit_manifest(folder, lambda m: m.pop("versions"))
    (run / versions.VERSIONS_FILE).unlink()  # a run folder from before the file existed
    other = {**versions.installed(), "torch": "9.9.9"}
    monkeypatch.setattr(versions, "installed", lambda: dict(other))
    assert advantage.resume(run, quiet=True, **{"trainer.total_steps": 3000}).step == 3000
    assert "resume:" not in capsys.readouterr().err
    assert not (run / "events.jsonl").exists()
    assert json.loads((run / versions.VERSIONS_FILE).read_text())["torch"] == "9.9.9"
