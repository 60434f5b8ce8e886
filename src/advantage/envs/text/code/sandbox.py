r"""Run untrusted Python (model-written code) on inputs in a separate, isolated, time-limited process.

``run_sandboxed(code, inputs, entry="f", limits=SandboxLimits())`` runs ``code``, calls ``entry(*args)`` for
each ``args`` in ``inputs`` and returns the values, decoded from JSON, in a :class:`SandboxResult`. It
never judges them: the caller (:class:`advantage.envs.text.code.CodeTask`) compares them with expected
outputs that never leave the caller's process. So code that forges the result protocol, patches ``json`` or
builtins, or exits early can at worst report values it computed itself — which is what it is asked for.

Processes (protocol in :mod:`advantage.envs.text.code._sandbox_child`). The trainer starts a *supervisor*,
``python -I -S _sandbox_child.py`` (no user site, no ``PYTHONPATH``, no ``site``; environment ``PATH``,
``LANG``, ``HOME``, ``PYTHONHASHSEED`` only, so no inherited secret; its own session and process group).
The supervisor unshares namespaces and forks the *candidate* process, which isolates itself (below), runs
the code and writes its results to a pipe to the supervisor. The supervisor, which the candidate can
neither see nor signal, forwards them to the trainer on a pipe only the two of them hold, with a per-run
nonce, the exit status and the CPU time. It kills the candidate at ``wall_seconds + 0.5`` on its own, so a
run ends even if the trainer dies. The trainer kills the candidate at ``wall_seconds`` (SIGKILL to the
PID-namespace init: the kernel then kills every process in the namespace), gives the supervisor 0.5 s to
reap it, then kills the supervisor's process group and reaps the supervisor. No zombie, no orphan.

Isolation, listed in :attr:`SandboxResult.isolation` as in effect for that run. The boundary is the
kernel's; nothing depends on Python-level checks, which the code could undo (``docs/reliability.md``
states the threat model).

1. ``netns`` ``pidns`` ``mountns`` ``ipcns`` ``utsns`` (+ ``userns`` when not root): ``unshare`` via
   ctypes (``os.unshare`` needs Python 3.12). The network namespace has only a loopback that is down, so
   every connection fails, 127.0.0.1 and abstract unix sockets included. The candidate is PID 1 of its
   PID namespace and sees no other process (no ``kill``, ``ptrace`` or ``pidfd_open`` can name the
   supervisor or the trainer). System V IPC objects and POSIX message queues belong to the IPC
   namespace and die with it (the filter of 6 refuses them anyway).
2. ``pivot-root`` ``minimal-root`` ``readonly-fs`` ``private-tmp`` ``no-proc``: the candidate's root is a
   fresh read-only tmpfs holding only the interpreter's module folders (``sys.path``), the system
   library folders (``/lib``, ``/usr/lib`` …, for extension modules) and ``/dev/null``, ``/dev/zero``,
   ``/dev/urandom``, each bound read-only at its own path, and an empty tmpfs of ``file_size_bytes``
   (noexec) on ``/tmp``, its working directory; the old root is detached. So the trainer's files, home
   folders, ``/proc`` (the trainer's environment) and pathname unix sockets do not exist for it, by any
   path or ``dir_fd``. (``chroot`` replaces ``pivot_root`` where the kernel refuses it, e.g. an initramfs
   root; without capabilities a chroot cannot be left either.)
3. ``rlimits``: CPU seconds (soft = hard, so the kernel sends SIGKILL), address space (``memory_bytes``:
   large allocations raise MemoryError), file size, open files 64, no core files, and processes
   (``RLIMIT_NPROC``). NPROC counts all processes of a user, and root ignores it, so it is made exact:
   as root the candidate switches to a fresh random uid (``uid-drop``), which owns no other process; in
   a user namespace the count is per namespace (Linux >= 5.14), which holds only the supervisor and the
   candidate. The limit is that count plus ``max_processes`` (threads count too).
4. ``no-caps`` ``no-new-privs``: the bounding and permitted capability sets are emptied and
   ``PR_SET_NO_NEW_PRIVS`` set, so the candidate cannot undo any of the above or gain privileges by exec.
5. ``session`` ``minimal-env``: its own session; environment ``PATH``, ``LANG``, ``HOME``,
   ``PYTHONHASHSEED`` only, so no inherited secret.
6. ``seccomp`` (x86_64, aarch64): a filter refuses the system calls that would undo or get around the
   above (namespaces, mounts, ``ptrace``, keyrings, ``bpf``, ``io_uring`` …), System V IPC and POSIX
   message queues (their memory is not counted by ``RLIMIT_AS`` and, without an IPC namespace, outlives
   the process), and sockets of every family but ``AF_UNIX``, ``AF_INET`` and ``AF_INET6`` (``AF_VSOCK``
   is not confined by a network namespace; netlink, packet, alg … are not needed).

Where the kernel refuses the namespaces (e.g. Docker's default seccomp profile, Ubuntu's AppArmor
restriction of unprivileged user namespaces), the run **fails closed**: stage ``setup``, an error saying
what is missing and how to run, and no code runs. ``isolation="unsafe"`` (``data.sandbox=unsafe`` of the
``code`` task) runs the code anyway with 3, 5 and, where the kernel allows it, 6 only
(``UNSAFE-no-isolation``): it can read and write whatever the trainer's user can and reach the network.

Cost: one process start (~30 ms of interpreter start-up) plus the namespaces and the mounts, about
70-150 ms per run on a 2-core machine. The trainer never compiles or runs the code itself.

Results are decoded with bounded nesting (:data:`MAX_DEPTH`) and bounded reads: whatever bytes the code
writes where its results go, the run ends with its values or a failure (``garbled``), never an exception.

Limitations: values travel as JSON (tuples come back as lists, dict keys as strings); ``PYTHONHASHSEED``
is set for programs the candidate might start, but ``-I`` makes its own interpreter ignore it, so string
hashing is randomized; ``SandboxResult.isolation`` is empty after a wall-time kill (the report is lost);
killing the candidate by PID has a window of microseconds in which the PID could have been reused.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import re
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

from advantage.envs.text.code import _sandbox_child
from advantage.envs.text.code._sandbox_child import GRACE, MARKER
from advantage.errors import ConfigError

__all__ = [
    "ISOLATION_MODES",
    "MAX_DEPTH",
    "Raised",
    "SandboxLimits",
    "SandboxResult",
    "kernel_isolation_problem",
    "run_sandboxed",
]

ISOLATION_MODES = ("kernel", "unsafe")
_KIND = "auto"  # tests force a kernel mode: "root", "userns", or "none" (as if the kernel refused)
_SCRIPT = os.path.abspath(_sandbox_child.__file__)
_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp", "PYTHONHASHSEED": "0"}
# Results nested deeper than this are garbled: json.loads recurses once per level, and a result nested
# 100,000 deep raised RecursionError out of run_sandboxed (and would out of any later code that walks it).
MAX_DEPTH = 100
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # brackets inside strings do not nest
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}
# The supervisor's last line holds the candidate's raw results (at most output_bytes + 4096 bytes) as a
# JSON string: escaping makes a byte at most 6 (a control character is \u00XX). Reading more than this
# means the supervisor is broken; the bound keeps the trainer's memory bounded whatever arrives.
_RAW_FACTOR, _SLACK = 6, 4096


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one run. ``wall_seconds`` bounds the whole run (start-up included); ``cpu_seconds`` the
    candidate's CPU time (whole seconds, the kernel's granularity); ``memory_bytes`` its address space;
    ``file_size_bytes`` the largest file it may write and the size of its ``/tmp``; ``max_processes``
    the processes or threads it may start; ``output_bytes`` the size of its results as JSON text in
    UTF-8 with non-ASCII characters unescaped (so a string counts its UTF-8 bytes, not the 6-12 bytes
    of its ``\\uXXXX`` escapes; the bytes read from the pipes are bounded by a multiple of it).
    ``isolation``: ``kernel`` (the default: namespaces and a minimal root; where the kernel refuses them
    the run fails with stage ``setup`` and nothing runs) or ``unsafe`` (no isolation but the rlimits and
    a clean environment: the code can read and write whatever the trainer's user can)."""

    wall_seconds: float = 5.0
    cpu_seconds: int = 2
    memory_bytes: int = 512 * 2**20
    file_size_bytes: int = 2**20
    max_processes: int = 0
    output_bytes: int = 2**20
    isolation: str = "kernel"

    def __post_init__(self) -> None:
        problems = []
        wall = self.wall_seconds
        if isinstance(wall, bool) or not isinstance(wall, int | float) or not 0 < wall <= 3600:
            problems.append(f"sandbox.wall_seconds must be a number in (0, 3600], got {wall!r}")
        bounds = {
            "cpu_seconds": (1, 3600),
            "memory_bytes": (64 * 2**20, 2**50),
            "file_size_bytes": (4096, 2**40),
            "max_processes": (0, 4096),
            "output_bytes": (1024, 2**30),
        }
        for name, (lo, hi) in bounds.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                problems.append(f"sandbox.{name} must be an int in [{lo}, {hi}], got {value!r}")
        if self.isolation not in ISOLATION_MODES:
            problems.append(
                f"sandbox.isolation must be one of {', '.join(ISOLATION_MODES)}, got {self.isolation!r}"
            )
        if problems:
            raise ConfigError(problems)


