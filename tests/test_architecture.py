"""The shape of the package: imports point down only.

The import graph is read from the source with :mod:`ast` (nothing is imported). A module depends on the
module it names: ``import advantage.a.b`` and ``from advantage.a.b import x`` on ``advantage.a.b``;
``from advantage.a import b`` on ``advantage.a.b`` when ``b`` is a module, else on the package
``advantage.a``. An import runs at module level (when the module is imported), lazily (inside a
function: late, when every module is loaded, the usual way to keep start-up fast), or never (under
``if TYPE_CHECKING:``: it only names a type). The rules:

* no import cycle, lazy imports included (a lazy circle is a layering knot all the same); code named by
  a string (the registry's ``Entry("advantage.algos.ppo:train")``) is not an import;
* the layers below the algorithms never import them: :data:`BELOW_ALGOS` lists those packages and modules;
* an algorithm (a module whose ``train`` the registry names) never imports another algorithm, and no
  module under ``advantage.algos`` imports an entry point (:data:`ENTRY_POINTS`): shared code lives in a
  module named for what it holds.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "advantage"
ALGOS = "advantage.algos"

# Packages and modules that sit below the algorithms: nothing in them may import ``advantage.algos``.
BELOW_ALGOS = (
    "advantage.math",
    "advantage.nn",
    "advantage.lm",
    "advantage.optim",
    "advantage.kernels",
    "advantage.envs",
    "advantage.data",
    "advantage.rollout",
    "advantage.registry",
    "advantage.config",
    "advantage.configs",
    "advantage.checkpoint",
    "advantage.config_sources",
    "advantage.safe_io",
    "advantage.monitoring",
    "advantage.schedules",
    "advantage.versions",
    "advantage.hyperparams",
    "advantage.torch_state",
    "advantage.evaluation",
    "advantage.distributed",
    "advantage.context",
    "advantage.resolve",
    "advantage.run_folder",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name."""
    return {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names (relative imports resolved against ``importer``)."""
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


TOP, LAZY, TYPES = "top", "lazy", "types"  # when an import runs: at import time, in a function, never


def imports(known: dict[str, Path], name: str, path: Path) -> list[tuple[str, str]]:
    """``(imported module, when)`` for every import of a package module in ``name``; ``when`` is
    :data:`TOP`, :data:`LAZY` or :data:`TYPES`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    top = set()  # the import statements that run at import time (also in module-level if/try blocks)
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            top.add(id(node))
        elif isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
        elif isinstance(node, ast.If | ast.Try):
            stack.extend(ast.iter_child_nodes(node))
        elif isinstance(node, ast.ExceptHandler):
            stack.extend(node.body)
    types = set()  # the import statements under ``if TYPE_CHECKING:``, at any depth
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _type_checking(node):
            types.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = _resolve(name, path.name == "__init__.py", node)
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                targets.append(sub if sub in known else mod)
        when = TYPES if id(node) in types else TOP if id(node) in top else LAZY
        for target in targets:
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                out.append((target, when))
    return out


@functools.cache
def _package_imports() -> dict[str, list[tuple[str, str]]]:
    known = modules()
    return {name: imports(known, name, path) for name, path in known.items()}


def graph(*, module_level_only: bool, types: bool = True) -> dict[str, set[str]]:
    """Module → the package modules it imports: at import time only, or also lazily; with ``types``, also
    those that only name a type (for the layering rules a type from a layer above is a dependency too)."""
    allowed = {TOP} if module_level_only else {TOP, LAZY, TYPES} if types else {TOP, LAZY}
    return {
        name: {target for target, when in found if when in allowed and target != name}
        for name, found in _package_imports().items()
    }


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(out)


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_import_walk_sees_the_package():
    """The walk can fail: it finds the modules and the imports it is meant to judge."""
    g = graph(module_level_only=False)
    assert "advantage.algos.llm.grpo" in g and "advantage.math" in g
    assert "advantage.math" in g["advantage.algos.llm.grpo"]
    # registry names RunContext under TYPE_CHECKING only: an import for the layers, none for cycles
    assert "advantage.context" in g["advantage.registry"]
    assert "advantage.context" not in graph(module_level_only=True)["advantage.registry"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_at_module_level():
    found = cycles(graph(module_level_only=True))
    assert not found, "import cycles among module-level imports:\n" + "\n".join(map(" -> ".join, found))


# Registration by name: the registry imports the config package once, lazily, so that each config module
# registers its algorithm (they import the registry to do so). The one circle the rules allow.
REGISTRATION = ("advantage.registry", "advantage.configs")


def test_no_import_cycles_lazy_imports_included():
    """Imports inside functions count too (only ``TYPE_CHECKING`` imports, which never run, do not)."""
    g = graph(module_level_only=False, types=False)
    assert REGISTRATION[1] in g[REGISTRATION[0]]  # the exception names an edge that exists
    g[REGISTRATION[0]].discard(REGISTRATION[1])
    found = cycles(g)
    assert not found, "import cycles (lazy imports included):\n" + "\n".join(map(" -> ".join, found))


def test_the_walk_tells_lazy_and_type_only_imports(tmp_path):
    """The walk can fail: a lazy import is an edge of the full graph, a ``TYPE_CHECKING`` one is not."""
    known = {
        "advantage.a": tmp_path / "a.py",
        "advantage.b": tmp_path / "b.py",
        "advantage.c": tmp_path / "c.py",
    }
    path = tmp_path / "a.py"
    path.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import advantage.b\n"
        "def f():\n    import advantage.c\nimport advantage\n",
        encoding="utf-8",
    )
    assert sorted(imports(known, "advantage.a", path)) == [
        ("advantage", TOP),
        ("advantage.b", TYPES),
        ("advantage.c", LAZY),
    ]


@pytest.mark.parametrize("below", BELOW_ALGOS)
def test_the_layers_below_the_algorithms_do_not_import_them(below):
    g = graph(module_level_only=False)
    bad = sorted(
        f"{src} imports {dst}"
        for src, targets in g.items()
        if _in(src, below)
        for dst in targets
        if _in(dst, ALGOS)
    )
    assert not bad, "\n".join(bad)


# Every module under advantage.algos outside the language-model trainers (found on disk, so a new file is
# covered without being listed), the classic networks and the optimizer step.
CLASSIC = (
    "advantage.nn",
    "advantage.optim",
    *sorted(m for m in modules() if _in(m, ALGOS) and m != ALGOS and not _in(m, f"{ALGOS}.llm")),
)


def test_the_classic_list_is_found_on_disk():
    assert {"advantage.algos.dqn_probe", "advantage.algos.tabular.planning", "advantage.algos.ppo"} <= set(
        CLASSIC
    )
    assert not any("llm" in m for m in CLASSIC)


@pytest.mark.parametrize("classic", CLASSIC)
def test_the_classic_code_never_imports_the_language_model_code(classic):
    """The classic networks, the optimizer step and the classic trainers stay clear of ``advantage.lm``
    (model code that needs the ``llm`` extra for most of what it does)."""
    g = graph(module_level_only=False)
    assert any(_in(src, classic) for src in g), classic
    bad = sorted(
        f"{src} imports {dst}"
        for src, targets in g.items()
        if _in(src, classic)
        for dst in targets
        if _in(dst, "advantage.lm")
    )
    assert not bad, "\n".join(bad)


MAX_FUNCTION_LINES = 120


@functools.cache
def _trees() -> dict[str, ast.Module]:
    return {
        name: ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, path in modules().items()
    }


def long_functions(limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``module:qualified.name (N lines)`` for every function or method of the package (nested ones
    included) longer than ``limit`` lines, from its ``def`` line to its last line."""
    out = []
    for name, tree in _trees().items():
        stack: list[tuple[ast.AST, str]] = [(tree, "")]
        while stack:
            node, prefix = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    qual = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        lines = (child.end_lineno or child.lineno) - child.lineno + 1
                        if lines > limit:
                            out.append(f"{name}:{qual} ({lines} lines)")
                    stack.append((child, qual + "."))
                else:
                    stack.append((child, prefix))
    return sorted(out)


def test_the_function_walk_sees_every_function():
    """The walk can fail: with a low enough limit it names methods and nested functions."""
    found = long_functions(limit=3)
    assert any(f.startswith("advantage.rollout.envsteps:EnvSteps.record (") for f in found)
    assert any(f.startswith("advantage.rollout.remote:EnvWorker.rollout.normalise (") for f in found)


def test_no_function_is_longer_than_120_lines():
    found = long_functions()
    assert not found, f"functions longer than {MAX_FUNCTION_LINES} lines (split them):\n" + "\n".join(found)


ENTRY_POINTS = ("advantage.cli", "advantage.runs", "advantage.__main__", "advantage.sweep")


@functools.cache
def algorithm_modules() -> frozenset[str]:
    """The modules whose ``train`` the registry names (``Entry("advantage.algos.ppo:train")``)."""
    from advantage.registry import all_algorithms

    return frozenset(a.train.target.partition(":")[0] for a in all_algorithms().values())


def test_the_algorithm_modules_are_found():
    found = algorithm_modules()
    assert {"advantage.algos.ppo", "advantage.algos.dqn", "advantage.algos.llm.grpo"} <= found
    assert all(m.startswith(ALGOS + ".") for m in found) and len(found) >= 12


def test_an_algorithm_imports_no_other_algorithm():
    g = graph(module_level_only=False)
    algos = algorithm_modules()
    bad = sorted(f"{src} imports {dst}" for src in algos for dst in g[src] if dst in algos and dst != src)
    assert not bad, "\n".join(bad)


def test_no_algorithm_code_imports_an_entry_point():
    g = graph(module_level_only=False)
    bad = sorted(
        f"{src} imports {dst}"
        for src, targets in g.items()
        if _in(src, ALGOS)
        for dst in targets
        if any(_in(dst, e) for e in ENTRY_POINTS)
    )
    assert not bad, "\n".join(bad)


MAX_FILE_LINES = 650


def test_no_module_is_over_the_line_limit():
    """A module that grows past this has two jobs: split it along its seam (the issue that set the limit
    split runs, safe_read, lean, datasets, grpo, the LM common module and config)."""
    long = {n: len(p.read_text(encoding="utf-8").splitlines()) for n, p in modules().items()}
    assert len(long) > 100
    bad = sorted(f"{n}: {k} lines" for n, k in long.items() if k > MAX_FILE_LINES)
    assert not bad, "\n".join(bad)


def test_no_config_parameter_is_typed_any():
    """A function taking a run's config says which: the config dataclass, or a Protocol naming the
    sections it reads (advantage.config.RunConfig and its kin), never ``cfg: Any``."""
    bad, seen = [], 0
    for name, tree in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                    if a.arg == "cfg":
                        seen += 1
                        if isinstance(a.annotation, ast.Name) and a.annotation.id == "Any":
                            bad.append(f"{name}:{node.name}")
    assert seen > 50  # the walk sees the config parameters it judges
    assert not bad, "\n".join(sorted(bad))
