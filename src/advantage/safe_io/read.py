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
- **Interpolations costed before they are resolved**
  (:func:`~advantage.safe_io.interpolations.check_interpolations`): OmegaConf's ``${…}`` can make a few
  hundred bytes expand to gigabytes, or to millions of resolutions.
- **Parquet metadata before data** (:func:`~advantage.safe_io.parquet.read_parquet_rows`): the decoded size
  the footer declares is checked, then rows are decoded in batches whose decoded bytes and longest value
  are checked as they arrive, so a footer that lies still stops at the first batch over a limit.

This module holds the readers of bytes, text, JSON, YAML and model folders; the interpolation costs are in
:mod:`advantage.safe_io.interpolations` and the Parquet reader in :mod:`advantage.safe_io.parquet`.

Errors are :class:`~advantage.errors.ConfigError` unless the caller names another
:class:`~advantage.errors.AdvantageError` (a run folder's files: ``RunDirError``); the command line turns
each into one line and exit code 2.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
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

Error = type[AdvantageError]


def name_of(path: str | os.PathLike[str], what: str | None) -> str:
    return what if what is not None else repr(str(path))


# ----------------------------------------------------------------------------------------------------
# Bytes and text


def file_size(path: str | os.PathLike[str], what: str | None = None, *, error: Error = ConfigError) -> int:
    """The size of the regular file ``path`` from its opened descriptor (one line for a missing file, a
    folder, a FIFO or a device)."""
    fd = open_regular(path, name_of(path, what), error)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def open_regular(path: str | os.PathLike[str], name: str, error: Error) -> int:
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
    name = name_of(path, what)
    fd = open_regular(path, name, error)
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
    return decode_utf8(
        read_bytes(path, limit, what, error=error, hint=hint), name_of(path, what), error=error
    )


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
    name = name_of(path, what)
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
    name = name_of(path, what)
    fd = open_regular(path, name, error)
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
    name = name_of(path, what)
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
