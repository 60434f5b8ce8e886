"""The numbers quoted in the docs match the results files they cite.

Every measured number in a docs page (or the README) comes from a results file under
``benchmarks/results/`` that a committed script writes. A page says which file a passage quotes, and which
value each number is, with HTML comments (the rendered page does not show them):

* ``<!-- results: benchmarks/results/NAME.json -->`` opens a *checked region*, up to the next heading, the
  next ``results`` marker or ``<!-- /results -->``.
* In it, a number followed directly by ``<!-- =PATH -->`` quotes the value at PATH in that file, rounded to
  the digits shown: ``**0.872**<!-- =dpo.hidden_score -->`` (``6.98e11``: to the digits of its mantissa;
  ``10,156``: to the unit).
  A unit may sit between the number and the comment (``0.45×``, ``17 %``). PATH is dotted keys and list
  indices (``runs[0].accuracy``); ``[key=value]`` keeps the list items whose ``key`` is ``value``; a key
  applied to a list maps over it; ``median(PATH)``, ``mean``, ``min``, ``max`` reduce a list; a trailing
  ``* K`` scales (``* 1000`` for milliseconds, ``* 100`` for percent).
* Every number with two or more decimals and every bold number in a checked region needs such a reference
  (numbers in math, code, link targets and comments are not quotes).
* ``--8<-- "benchmarks/results/NAME.md"`` includes a results table as the script wrote it.
* There is no way to quote a number measured by hand: a passage whose numbers no script writes says what
  was found without them (and the command that shows it). An ``<!-- unsourced: … -->`` marker, which
  earlier versions of the pages used for such passages, is an error.

Each cited results file must exist and be written by a committed script: a ``benchmarks/*.py`` names it.
Nothing here trains anything; the whole module runs in well under a second.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

MARKER = re.compile(r"<!--\s*(results)\s*:(.*?)-->|<!--\s*/results\s*-->", re.S)
UNSOURCED = re.compile(r"<!--\s*unsourced\b", re.I)
HEADING = re.compile(r"^#{1,6} ", re.M)
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
NUMBER = r"[−+-]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[−+-]?\d+)?"
# A number, an optional unit, an optional closing **, then the reference comment.
REF = re.compile(
    rf"(?P<num>{NUMBER})(?P<unit>[ \u00a0]?(?:×|%|ms|s|min|x))?(?P<bold>\*\*)?[ \t]*<!--\s*=(?P<path>.*?)-->",
    re.S,
)
INLINE_CODE = re.compile(r"`[^`\n]+`")
SNIPPET = re.compile(r"""^--8<--\s+["']?(?P<path>[^"'\s]+)["']?\s*$""", re.M)
REDUCERS: dict[str, Callable[[list[float]], float]] = {
    "median": statistics.median,
    "mean": statistics.fmean,
    "min": min,
    "max": max,
}
# Not quotes: fenced code, HTML comments, display and inline math, inline code, link targets, snippet lines.
NOT_PROSE = [
    FENCE,
    re.compile(r"<!--.*?-->", re.S),
    re.compile(r"\$\$.*?\$\$", re.S),
    re.compile(r"\$[^$\n]+\$"),
    re.compile(r"\]\([^)\n]*\)|\]\[[^\]\n]*\]"),
    SNIPPET,
]
UNREFERENCED = re.compile(r"(?<![\w.])\d+\.\d{2,}(?![\w.])|\*\*[^*\n]*\d[^*\n]*\*\*")


@dataclass
class Region:
    kind: str  # "results" or "" (outside any marker)
    arg: str  # the results file
    start: int
    end: int


def code_masked(text: str) -> str:
    """``text`` with fenced and inline code blanked (same length and lines): markers, references and
    headings shown as code are not markers, references and headings."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    return INLINE_CODE.sub(blank, FENCE.sub(blank, text))


def regions(text: str) -> list[Region]:
    """The page (code already masked) cut at its markers and headings."""
    cuts: list[tuple[int, int, str, str]] = [(0, 0, "", "")]
    for m in MARKER.finditer(text):
        cuts.append((m.start(), m.end(), m.group(1) or "", (m.group(2) or "").strip()))
    for m in HEADING.finditer(text):
        cuts.append((m.start(), m.start(), "", ""))
    cuts.sort()
    ends = [c[0] for c in cuts[1:]] + [len(text)]
    return [Region(kind, arg, body, end) for (_, body, kind, arg), end in zip(cuts, ends, strict=True)]