@dataclass(frozen=True)
class Raised:
    """In :attr:`SandboxResult.outputs`: the call raised (``error`` is ``"Type: message"``) or returned a
    value that is not JSON. Never equal to a returned value."""

    error: str


@dataclass(frozen=True)
class SandboxResult:
    """``outputs[i]`` is what ``entry(*inputs[i])`` returned (JSON-decoded) or a :class:`Raised`; None when
    the run produced no results, then ``error`` says why and ``stage`` where it stopped: ``setup`` (the
    sandbox could not start), ``syntax`` (the code does not compile), ``load`` (running its top level
    raised), ``entry`` (no callable ``entry``) or ``run`` (killed, exited early or garbled results).
    ``killed_by``: ``wall``, ``cpu``, ``output`` or ``signal SIGxxx`` when the candidate was killed.
    ``seconds``: wall time of the whole run. ``isolation``: the measures in effect (module docstring)."""

    outputs: list[Any] | None
    error: str | None
    seconds: float
    killed_by: str | None
    stage: str | None = None
    isolation: tuple[str, ...] = ()


def run_sandboxed(
    code: str, inputs: list[list[Any]], *, entry: str = "f", limits: SandboxLimits | None = None
) -> SandboxResult:
    """Run ``code`` in a sandbox and call ``entry(*args)`` for each ``args`` in ``inputs`` (lists of
    JSON-serializable positional arguments). Thread-safe; never raises for anything the code does."""
    limits = limits or SandboxLimits()
    if not isinstance(code, str):
        raise TypeError(f"code must be a str, got {type(code).__name__}")
    if not entry.isidentifier():
        raise ValueError(f"entry must be a Python identifier, got {entry!r}")
    if not all(isinstance(args, list | tuple) for args in inputs):
        raise ValueError("inputs must be a list of argument lists, e.g. [[1], [2]] for f(1), f(2)")
    nonce = secrets.token_hex(16)
    payload: dict[str, Any] = {
        "code": code,
        "entry": entry,
        "inputs": [list(a) for a in inputs],
        "nonce": nonce,
        "kind": _KIND,
    }
    state: dict[str, Any] = {"inner": None, "final": None, "killed_by": None, "n": len(inputs)}
    tail, start = "", time.monotonic()
    with tempfile.TemporaryDirectory(prefix="advantage-sandbox-") as workdir:  # the unsafe mode's cwd
        payload.update(limits=asdict(limits), workdir=os.path.realpath(workdir))
        data = json.dumps(payload).encode()  # TypeError for inputs that are not JSON: the caller's bug
        with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stderr:
            stdin.write(data)
            stdin.seek(0)
            read_fd, write_fd = os.pipe()
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", _SCRIPT, MARKER, str(write_fd)],
                    stdin=stdin,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    env=_ENV,
                    cwd=workdir,
                    pass_fds=(write_fd,),
                    start_new_session=True,  # its own process group, killed as a whole at the end
                )
            except OSError as e:
                os.close(read_fd)
                return SandboxResult(None, f"could not start the sandbox: {e}", 0.0, None, "setup")
            finally:
                os.close(write_fd)
            try:
                _read_messages(read_fd, nonce, start + limits.wall_seconds, limits.output_bytes, state)
            finally:  # also on KeyboardInterrupt: leave no process behind
                _stop(proc, state)
                os.close(read_fd)
            stderr.seek(max(0, stderr.seek(0, 2) - 600))
            tail = stderr.read().decode(errors="replace").strip()
    return _interpret(state, limits, time.monotonic() - start, tail)


