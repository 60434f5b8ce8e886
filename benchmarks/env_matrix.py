"""Every environment of Gymnasium's registry × every environment algorithm, as a user would run them.

    python -m benchmarks.env_matrix      # the whole matrix -> benchmarks/results/env_matrix.{md,json}
    python -m benchmarks.env_matrix --envs Hopper-v5 --jobs 2  # some envs; the report: every logged cell
    python -m benchmarks.env_matrix --report-only               # the report from the committed cell log
    python -m benchmarks.env_matrix --jobs 2        # two cells at a time
    python -m benchmarks.env_matrix --cells ppo:FrozenLake-v1,dqn:Blackjack-v1 --out /tmp/m   # some cells

The environments: every id whose entry point is in Gymnasium's ``classic_control``, ``toy_text``, ``box2d``
or ``mujoco`` packages and that builds here (MuJoCo v2/v3 need ``mujoco<3``; they are listed as not
buildable). The algorithms: every registered algorithm that trains on an environment (``advantage list``).

A cell is what a user does, through the command line, one process each:

1. ``advantage train ALGO env.id=ID`` with a short budget and checkpoints, interrupted with SIGINT once its
   first checkpoint is written (a run that finishes first is simply not interrupted);
2. ``advantage resume RUN trainer.total_steps=<past the budget>``;
3. ``advantage eval RUN --episodes 2 --json``.

Pass: every command exits 0 (and eval prints a finite ``return_mean``). Refused: ``train`` exits 2 with a
one-line error naming the space (the algorithm cannot handle that observation or action space, or an
exact-planning algorithm gets an env without a transition model). Anything else fails the cell, with
the last line of its error. The budgets are small: this checks that every combination runs, stops,
resumes and evaluates, not how well it learns (the zoo suite does that).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FAMILIES = ("classic_control", "toy_text", "box2d", "mujoco")
CHILD_ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
CELL_TIMEOUT = 600  # seconds for one command

# Budgets: enough for one update and a checkpoint before the interrupt; resumed to 1.5x.
BUDGET = {"ppo": 4096, "a2c": 2000, "trpo": 4096, "reinforce": 2000, "reinforce_is": 2000}
BUDGET |= {"dqn": 2000, "sac": 1500, "td3": 1500, "ddpg": 1500}
DEFAULT_BUDGET = 2000


def env_ids() -> tuple[list[str], dict[str, str]]:
    """The registry's ids of the four families that build here, and why the others do not."""
    import gymnasium as gym

    ids, skipped = [], {}
    for env_id, spec in gym.registry.items():
        if not any(f"envs.{f}" in str(spec.entry_point) for f in FAMILIES):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                gym.make(env_id).close()
        except Exception as e:
            skipped[env_id] = f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
            continue
        ids.append(env_id)
    return ids, skipped


def algorithms() -> list[str]:
    from advantage.registry import all_algorithms

    return sorted(name for name, a in all_algorithms().items() if a.uses_env)


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "advantage.cli", *args]


def _last_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return lines[-1][:300] if lines else ""


