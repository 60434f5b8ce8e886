"""The project's pytest settings (pyproject's addopts: ``-n auto --dist loadgroup``) with pytest-xdist
switched off: ``-p no:xdist`` runs the tests in one process, as ``-n 0`` does (tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("flags", [["-p", "no:xdist"], ["-n", "0"]])
def test_one_process_either_way(flags):
    cmd = [sys.executable, "-m", "pytest", *flags, "-q", "-p", "no:cacheprovider"]
    cmd += [
        "tests/test_config.py::test_defaults_and_dotted_overrides",
        "tests/test_grpo.py::test_synthetic_task_without_a_reward_model_is_refused",
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "passed" in done.stdout


def test_not_slow_leaves_the_heavy_tests_out_too():
    """``-m "not slow"`` (the README's fast command) replaces pyproject's ``-m 'not heavy'``; the heavy
    tests (minutes each, not all marked slow) stay out all the same, and ``-m heavy`` still selects them."""
    heavy = "tests/test_offpolicy.py::test_sac_halfcheetah_v5_return_rises_in_20k_steps"
    base = [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "--collect-only", "-q"]
    fast = subprocess.run(
        [*base, "-m", "not slow", heavy], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert "1 deselected" in fast.stdout and "test_sac_halfcheetah" not in fast.stdout.split("deselected")[0]
    chosen = subprocess.run(
        [*base, "-m", "heavy", heavy], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert "test_sac_halfcheetah_v5_return_rises_in_20k_steps" in chosen.stdout
    readme = (ROOT / "README.md").read_text()
    assert 'python -m pytest -m "not slow"' in readme