def _read_messages(fd: int, nonce: str, deadline: float, cap: int, state: dict[str, Any]) -> None:
    """Read the supervisor's two lines (``{"inner": pid}`` at once, the final report at the end) until
    EOF, the deadline, or more bytes than a report of ``cap`` bytes of results can take once escaped;
    record them in ``state``."""
    poller = select.poll()  # not select.select: fd numbers above 1024 are fine
    poller.register(fd, select.POLLIN)
    buf = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            state["killed_by"] = "wall"
            return
        if not poller.poll(left * 1000):
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        buf += chunk
        if len(buf) > _RAW_FACTOR * (cap + _SLACK) + 65536:
            state["killed_by"] = "output"
            return
        if state["inner"] is None and b"\n" in buf:
            hello = _decode(bytes(buf[: buf.index(b"\n")]), nonce)
            state["inner"] = hello.get("inner") if hello else None
    lines = bytes(buf).split(b"\n")
    state["final"] = _decode(lines[1], nonce) if len(lines) > 1 else None


def _decode(line: bytes, nonce: str) -> dict[str, Any] | None:
    """One supervisor message, or None when it is not JSON or lacks this run's nonce."""
    try:
        ok, msg = _loads(line.decode())
    except UnicodeDecodeError:
        return None
    return msg if ok and isinstance(msg, dict) and msg.get("nonce") == nonce else None


