"""The sandbox's own side: the supervisor and the candidate process (see :mod:`advantage.sandbox`).

Run as ``python -I -S _sandbox_child.py --advantage-sandbox FD`` with the payload (code, entry, inputs,
nonce, limits, fallback working directory) as JSON on stdin. Standard library only: under ``-I -S`` the
``advantage`` package and site-packages are not importable, and fewer imports start faster.

Protocol. The supervisor writes two JSON lines to ``FD`` (a pipe only it and the trainer hold), both with
the nonce: ``{"inner": pid}`` right after forking the candidate (so the trainer can kill it), and the final
report (exit status, signal, CPU seconds, isolation, the candidate's raw results) after reaping it. The
candidate writes to its own pipe to the supervisor: first one line ``{"isolation": [...]}`` or
``{"error": ...}`` before any candidate code runs (so it can be trusted), then one JSON report
``{"stage": "syntax"|"load"|"entry", "error": ...}`` or ``{"stage": "done", "outputs": [["v", value] |
["e", "Type: message"], ...]}``. Everything after the first line may be forged by the code; the trainer
only ever treats it as the values the code returned.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from typing import Any

MARKER = "--advantage-sandbox"  # in every sandbox process's command line (tests look for leftovers)
GRACE = 0.5  # seconds: the supervisor's own deadline is this much after the trainer's
# Linux constants (sched.h, mount.h, prctl.h)
_CLONE = {"netns": 0x40000000, "pidns": 0x20000000, "mountns": 0x00020000, "ipcns": 0x08000000}
_CLONE["utsns"], _CLONE_NEWUSER = 0x04000000, 0x10000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 1, 2, 4, 8, 32
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 24, 38


def supervise(result_fd: int) -> None:
    """The supervisor: unshare, fork the candidate, forward its results with the nonce, never raise."""
    payload = json.loads(sys.stdin.buffer.read())
    limits, nonce = payload["limits"], payload["nonce"]
    deadline = time.monotonic() + limits["wall_seconds"] + GRACE
    kind, why = _unshare(limits["isolation"])
    if kind is None and limits["isolation"] == "namespaces":
        _write_all(result_fd, _line({"nonce": nonce}) + _line({"nonce": nonce, "error": why}))
        os._exit(0)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.close(result_fd)
        _candidate(payload, kind, write_end)  # never returns
    os.close(write_end)
    _write_all(result_fd, _line({"nonce": nonce, "inner": pid}))
    data, overflow, timeout = bytearray(), False, False
    while True:  # drain while it runs: a full pipe would block it
        ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(read_end, 1 << 16) if ready else b""
        overflow = overflow or len(data) + len(chunk) > limits["output_bytes"] + 4096
        timeout = not ready
        if not chunk or overflow:
            break
        data += chunk
    if overflow or timeout:
        os.kill(pid, signal.SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    setup, _, result = bytes(data).partition(b"\n")  # the first line is written before the code runs
    try:
        report = json.loads(setup)
    except ValueError:
        report = {"error": "sandbox setup failed: no report from the candidate process"}
    final = {"nonce": nonce, "overflow": overflow, "timeout": timeout, "cpu": usage.ru_utime + usage.ru_stime}
    final.update(error=report.get("error"), isolation=report.get("isolation", []))
    final.update(signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None)
    final.update(status=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None)
    final["result"] = result.decode(errors="replace") if result.strip() else None
    _write_all(result_fd, _line(final))
    os._exit(0)


def _unshare(isolation: str) -> tuple[str | None, str]:
    """Enter new namespaces: ``("root", …)`` as real root (no user namespace: the candidate drops to a
    fresh uid instead), ``("userns", …)`` inside a user namespace mapping our own uid, or ``(None, why)``."""
    if isolation == "python":
        return None, "isolation='python'"
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    flags = sum(_CLONE.values())
    if os.geteuid() == 0 and libc.unshare(flags) == 0:
        return "root", ""
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(flags | _CLONE_NEWUSER) != 0:
        return None, f"unshare failed: {os.strerror(ctypes.get_errno())}"
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    return "userns", ""


def _candidate(payload: dict[str, Any], kind: str | None, out_fd: int) -> None:
    """The candidate process: isolate, report the isolation (one line), run the code, report, exit."""
    try:
        isolation = _isolate(payload, kind, out_fd)
    except BaseException as e:  # report instead of running the code with half the isolation
        _write_all(out_fd, _line({"error": f"sandbox setup failed: {type(e).__name__}: {e}"}))
        os._exit(1)
    _write_all(out_fd, _line({"isolation": isolation}))
    _run_code(payload["code"], payload["entry"], payload["inputs"], out_fd)
    os._exit(0)


def _isolate(payload: dict[str, Any], kind: str | None, out_fd: int) -> list[str]:
    """Apply every measure of the module docstring that this kernel allows; return their names."""
    import ctypes
    import resource

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    limits = payload["limits"]
    done = ["session", "minimal-env", "rlimits"]
    if kind is not None:
        done += [*_CLONE, "userns"] if kind == "userns" else list(_CLONE)
        done += _mount_all(libc, limits["file_size_bytes"])
        os.chdir("/tmp")
        os.setsid()  # leave the supervisor's process group, so kill(0, …) cannot reach the supervisor
    else:
        os.chdir(payload["workdir"])
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # prints go nowhere; stdin (the payload) is not readable
        os.dup2(devnull, fd)
    os.closerange(3, out_fd)
    os.closerange(out_fd + 1, 1 << 20)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the supervisor
    # processes already counted against RLIMIT_NPROC: none for a fresh uid, us and the supervisor in a
    # user namespace, all of our uid's threads otherwise (root ignores the limit: the hook covers it)
    counted = {"root": 1, "userns": 2}.get(kind or "", 0) or _threads_of_uid(os.getuid())
    nproc = counted + limits["max_processes"]
    for res, value in (
        (resource.RLIMIT_CPU, limits["cpu_seconds"]),
        (resource.RLIMIT_AS, limits["memory_bytes"]),
        (resource.RLIMIT_FSIZE, limits["file_size_bytes"]),
        (resource.RLIMIT_NOFILE, 64),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, nproc),
    ):
        resource.setrlimit(res, (value, value))
    for cap in range(64):  # EINVAL past the last capability, EPERM without CAP_SETPCAP: both harmless
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    if kind == "root":
        uid = 2**30 + int.from_bytes(os.urandom(4), "big") % 2**29
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # clears the capability sets too
        done.append("uid-drop")
    header, caps = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()  # _LINUX_CAPABILITY_V3
    if libc.capset(header, caps) == 0:
        done.append("no-caps")
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0:
        done.append("no-new-privs")
    hook = set()
    if kind is None:
        hook = {"network", "process", "files"}
    elif os.geteuid() == 0:  # a user namespace entered as root: kuid 0 is exempt from RLIMIT_NPROC
        hook = {"process"}
    if hook:
        _add_audit_hook(hook | {"ctypes"}, os.getcwd())
        done += [f"audit-hook:{h}" for h in sorted(hook | {"ctypes"})]
    return done


def _mount_all(libc: Any, tmp_bytes: int) -> list[str]:
    """In the new mount namespace: everything read-only, ``/root`` and ``/home`` hidden, a private ``/tmp``
    and ``/proc``. Raises OSError when the root cannot be made read-only or ``/tmp`` private."""

    def mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> bool:
        enc = [s.encode() if s is not None else None for s in (src, target, fstype)]
        return libc.mount(enc[0], enc[1], enc[2], flags, data.encode() if data else None) == 0

    def checked(ok: bool, what: str) -> None:
        if not ok:
            import ctypes

            raise OSError(f"{what}: {os.strerror(ctypes.get_errno())}")

    checked(mount(None, "/", None, _MS_REC | _MS_PRIVATE), "making mounts private")
    prefixes = sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)})
    prefix_fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in prefixes}
    keep = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC}  # locked in a user namespace
    with open("/proc/self/mountinfo") as f:
        entries = [line.split() for line in f]
    for fields in entries:
        target = _unescape(fields[4])
        flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY  # no atime flag: the remount keeps the mount's own
        flags |= sum(keep.get(opt, 0) for opt in fields[5].split(","))
        ok = mount(None, target, None, flags)
        if target == "/":
            checked(ok, "remounting / read-only")
    done = ["readonly-fs"]
    hidden = [d for d in ("/root", "/home") if os.path.isdir(d)]
    for home in hidden:
        checked(mount("tmpfs", home, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "size=64k,mode=755"), home)
        for prefix, fd in prefix_fds.items():
            if prefix.startswith(home + "/"):  # the interpreter lives here: bind its prefix back, read-only
                os.makedirs(prefix, exist_ok=True)
                checked(mount(f"/proc/self/fd/{fd}", prefix, None, _MS_BIND | _MS_REC), prefix)
                mount(None, prefix, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
        mount(None, home, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    done += ["hidden-home"] if hidden else []
    for fd in prefix_fds.values():
        os.close(fd)
    size = f"size={max(tmp_bytes, 4096)},nr_inodes=1024,mode=1777"
    checked(mount("tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, size), "mounting /tmp")
    if mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC):
        done += ["private-tmp", "private-proc"]
    else:  # e.g. a container that masks parts of /proc: hide it entirely instead
        flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_RDONLY
        checked(mount("tmpfs", "/proc", "tmpfs", flags, "size=4k"), "hiding /proc")
        done += ["private-tmp", "hidden-proc"]
    return done


def _unescape(path: str) -> str:
    """A mount point from ``/proc/self/mountinfo``, where space, tab, newline and backslash are octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        path = path.replace(code, char)
    return path


