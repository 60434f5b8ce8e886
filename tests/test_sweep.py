"""``advantage sweep``: the grid × seeds plan, one run folder per trial, the summary, and bad input found
before any trial runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advantage.cli import main
from advantage.errors import ConfigError
from advantage.sweep import parse_grid, sweep, trials

QUICK = {
    "env.id": "FrozenLake-v1",
    "env.is_slippery": False,
    "trainer.total_steps": 3000,
    "trainer.eval_every": 0,
    "trainer.eval_episodes": 5,
    "trainer.tensorboard": False,
}


def test_grid_and_plan():
    grid = parse_grid(["algorithm.alpha=0.1,0.5", "algorithm.gamma=0.9,0.99"])
    assert grid == {"algorithm.alpha": [0.1, 0.5], "algorithm.gamma": [0.9, 0.99]}
    plan = trials(grid, seeds=2)
    assert len(plan) == 8
    assert plan[0] == {"point": {"algorithm.alpha": 0.1, "algorithm.gamma": 0.9}, "seed": 0}
    assert plan[1]["seed"] == 1 and plan[2]["point"]["algorithm.gamma"] == 0.99
    with pytest.raises(ConfigError, match="expected key=v1,v2"):
        parse_grid(["algorithm.alpha"])


def test_sweep_writes_one_run_per_trial_and_a_summary(tmp_path):
    rows = sweep(
        "q_learning",
        {"algorithm.alpha": [0.05, 0.5]},
        seeds=2,
        overrides=QUICK,
        out=tmp_path / "sw",
    )
    assert [r["trial"] for r in rows] == [0, 1, 2, 3]
    assert [(r["point"]["algorithm.alpha"], r["seed"]) for r in rows] == [
        (0.05, 0),
        (0.05, 1),
        (0.5, 0),
        (0.5, 1),
    ]
    for r in rows:
        assert Path(r["run_dir"], "config.yaml").exists() and r["return_mean"] is not None
    summary = json.loads((tmp_path / "sw" / "summary.json").read_text())
    assert len(summary["points"]) == 2 and all(p["n"] == 2 for p in summary["points"])
    means = [p["mean"] for p in summary["points"]]
    assert means == sorted(means, reverse=True)  # best first
    assert "| algorithm.alpha |" in (tmp_path / "sw" / "summary.md").read_text()


def test_a_bad_trial_fails_the_sweep_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "sw"
    code = main(
        [
            "sweep",
            "q_learning",
            "--grid",
            "algorithm.alpha=0.1,-1",
            "--out",
            str(out),
            "trainer.total_steps=100",
        ]
    )
    assert code == 2
    assert "trial 1 {'algorithm.alpha': -1}: algorithm.alpha" in capsys.readouterr().err
    assert not out.exists()


def test_cli_sweep(tmp_path, capsys):
    out = tmp_path / "cli"
    args = ["sweep", "q_learning", "--grid", "algorithm.alpha=0.1,0.5", "--out", str(out)]
    assert main([*args, *(f"{k}={v}" for k, v in QUICK.items())]) == 0
    text = capsys.readouterr().out
    assert "### Sweep summary" in text and f"sweep folder: {out}" in text
    assert sorted(p.name for p in out.iterdir()) == ["summary.json", "summary.md", "trial-000", "trial-001"]
    assert main([*args, "trainer.total_steps=100"]) == 2  # the folder is not empty: refused


@pytest.mark.slow
def test_sweep_on_ray_workers(tmp_path):
    ray = pytest.importorskip("ray")
    try:
        rows = sweep(
            "q_learning", {"algorithm.alpha": [0.1, 0.5]}, overrides=QUICK, out=tmp_path / "r", workers=2
        )
    finally:
        ray.shutdown()
    assert len(rows) == 2 and all(Path(r["run_dir"], "metrics.jsonl").exists() for r in rows)