def _loads(text: str) -> tuple[bool, Any]:
    """``(True, value)`` for JSON nested at most :data:`MAX_DEPTH` deep, else ``(False, None)``. The
    depth is counted before decoding (brackets outside strings; a document that is not JSON can only
    count deeper than the decoder gets before it fails), so decoding recurses a bounded number of times
    whatever the candidate wrote; any decoding failure is a garbled result, never an exception."""
    if text.count("[") + text.count("{") > MAX_DEPTH:  # the scan below only when it could matter
        brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
        if max(itertools.accumulate(map(_NESTING.__getitem__, brackets)), default=0) > MAX_DEPTH:
            return False, None
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):  # ValueError includes integers of over 4300 digits
        return False, None


def _stop(proc: Any, state: dict[str, Any]) -> None:
    """Leave no process behind: kill the candidate (with its whole PID namespace) unless it has reported,
    give the supervisor time to reap it, kill the supervisor's process group, reap the supervisor."""
    inner = state["inner"]
    if state["final"] is None and isinstance(inner, int) and inner > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(inner, signal.SIGKILL)
    try:  # wait for the supervisor's exit without reaping it, so its pid (= the group id) stays reserved
        pidfd = os.pidfd_open(proc.pid)
    except OSError:
        pidfd = None
    if pidfd is not None:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.poll(GRACE * 1000)
        os.close(pidfd)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the supervisor if stuck, and anything left in its group
    proc.wait()


