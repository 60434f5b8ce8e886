"""Sources are cited by name: no "seed 003" (the file number of one of the study notes, meaningless to a
reader) in the package, the docs, the examples or the README. docs/sources.md describes the notes."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED_NOTE = re.compile(r"\bseeds?\s+0\d\d\b", re.IGNORECASE)
SUFFIXES = {".py", ".md", ".yml", ".yaml", ".toml", ".txt", ".json"}


def _files() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder in ("src", "docs", "examples"):
        files += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    return files


def test_the_pattern_finds_the_file_numbers_and_nothing_else():
    hits = ["seed 003", 'Seed 002\'s "Monte Carlo"', "(seeds 000/003)", "seed  001"]
    misses = ["--seed 123", "trainer.seed=0", "seed 0", "the seed 1000 run", "seed_000"]
    assert all(SEED_NOTE.search(s) for s in hits)
    assert not any(SEED_NOTE.search(s) for s in misses)


def test_no_study_note_file_numbers_in_the_package_docs_or_examples():
    found = [
        f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
        for path in _files()
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if SEED_NOTE.search(line)
    ]
    assert not found, "cite the paper (or 'the study notes', see docs/sources.md):\n" + "\n".join(found)
