"""The child process that renders chat templates for :mod:`advantage.chat_template`.

Run as ``python -I _chat_template_child.py MEMORY_BYTES``; it imports only the standard library and
jinja2 (never ``advantage``), so it starts in a few tens of milliseconds and its memory limit counts
nothing but the rendering. After its imports it caps its own address space at what it uses plus
``MEMORY_BYTES`` (``RLIMIT_AS``: an allocation past it is a ``MemoryError``, not the machine's memory),
then serves requests on stdin, one at a time, until stdin closes.

Frames both ways are an 8-byte big-endian length and that many bytes of UTF-8 JSON. A request::

    {"template": str, "conversations": [[message, ...], ...], "kwargs": {...},
     "add_generation_prompt": bool, "max_chars": int, "seconds": float}

is answered ``{"texts": [str, ...]}`` or ``{"error": str, "kind": "template" | "time" | "size" |
"memory"}``. Each conversation has ``seconds`` of wall time (``SIGALRM`` raises in the render loop) and
``max_chars`` characters of output, counted chunk by chunk as jinja2 generates them.

The environment is the one ``transformers`` renders chat templates with (its
``_compile_jinja_template``): jinja2's ``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and
``lstrip_blocks``, the ``loopcontrols`` extension and a ``{% generation %}`` block that renders its body,
the ``tojson`` filter with its keyword arguments, and ``raise_exception``, ``strftime_now``, ``dict`` and
``namespace`` (no underscore-prefixed names). A template renders to the same text here as through
``tokenizer.apply_chat_template(messages, tokenize=False)``.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import struct
import sys
from datetime import datetime
from typing import Any

HEADER = struct.Struct(">Q")
MAX_REQUEST_BYTES = 1 << 30  # the parent never sends more; anything larger is not a request


class _Timeout(BaseException):
    pass


class _TooLong(Exception):
    pass


def _environment() -> Any:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """``{% generation %}…{% endgeneration %}``: its body (transformers marks the assistant's tokens
        with it; the text is the body's)."""

        tags = {"generation"}  # noqa: RUF012  (jinja2 reads the class attribute)

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> Any:
            return caller()

    def raise_exception(message: Any) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(format: str) -> str:
        return datetime.now().strftime(format)

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"chat templates cannot store underscore-prefixed attributes on a namespace ({name!r})"
                )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env


def _limit_memory(extra: int) -> None:
    """Cap the address space at what the process maps now plus ``extra`` bytes; no core files."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return  # not Linux: the parent's time and size limits still hold
    limit = mapped + extra
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _read_exact(stream: Any, n: int) -> bytes | None:
    data = stream.read(n)
    return data if data is not None and len(data) == n else None


def _write(stream: Any, message: dict[str, Any]) -> None:
    body = json.dumps(message).encode("ascii")  # escaped: any string, lone surrogates included
    stream.write(HEADER.pack(len(body)) + body)
    stream.flush()


def _render(template: Any, request: dict[str, Any], conversation: list[Any]) -> str:
    limit = int(request["max_chars"])
    out: list[str] = []
    size = 0
    signal.setitimer(signal.ITIMER_REAL, float(request["seconds"]))
    try:
        for chunk in template.generate(
            messages=conversation,
            tools=None,
            documents=None,
            add_generation_prompt=bool(request["add_generation_prompt"]),
            **request["kwargs"],
        ):
            size += len(chunk)
            if size > limit:
                raise _TooLong
            out.append(chunk)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return "".join(out)


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def main() -> int:
    import jinja2

    env = _environment()
    compiled: dict[str, Any] = {}
    signal.signal(signal.SIGALRM, _alarm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the run; it closes stdin then
    _limit_memory(int(sys.argv[1]))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = _read_exact(stdin, HEADER.size)
        if head is None:
            return 0
        (n,) = HEADER.unpack(head)
        if n > MAX_REQUEST_BYTES:
            return 2
        body = _read_exact(stdin, n)
        if body is None:
            return 0
        request = json.loads(body)
        try:
            source = request["template"]
            template = compiled.get(source)
            if template is None:
                signal.setitimer(signal.ITIMER_REAL, float(request["seconds"]))
                try:
                    template = env.from_string(source)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                compiled.clear()  # one template at a time: a run renders with one tokenizer
                compiled[source] = template
            texts = [_render(template, request, c) for c in request["conversations"]]
            _write(stdout, {"texts": texts})
        except _Timeout:
            _write(stdout, {"error": f"rendering took over {request['seconds']} s", "kind": "time"})
        except _TooLong:
            _write(stdout, {"error": f"its output is over {request['max_chars']} characters", "kind": "size"})
        except MemoryError:
            _write(stdout, {"error": "rendering ran out of its memory", "kind": "memory"})
            return 3  # the heap may be fragmented or half-built: the parent starts a fresh child
        except RecursionError:
            _write(stdout, {"error": "recursion too deep (a macro calling itself?)", "kind": "template"})
        except Exception as e:  # a template error, raise_exception(), or what Python raises inside one
            name = "TemplateError" if isinstance(e, jinja2.TemplateError) else type(e).__name__
            text = " ".join(f"{name}: {e}".split())
            _write(stdout, {"error": text[:300], "kind": "template"})


if __name__ == "__main__":
    sys.exit(main())