def _interpret(state: dict[str, Any], limits: SandboxLimits, seconds: float, tail: str) -> SandboxResult:
    """Turn the supervisor's final report (or its absence) into a :class:`SandboxResult`."""
    final, killed_by = state["final"], state["killed_by"]
    if killed_by == "wall":
        error = f"wall time limit {limits.wall_seconds:g} s exceeded"
        return SandboxResult(None, error, seconds, "wall", "run")
    if killed_by == "output" or (final and final.get("overflow")):
        return SandboxResult(None, f"results over {limits.output_bytes} bytes", seconds, "output", "run")
    if final is None:
        why = f": {tail.splitlines()[-1]}" if tail else ""
        return SandboxResult(None, f"the sandbox supervisor failed{why}", seconds, None, "setup")
    isolation = tuple(final.get("isolation") or ())
    if final.get("error"):  # set by trusted code: the supervisor or the candidate process before the code ran
        return SandboxResult(None, final["error"], seconds, None, "setup", isolation)
    if final.get("timeout"):  # the supervisor's own deadline, later than ours: only if we were slow
        error = f"wall time limit {limits.wall_seconds:g} s exceeded"
        return SandboxResult(None, error, seconds, "wall", "run", isolation)
    sig, cpu = final.get("signal"), float(final.get("cpu") or 0.0)
    killed = None
    # SIGKILL without a timeout or overflow comes from the kernel's CPU limit (rusage lags it a little)
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= 0.5 * limits.cpu_seconds):
        killed = "cpu"
    elif sig:
        try:
            killed = f"signal {signal.Signals(sig).name}"
        except ValueError:
            killed = f"signal {sig}"
    if killed:
        error = f"CPU time limit {limits.cpu_seconds} s exceeded" if killed == "cpu" else f"killed: {killed}"
        return SandboxResult(None, error, seconds, killed, "run", isolation)
    raw = final.get("result")
    ok, report = _loads(raw) if isinstance(raw, str) else (True, None)
    if not ok:
        report = "garbled"
    if report is None:
        why = f"the program exited with status {final.get('status')} before reporting"
        return SandboxResult(None, f"no results: {why}", seconds, None, "run", isolation)
    stage = report.get("stage") if isinstance(report, dict) else None
    if stage in ("syntax", "load", "entry") and isinstance(report.get("error"), str):
        return SandboxResult(None, report["error"][:300], seconds, None, stage, isolation)
    outputs = report.get("outputs") if stage == "done" else None
    if not isinstance(outputs, list) or len(outputs) != state["n"] or not all(map(_well_formed, outputs)):
        return SandboxResult(None, "garbled results from the sandbox", seconds, None, "run", isolation)
    values = [o[1] if o[0] == "v" else Raised(o[1][:300]) for o in outputs]
    return SandboxResult(values, None, seconds, None, None, isolation)


def _well_formed(item: Any) -> bool:
    """One encoded output: ``["v", value]`` or ``["e", "message"]``."""
    ok = isinstance(item, list) and len(item) == 2 and item[0] in ("v", "e")
    return ok and (item[0] == "v" or isinstance(item[1], str))


def kernel_isolation_problem() -> str | None:
    """None when the kernel isolation works on this machine, else why not and how to run (one trial run
    of a trivial program, ~0.1 s; cached per process and :data:`_KIND`)."""
    return _probe(_KIND)


@functools.cache
def _probe(kind: str) -> str | None:
    result = run_sandboxed("def f():\n    return 1", [[]], limits=SandboxLimits(wall_seconds=10.0))
    return None if result.outputs == [1] else result.error or "the sandbox did not run"
