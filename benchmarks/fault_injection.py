"""The two SIGKILL fault-injection tests, run once, their counts recorded for docs/reliability.md.

    python -m benchmarks.fault_injection   # -> benchmarks/results/fault_injection.{md,json}, about 20 seconds

Runs ``tests/test_fault_injection.py``'s random-kill test (a checkpoint writer SIGKILLed at 20 seeded
random delays) and its exhaustive test (one save killed at each of its file operations) with pytest, in
a fresh process with one thread, and parses the summary line each test prints: cases tried, faults
survived, bytes lost, and for the random test how many saves completed and how many kills landed inside
a write (leaving a half-written temp folder). Where a random kill lands depends on the machine's speed,
so that last count changes from run to run and machine to machine; the tests require only that every
fault is survived with no byte lost.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.pipeline import ROOT, versions, write_results

TESTS = "random_moments or every_file_operation"
RANDOM = re.compile(
    r"SIGKILL at random moments: (?P<cases>\d+) cases tried, (?P<survived>\d+) faults survived, "
    r"(?P<bytes_lost>\d+) bytes lost \((?P<saves>\d+) saves completed, (?P<temp_left>\d+) kills left"
)
EXHAUSTIVE = re.compile(
    r"SIGKILL at every file operation of a save: (?P<cases>\d+) cases tried \((?P<operations>\d+) operations "
    r"per save\), (?P<survived>\d+) faults survived, (?P<bytes_lost>\d+) bytes lost"
)


def table(res: dict[str, Any]) -> list[str]:
    r, e = res["random"], res["exhaustive"]
    return [
        "| Fault injection | Cases tried | Faults survived | Bytes lost |",
        "|---|---|---|---|",
        f"| SIGKILL at random moments (seed 20240601, delays 0–0.3 s) | {r['cases']} | {r['survived']} "
        f"| **{r['bytes_lost']}** |",
        f"| SIGKILL at every file operation of one save ({e['operations']} operations per save) "
        f"| {e['cases']} | {e['survived']} | **{e['bytes_lost']}** |",
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args()
    load = os.getloadavg()[0]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "tests/test_fault_injection.py",
        "-k",
        TESTS,
        "-s",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"the fault-injection tests failed:\n{out.stdout[-3000:]}\n{out.stderr[-2000:]}")
    found = {name: rx.search(out.stdout) for name, rx in (("random", RANDOM), ("exhaustive", EXHAUSTIVE))}
    missing = [name for name, m in found.items() if m is None]
    if missing:
        raise RuntimeError(f"no summary line of the {missing} test in pytest's output:\n{out.stdout[-3000:]}")
    counts = {k: {kk: int(v) for kk, v in m.groupdict().items()} for k, m in found.items() if m is not None}
    res = {**versions(load), **counts}
    write_results(Path(args.out), "fault_injection", res, table)


if __name__ == "__main__":
    main()
