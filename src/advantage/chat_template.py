"""Chat templates rendered within bounds of time, output and memory.

A model folder's chat template (``tokenizer_config.json``'s ``chat_template``, or ``chat_template.jinja``)
is a program written by whoever made the folder. jinja2's sandbox keeps it from reaching Python's
internals, but not from asking for ``{{ 'a' * 4000000000 }}`` (4 GB at once) or nesting ``range`` loops
that never end, and neither can be stopped from inside the process that asked: one allocation is one C
call, and a loop without output calls nothing that could check a clock.

So templates are rendered in a child process (:mod:`advantage._chat_template_child`: the standard
library and jinja2 only, started once per process on first use, about 50 ms) whose address space is
capped at its start-up size plus :data:`RENDER_MEMORY_BYTES` (an allocation past it fails there, as a
``MemoryError``), which stops each conversation after :data:`RENDER_SECONDS` seconds and at
:data:`RENDER_MAX_CHARS` characters of output, and which this process kills if it does not answer in
time. Every failure is a :class:`~advantage.errors.ConfigError` naming the template's folder and the
limit; the next render starts a fresh child. The child renders with the environment ``transformers``
uses for ``apply_chat_template``, so the text is the same (``tests/test_bounded_reads.py`` compares them).
Rendered texts are kept (up to :data:`CACHE_MAX_CHARS` characters): a run renders the same prompts for
its length check and again for every epoch.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from advantage.errors import ConfigError

RENDER_SECONDS = 1.0  # per conversation; a real template takes well under a millisecond
RENDER_MAX_CHARS = 16 << 20  # per conversation
RENDER_MEMORY_BYTES = 512 << 20  # the child's address space above its start-up size
START_SECONDS = 30.0  # to start the child and import jinja2, on a loaded machine
CACHE_MAX_CHARS = 64 << 20
_HEADER = struct.Struct(">Q")
_CHILD = Path(__file__).with_name("_chat_template_child.py")
# what the child keeps of the environment: the time zone (strftime_now) and the locale, nothing secret
_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")


class _Failed(Exception):
    """The child did not answer: ``kind`` is ``time`` or ``exit``."""

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind


class _Child:
    """One renderer process and its two pipes."""

    def __init__(self) -> None:
        env = {k: os.environ[k] for k in _ENV_KEYS if k in os.environ}
        self.proc = subprocess.Popen(
            [sys.executable, "-I", str(_CHILD), str(RENDER_MEMORY_BYTES)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a Ctrl-C at the terminal is the parent's to handle
        )
        self.owner = os.getpid()
        self.fresh = True
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.fd_in, self.fd_out = self.proc.stdin.fileno(), self.proc.stdout.fileno()

    def ask(self, payload: bytes, seconds: float, max_reply: int) -> dict[str, Any]:
        """Send one request and read its answer within ``seconds``."""
        deadline = time.monotonic() + seconds + (START_SECONDS if self.fresh else 0.0)
        self.fresh = False
        view = memoryview(_HEADER.pack(len(payload)) + payload)
        while view:
            self._wait(self.fd_in, deadline, write=True)
            try:
                view = view[os.write(self.fd_in, view) :]
            except (BrokenPipeError, ConnectionResetError):
                raise _Failed("exit", self._exit_status()) from None
        (n,) = _HEADER.unpack(self._read(_HEADER.size, deadline))
        if n > max_reply:
            raise _Failed("exit", f"an answer of {n} bytes, over {max_reply}")
        return json.loads(self._read(n, deadline))

    def _wait(self, fd: int, deadline: float, write: bool = False) -> None:
        left = deadline - time.monotonic()
        ready = (
            select.select([], [fd], [], max(left, 0))[1]
            if write
            else select.select([fd], [], [], max(left, 0))[0]
        )
        if not ready:
            raise _Failed("time", "no answer in time")

    def _read(self, n: int, deadline: float) -> bytes:
        chunks, got = [], 0
        while got < n:
            self._wait(self.fd_out, deadline)
            chunk = os.read(self.fd_out, min(n - got, 1 << 20))
            if not chunk:
                raise _Failed("exit", self._exit_status())
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _exit_status(self) -> str:
        try:
            code = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "the renderer stopped answering"
        return f"the renderer exited with status {code}" + (" (out of memory?)" if code < 0 else "")

    def close(self) -> None:
        """Stop the child and reap it (closing its stdin ends it; a hung one is killed)."""
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5.0)


_lock = threading.Lock()
_child: _Child | None = None
_cache: OrderedDict[str, str] = OrderedDict()
_cached_chars = 0


def _close() -> None:
    global _child
    if _child is not None and _child.owner == os.getpid():
        _child.close()
    _child = None


atexit.register(_close)


def _plain(value: Any) -> Any:
    """``value`` as JSON data (what the template sees): strings, numbers, lists and mappings."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)


