"""The SFT-over-seeds benchmark's summary and table (its runs are minutes each: benchmarks/sft_seeds.py)."""

from __future__ import annotations

import pytest
from benchmarks.sft_seeds import summary, table


def test_summary_and_table_of_five_seeds():
    accs = [0.364, 0.25, 0.5, 0.42, 0.31]
    runs = [
        {"seed": i, "test_accuracy": a, "n": 500, "wall_s": 75.0, "steps": 400} for i, a in enumerate(accs)
    ]
    s = summary(runs)
    assert s["min"] == 0.25 and s["max"] == 0.5 and s["spread_points"] == pytest.approx(25.0)
    assert s["mean"] == pytest.approx(sum(accs) / 5) and s["std"] > 0
    res = {
        "command": "python -m benchmarks.sft_seeds",
        "overrides": ["trainer.total_steps=1000"],
        "torch": "2.13.0+cpu",
        "cpus": 2,
        "jobs": 2,
        "load_average_start": 0.5,
        "runs": runs,
        "summary": s,
    }
    lines = table(res)
    assert "| 1 | 0.250 | 400 | 75 |" in lines
    assert any("spread 25.0 points" in line for line in lines)
    assert any("trainer.total_steps=1000" in line for line in lines)
