"""The torch versions the library is tested on: for each version, a virtual environment outside the
repository with that torch installed first, then ``pip install -e ".[dev]"`` of this repository *without*
``constraints/cpu.txt``; pip must keep the torch it found (pyproject.toml's ``torch>=MIN`` allows it), and
the tests marked ``torch_versions`` (every fast path against its reference, and one short learning test per
algorithm family) must pass there.

    python -m benchmarks.torch_versions                           # the newest torch and pyproject's minimum
    python -m benchmarks.torch_versions --versions 2.5.1 2.6.0    # any others
    python -m benchmarks.torch_versions --skip-install            # the existing environments as they are
    python -m benchmarks.torch_versions --pytest-args="-n 0"      # one process (pyproject's addopts: -n auto)
    python -m benchmarks.torch_versions --write-only              # the .md again from the .json
    -> benchmarks/results/torch_versions.{md,json}

Each version's environment is kept (``~/.cache/advantage-torch-venvs/<version>``, ``--venv-root``),
so a rerun after a change to the library costs the tests only; a run updates
the rows of the versions it ran and keeps the others. The repository's own ``.venv`` (installed with
``constraints/cpu.txt``: the torch the committed results were produced with) is one more row unless
``--no-local``. The tests run with this repository's ``src`` first on ``PYTHONPATH``.

*Kept* is asked with ``pip install --dry-run -e TARGET`` for ``.``, ``.[llm]`` and ``.[dev]`` while torch
is the only package of a new environment (kept in its ``record.json``; asked again, in the environment as
it is, when pyproject.toml's torch requirement changes). Where pip would replace torch for ``.[dev]`` (a
dependency, or pyproject's own minimum, needs a newer one), the row names the requirement and the tests
still run on the version asked for: the dependencies installed with torch held (``-c`` a file with
``torch==VERSION``), the repository with ``--no-deps``.

This machine's pip configuration may cap torch (a ``global.constraint`` file): the environments' pip
commands run with ``PIP_CONSTRAINT`` pointing to an empty file, which replaces it for those commands only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "torch_versions"
NEWEST = "2.15.0"  # the newest torch on PyPI when this script was written
CONSTRAINTS = ROOT / "constraints" / "cpu.txt"
PROBE = "import json, platform, torch; print(json.dumps([torch.__version__, platform.python_version()]))"


def minimum() -> str:
    """The ``X`` of pyproject.toml's ``torch>=X``."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        m = re.fullmatch(r"torch\s*>=\s*([\w.]+)(,.*)?", dep.strip())
        if m:
            return m.group(1)
    raise SystemExit("pyproject.toml has no torch>=X dependency")


def pinned() -> str:
    """The torch version of constraints/cpu.txt."""
    m = re.search(r"^torch==([\w.+]+)", CONSTRAINTS.read_text(), re.M)
    if not m:
        raise SystemExit(f"{CONSTRAINTS} pins no torch")
    return m.group(1)


def run(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> int:
    """Run ``cmd`` in the repository, its output appended to ``log`` (and echoed as one line)."""
    print("$", shlex.join(cmd), flush=True)
    with log.open("a") as f:
        f.write(f"\n$ {shlex.join(cmd)}\n")
        f.flush()
        return subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT).returncode


def probe(python: Path) -> tuple[str, str] | None:
    """(torch version, python version) of an environment, None without torch."""
    out = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True)
    return tuple(json.loads(out.stdout)) if out.returncode == 0 else None  # type: ignore[return-value]


def base_version(v: str) -> str:
    """``2.6.0`` for ``2.6.0+cu124`` and for ``2.6``: the name of a version's environment."""
    parts = v.split("+")[0].split(".")
    return ".".join(parts + ["0"] * (3 - len(parts)))


def upgrade_reason(report: dict[str, Any]) -> str:
    """The packages pip would install that ask for a torch version, with their requirement."""
    found = []
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        for req in meta.get("requires_dist") or []:
            m = re.match(r"torch\s*([<>=!~][^;]*)?(;.*)?$", req)
            if m and m.group(1) and not (m.group(2) and "extra" in m.group(2)):
                found.append(f"{meta['name']} {meta['version']} needs torch{m.group(1).strip()}")
    return "; ".join(found)


