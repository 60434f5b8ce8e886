"""Bounded reading: every file the program reads (config and hyperparameter YAML, JSON of a model folder,
datasets in JSON, JSONL and Parquet) goes through these functions, so a hostile or broken file costs a
bounded amount of memory and time and ends in one line naming it, never a traceback.

The rules, each applied *before* the work it protects:

- **Size from the opened file, read with a cap.** :func:`read_bytes` opens the file once, refuses what is
  not a regular file (a FIFO would block, ``/dev/zero`` never ends) and a size over the limit from
  ``fstat``, then reads at most ``limit + 1`` bytes, so a file that grows while it is read is refused
  too. No size a file *claims* (a manifest, a Parquet footer) is trusted on its own.
- **Strict UTF-8**, the error naming the byte offset (:func:`decode_utf8`).
- **JSON depth counted without recursion** (:func:`json_too_deep`: strings removed, then the innermost
  bracket pairs peeled one level per pass), before :func:`json.loads` sees the text.
- **YAML events first** (:func:`parse_yaml`): the parser's event stream is counted (values, aliases,
  nesting) before a node graph is built, and the graph is walked, aliases and merge keys expanded, up to
  a node budget before anything is constructed; libyaml's parser where PyYAML has it (its own nesting
  limit, and no pure-Python scanner that is quadratic on ``[[[[…``).
- **Interpolations costed before they are resolved** (:func:`check_interpolations`): OmegaConf's
  ``${…}`` can make a few hundred bytes expand to gigabytes, or to millions of resolutions.
- **Parquet metadata before data** (:func:`read_parquet_rows`): the decoded size the footer declares is
  checked, then rows are decoded in batches whose decoded bytes and longest value are checked as they
  arrive, so a footer that lies still stops at the first batch over a limit.

Errors are :class:`~advantage.errors.ConfigError` unless the caller names another
:class:`~advantage.errors.AdvantageError` (a run folder's files: ``RunDirError``); the command line turns
each into one line and exit code 2.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from advantage.errors import AdvantageError, ConfigError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

# JSON and YAML nesting: data and configs are a handful of levels deep; Python's own parsers recurse.
MAX_DEPTH = 64
# A model folder's small JSON files (config.json, tokenizer_config.json, generation_config.json, ...).
MODEL_JSON_MAX_BYTES = 64 * MiB
# Its larger tokenizer files (tokenizer.json, vocab.json, merges.txt, tokenizer.model): read by the
# tokenizers library whole, so checked here first.
TOKENIZER_FILE_MAX_BYTES = 512 * MiB
CHAT_TEMPLATE_MAX_BYTES = 1 * MiB
# YAML: values after aliases are expanded, aliases written, nesting (config.py's limits, kept there).
YAML_MAX_ALIASES = 1000
# Interpolations: ``${…}`` resolutions OmegaConf would perform (it does not cache a string it resolved),
# and the characters they produce, over the whole config.
INTERPOLATION_MAX_RESOLUTIONS = 1000
INTERPOLATION_MAX_CHARS = 1 * MiB

Error = type[AdvantageError]


def _name(path: str | os.PathLike[str], what: str | None) -> str:
    return what if what is not None else repr(str(path))


# ----------------------------------------------------------------------------------------------------
# Bytes and text


def file_size(path: str | os.PathLike[str], what: str | None = None, *, error: Error = ConfigError) -> int:
    """The size of the regular file ``path`` from its opened descriptor (one line for a missing file, a
    folder, a FIFO or a device)."""
    fd = _open_regular(path, _name(path, what), error)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _open_regular(path: str | os.PathLike[str], name: str, error: Error) -> int:
    """A blocking read descriptor of the regular file ``path``. ``O_NONBLOCK`` at open: a FIFO neither
    blocks nor waits for a writer before it is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise error(f"{name}: no such file") from None
    except PermissionError:
        raise error(f"{name}: permission denied") from None
    except OSError as e:
        raise error(f"{name}: cannot be opened ({e.strerror or e})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise error(f"{name} is a folder, not a file")
        if not stat.S_ISREG(mode):
            raise error(f"{name} is not a regular file (a pipe or a device?)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(
    path: str | os.PathLike[str],
    limit: int,
    what: str | None = None,
    *,
    error: Error = ConfigError,
    hint: str = "",
) -> bytes:
    """The content of the regular file ``path``, refused (``what`` naming it, default its path) when it
    is over ``limit`` bytes: the size comes from the opened descriptor and at most ``limit + 1`` bytes
    are ever read, so nothing larger reaches memory. ``hint`` ends the over-the-limit message (``"; a
    config file is small"``)."""
    name = _name(path, what)
    fd = _open_regular(path, name, error)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise error(f"{name} is over {limit} bytes (it is {size} bytes){hint}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            try:
                # the size it has (a read of n bytes allocates n at once), then what it grew by, if anything
                data = f.read(size + 1)
                if len(data) > size:
                    data += f.read(limit + 1 - len(data))
            except OSError as e:
                raise error(f"{name}: cannot be read ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise error(f"{name} is over {limit} bytes (it grew while it was read){hint}")
    return data


def decode_utf8(data: bytes, what: str, *, error: Error = ConfigError) -> str:
    """``data`` as strict UTF-8; the error names ``what`` and the offset of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{what}: not valid UTF-8 (byte {e.start})") from None


def read_text(
    path: str | os.PathLike[str],
    limit: int,
    what: str | None = None,
    *,
    error: Error = ConfigError,
    hint: str = "",
) -> str:
    """:func:`read_bytes` decoded as strict UTF-8 (:func:`decode_utf8`)."""
    return decode_utf8(read_bytes(path, limit, what, error=error, hint=hint), _name(path, what), error=error)


# ----------------------------------------------------------------------------------------------------
# JSON

_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# every ASCII character but the brackets deleted, the brackets made into one kind of pair
_BRACKETS_ONLY = {i: None for i in range(128) if chr(i) not in "[]{}"} | str.maketrans("[]{}", "()()")


def json_too_deep(text: str, max_depth: int = MAX_DEPTH) -> bool:
    """Whether the JSON ``text`` nests arrays and objects deeper than ``max_depth`` levels, found without
    recursion and in time linear in the text per level: strings are removed, every other character but
    the brackets dropped, then each pass removes the innermost ``()`` pairs, one level per pass; a pair
    left after ``max_depth`` passes is deeper, and so are more than ``max_depth`` brackets never closed.
    Otherwise malformed text (an unterminated string, a character outside the ASCII range outside a
    string) answers something and is left for the parser to name."""
    brackets = _JSON_STRING.sub("", text).translate(_BRACKETS_ONLY)
    for _ in range(max_depth):
        peeled = brackets.replace("()", "")
        if len(peeled) == len(brackets):
            break  # nothing left to peel
        brackets = peeled
    else:
        if "()" in brackets:
            return True
    return brackets.count("(") > max_depth


def parse_json(
    text: str | bytes,
    what: str,
    *,
    max_depth: int = MAX_DEPTH,
    error: Error = ConfigError,
    line: bool = False,
) -> Any:
    """``json.loads`` whose every failure is one error naming ``what``: invalid UTF-8 (bytes), nesting
    over ``max_depth`` (checked first, :func:`json_too_deep`), malformed JSON (with its line, unless
    ``line``: ``what`` already names one line of a JSONL file), a number of thousands of digits."""
    if isinstance(text, bytes | bytearray):
        text = decode_utf8(bytes(text), what, error=error)
    if json_too_deep(text, max_depth):
        raise error(f"{what}: malformed JSON (nested deeper than {max_depth} levels)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        at = "" if line else f":{e.lineno}"
        raise error(f"{what}{at}: malformed JSON{' line' if line else ''} ({e.msg})") from None
    except RecursionError:
        raise error(f"{what}: malformed JSON (nested too deeply)") from None
    except ValueError as e:  # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        raise error(f"{what}: malformed JSON ({str(e)[:120]})") from None


def json_kind(value: Any) -> str:
    """The JSON type of a parsed value, for a message that never echoes the file's content."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def load_json(
    path: str | os.PathLike[str],
    limit: int,
    what: str | None = None,
    *,
    max_depth: int = MAX_DEPTH,
    error: Error = ConfigError,
    expect: type | None = None,
) -> Any:
    """The JSON value of the file ``path`` (:func:`read_bytes` with ``limit``, then :func:`parse_json`);
    ``expect=dict`` (or ``list``) refuses a value of another JSON type."""
    name = _name(path, what)
    value = parse_json(read_bytes(path, limit, name, error=error), name, max_depth=max_depth, error=error)
    if expect is not None and not isinstance(value, expect):
        want = "object" if expect is dict else "array" if expect is list else expect.__name__
        raise error(f"{name} must hold a JSON {want}, got a JSON {json_kind(value)}")
    return value


def iter_jsonl(
    path: str | os.PathLike[str],
    line_limit: int,
    what: str | None = None,
    *,
    max_depth: int = MAX_DEPTH,
    error: Error = ConfigError,
) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for every non-blank line of the JSONL file ``path``, one bounded line at a
    time: a line over ``line_limit`` bytes is refused before it is read whole, so memory never holds more
    than one line of text."""
    name = _name(path, what)
    fd = _open_regular(path, name, error)
    with os.fdopen(fd, "rb") as f:
        lineno = 0
        while raw := f.readline(line_limit + 1):
            lineno += 1
            if len(raw) > line_limit:
                raise error(f"{name}:{lineno}: line over {line_limit} bytes; a row must be smaller")
            where = f"{name}:{lineno}"
            text = decode_utf8(raw, where, error=error)
            if text.strip():
                yield lineno, parse_json(text, where, max_depth=max_depth, error=error, line=True)


# ----------------------------------------------------------------------------------------------------
# YAML


def _yaml_loader() -> Any:
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(
    text: str | bytes,
    what: str,
    *,
    where: str | None = None,
    max_nodes: int,
    max_depth: int = MAX_DEPTH,
    max_aliases: int = YAML_MAX_ALIASES,
    error: Error = ConfigError,
) -> Any:
    """The value of one YAML document, loaded safely and within bounds, else one error naming ``what``.

    Bytes must be UTF-8. The parser's events are counted first: more than ``max_nodes`` values, more
    than ``max_aliases`` aliases, or nesting deeper than ``max_depth`` stop the read before a node is
    built. The composed node graph is then walked with every alias and merge key (``<<: *a``) expanded,
    up to ``max_nodes`` nodes: aliases share one object in YAML but OmegaConf copies each use, and a
    merge copies the merged mapping's pairs, so 532 bytes can stand for 9^9 values. Only then is the
    document constructed. ``where`` is the file name syntax errors show (default ``what``)."""
    import yaml

    if isinstance(text, bytes | bytearray):
        text = decode_utf8(bytes(text), what, error=error)
    loader = _yaml_loader()
    too_big = f"{what}: more than {max_nodes} values once its aliases are expanded (an alias bomb?)"
    refused = "; refused before expanding it"
    try:
        if loader is yaml.SafeLoader and json_too_deep(text, max_depth):  # pure Python: no own limit
            raise error(f"{what}: nested deeper than {max_depth} levels{refused}")
        depth = nodes = aliases = 0
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                nodes += 1
                if depth > max_depth:
                    raise error(f"{what}: nested deeper than {max_depth} levels{refused}")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            elif isinstance(event, yaml.ScalarEvent | yaml.AliasEvent):
                nodes += 1
                if depth + 1 > max_depth:
                    raise error(f"{what}: nested deeper than {max_depth} levels{refused}")
                if isinstance(event, yaml.AliasEvent):
                    aliases += 1
                    if aliases > max_aliases:
                        raise error(f"{what}: more than {max_aliases} aliases (*name){refused}")
            if nodes > max_nodes:
                raise error(f"{too_big}{refused}")
        node = yaml.compose(text, Loader=loader)
        if node is None:
            return None
        why = _expanded_too_big(node, max_nodes, max_depth)
        if why:
            raise error(f"{what}: {why}{refused}")
        constructor = loader("")
        try:
            return constructor.construct_document(node)
        finally:
            constructor.dispose()
    except AdvantageError:
        raise  # ours, raised above (a ConfigError is also a ValueError)
    except yaml.YAMLError as e:
        detail = " ".join(str(e).split()).replace('"<unicode string>"', f'"{where or what}"')
        raise error(f"{what} is not valid YAML: {detail[:300]}") from None
    except RecursionError:
        raise error(f"{what} is not valid YAML (nested too deeply)") from None
    except (ValueError, TypeError, OverflowError) as e:  # a value PyYAML's constructors cannot build:
        # a date such as 2001-13-45, an integer of more than 4300 digits
        raise error(f"{what} is not valid YAML: {' '.join(str(e).split())[:200]}") from None


def _expanded_too_big(node: Any, max_nodes: int, max_depth: int) -> str | None:
    """Why the YAML node graph ``node`` is too big once every alias and merge is expanded, or None.
    Visits at most ``max_nodes + 1`` nodes, so a bomb costs nothing to detect."""
    import yaml

    stack, count = [(node, 1)], 0
    while stack:
        n, depth = stack.pop()
        count += 1
        if count > max_nodes:
            return f"more than {max_nodes} values once its aliases are expanded (an alias bomb?)"
        if depth > max_depth:
            return f"nested deeper than {max_depth} levels"
        if isinstance(n, yaml.MappingNode):
            for key, value in n.value:
                stack.append((key, depth + 1))
                stack.append((value, depth + 1))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend((v, depth + 1) for v in n.value)
    return None


def load_yaml_file(
    path: str | os.PathLike[str],
    limit: int,
    what: str | None = None,
    *,
    max_nodes: int,
    max_depth: int = MAX_DEPTH,
    max_aliases: int = YAML_MAX_ALIASES,
    error: Error = ConfigError,
    hint: str = "",
) -> Any:
    """:func:`read_bytes` (``limit``) then :func:`parse_yaml`."""
    name = _name(path, what)
    data = read_bytes(path, limit, name, error=error, hint=hint)
    return parse_yaml(
        data,
        name,
        where=str(path),
        max_nodes=max_nodes,
        max_depth=max_depth,
        max_aliases=max_aliases,
        error=error,
    )


# ----------------------------------------------------------------------------------------------------
# OmegaConf interpolations

# Resolvers whose first argument is a key of the config (its value is what they return).
_KEY_RESOLVERS = ("oc.select", "oc.deprecated", "oc.dict.keys", "oc.dict.values")
_PATH_PART = re.compile(r"\[([^\]]*)\]|([^.\[\]]+)")


_NESTED = "\x00"  # where a nested interpolation stood in the text of the one around it


class _Interp:
    """One ``${…}``: its text between the braces (each nested interpolation replaced by
    :data:`_NESTED`) and the interpolations nested in it, in order."""

    __slots__ = ("nested", "text")

    def __init__(self, text: str, nested: list[_Interp]):
        self.text, self.nested = text, nested


def _scan(s: str, i: int = 0, stop: str | None = None) -> tuple[list[_Interp], str, int]:
    """The interpolations in ``s`` from ``i`` (to the ``}`` closing the enclosing one when ``stop``),
    the text outside them (:data:`_NESTED` where each stood) and the index after the end. ``\\${`` is
    literal text, as OmegaConf reads it; quotes and braces inside an interpolation are kept balanced so a
    ``}`` in them does not close it."""
    found: list[_Interp] = []
    literal: list[str] = []
    braces = 0
    quote: str | None = None
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\" and i + 1 < n:
            literal.append(s[i : i + 2])
            i += 2
            continue
        if s.startswith("${", i):
            nested, text, i = _scan(s, i + 2, "}")
            found.append(_Interp(text, nested))
            literal.append(_NESTED)
            continue
        if stop is not None:
            if quote:
                quote = None if c == quote else quote
            elif c in "'\"":
                quote = c
            elif c == "{":
                braces += 1
            elif c == "}":
                if braces == 0:
                    return found, "".join(literal), i + 1
                braces -= 1
        literal.append(c)
        i += 1
    return found, "".join(literal), i


_DYNAMIC_KEY = (
    "a key built from another interpolation (${a.${b}}): its target, and so its cost, cannot be known "
    "before resolving it"
)


class _Costs:
    """Resolutions and characters of every interpolated value of a config tree (plain containers, as
    ``OmegaConf.to_container(resolve=False)`` gives), memoized per node. OmegaConf resolves a node each
    time it is referenced, so a reference costs one resolution plus all of its target's."""

    def __init__(self, tree: Any, what: str, error: Error):
        self.tree, self.what, self.error = tree, what, error
        self.memo: dict[tuple[Any, ...], tuple[int, int]] = {}
        self.active: set[tuple[Any, ...]] = set()

    def refuse(self, why: str) -> AdvantageError:
        return self.error(f"{self.what}: {why}; refused before resolving it")

    def over(self, cost: int, size: int) -> None:
        if cost > INTERPOLATION_MAX_RESOLUTIONS:
            raise self.refuse(
                f"its ${{…}} interpolations take more than {INTERPOLATION_MAX_RESOLUTIONS} resolutions "
                "(references to references: an interpolation bomb?)"
            )
        if size > INTERPOLATION_MAX_CHARS:
            raise self.refuse(
                f"its ${{…}} interpolations expand to more than {INTERPOLATION_MAX_CHARS} characters "
                "(an interpolation bomb?)"
            )

    def node(self, path: tuple[Any, ...]) -> tuple[int, int]:
        """``(resolutions, characters)`` of resolving the node at ``path`` (a container: all of it)."""
        if path in self.memo:
            return self.memo[path]
        if path in self.active:  # a cycle: OmegaConf reports it itself
            return 1, 0
        value = self._get(path)
        self.active.add(path)
        try:
            if isinstance(value, Mapping):
                parts = [self.node((*path, k)) for k in value]
                keys = sum(len(str(k)) for k in value)
                cost = (sum(p[0] for p in parts), sum(p[1] for p in parts) + keys)
            elif isinstance(value, list):
                parts = [self.node((*path, i)) for i in range(len(value))]
                cost = (sum(p[0] for p in parts), sum(p[1] for p in parts))
            elif isinstance(value, str) and "${" in value:
                cost = self._string(value, path)
            else:
                cost = (0, len(str(value)))
        finally:
            self.active.discard(path)
        self.memo[path] = cost
        self.over(*cost)
        return cost

    def _get(self, path: tuple[Any, ...]) -> Any:
        value = self.tree
        for part in path:
            value = value[part]
        return value

    def _find(self, base: tuple[Any, ...], key: str) -> tuple[Any, ...] | None:
        """The path of the node ``key`` names, relative to the container at ``base`` (None: no such node,
        which OmegaConf reports itself)."""
        value: Any = self._get(base)
        path = list(base)
        for bracket, plain in _PATH_PART.findall(key):
            part: Any = (bracket or plain).strip()
            if isinstance(value, Mapping):
                if part not in value:
                    return None
            elif isinstance(value, list):
                if not part.lstrip("-").isdigit() or not -len(value) <= int(part) < len(value):
                    return None
                part = int(part) % len(value)
            else:
                return None
            path.append(part)
            value = value[part]
        return tuple(path)

    def _string(self, s: str, path: tuple[Any, ...]) -> tuple[int, int]:
        found, literal, _ = _scan(s)
        cost, size = 0, len(literal) - len(found)
        for interp in found:
            c, n = self._interp(interp, path)
            cost, size = cost + c, size + n
            self.over(cost, size)
        return cost, size

    def _interp(self, interp: _Interp, path: tuple[Any, ...]) -> tuple[int, int]:
        """One ``${…}`` in the value at ``path``: one resolution, its nested interpolations, and the
        node it reads (a key, or the key argument of a selecting resolver)."""
        cost, size = 1, len(interp.text) - len(interp.nested)
        for inner in interp.nested:
            c, n = self._interp(inner, path)
            cost, size = cost + c, size + n
        text = interp.text.strip()
        resolver, colon, args = text.partition(":")
        key = text
        if colon and re.fullmatch(r"[A-Za-z_][\w.]*", resolver.strip()):
            name = resolver.strip()
            key = args.split(",", 1)[0].strip()
            if name == "oc.env":
                size += _longest_env() if _NESTED in key else len(os.environ.get(key, ""))
                return cost, size
            if name == "oc.decode":
                # it parses its argument as a config value and resolves any ${…} in the text it gets:
                # allowed for an environment variable or literal text without ${…}, not for the config's
                # own values, whose text could hold further interpolations
                if "${" in args or not all(_is_env(inner) for inner in interp.nested):
                    raise self.refuse(
                        "${oc.decode:…} of a config value or of text holding ${…}: what it resolves, and so "
                        "its cost, cannot be known before resolving it (decode an environment variable "
                        "instead)"
                    )
                return cost, size
            if name not in _KEY_RESOLVERS:
                return cost, size
        if _NESTED in key:
            raise self.refuse(_DYNAMIC_KEY)
        dots = len(key) - len(key.lstrip("."))
        base = path[: len(path) - dots] if dots else ()
        try:
            target = self._find(base, key[dots:]) if key[dots:] else base
        except (KeyError, IndexError, TypeError):
            target = None
        if target is None:
            return cost, size
        c, n = self.node(target)
        return cost + c, size + n


def _is_env(interp: _Interp) -> bool:
    return interp.text.strip().startswith("oc.env:") and all(_is_env(i) for i in interp.nested)


def _longest_env() -> int:
    return max((len(v) for v in os.environ.values()), default=0)


def check_interpolations(tree: Any, what: str = "config", *, error: Error = ConfigError) -> None:
    """Refuse a config tree (plain containers, unresolved) whose ``${…}`` interpolations would take more
    than :data:`INTERPOLATION_MAX_RESOLUTIONS` resolutions or expand to more than
    :data:`INTERPOLATION_MAX_CHARS` characters, counted before anything is resolved: a ~360-byte file of
    references to references (``b: ${a}${a}${a}``, ``c: ${b}${b}${b}``, …) grows geometrically. Keys built
    from other interpolations and ``oc.decode`` of a config value, whose cost cannot be counted in
    advance, are refused too."""
    costs = _Costs(tree, what, error)
    total_cost = total_size = 0
    try:
        for path in _interpolated_leaves(tree):
            c, n = costs.node(path)
            total_cost, total_size = total_cost + c, total_size + n
            costs.over(total_cost, total_size)
    except RecursionError:
        raise costs.refuse("its ${…} interpolations are nested or chained too deeply") from None


def _interpolated_leaves(tree: Any) -> Iterator[tuple[Any, ...]]:
    stack: list[tuple[Any, tuple[Any, ...]]] = [(tree, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, Mapping):
            stack.extend((v, (*path, k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(value))
        elif isinstance(value, str) and "${" in value:
            yield path


# ----------------------------------------------------------------------------------------------------
# Parquet

PARQUET_MAX_DECODED = 1 * GiB  # a dataset's values once decoded (Arrow's bytes)
PARQUET_BATCH_BYTES = 64 * MiB  # decoded per batch, by the footer's average row size
PARQUET_FOOTER_MAX_BYTES = 16 * MiB


def read_parquet_rows(
    path: str | os.PathLike[str],
    what: str | None = None,
    *,
    max_value_bytes: int,
    max_decoded: int | None = None,
    error: Error = ConfigError,
) -> list[dict[str, Any]]:
    """The rows of a Parquet file as dicts, decoded within bounds.

    Before any data is read, the footer's declared decoded size (every column chunk's uncompressed size)
    must be at most ``max_decoded`` bytes (default :data:`PARQUET_MAX_DECODED`): a file of a few hundred
    kilobytes can compress gigabytes of one repeated byte. Rows are then decoded in batches sized from
    the footer's largest average row (about :data:`PARQUET_BATCH_BYTES` each); each batch's decoded bytes
    count against ``max_decoded`` and its longest string or binary value (nested lists and structs
    included) must be at most ``max_value_bytes`` before it becomes Python objects. So a footer that
    understates the sizes is caught at the first batch past a limit."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = _name(path, what)
    max_decoded = PARQUET_MAX_DECODED if max_decoded is None else max_decoded
    fd = _open_regular(path, name, error)  # a regular file (no FIFO, no device), checked before pyarrow
    os.close(fd)
    try:
        pf = pq.ParquetFile(
            str(path), thrift_string_size_limit=PARQUET_FOOTER_MAX_BYTES, thrift_container_size_limit=1 << 20
        )
        md = pf.metadata
        declared, widest = 0, 1
        for g in range(md.num_row_groups):
            group = md.row_group(g)
            size = sum(group.column(c).total_uncompressed_size for c in range(group.num_columns))
            declared += max(size, group.total_byte_size)
            widest = max(widest, -(-size // max(group.num_rows, 1)))
    except AdvantageError:
        raise
    except Exception as e:  # pyarrow raises ArrowInvalid/OSError subclasses for corrupt files
        raise error(f"{name}: not a readable parquet file ({' '.join(str(e).split())[:200]})") from None
    if declared > max_decoded:
        raise error(
            f"{name}: its values decode to {declared} bytes (the file is {Path(path).stat().st_size}), "
            f"over the limit of {max_decoded} bytes; refused before decoding them"
        )
    batch_rows = max(1, min(65536, PARQUET_BATCH_BYTES // widest))
    rows: list[dict[str, Any]] = []
    decoded = 0
    try:
        for batch in pf.iter_batches(batch_size=batch_rows, use_threads=False):
            decoded += batch.nbytes
            if decoded > max_decoded:
                raise error(
                    f"{name}: its values decode to more than {max_decoded} bytes (more than its footer "
                    "declares); refused"
                )
            for column, array in zip(batch.schema.names, batch.columns, strict=True):
                longest = _longest_value(array, pa)
                if longest > max_value_bytes:
                    first = len(rows)
                    raise error(
                        f"{name}: column {column[:60]!r} holds a value of {longest} bytes in rows "
                        f"{first}-{first + batch.num_rows - 1}, over the limit of {max_value_bytes} "
                        "bytes per value; refused before decoding it"
                    )
            rows.extend(batch.to_pylist())
    except AdvantageError:
        raise
    except Exception as e:
        raise error(f"{name}: not a readable parquet file ({' '.join(str(e).split())[:200]})") from None
    return rows


def _longest_value(array: Any, pa: Any) -> int:
    """The byte length of the longest string or binary value in the Arrow ``array``, looking inside
    lists, structs, maps and dictionaries."""
    import pyarrow.compute as pc

    t = array.type
    if pa.types.is_dictionary(t):
        return _longest_value(array.dictionary, pa)
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    ):
        if len(array) == 0:
            return 0
        longest = pc.max(pc.binary_length(array)).as_py()
        return int(longest or 0)
    if pa.types.is_map(t):
        return max(_longest_value(array.keys, pa), _longest_value(array.items, pa))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _longest_value(array.flatten(), pa)
    if pa.types.is_struct(t):
        return max((_longest_value(array.field(i), pa) for i in range(t.num_fields)), default=0)
    return 0


# ----------------------------------------------------------------------------------------------------
# Model folders

# The JSON files transformers reads from a model folder: each must be a JSON object within bounds.
MODEL_JSON_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
    "adapter_config.json",
)
# Tokenizer files transformers or the tokenizers library read whole: JSON (an object, like the files
# above), text (UTF-8) and binary (sentencepiece models: the size only), each within
# TOKENIZER_FILE_MAX_BYTES.
TOKENIZER_JSON_FILES = ("tokenizer.json", "vocab.json")
TOKENIZER_TEXT_FILES = ("merges.txt", "vocab.txt")
TOKENIZER_BINARY_FILES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
TOKENIZER_FILES = TOKENIZER_JSON_FILES + TOKENIZER_TEXT_FILES + TOKENIZER_BINARY_FILES
# Files found good, by identity and version (device, inode, size, modification time): a run checks its
# model folder several times (the config check, the tokenizer, the model), and a tokenizer.json can be
# tens of megabytes.
_CHECKED: set[tuple[int, int, int, int]] = set()


def check_model_folder(folder: str | os.PathLike[str], *, error: Error = ConfigError) -> Path:
    """Check, before transformers reads them, the files of a model folder that it parses whole: each JSON
    file of :data:`MODEL_JSON_FILES` present is at most :data:`MODEL_JSON_MAX_BYTES`, UTF-8, nested at
    most :data:`MAX_DEPTH` deep and a JSON object (transformers' own reads end in a ``RecursionError``,
    a ``UnicodeDecodeError`` or an ``AttributeError`` on a list otherwise); the tokenizer files
    (:data:`TOKENIZER_FILES`) are at most :data:`TOKENIZER_FILE_MAX_BYTES` and, for the JSON and text
    ones, checked the same way; ``chat_template.jinja`` and a ``chat_template`` in
    ``tokenizer_config.json`` are UTF-8 text of at most :data:`CHAT_TEMPLATE_MAX_BYTES`. Returns
    ``folder``; a path that is not a folder is returned as it is (the loader says what it is)."""
    folder = Path(folder)
    if not folder.is_dir():
        return folder
    kinds = [(n, "json", MODEL_JSON_MAX_BYTES) for n in MODEL_JSON_FILES]
    kinds += [(n, "json", TOKENIZER_FILE_MAX_BYTES) for n in TOKENIZER_JSON_FILES]
    kinds += [(n, "text", TOKENIZER_FILE_MAX_BYTES) for n in TOKENIZER_TEXT_FILES]
    kinds += [(n, "bytes", TOKENIZER_FILE_MAX_BYTES) for n in TOKENIZER_BINARY_FILES]
    kinds += [("chat_template.jinja", "text", CHAT_TEMPLATE_MAX_BYTES)]
    for name, kind, limit in kinds:
        path = folder / name
        if os.path.lexists(path):
            _check_model_file(path, kind, limit, error)
    return folder


def _check_model_file(path: Path, kind: str, limit: int, error: Error) -> None:
    what = f"model folder file {str(path)!r}"
    st = os.stat(path) if path.exists() else None
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) if st is not None else None
    if key is not None and key in _CHECKED:
        return
    if kind == "bytes":
        size = file_size(path, what, error=error)
        if size > limit:
            raise error(f"{what} is over {limit} bytes (it is {size} bytes); refused before it is read")
    elif kind == "text":
        read_text(path, limit, what, error=error)
    else:
        value = load_json(path, limit, what, error=error, expect=dict)
        if path.name == "tokenizer_config.json":
            _check_template_field(value.get("chat_template"), f"{what}: its chat_template", error)
    if key is not None:
        _CHECKED.add(key)


def _check_template_field(value: Any, what: str, error: Error) -> None:
    """A ``chat_template`` value: a string, or a list of ``{"name", "template"}``, of bounded length."""
    templates = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    for t in templates:
        text = t.get("template") if isinstance(t, dict) else t
        if isinstance(text, str) and len(text.encode("utf-8", "surrogatepass")) > CHAT_TEMPLATE_MAX_BYTES:
            raise error(f"{what} is over {CHAT_TEMPLATE_MAX_BYTES} bytes; a chat template is small")
