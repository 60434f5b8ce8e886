"""The sandbox's own side: the supervisor and the candidate process (see
:mod:`advantage.envs.text.code.sandbox`).

Run as ``python -I -S _sandbox_child.py --advantage-sandbox FD`` with the payload (code, entry, inputs,
nonce, limits, the unsafe mode's working directory,
the kernel mode tests force) as JSON on stdin. Standard library only: under ``-I -S`` the
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

import contextlib
import json
import os
import select
import signal
import sys
import time
from typing import Any, NoReturn

MARKER = "--advantage-sandbox"  # in every sandbox process's command line (tests look for leftovers)
GRACE = 0.5  # seconds: the supervisor's own deadline is this much after the trainer's
# Linux constants (sched.h, mount.h, prctl.h)
_CLONE = {"netns": 0x40000000, "pidns": 0x20000000, "mountns": 0x00020000, "ipcns": 0x08000000}
_CLONE["utsns"], _CLONE_NEWUSER = 0x04000000, 0x10000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 1, 2, 4, 8, 32
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 24, 38
NO_KERNEL_ISOLATION = (
    "the code sandbox needs Linux namespaces (user or root, plus mount, PID, network and IPC), which this "
    "system refuses, so no model-written code was run. Run on Linux >= 5.14 with unprivileged user "
    "namespaces allowed (sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0; in "
    "a container: a runtime or seccomp profile that allows unshare(CLONE_NEWUSER), e.g. podman, or docker "
    "run --security-opt seccomp=unconfined), or set data.sandbox=unsafe to run it with no isolation at "
    "all (only on a machine you can lose)"
)


def supervise(result_fd: int) -> None:
    """The supervisor: unshare, fork the candidate, forward its results with the nonce, never raise."""
    payload = json.loads(sys.stdin.buffer.read())
    limits, nonce = payload["limits"], payload["nonce"]
    deadline = time.monotonic() + limits["wall_seconds"] + GRACE
    kind, why = _unshare(limits["isolation"], payload.get("kind", "auto"))
    if kind is None and limits["isolation"] != "unsafe":  # fail closed: never run unconfined by default
        error = f"{NO_KERNEL_ISOLATION} ({why})"
        _write_all(result_fd, _line({"nonce": nonce}) + _line({"nonce": nonce, "error": error}))
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


def _bind_paths() -> list[str]:
    """What the candidate's file system holds besides its ``/tmp``: the interpreter's module folders
    (``sys.path``: the standard library and its extension modules) and the system library folders those
    extension modules link against, read-only; ``/dev/null``, ``/dev/zero`` and ``/dev/urandom``."""
    paths = [p for p in sys.path if os.path.isdir(p)]
    paths += [p for p in ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib") if os.path.isdir(p)]
    paths += [p for p in ("/dev/null", "/dev/zero", "/dev/urandom") if os.path.exists(p)]
    return sorted({os.path.realpath(p) for p in paths})


def _unshare(isolation: str, kind: str) -> tuple[str | None, str]:
    """Enter new namespaces: ``("root", …)`` as real root (no user namespace: the candidate drops to a
    fresh uid instead), ``("userns", …)`` inside a user namespace mapping our own uid, ``("userns-root",
    …)`` the same entered as root (uid 0 inside is a fresh uid outside, which the candidate switches to:
    kuid 0 would ignore RLIMIT_NPROC), or ``(None, why)``. ``kind`` (tests) forces one: ``root``,
    ``userns`` or ``none``."""
    if isolation == "unsafe":
        return None, "isolation='unsafe'"
    if kind == "none":
        return None, "kernel isolation switched off for a test"
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    flags = sum(_CLONE.values())
    root = os.geteuid() == 0
    if kind == "root" and not root:
        return None, "not root"
    if root and kind in ("auto", "root"):
        if libc.unshare(flags) == 0:
            return "root", ""
        if kind == "root":
            return None, f"unshare as root failed: {os.strerror(ctypes.get_errno())}"
    uid, gid = os.geteuid(), os.getegid()
    mapper = _start_mapper() if root else None
    if libc.unshare(flags | _CLONE_NEWUSER) != 0:
        why = f"unshare of a user namespace failed: {os.strerror(ctypes.get_errno())}"
        if mapper is not None:
            os.kill(mapper[0], signal.SIGKILL)
            os.waitpid(mapper[0], 0)
        return None, why
    if mapper is not None:  # only a process outside the namespace may map another uid than its own
        pid, go = mapper
        os.write(go, b"x")
        os.close(go)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            return None, "mapping a fresh uid into the user namespace failed"
        return "userns-root", ""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    return "userns", ""


def _start_mapper() -> tuple[int, int]:
    """A child that, once told (a byte on the returned fd), maps uid and gid 0 of our new user namespace
    to a fresh uid and gid outside it, then exits (0 on success)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(write_end)
            os.read(read_end, 1)
            fresh = _fresh_uid()
            for name in ("uid_map", "gid_map"):
                with open(f"/proc/{os.getppid()}/{name}", "w") as f:
                    f.write(f"0 {fresh} 1")
            os._exit(0)
        except BaseException:
            os._exit(1)
    os.close(read_end)
    return pid, write_end