def _name(tokenizer: Any) -> str:
    where = getattr(tokenizer, "name_or_path", "") or ""
    return f"the chat template of {str(where)!r}" if where else "the tokenizer's chat template"


def render_chats(
    tokenizer: Any,
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    *,
    add_generation_prompt: bool = True,
) -> list[str]:
    """``tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=...)`` for each
    conversation ``c`` (a list of ``{"role", "content"}`` messages), rendered in the bounded child
    (module docstring). Raises :class:`ConfigError` naming the template's folder when the tokenizer has
    no template, or the template fails, runs past :data:`RENDER_SECONDS`, outputs more than
    :data:`RENDER_MAX_CHARS` characters or needs more than :data:`RENDER_MEMORY_BYTES` of memory."""
    global _cached_chars
    what = _name(tokenizer)
    try:
        template = tokenizer.get_chat_template()
    except ValueError as e:
        raise ConfigError(f"{what}: {' '.join(str(e).split())[:200]}") from None
    if not isinstance(template, str):
        raise ConfigError(f"{what} is not a string of jinja2 text")
    kwargs = _plain(dict(tokenizer.special_tokens_map))
    head = hashlib.sha256(json.dumps([template, kwargs, add_generation_prompt]).encode()).hexdigest()
    keys = [head + json.dumps(_plain(c)) for c in conversations]
    with _lock:
        texts: list[str | None] = [_cache.get(k) for k in keys]
        missing = [i for i, t in enumerate(texts) if t is None]
        if missing:
            fresh = _ask_child(
                what, template, kwargs, add_generation_prompt, [conversations[i] for i in missing]
            )
            for i, text in zip(missing, fresh, strict=True):
                texts[i] = text
                if len(text) < CACHE_MAX_CHARS // 64:
                    _cache[keys[i]] = text
                    _cached_chars += len(text) + len(keys[i])
        for k in keys:
            if k in _cache:
                _cache.move_to_end(k)
        while _cached_chars > CACHE_MAX_CHARS and _cache:
            k, t = _cache.popitem(last=False)
            _cached_chars -= len(k) + len(t)
    return [t for t in texts if t is not None]


def render_chat(
    tokenizer: Any, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True
) -> str:
    """:func:`render_chats` of one conversation."""
    return render_chats(tokenizer, [messages], add_generation_prompt=add_generation_prompt)[0]


def _ask_child(
    what: str, template: str, kwargs: Any, add_generation_prompt: bool, conversations: list[Any]
) -> list[str]:
    """The child's texts for ``conversations`` (the lock is held). A failure closes the child."""
    global _child
    if _child is not None and _child.owner != os.getpid():
        _child = None  # inherited through a fork: that process's child, not ours
    request = {
        "template": template,
        "conversations": [_plain(c) for c in conversations],
        "kwargs": kwargs,
        "add_generation_prompt": add_generation_prompt,
        "max_chars": RENDER_MAX_CHARS,
        "seconds": RENDER_SECONDS,
    }
    payload = json.dumps(request).encode("ascii")
    seconds = RENDER_SECONDS * (len(conversations) + 1) + 2.0
    max_reply = 6 * RENDER_MAX_CHARS * len(conversations) + (1 << 16)  # \uXXXX escapes: 6 bytes a char
    if _child is None:
        try:
            _child = _Child()
        except OSError as e:
            raise ConfigError(f"{what}: cannot start the template renderer ({e.strerror or e})") from None
    try:
        answer = _child.ask(payload, seconds, max_reply)
    except _Failed as e:
        _close()
        if e.kind == "time":
            raise ConfigError(
                f"{what}: rendering did not finish in {RENDER_SECONDS} s (a loop without end?); refused"
            ) from None
        raise ConfigError(
            f"{what}: rendering failed ({e}; the limits are {RENDER_MEMORY_BYTES >> 20} MiB of memory and "
            f"{RENDER_MAX_CHARS} characters); refused"
        ) from None
    except (OSError, ValueError) as e:
        _close()
        raise ConfigError(f"{what}: the template renderer failed ({type(e).__name__}: {e})") from None
    except BaseException:  # e.g. Ctrl-C while waiting: its answer must not be read as the next one's
        _close()
        raise
    if "error" in answer:
        kind, detail = answer.get("kind"), str(answer["error"])
        if kind != "template":
            _close()
        problem = {
            "time": f"rendering did not finish in {RENDER_SECONDS} s (a loop without end?)",
            "size": f"its output is over {RENDER_MAX_CHARS} characters",
            "memory": f"rendering needed more than {RENDER_MEMORY_BYTES >> 20} MiB of memory",
        }
        if kind in problem:
            raise ConfigError(f"{what}: {problem[kind]}; refused")
        raise ConfigError(f"{what} fails: {detail}")
    texts = answer.get("texts")
    if (
        not isinstance(texts, list)
        or len(texts) != len(conversations)
        or not all(isinstance(t, str) for t in texts)
    ):
        _close()
        raise ConfigError(f"{what}: the template renderer gave a malformed answer")
    return texts
