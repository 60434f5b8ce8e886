"""Griffe extension for the docs build: render the reStructuredText bits of advantage's docstrings.

The source docstrings are Google style but use a few reST constructs (``:math:`...```, ``.. math::``
blocks, ``:func:`name``` roles, ``text::`` literal blocks, ``>>>`` examples). mkdocstrings renders
docstrings as Markdown, where those come out garbled (``_`` in formulas turns into emphasis, ``>>>``
into nested quotes). This extension rewrites each docstring once the package is loaded:

* ``:math:`x``` becomes ``$x$`` and a ``.. math::`` block becomes ``$$ ... $$`` (pymdownx.arithmatex
  then hands them to MathJax);
* ``:func:`name``` / ``:class:`` / ``:mod:`` / ``:meth:`` / ``:attr:`` / ``:data:`` / ``:exc:`` become
  an optional cross-reference (a link when the target is rendered somewhere in the site, plain code
  otherwise; optional references never fail a ``--strict`` build);
* a paragraph ending in ``::`` loses one colon (its indented block is already a Markdown code block);
* a paragraph of ``>>>`` lines becomes a fenced ``pycon`` block.

It only changes what the docs show; the source files are not touched. Loaded from mkdocs.yml
(``plugins.mkdocstrings.handlers.python.options.extensions``); excluded from the built site.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?P<role>math|func|class|mod|meth|attr|data|exc|obj):`(?P<body>[^`]+)`")
_MATH_DIRECTIVE = re.compile(r"^(?P<indent>\s*)\.\. math::\s*$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _math_blocks(lines: list[str]) -> list[str]:
    """``.. math::`` + indented lines  ->  ``$$`` + dedented lines + ``$$``."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _MATH_DIRECTIVE.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        base = len(m.group("indent"))
        i += 1
        body: list[str] = []
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > base):
            body.append(lines[i])
            i += 1
        while body and not body[-1].strip():
            body.pop()
        content = [b for b in body if b.strip()]
        strip = min((_indent(b) for b in content), default=0)
        pad = " " * base
        if out and out[-1].strip():
            out.append("")
        out.append(pad + "$$")
        out.extend(pad + b[strip:] for b in content)
        out.append(pad + "$$")
        if i < len(lines) and lines[i].strip():
            out.append("")
    return out


def _literal_paragraphs(lines: list[str]) -> list[str]:
    """``text::`` before an indented block -> ``text:``; ``>>>`` paragraphs -> fenced pycon blocks."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>") and (i == 0 or not lines[i - 1].strip()):
            pad = " " * _indent(line)
            out.append(pad + "```pycon")
            while i < len(lines) and lines[i].strip():
                out.append(lines[i])
                i += 1
            out.append(pad + "```")
            continue
        if line.rstrip().endswith("::") and not line.lstrip().startswith(".."):
            line = line.rstrip()[:-1]
        out.append(line)
        i += 1
    return out


class RstMarkup(griffe.Extension):
    """Rewrite reST markup in every docstring of a loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        self._loader = loader
        self._visit(pkg, seen=set())

    # -- walking -----------------------------------------------------------------------------------
    def _visit(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            obj.docstring.value = self._rewrite(obj.docstring.value, obj)
        for member in obj.members.values():
            if not member.is_alias:
                self._visit(member, seen)

    # -- rewriting ---------------------------------------------------------------------------------
    def _rewrite(self, text: str, obj: griffe.Object) -> str:
        lines = _literal_paragraphs(_math_blocks(text.splitlines()))
        return _ROLE.sub(lambda m: self._role(m.group("role"), m.group("body"), obj), "\n".join(lines))

    def _role(self, role: str, body: str, obj: griffe.Object) -> str:
        if role == "math":
            return f"${body}$"
        short = body.startswith("~")
        name = body.lstrip("~").rstrip("()")
        title = name.rsplit(".", 1)[-1] if short else name
        target = self._resolve(name, obj)
        code = f"<code>{title}</code>"
        if target is None:
            return code
        return f'<autoref identifier="{target}" optional>{code}</autoref>'

    # -- name resolution ---------------------------------------------------------------------------
    def _lookup(self, path: str) -> Any:
        try:
            return self._loader.modules_collection[path]
        except Exception:  # not loaded, or an alias that cannot be followed yet
            return None

    def _canonical(self, found: Any) -> str | None:
        for _ in range(8):  # follow re-exports: advantage.math.gae -> advantage.math.returns.gae
            if found is None:
                return None
            if not getattr(found, "is_alias", False):
                return found.path
            found = self._lookup(found.target_path)
        return None

    def _resolve(self, name: str, obj: griffe.Object) -> str | None:
        if "." in name:
            return self._canonical(self._lookup(name))
        scope: Any = obj
        while scope is not None:
            member = scope.members.get(name) if hasattr(scope, "members") else None
            if member is not None:
                return self._canonical(member)
            scope = scope.parent
        return None