def _fresh_uid() -> int:
    """A random uid above any real account's, which owns no process or file."""
    return 2**30 + int.from_bytes(os.urandom(4), "big") % 2**29


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
    """Apply every measure of the sandbox module's docstring (:mod:`advantage.envs.text.code.sandbox`);
    return their names. Raises when a kernel measure fails (the caller then reports an error instead of
    running the code)."""
    import ctypes
    import resource

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    limits = payload["limits"]
    done = ["session", "minimal-env", "rlimits"]
    devnull = os.open(os.devnull, os.O_RDWR)
    if kind is not None:
        done += [*_CLONE, "userns"] if kind.startswith("userns") else list(_CLONE)
        done += _build_root(libc, limits["file_size_bytes"], kind == "userns-root")
        os.chdir("/tmp")
        os.setsid()  # leave the supervisor's process group, so kill(0, …) cannot reach the supervisor
    else:
        os.chdir(payload["workdir"])
        done.append("UNSAFE-no-isolation")
    for fd in (0, 1, 2):  # prints go nowhere; stdin (the payload) is not readable
        os.dup2(devnull, fd)
    os.closerange(3, out_fd)
    os.closerange(out_fd + 1, 1 << 20)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the supervisor
    # processes already counted against RLIMIT_NPROC: none for a fresh uid, us and the supervisor in a
    # user namespace (the count is per namespace), all of our uid's threads otherwise
    counted = {"root": 1, "userns": 2, "userns-root": 1}.get(kind or "", 0) or _threads_of_uid(os.getuid())
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
    if kind in ("root", "userns-root"):  # inside the user namespace, uid 0 is the fresh uid outside
        uid = _fresh_uid() if kind == "root" else 0
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # as root outside a user namespace: clears the capability sets too
        done.append("uid-drop")
    header, caps = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()  # _LINUX_CAPABILITY_V3
    if libc.capset(header, caps) == 0:
        done.append("no-caps")
    elif kind is not None:
        raise OSError(f"dropping capabilities: {os.strerror(ctypes.get_errno())}")
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0:
        done.append("no-new-privs")
    elif kind is not None:
        raise OSError(f"setting no_new_privs: {os.strerror(ctypes.get_errno())}")
    if kind is not None:
        done += _seccomp(libc)
    elif "no-new-privs" in done:  # unsafe: no namespace, so the filter is all that keeps IPC objects from
        with contextlib.suppress(OSError):  # outliving the run; where refused, unsafe runs on without it
            done += _seccomp(libc)
    return done


# Per architecture (x86_64, aarch64): the audit arch; clone, socket, socketpair; the system calls refused
# with EPERM: unshare setns mount umount2 pivot_root chroot ptrace process_vm_readv process_vm_writev
# keyctl add_key request_key bpf perf_event_open userfaultfd name_to_handle_at open_by_handle_at, then
# System V IPC (shmget shmat shmctl shmdt semget semop semctl semtimedop msgget msgsnd msgrcv msgctl) and
# POSIX message queues (mq_open mq_unlink mq_timedsend mq_timedreceive mq_notify mq_getsetattr). Neither
# architecture has the ``ipc`` or ``socketcall`` multiplexers (i386 does: its ABI is killed outright).
_SECCOMP_ARCH: dict[str, tuple[int, int, int, int, list[int]]] = {
    "x86_64": (
        0xC000003E,
        56,
        41,
        53,
        [
            *(272, 308, 165, 166, 155, 161, 101, 310, 311, 250, 248, 249, 321, 298, 323, 303, 304),
            *(29, 30, 31, 67, 64, 65, 66, 220, 68, 69, 70, 71),
            *(240, 241, 242, 243, 244, 245),
        ],
    ),
    "aarch64": (
        0xC00000B7,
        220,
        198,
        199,
        [
            *(97, 268, 40, 39, 41, 51, 117, 270, 271, 219, 217, 218, 280, 241, 282, 264, 265),
            *(194, 196, 195, 197, 190, 193, 191, 192, 186, 189, 188, 187),
            *(180, 181, 182, 183, 184, 185),
        ],
    ),
}
# the new mount API and io_uring (same numbers everywhere)
_SECCOMP_COMMON = [428, 429, 430, 431, 432, 433, 442, 425, 426, 427]
_CLONE3 = 435
_CLONE_NEW_ANY = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
# Socket address families socket() and socketpair() may create: AF_UNIX (socketpair is used by asyncio,
# multiprocessing and socket.socketpair; abstract addresses belong to the network namespace, and the
# private root holds no pathname socket of the host), AF_INET and AF_INET6 (the network namespace has
# only a loopback that is down, so nothing is reachable). Every other family (netlink, packet, vsock,
# which no network namespace confines, alg, bluetooth, …) gets EAFNOSUPPORT, as from a kernel without it.
SOCKET_FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10}
_EAFNOSUPPORT = 97


