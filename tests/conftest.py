import pytest


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Every test runs in its own folder, so default run folders (runs/...) never collide."""
    monkeypatch.chdir(tmp_path)
    yield