def _threads_of_uid(uid: int) -> int:
    """Threads whose real uid is ``uid`` (what RLIMIT_NPROC counts outside a user namespace)."""
    total = 0
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                total += int(fields["Threads"])
        except (OSError, ValueError, KeyError):
            continue  # not a process, or gone
    return total


_PROCESS_EVENTS = {"os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn", "os.system"}
_PROCESS_EVENTS |= {"os.kill", "os.killpg", "subprocess.Popen", "os.startfile"}
_PATH_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.utime"}
_PATH_EVENTS |= {"os.truncate", "os.link", "os.symlink", "os.chflags", "os.setxattr", "os.removexattr"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _add_audit_hook(blocked: set[str], workdir: str) -> None:
    """The Python-level fallback: refuse the audit events of the ``blocked`` categories."""
    own = f"/proc/{os.getpid()}"
    allowed = tuple(os.path.realpath(p) + "/" for p in (sys.base_prefix, sys.base_exec_prefix))

    def inside(real: str, root: str) -> bool:
        return real == root or real.startswith(root + "/")

    def denied(path: Any, writes: bool) -> bool:
        if isinstance(path, int) or path is None:
            return False  # a file descriptor already open
        real = os.path.realpath(os.fsdecode(path))
        if writes and not (inside(real, workdir) or real == os.devnull):
            return True
        other_process = real.startswith("/proc/") and real.split("/")[2].isdigit() and not inside(real, own)
        home = inside(real, "/root") or inside(real, "/home")
        return other_process or (home and not (real + "/").startswith(allowed))

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if "network" in blocked and event.startswith("socket."):
            raise PermissionError(f"sandbox: {event} blocked (no network)")
        if "process" in blocked and (
            event in _PROCESS_EVENTS or (event == "import" and args[0] == "_posixsubprocess")
        ):
            raise PermissionError(f"sandbox: {event} blocked (no processes or signals)")
        if "ctypes" in blocked and (
            event.startswith("ctypes.") or (event == "import" and args[0] in ("ctypes", "_ctypes"))
        ):
            raise PermissionError(f"sandbox: {event} blocked (no ctypes)")
        if "files" not in blocked:
            return
        if event == "open":
            mode, flags = str(args[1] or ""), args[2] if isinstance(args[2], int) else 0
            writes = bool(flags & _WRITE_FLAGS) or any(c in mode for c in "wax+")
            if denied(args[0], writes):
                raise PermissionError(f"sandbox: opening {args[0]!r} blocked")
        elif event in ("os.listdir", "os.scandir") and denied(args[0], False):
            raise PermissionError(f"sandbox: listing {args[0]!r} blocked")
        elif event in _PATH_EVENTS and any(denied(a, True) for a in args[:2]):
            raise PermissionError(f"sandbox: {event} outside the working directory blocked")

    sys.addaudithook(hook)


def _run_code(code: str, entry: str, inputs: list[list[Any]], out_fd: int) -> None:
    """Compile and run ``code``, call ``entry`` on each input, write one JSON report to ``out_fd``."""
    import builtins

    pid, dumps, write_all = os.getpid(), json.dumps, _write_all  # bound before the code can patch them

    def report(msg: dict[str, Any] | str) -> None:
        if os.getpid() == pid:  # copies of this process that the code forked stay silent
            write_all(out_fd, (msg if isinstance(msg, str) else dumps(msg)).encode())
        os._exit(0)

    try:
        compiled = compile(code, "<candidate>", "exec")
    except BaseException as e:  # SyntaxError, ValueError (null bytes), RecursionError, MemoryError
        report({"stage": "syntax", "error": _describe(e)})
    namespace: dict[str, Any] = {"__name__": "__candidate__", "__builtins__": builtins}
    try:
        exec(compiled, namespace)
    except BaseException as e:  # SystemExit included: exiting is a failure, not a result
        report({"stage": "load", "error": f"error while loading the code: {_describe(e)}"})
    fn = namespace.get(entry)
    if not callable(fn):
        report({"stage": "entry", "error": f"no function {entry!r} defined"})
    items = []
    for args in inputs:
        try:
            items.append(f'["v",{dumps(fn(*args), allow_nan=False)}]')
        except BaseException as e:  # the call raised, or its value is not JSON
            items.append(dumps(["e", _describe(e)]))
    report('{"stage":"done","outputs":[' + ",".join(items) + "]}")


def _describe(e: BaseException) -> str:
    """``"Type: message"`` of an exception raised by the candidate (whose ``__str__`` may raise too)."""
    try:
        text = str(e)
    except BaseException:
        text = "?"
    return f"{type(e).__name__}: {text}"[:300] if text else type(e).__name__


def _line(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg).encode() + b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


if __name__ == "__main__" and sys.argv[1:2] == [MARKER]:
    supervise(int(sys.argv[2]))