def _seccomp_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter of :func:`_seccomp` for ``machine`` as classic BPF instructions ``(code, jt, jf, k)``.
    Jumps are written to labels (strings) and resolved to the relative offsets BPF wants."""
    arch, clone, socket_nr, socketpair_nr, denied = _SECCOMP_ARCH[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill, eperm = 0x7FFF0000, 0x80000000, 0x00050000 | 1
    enosys, eafnosupport = 0x00050000 | 38, 0x00050000 | _EAFNOSUPPORT
    nr, arg0 = 0, 16  # offsets in struct seccomp_data; arg0's low 32 bits (little-endian): an int
    code: list[tuple[int, int | str, int | str, int]] = [
        (ld, 0, 0, 4),
        (jeq, 0, "kill", arch),  # another ABI (x32, i386): its system call numbers mean other calls
        (ld, 0, 0, nr),
        (jge, "kill", 0, 0x40000000),  # x32 numbers on x86_64
    ]
    code += [(jeq, "eperm", 0, n) for n in denied + _SECCOMP_COMMON]
    code += [(jeq, "enosys", 0, _CLONE3)]
    code += [(jeq, 0, "socket", clone), (ld, 0, 0, arg0), (jset, "eperm", "allow", _CLONE_NEW_ANY)]
    labels = {"socket": len(code)}
    code += [(jeq, "family", 0, socket_nr), (jeq, "family", "allow", socketpair_nr)]
    labels["family"] = len(code)
    code += [(ld, 0, 0, arg0), *((jeq, "allow", 0, f) for f in SOCKET_FAMILIES.values())]
    code += [(ret, 0, 0, eafnosupport)]
    for name, action in (("eperm", eperm), ("enosys", enosys), ("kill", kill), ("allow", allow)):
        labels[name] = len(code)
        code.append((ret, 0, 0, action))

    def offset(at: int, target: int | str) -> int:
        if isinstance(target, int):
            return target
        jump = labels[target] - at - 1
        if not 0 <= jump < 256:  # a forward jump of at most 255: our own bug, never installed
            raise ValueError(f"seccomp program: jump to {target} out of range ({jump})")
        return jump

    return [(op, offset(i, jt), offset(i, jf), k) for i, (op, jt, jf, k) in enumerate(code)]


def _seccomp(libc: Any) -> list[str]:
    """A seccomp filter (classic BPF, no library) that refuses with EPERM the system calls that change
    namespaces or mounts, inspect other processes, create or reach System V IPC objects and POSIX message
    queues (their memory is not counted by ``RLIMIT_AS``, and without an IPC namespace they outlive the
    process), or reach rarely needed kernel code (keys, BPF, perf, userfaultfd, io_uring, file handles);
    ``clone`` with a namespace flag; ``socket``/``socketpair`` of a family outside
    :data:`SOCKET_FAMILIES` (EAFNOSUPPORT); ``clone3`` gets ENOSYS (the C library then falls back to
    ``clone``, whose flags a filter can read). Any other ABI (x32, i386 on x86_64) kills the process.
    Defence in depth where the namespaces are the boundary, this narrows the kernel code the candidate can
    reach; without namespaces (``unsafe``) it is what keeps IPC memory from outliving the run. Returns
    ``["seccomp"]``, or ``[]`` on an unknown architecture."""
    import ctypes
    import platform

    if platform.machine() not in _SECCOMP_ARCH:
        return []
    prog = _seccomp_program(platform.machine())

    class Filter(ctypes.Structure):
        _fields_ = [
            ("code", ctypes.c_uint16),
            ("jt", ctypes.c_uint8),
            ("jf", ctypes.c_uint8),
            ("k", ctypes.c_uint32),
        ]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(prog))(*[Filter(*f) for f in prog])
    program = Program(len(prog), filters)
    if libc.prctl(22, 2, ctypes.byref(program), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(f"installing the seccomp filter: {os.strerror(ctypes.get_errno())}")
    return ["seccomp"]


_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
_MNT_DETACH = 2


def _build_root(libc: Any, tmp_bytes: int, become_fresh_uid: bool) -> list[str]:
    """In the new mount namespace, make the candidate's whole file system a fresh tmpfs holding only the
    paths of :func:`_bind_paths` (read-only, at their own paths) and an empty ``/tmp`` of ``tmp_bytes``
    (noexec), and make it the root (``pivot_root``, the old root detached). So no other path — the
    trainer's files, home folders, ``/proc``, pathname sockets — exists for the candidate.
    ``become_fresh_uid``: switch to uid 0 of the user namespace (a fresh uid outside) once the paths are
    open. Raises OSError on any
    failure."""
    import ctypes
    import platform

    def mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
        enc = [s.encode() if s is not None else None for s in (src, target, fstype)]
        if libc.mount(enc[0], enc[1], enc[2], flags, data.encode() if data else None) != 0:
            raise OSError(f"mount {target}: {os.strerror(ctypes.get_errno())}")

    mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    # opened in this mount namespace (a mount of another cannot be bound), before the tmpfs covers /tmp
    binds = {p: os.open(p, os.O_PATH) for p in _bind_paths()}
    if become_fresh_uid:  # as root: opened as kuid 0 (which may walk /root); files are made as the fresh uid
        os.setgroups([])
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
    new = "/tmp"  # any existing folder: the tmpfs covers it in this namespace only
    mount("tmpfs", new, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,nr_inodes=4096,mode=755")
    for path, fd in binds.items():
        target = new + path
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(target, exist_ok=True)
        else:
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
        mount(f"/proc/self/fd/{fd}", target, None, _MS_BIND | _MS_REC)
        ro = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID
        try:  # no atime flag: the remount keeps the mount's own (locked in a user namespace)
            mount(None, target, None, ro | (0 if path.startswith("/dev/") else _MS_NODEV))
        except OSError:  # the source mount has flags a user namespace cannot clear
            mount(None, target, None, ro | _MS_NODEV | _MS_NOEXEC)
        os.close(fd)
    for link in ("/lib", "/lib64"):  # merged /usr: the dynamic loader's paths are links into /usr
        if os.path.islink(link) and not os.path.lexists(new + link):
            os.symlink(os.readlink(link), new + link)
    os.makedirs(new + "/tmp")
    size = f"size={max(tmp_bytes, 4096)},nr_inodes=1024,mode=1777"
    mount("tmpfs", new + "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, size)
    os.chdir(new)
    number = _PIVOT_ROOT.get(platform.machine())
    if number is not None and libc.syscall(number, b".", b".") == 0:  # the old root now sits on top
        if libc.umount2(b".", _MNT_DETACH) != 0:
            raise OSError(f"detaching the old root: {os.strerror(ctypes.get_errno())}")
        how = "pivot-root"
    else:  # e.g. an initramfs root, which pivot_root refuses; chroot without capabilities is final too
        os.chroot(".")
        how = "chroot"
    os.chdir("/")
    mount(None, "/", None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    return [how, "minimal-root", "readonly-fs", "private-tmp", "no-proc"]


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


def _run_code(code: str, entry: str, inputs: list[list[Any]], out_fd: int) -> None:
    """Compile and run ``code``, call ``entry`` on each input, write one JSON report to ``out_fd``."""
    import builtins

    pid, dumps, write_all = os.getpid(), json.dumps, _write_all  # bound before the code can patch them

    def report(msg: dict[str, Any] | str) -> NoReturn:
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
            value = fn(*args)
            # UTF-8, non-ASCII unescaped: the output limit counts the bytes of the value, not 6-12 bytes
            # of \uXXXX escapes per character; a string with a lone surrogate (not UTF-8) stays escaped
            text = dumps(value, allow_nan=False, ensure_ascii=False)
            try:
                text.encode()
            except UnicodeEncodeError:
                text = dumps(value, allow_nan=False)
            items.append(f'["v",{text}]')
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
    """One protocol line: JSON in UTF-8 with non-ASCII unescaped, so a result of non-ASCII text is not
    inflated 6-12 times on its way to the trainer. A lone surrogate (only ever inside a JSON string)
    becomes its ``\\uXXXX`` escape, which decodes back to the same string."""
    return json.dumps(msg, ensure_ascii=False).encode("utf-8", "backslashreplace") + b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


if __name__ == "__main__" and sys.argv[1:2] == [MARKER]:
    supervise(int(sys.argv[2]))