def run_cell(algo: str, env_id: str, root: Path) -> dict[str, Any]:
    """Train (interrupted), resume past the budget, evaluate: the cell's outcome."""
    budget = BUDGET.get(algo, DEFAULT_BUDGET)
    run_dir = root / f"{algo}-{env_id}"
    keys = {
        "env.id": env_id,
        "trainer.total_steps": budget,
        "trainer.checkpoint_every": max(1, budget // 4),
        "trainer.eval_every": 0,
        "trainer.eval_episodes": 2,
        "trainer.log_every": max(1, budget // 8),
        "trainer.run_dir": str(run_dir),
        "trainer.tensorboard": "false",
        "trainer.plot": "false",
        "trainer.progress": "none",
    }
    t0 = time.monotonic()
    out: dict[str, Any] = {"algo": algo, "env": env_id}
    p = subprocess.Popen(
        _cmd("train", algo, *(f"{k}={v}" for k, v in keys.items()), "--quiet"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=CHILD_ENV,
    )
    latest = run_dir / "checkpoints" / "latest"
    interrupted = False
    deadline = time.monotonic() + CELL_TIMEOUT
    while p.poll() is None and time.monotonic() < deadline:
        if os.path.lexists(latest):
            p.send_signal(signal.SIGINT)
            interrupted = True
            break
        time.sleep(0.05)
    try:
        _, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        return out | {
            "status": "fail",
            "note": f"train: over {CELL_TIMEOUT} s",
            "seconds": time.monotonic() - t0,
        }
    sigint_rc = (130, -signal.SIGINT, 0)  # 130: stopped by SIGINT (checkpointed); 0: finished first
    if p.returncode == 2 and not os.path.lexists(latest):
        line = _last_line(err)
        return out | {"status": "refused", "note": line, "seconds": time.monotonic() - t0}
    if p.returncode not in sigint_rc:
        return out | {
            "status": "fail",
            "note": f"train exit {p.returncode}: {_last_line(err)}",
            "seconds": 0.0,
        }
    out["interrupted"] = interrupted and p.returncode != 0
    try:
        resume = subprocess.run(
            _cmd("resume", str(run_dir), f"trainer.total_steps={budget * 3 // 2}", "--quiet"),
            capture_output=True,
            text=True,
            env=CHILD_ENV,
            timeout=CELL_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        note = f"resume: over {CELL_TIMEOUT} s"
        return out | {"status": "fail", "note": note, "seconds": time.monotonic() - t0}
    out["env_restarted"] = "could not be restored exactly" in resume.stderr
    if resume.returncode != 0:
        return out | {
            "status": "fail",
            "note": f"resume exit {resume.returncode}: {_last_line(resume.stderr)}",
        }
    ev = subprocess.run(
        _cmd("eval", str(run_dir), "--episodes", "2", "--json"),
        capture_output=True,
        text=True,
        env=CHILD_ENV,
        timeout=CELL_TIMEOUT,
    )
    if ev.returncode != 0:
        return out | {"status": "fail", "note": f"eval exit {ev.returncode}: {_last_line(ev.stderr)}"}
    try:
        result = json.loads(ev.stdout.strip().splitlines()[-1])
        ret = float(result["return_mean"])
    except (ValueError, KeyError, IndexError) as e:
        return out | {"status": "fail", "note": f"eval printed no result ({e}): {_last_line(ev.stdout)}"}
    if not math.isfinite(ret):
        return out | {"status": "fail", "note": f"eval return_mean {ret}"}
    return out | {"status": "pass", "return_mean": ret, "seconds": round(time.monotonic() - t0, 1)}


def write_report(
    cells: list[dict[str, Any]],
    skipped: dict[str, str],
    out: Path,
    seconds: float,
    missing: list[tuple[str, str]] | None = None,
) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "wall_seconds": round(seconds, 1),
        "command": "python -m benchmarks.env_matrix " + " ".join(sys.argv[1:]),
    }
    try:
        import gymnasium
        import torch

        meta |= {"gymnasium": gymnasium.__version__, "torch": torch.__version__}
    except ImportError:
        pass
    counts = {s: sum(c["status"] == s for c in cells) for s in ("pass", "refused", "fail")}
    restarted = sum(bool(c.get("env_restarted")) for c in cells)
    missing = missing or []
    counts["not_run"] = len(missing)
    report = {"meta": meta, "counts": counts, "cells": cells, "not_run": missing, "not_buildable": skipped}
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    algos = sorted({c["algo"] for c in cells})
    envs = list(dict.fromkeys(c["env"] for c in cells))
    by = {(c["algo"], c["env"]): c for c in cells}
    mark = {"pass": "✓", "refused": "–", "fail": "✗"}
    lines = [
        "# Every environment × every algorithm",
        "",
        f"Written by `{str(meta['command']).strip()}` ({meta.get('torch', '?')}, gymnasium "
        f"{meta.get('gymnasium', '?')}, {meta['cpus']} CPUs, {meta['wall_seconds']} s). Each cell trains "
        "with a short budget, is interrupted with SIGINT after its first checkpoint, resumed past the "
        "budget and evaluated, all through the command line.",
        "",
        f"**{counts['pass']} pass, {counts['refused']} refused (the algorithm cannot handle the space, one "
        f"line, exit 2), {counts['fail']} fail.** ✓ pass (↻: the resume started fresh episodes, saying so; "
        f"{restarted} cells), – refused, ✗ fail.",
        "",
        "| env | " + " | ".join(algos) + " |",
        "| --- | " + " | ".join("---" for _ in algos) + " |",
    ]
    for env in envs:
        row = []
        for a in algos:
            c = by.get((a, env))
            row.append("" if c is None else mark[c["status"]] + ("↻" if c.get("env_restarted") else ""))
        lines.append(f"| {env} | " + " | ".join(row) + " |")
    if missing:
        by_env: dict[str, list[str]] = {}
        for a, e in missing:
            by_env.setdefault(e, []).append(a)
        lines[6:6] = [
            f"**{len(missing)} cells not run yet** (the cell log is resumable: "
            "`python -m benchmarks.env_matrix --envs ...` runs only what is missing): "
            + "; ".join(f"{e} ({len(a)})" for e, a in by_env.items())
            + ".",
            "",
        ]
    fails = [c for c in cells if c["status"] == "fail"]
    if fails:
        lines += ["", "## Failures", ""] + [f"- {c['algo']} × {c['env']}: {c['note']}" for c in fails]
    refusals = sorted({c["note"].split(";")[0] for c in cells if c["status"] == "refused"})
    lines += ["", "## Refusals (distinct first clauses)", ""] + [f"- {r}" for r in refusals[:60]]
    if skipped:
        lines += ["", "## Ids that do not build here", ""] + [f"- {k}: {v}" for k, v in skipped.items()]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main() -> None:
    global CELL_TIMEOUT
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1, help="cells run at once")
    ap.add_argument("--timeout", type=int, default=CELL_TIMEOUT, help="seconds for one command of a cell")
    ap.add_argument("--cells", default="", help="only these ALGO:ENV_ID cells (comma-separated)")
    ap.add_argument("--algos", default="", help="only these algorithms (comma-separated)")
    ap.add_argument("--envs", default="", help="only these env ids (comma-separated)")
    ap.add_argument("--out", default=str(HERE / "results" / "env_matrix"), help="report path without suffix")
    ap.add_argument(
        "--log",
        default=str(HERE / "results" / "env_matrix_cells.jsonl"),
        help="each finished cell is appended here; cells already logged are not run again, and the report "
        "is written from every logged cell (several invocations on disjoint --envs share one log)",
    )
    ap.add_argument("--report-only", action="store_true", help="write the report from the log, run nothing")
    ap.add_argument("--again", action="store_true", help="run the picked cells even if logged (newest wins)")
    args = ap.parse_args()
    CELL_TIMEOUT = args.timeout
    ids, skipped = env_ids()  # every buildable id, before --envs picks some
    algos = algorithms()
    if args.cells:
        pairs = [tuple(c.split(":", 1)) for c in args.cells.split(",")]
    else:
        algos = [a for a in algos if not args.algos or a in args.algos.split(",")]
        picked = [i for i in ids if not args.envs or i in args.envs.split(",")]
        pairs = [(a, i) for i in picked for a in algos]
    log = Path(args.log)

    def logged() -> dict[tuple[str, str], dict[str, Any]]:
        rows = [json.loads(x) for x in log.read_text().splitlines() if x.strip()] if log.exists() else []
        return {(c["algo"], c["env"]): c for c in rows}  # the newest line of a cell wins

    done = logged()
    todo = [] if args.report_only else [p for p in pairs if args.again or p not in done]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        for c in pool.map(lambda p: run_cell(p[0], p[1], Path(tmp)), todo):
            print(f"{c['status']:8} {c['algo']:26} {c['env']:28} {c.get('note', '')[:120]}", flush=True)
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a") as f:
                f.write(json.dumps(c) + "\n")
    done = logged()
    all_ids = ids
    wanted = set(pairs) if args.cells else {(a, i) for i in all_ids for a in algorithms()}
    cells = [c for key, c in done.items() if key in wanted]
    order = {e: n for n, e in enumerate(all_ids)}
    cells.sort(key=lambda c: (order.get(c["env"], len(order)), c["algo"]))
    missing = sorted(wanted - set(done), key=lambda p: (order.get(p[1], 0), p[0]))
    write_report(cells, skipped, Path(args.out), time.monotonic() - t0, missing)
    fails = sum(c["status"] == "fail" for c in cells)
    print(f"{len(cells)} cells: {len(cells) - fails} pass or refused, {fails} fail -> {args.out}.md")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
