import pytest


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Every test runs in its own folder, so default run folders (runs/...) never collide."""
    monkeypatch.chdir(tmp_path)
    yield


@pytest.fixture
def rewound(tmp_path):
    """``rewound(run_dir)``: a copy of a run folder with two checkpoints as it was at the first one (the
    last checkpoint removed, ``latest`` pointing back), i.e. the same run interrupted there."""
    import shutil

    def make(run_dir, name: str = "half"):
        dest = tmp_path / name
        shutil.copytree(run_dir, dest)
        ckpts = dest / "checkpoints"
        names = sorted(p.name for p in ckpts.glob("step_*"))
        shutil.rmtree(ckpts / names[-1])
        (ckpts / "latest").write_text(names[0] + "\n")
        return dest

    return make