def downloaded_mb(text: str) -> float:
    """The megabytes pip says it downloaded in ``text`` (its log), cached wheels not counted."""
    units = {"B": 1e-6, "kB": 1e-3, "MB": 1.0, "GB": 1e3}
    sizes = re.findall(r"^\s*Downloading \S+ \(([\d.]+) (B|kB|MB|GB)\)", text, re.M)
    return round(sum(float(n) * units[u] for n, u in sizes), 1)


TARGETS = (".", ".[llm]", ".[dev]")  # what `pip install -e TARGET` is checked to keep the torch for


def requirements(extra: str) -> list[str]:
    """pyproject.toml's dependencies and ``extra``'s (``advantage[...]`` expanded), torch left out."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found, todo, seen = list(project["dependencies"]), [extra], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for dep in project["optional-dependencies"][name]:
            m = re.fullmatch(r"advantage\[([\w,\s-]+)\]", dep.strip())
            if m:
                todo += [x.strip() for x in m.group(1).split(",")]
            else:
                found.append(dep)
    return [d for d in dict.fromkeys(found) if not re.match(r"torch\b(?![-\w])", d)]


def kept(pip: list[str], target: str, venv: Path, env: dict[str, str], log: Path) -> dict[str, Any]:
    """Would ``pip install -e TARGET`` (no constraints file) keep the installed torch? A dry run."""
    report_file = venv / "dry-run.json"
    report_file.unlink(missing_ok=True)
    rc = run([*pip, "install", "--dry-run", "-q", "--report", str(report_file), "-e", target], log, env)
    if rc != 0:
        return {"kept": False, "why": f"pip install --dry-run -e {target} failed (exit {rc})"}
    report = json.loads(report_file.read_text())
    new = [i["metadata"]["version"] for i in report.get("install", []) if i["metadata"]["name"] == "torch"]
    if not new:
        return {"kept": True}
    return {"kept": False, "pip_would_install": new[0], "why": upgrade_reason(report)}


def torch_requirement() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(d for d in deps if re.match(r"torch\b(?![-\w])", d))


def install(version: str, venv: Path, env: dict[str, str], log: Path) -> dict[str, Any]:
    """Create the environment (or reuse it), install torch ``version`` first, then the repository without
    the constraints file; return what pip did with torch.

    Whether pip keeps the torch is asked (dry runs) while torch is all the environment has, once: the
    answer is kept in the environment's ``record.json`` and asked again, in the environment as it is, only
    when pyproject.toml's torch requirement has changed since."""
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip"]
    record_file = venv / "record.json"
    start = time.perf_counter()
    fresh = not python.exists()
    if fresh:
        if run([sys.executable, "-m", "venv", str(venv)], log) != 0:
            raise SystemExit(f"could not create {venv}; see {log}")
        run([*pip, "install", "-q", "--upgrade", "pip"], log, env)
    record = json.loads(record_file.read_text()) if record_file.exists() and not fresh else {}
    have = probe(python)
    if have is None or base_version(have[0]) != version:
        if run([*pip, "install", f"torch=={version}"], log, env) != 0:
            raise SystemExit(f"pip could not install torch=={version}; see {log}")
        record["torch_install_seconds"] = round(time.perf_counter() - start, 1)
        record["torch_download_mb"] = downloaded_mb(log.read_text())  # torch and its CUDA wheels
    requirement = torch_requirement()
    if record.get("requirement") != requirement:
        record["kept_by"] = {t: kept(pip, t, venv, env, log) for t in TARGETS}
        record["requirement"] = requirement
        record["checked"] = "torch alone in the environment" if fresh else "the environment as it was"
    held = not record["kept_by"][".[dev]"]["kept"]
    if held:
        # The tests still run on the version asked for: the dependencies with torch held, then the
        # repository without its own (its torch>=MIN may exclude the version).
        held_file, reqs = venv / "held.txt", venv / "requirements.txt"
        held_file.write_text(f"torch=={version}\n")
        reqs.write_text("\n".join(requirements("dev")) + "\n")
        steps = [["-r", str(reqs), "-c", str(held_file)], ["--no-deps", "-e", "."]]
    else:
        steps = [["-e", ".[dev]"]]
    for step in steps:
        if run([*pip, "install", *step], log, env) != 0:
            raise SystemExit(f"pip install {shlex.join(step)} failed in {venv}; see {log}")
    if fresh:
        record["install_seconds"] = round(time.perf_counter() - start, 1)
        record["download_mb"] = downloaded_mb(log.read_text())
    record_file.write_text(json.dumps(record, indent=2) + "\n")
    return {**record, "kept": record["kept_by"]["."]["kept"], "tests_held": held}


