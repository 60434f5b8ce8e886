"""The commands in the README's and the docs' code blocks, checked against the CLI so the docs cannot drift:
every one parses with `advantage`'s own parser, names a registered algorithm, and its keys, values and
presets pass the config validation; the cheap ones (`advantage list`, `--version`) are run. A few claims of
the prose (how many subcommands, the default algorithm, each algorithm's default env) are checked too."""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

import pytest

from advantage.cli import _split_algo, build_parser, main
from advantage.config_sources import load_yaml, parse_overrides
from advantage.registry import ALGORITHMS, all_algorithms
from advantage.resolve import DEFAULT_ALGO, resolve_config

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Stand-ins for a folder the reader has (runs/<run>, RUN, runs/OLD, ...): such a command is only parsed.
PLACEHOLDER = re.compile(r"<[^>]*>|\bRUN(_[AB])?\b|\bOLD\b|\.\.\.|my_config\.yaml|prefs\.jsonl")


def _commands() -> list[tuple[str, str]]:
    """``(where, command)`` for every ``advantage ...`` command in a fenced code block."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for block in re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S):
            joined = re.sub(r"\\\n\s*", " ", block)  # line continuations
            for line in joined.splitlines():
                line = re.split(r"\s+#\s", line, maxsplit=1)[0].strip()  # a trailing comment
                for part in line.split("&&"):
                    part = part.strip()
                    if part.startswith("advantage ") or part == "advantage":
                        found.append((f"{page.relative_to(ROOT)}: {part}", part))
    return found


COMMANDS = _commands()


def test_the_docs_have_commands_to_check():
    assert len(COMMANDS) > 60
    assert any("sweep" in c for _, c in COMMANDS) and any("grpo" in c for _, c in COMMANDS)


def _parse(argv: list[str]):
    """What ``advantage.cli.main`` does before running the command."""
    parser = build_parser()
    ns, extra = parser.parse_known_args(argv)
    target = {"train": "args", "sweep": "args", "resume": "overrides"}.get(ns.command)
    assert not extra or (target and all("=" in x and not x.startswith("-") for x in extra)), extra
    if extra:
        setattr(ns, target, [*getattr(ns, target), *extra])
    return ns


@pytest.mark.parametrize("where, command", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_documented_command_is_valid(where, command, monkeypatch):
    argv = shlex.split(re.sub(r"<[^>]*>", "PLACEHOLDER", command))[1:]
    if argv in (["list"], ["--version"]) or argv[:1] == ["list"]:
        with pytest.raises(SystemExit) if argv == ["--version"] else _nothing():
            assert main(argv) == 0
        return
    try:
        ns = _parse(argv)
    except SystemExit as e:
        pytest.fail(f"{where}: the CLI's parser rejects it (exit {e.code})")
    if ns.command not in ("train", "sweep"):
        return
    algo, rest = _split_algo(ns.args)
    assert algo is None or algo in all_algorithms(), f"{where}: unknown algorithm {algo!r}"
    config = ns.config
    if PLACEHOLDER.search(command) or (config and not (ROOT / config).is_file()):
        return  # a folder or file of the reader's: the rest depends on it
    overrides = parse_overrides(rest)
    if ns.command == "sweep":
        from advantage.sweep import parse_grid

        for key, values in parse_grid(ns.grid or []).items():
            overrides[key] = values[0]
    # The schema (keys, types, ranges, presets, env ids and kwargs) is checked; an algorithm's own check
    # (model folders, datasets, reward models the reader trains first) is not.
    name = algo or (load_yaml(ROOT / config).get("algo") if config else None) or DEFAULT_ALGO
    spec = all_algorithms()[name]
    monkeypatch.setitem(ALGORITHMS, name, dataclasses.replace(spec, check=None))
    monkeypatch.chdir(ROOT)
    resolve_config(algo, config, overrides)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_index_counts_the_subcommands_and_names_the_default_algorithm():
    text = (ROOT / "docs" / "index.md").read_text()
    numbers = {"four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}
    count = re.search(r"The `advantage` command has (\w+) subcommands", text)
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert count and numbers[count.group(1)] == len(sub.choices), count and count.group(0)
    default = re.search(r"`train \[ALGO\] \[key=value \.\.\.\]` uses `(\w+)`", text)
    assert default and default.group(1) == DEFAULT_ALGO


def test_concepts_gives_each_algorithms_default_env():
    text = (ROOT / "docs" / "concepts.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `env` |"))
    claims = re.findall(r"`([\w/-]+-v\d+)` for ((?:`\w+`(?:, | and )?)+)", row)
    assert claims, row
    for env_id, algos in claims:
        for algo in re.findall(r"`(\w+)`", algos):
            assert resolve_config(algo)[1].env.id == env_id, (algo, env_id)