def lookup(data: Any, expr: str) -> float:
    """The value of a reference (``PATH``, ``FN(PATH)``, either with ``* K``) in ``data``."""
    expr, _, scale = expr.partition("*")
    expr = expr.strip()
    reduce = None
    m = re.fullmatch(r"(\w+)\((.*)\)", expr)
    if m:
        if m.group(1) not in REDUCERS:
            raise ValueError(f"unknown function {m.group(1)!r} in {expr!r}; use one of {sorted(REDUCERS)}")
        reduce, expr = REDUCERS[m.group(1)], m.group(2).strip()
    value = data
    for token in re.findall(r"\[[^\]]*\]|[^.\[\]]+", expr):
        if token.startswith("[") and re.fullmatch(r"\[-?\d+\]", token):
            value = value[int(token[1:-1])]
        elif token.startswith("["):
            wanted = dict(kv.split("=", 1) for kv in token[1:-1].split(","))
            value = [v for v in value if all(str(v.get(k.strip())) == w.strip() for k, w in wanted.items())]
            if not value:
                raise KeyError(f"no item of the list matches {token} in {expr!r}")
        elif isinstance(value, list):
            value = [v[token] for v in value]
        else:
            if token not in value:
                raise KeyError(f"no key {token!r} in {expr!r} (keys there: {sorted(value)[:12]})")
            value = value[token]
    if reduce is not None:
        value = reduce(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{expr!r} is {value!r}, not a number")
    return float(value) * (float(scale) if scale.strip() else 1.0)


def matches(shown: str, value: float) -> bool:
    """Whether ``shown`` is ``value`` rounded to the digits shown (either way of rounding a half)."""
    shown = shown.replace(",", "")  # 10,156 is 10156
    mantissa, _, exponent = shown.replace("−", "-").partition("e")
    digits = len(mantissa.split(".")[1]) if "." in mantissa else 0
    number = float(shown.replace("−", "-"))
    step = 10.0 ** (int(exponent or 0) - digits)  # 6.98e11 is rounded to 1e9
    return math.isfinite(value) and abs(value - number) <= 0.5 * step * (1 + 1e-9) + 1e-9


def writer_of(path: Path) -> Path | None:
    """The committed benchmark script that writes the results file ``path``: its name is the file's stem
    or begins it (``pendulum_offpolicy.py --name pendulum_offpolicy_matched``), or its text names the stem."""
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        if path.stem == script.stem or path.stem.startswith(script.stem + "_"):
            return script
        if re.search(rf"\b{re.escape(path.stem)}\b", script.read_text()):
            return script
    return None


def check_page(text: str, root: Path = ROOT) -> list[str]:
    """Every problem with the quoted numbers of one page, as readable lines (empty: the page is right)."""
    problems: list[str] = []
    cache: dict[str, Any] = {}
    text = code_masked(text)

    def line(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    def results_file(arg: str, pos: int, parse: bool = True) -> Any:
        """The parsed JSON file ``arg`` (``parse``), after checking it exists and a script writes it."""
        if arg in cache:
            return cache[arg]
        cache[arg] = None
        f = root / arg
        if not arg.startswith("benchmarks/results/") or not f.is_file():
            problems.append(f"line {line(pos)}: results file {arg!r} is not a file under benchmarks/results/")
        elif root == ROOT and writer_of(f) is None:
            problems.append(f"line {line(pos)}: no benchmarks/*.py writes {arg!r}")
        elif parse and f.suffix != ".json":
            problems.append(f"line {line(pos)}: {arg!r}: references read a .json results file")
        elif parse:
            cache[arg] = json.loads(f.read_text())
        return cache[arg]

    for m in SNIPPET.finditer(text):
        if m.group("path").startswith("benchmarks/results/"):
            results_file(m.group("path"), m.start(), parse=False)
    for m in UNSOURCED.finditer(text):
        problems.append(
            f"line {line(m.start())}: an unsourced passage: quote numbers from a results file that a "
            "committed script writes, or say what was found without them"
        )
    for r in regions(text):
        body = text[r.start : r.end]
        data = results_file(r.arg, r.start) if r.kind == "results" else None
        for m in REF.finditer(body):
            at = line(r.start + m.start())
            if r.kind != "results":
                problems.append(f"line {at}: {m.group(0)!r} has no <!-- results: FILE --> above it")
                continue
            if data is None:
                continue
            try:
                value = lookup(data, m.group("path"))
            except (KeyError, IndexError, TypeError, ValueError) as e:
                problems.append(f"line {at}: {m.group('path').strip()!r} in {r.arg}: {e}")
                continue
            if not matches(m.group("num"), value):
                problems.append(
                    f"line {at}: the page says {m.group('num')} where {r.arg} has "
                    f"{m.group('path').strip()} = {value:.6g}"
                )
        if r.kind == "results":
            # A referenced bold number leaves an empty ****, not the end of one bold span and the start
            # of the next.
            prose = REF.sub(lambda m: "**" if m.group("bold") else "", body).replace("****", "")
            for pattern in NOT_PROSE:
                prose = pattern.sub(" ", prose)
            for m in UNREFERENCED.finditer(prose):
                problems.append(
                    f"line {line(r.start)}+: {m.group(0)!r} in the region of {r.arg} has no "
                    "<!-- =PATH --> reference"
                )
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_quoted_numbers_match_their_results_files(page: Path) -> None:
    problems = check_page(page.read_text())
    assert not problems, f"{page.relative_to(ROOT)}:\n" + "\n".join(problems)


def test_no_page_quotes_numbers_measured_by_hand() -> None:
    """No page or README passage is marked ``unsourced``: every quoted measurement has a results file."""
    found = [
        f"{page.relative_to(ROOT)}:{code_masked(text).count(chr(10), 0, m.start()) + 1}"
        for page in PAGES
        for text in [page.read_text()]
        for m in UNSOURCED.finditer(code_masked(text))
    ]
    assert not found, "unsourced passages left: " + ", ".join(found)


def test_the_language_model_pages_cite_their_results() -> None:
    """The pages of the LM trainers quote measurements; each says where they come from."""
    for name in ("dpo", "reward_models", "ppo_rlhf", "grpo", "language_models"):
        text = (ROOT / "docs" / "algorithms" / f"{name}.md").read_text()
        assert "<!-- results:" in text or SNIPPET.search(text), name


def test_the_checker_finds_wrong_missing_and_unreferenced_numbers(tmp_path: Path) -> None:
    res = tmp_path / "benchmarks" / "results"
    res.mkdir(parents=True)
    (res / "demo.json").write_text(
        json.dumps(
            {
                "dpo": {"win_rate": 0.5994},
                "norm": 6.98137e11,
                "steps": 10156,
                "runs": [{"lib": "a", "s": 0.0057}, {"lib": "b", "s": 0.0126}],
            }
        ),
    )
    good = (
        "# Page\n\n<!-- results: benchmarks/results/demo.json -->\n"
        "win rate **0.599**<!-- =dpo.win_rate --> after 10,156<!-- =steps --> steps and "
        "5.7 ms<!-- =median(runs[lib=a].s) * 1000 -->, "
        "max 12.6<!-- =max(runs.s)*1000 -->, over 3 seeds ‖w‖ **6.98e11**<!-- =norm -->;\n"
        "β = 0.1 and `lr = 0.003` are settings, not quotes.\n"
        "\n## Elsewhere\n\nOutside a region 0.123 is not checked.\n"
        "\n## Syntax\n\n`<!-- results: benchmarks/results/nope.json -->` and `0.5<!-- =x -->` are code.\n"
    )
    assert check_page(good, tmp_path) == []
    for old, new, problem in [
        ("**0.599**", "**0.872**", "says 0.872"),  # a wrong number
        ("**6.98e11**", "**6.97e11**", "says 6.97e11"),
        (
            "10,156<",
            "10,157<",
            "says 10,157",
        ),  # thousands separators  # scientific notation, rounded as shown
        ("<!-- =dpo.win_rate -->", "", "'**0.599**'"),  # a number without its source
        ("win rate", "accuracy 0.69 and win rate", "'0.69'"),  # a loose number in a checked region
        ("=dpo.win_rate", "=dpo.winrate", "no key 'winrate'"),  # a typo in the key
        ("demo.json", "nope.json", "is not a file"),  # a missing results file
        ("<!-- results: benchmarks/results/demo.json -->", "", "has no <!-- results"),  # no results file
        (
            "Outside a region",
            "<!-- unsourced: measured by hand -->",
            "an unsourced passage",
        ),  # no longer allowed
        ("Outside a region", "<!--unsourced-->", "an unsourced passage"),
    ]:
        assert old in good
        problems = check_page(good.replace(old, new), tmp_path)
        assert any(problem in p for p in problems), (old, new, problems)