def counts(junit: Path) -> dict[str, Any]:
    """passed/failed/skipped and the failing test ids from pytest's junit XML."""
    if not junit.exists():
        return {"passed": 0, "failed": 0, "skipped": 0, "failures": ["pytest wrote no report"]}
    failed, skipped, passed = [], 0, 0
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            lines = [x.strip() for x in (bad.get("message") or bad.text or "").splitlines() if x.strip()]
            failed.append(f"{name}: {' '.join(lines[:2])[:300]}")
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    return {"passed": passed, "failed": len(failed), "skipped": skipped, "failures": failed}


def test(python: Path, junit: Path, pytest_args: list[str], log: Path) -> dict[str, Any]:
    junit.unlink(missing_ok=True)
    cmd = [str(python), "-m", "pytest", "-m", "torch_versions", "-p", "no:cacheprovider", "-q"]
    cmd += [f"--junitxml={junit}", *pytest_args]
    start = time.perf_counter()
    # this repository's src first: the environment's editable install may point to another checkout
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)
    rc = run(cmd, log, {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"})
    return {"pytest_exit": rc, "test_seconds": round(time.perf_counter() - start, 1), **counts(junit)}


def load() -> list[dict[str, Any]]:
    path = RESULTS.with_suffix(".json")
    return json.loads(path.read_text())["rows"] if path.exists() else []


def version_key(row: dict[str, Any]) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", base_version(row["torch"]))[:3])


def unmet(why: str, version: str) -> str:
    """The parts of ``why`` ("NAME VERSION needs torch SPEC; ...") whose SPEC excludes torch ``version``."""
    try:
        from packaging.specifiers import SpecifierSet
    except ImportError:
        return why
    parts = why.split("; ")
    found = [re.search(r"needs torch(.+)$", p) for p in parts]
    return "; ".join(
        p
        for p, m in zip(parts, found, strict=True)
        if not m or base_version(version) not in SpecifierSet(m[1])
    )


def kept_cell(row: dict[str, Any], target: str) -> str:
    got = row.get("kept_by", {}).get(target)
    if got is None:
        return row.get("kept_note", "-")
    return "yes" if got["kept"] else f"no: {got.get('pip_would_install', '?')}"


def write(rows: list[dict[str, Any]]) -> None:
    rows = sorted(rows, key=lambda r: (version_key(r), r["source"]))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "minimum": minimum(),
        "pinned": pinned(),
        "selection": "python -m pytest -m torch_versions -p no:cacheprovider -q",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "rows": rows,
    }
    heads = " | ".join(f"kept by `pip install -e {t}`" for t in TARGETS)
    lines = [
        "### torch versions",
        "",
        "`python -m pytest -m torch_versions` (written by `benchmarks/torch_versions.py`) in one "
        "environment per torch version, torch installed first, then the repository without the constraints "
        f"file; {payload['machine']}. pyproject.toml: torch>={payload['minimum']}; constraints/cpu.txt: "
        f"torch=={payload['pinned']}. *kept*: a dry run of pip leaves the installed torch as it is; where "
        "it would not for `.[dev]`, that install and the tests ran with the version held (`-c torch==X`).",
        "",
        f"| torch | installed from | {heads} | passed | failed | skipped | tests s | python | date |",
        "|---|---|" + "---|" * len(TARGETS) + "---|---|---|---|---|---|",
    ]
    notes = []
    for r in rows:
        cells = " | ".join(kept_cell(r, t) for t in TARGETS)
        lines.append(
            f"| {r['torch']} | {r['source']} | {cells} | {r['passed']} | {r['failed']} | {r['skipped']} "
            f"| {r['test_seconds']} | {r['python']} | {r['date']} |"
        )
        for target, got in r.get("kept_by", {}).items():
            if not got["kept"]:
                got["why"] = unmet(got.get("why", ""), r["torch"])
                notes.append(f"- torch {r['torch']}, `pip install -e {target}`: {got['why']}")
        by_message: dict[str, list[str]] = {}
        for failure in r.get("failures", []):
            name, _, message = failure.partition(": ")
            by_message.setdefault(message, []).append(name)
        for message, names in by_message.items():
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            notes.append(f"- torch {r['torch']}: {len(names)} failed with `{message}`: {shown}")
    RESULTS.with_suffix(".json").write_text(json.dumps(payload, indent=2) + "\n")
    RESULTS.with_suffix(".md").write_text("\n".join([*lines, "", *notes]).rstrip() + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--versions", nargs="+", help=f"torch versions (default: {NEWEST} and pyproject's minimum)"
    )
    ap.add_argument(
        "--venv-root",
        type=Path,
        default=Path("~/.cache/advantage-torch-venvs").expanduser(),
        help="where the environments live, one folder per version",
    )
    ap.add_argument(
        "--skip-install", action="store_true", help="run the tests in the existing environments as they are"
    )
    ap.add_argument("--no-local", action="store_true", help="leave out the repository's .venv row")
    ap.add_argument(
        "--local-venv", type=Path, default=ROOT / ".venv", help="the constraints-file environment"
    )
    ap.add_argument("--pytest-args", default="", help='more pytest arguments, e.g. "-n 0"')
    ap.add_argument("--write-only", action="store_true", help="rewrite the .md from the .json, run nothing")
    args = ap.parse_args()
    if args.write_only:
        write(load())
        return

    versions = sorted(
        {base_version(v) for v in args.versions or [NEWEST, minimum()]},
        key=lambda v: version_key({"torch": v}),
    )
    pytest_args = shlex.split(args.pytest_args)
    args.venv_root.mkdir(parents=True, exist_ok=True)
    no_cap = args.venv_root / "no-constraints.txt"
    no_cap.write_text("# empty: replaces a pip global.constraint for these environments' pip commands\n")
    env = {**os.environ, "PIP_CONSTRAINT": str(no_cap)}
    env.pop("PIP_REQUIRE_VIRTUALENV", None)
    today = datetime.date.today().isoformat()
    rows = {(r["torch_requested"], r["source"]): r for r in load()}

    plan: list[tuple[str, str, Path]] = [(v, "PyPI", args.venv_root / v) for v in versions]
    if not args.no_local and (args.local_venv / "bin" / "python").exists():
        plan.append((pinned(), "constraints/cpu.txt", args.local_venv))
    for version, source, venv in plan:
        print(f"== torch {version} ({source}): {venv}", flush=True)
        label = version if source == "PyPI" else f"local-{version}"
        log = args.venv_root / f"{label}.log"
        log.write_text("")
        python = venv / "bin" / "python"
        row: dict[str, Any] = {"torch_requested": version, "source": source}
        if source == "constraints/cpu.txt":
            row["kept_note"] = "n/a: `-c constraints/cpu.txt`"
        elif args.skip_install and (venv / "record.json").exists():
            record = json.loads((venv / "record.json").read_text())
            row.update(record, kept=record["kept_by"]["."]["kept"])
            row["tests_held"] = not record["kept_by"][".[dev]"]["kept"]
        else:
            row.update(install(version, venv, env, log))
        have = probe(python)
        if have is None:
            raise SystemExit(f"no torch in {venv}; see {log}")
        row["torch"], row["python"] = have
        row.update(test(python, args.venv_root / f"{label}.junit.xml", pytest_args, log))
        row["date"] = today
        row["pytest_args"] = pytest_args
        rows[(version, source)] = row
        print(
            f"   torch {row['torch']}: kept {row.get('kept', '-')}, {row['passed']} passed, "
            f"{row['failed']} failed, {row['skipped']} skipped in {row['test_seconds']} s (log: {log})",
            flush=True,
        )
        write(list(rows.values()))
    print(f"-> {RESULTS.with_suffix('.md').relative_to(ROOT)}")


if __name__ == "__main__":
    main()
