"""Checkpoints written by earlier code still load and continue the same run: each folder under
``tests/fixtures/checkpoints/`` is a small run stopped at a checkpoint, written by
``tests/fixtures/make_checkpoints.py`` with the code of the day it was made. Resumed with today's code, it
must log the metrics rows the uninterrupted run logged (``expected.json``; clock readings aside). Floats are
compared to a relative 1e-5: another CPU's kernels may round the last bits differently, while a renamed key
or another random stream changes the rows outright."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest

import advantage
from advantage.checkpoint import verify_checkpoint

FIXTURES = Path(__file__).resolve().parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from make_checkpoints import RUNS, comparable, relocate, resume_overrides  # noqa: E402

# The language-model runs build a model and tokenizer: a few seconds each.
LM = {"sft", "reward_model", "dpo", "grpo", "ppo_rlhf"}


def test_every_algorithm_of_the_script_has_a_fixture():
    assert sorted(p.name for p in (FIXTURES / "checkpoints").iterdir()) == sorted(RUNS)


@pytest.mark.parametrize("algo", [pytest.param(a, marks=pytest.mark.slow) if a in LM else a for a in RUNS])
def test_resuming_an_old_checkpoint_logs_the_rows_of_the_uninterrupted_run(tmp_path, algo):
    fixture = FIXTURES / "checkpoints" / algo
    expected = json.loads((fixture / "expected.json").read_text())
    # The files as committed pass the manifest's size and SHA-256 checks.
    (folder,) = (fixture / "checkpoints").glob("step_*")
    verify_checkpoint(folder)
    run_dir = tmp_path / algo
    shutil.copytree(fixture, run_dir)
    relocate(run_dir, algo, FIXTURES / "checkpoints")
    resumed = advantage.resume(run_dir, quiet=True, **resume_overrides(algo, FIXTURES / "checkpoints"))
    assert resumed.step == expected["final_step"]
    rows = comparable(resumed.metrics, expected["checkpoint_step"])
    assert [sorted(r) for r in rows] == [sorted(r) for r in expected["rows"]]
    for got, want in zip(rows, expected["rows"], strict=True):
        for key, value in want.items():
            same = value == got[key] or (
                # abs_tol at fp32 rounding of O(1) quantities: fp32 kernels differ across CPUs (ISA), and a
                # small difference of log-probs such as a KL of 5e-5 keeps only their absolute error
                isinstance(value, float) and math.isclose(got[key], value, rel_tol=1e-5, abs_tol=1e-6)
            )
            assert same, (got["step"], key, got[key], value)
