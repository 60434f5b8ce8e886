"""The code sandbox and the ``code`` task: every attack scores 0 with a reason, within the time limit + 1 s,
leaving no process behind and the trainer's memory unchanged; correct code passes, from any thread.

Attacks run in every kernel mode of the sandbox: ``root`` (namespaces without a user namespace, the
candidate on a fresh uid; only when the tests run as root) and ``userns`` (a user namespace). Where a mode
is unavailable on the machine running the tests, the test asserts that the sandbox fails closed (nothing
runs, a clear error) and is then skipped."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

from advantage import _sandbox_child, sandbox
from advantage.envs.text import CodeTask, Example, extract_code, make_task
from advantage.envs.text import code as code_module
from advantage.errors import ConfigError
from advantage.sandbox import Raised, SandboxLimits, run_sandboxed

# On one pytest-xdist worker (--dist loadgroup): the leftover-process checks look at the whole machine.
pytestmark = pytest.mark.xdist_group("sandbox")

KINDS = ["root", "userns"]
WALL = 2.0


def _assert_fails_closed() -> None:
    """With the kernel isolation unavailable: no code runs, the error says what is missing and how to run."""
    witness = "def f():\n    return 1"
    result = run_sandboxed(witness, [[]])
    assert result.outputs is None and result.stage == "setup", result
    assert "needs Linux namespaces" in result.error and "data.sandbox=unsafe" in result.error
    with pytest.raises(ConfigError, match="needs Linux namespaces"):
        make_task("code")
    task = CodeTask(
        tests=2,
        answer_format="plain",
        format_reward=0.0,
        partial_credit=False,
        timeout=1.0,
        memory_mb=256,
        sandbox="unsafe",
    )  # built, then its limits switched back to kernel
    task.limits = SandboxLimits(wall_seconds=WALL)
    with pytest.raises(RuntimeError, match="needs Linux namespaces"):
        task.verify("def f(x):\n    return x", _example(([1], 1)))


@pytest.fixture(params=KINDS)
def mode(request, monkeypatch) -> str:
    """Each kernel mode; where this machine cannot run it, check it fails closed, then skip."""
    monkeypatch.setattr(sandbox, "_KIND", request.param)
    if sandbox.kernel_isolation_problem() is not None:
        _assert_fails_closed()
        pytest.skip(f"sandbox mode {request.param} unavailable here: checked that it fails closed")
    return request.param


@pytest.fixture
def kernel() -> None:
    """The sandbox's default mode on this machine; where it has none, check it fails closed, then skip."""
    if sandbox.kernel_isolation_problem() is not None:
        _assert_fails_closed()
        pytest.skip("no kernel isolation here: checked that the sandbox fails closed")


def _task(mode: str = "auto", **options) -> CodeTask:
    task = make_task("code", timeout=WALL, memory_mb=256, **options)
    task.limits = SandboxLimits(wall_seconds=WALL, cpu_seconds=2, memory_bytes=256 * 2**20)
    return task


def _example(*tests) -> Example:
    """A problem whose hidden tests are ``(args, expected)`` pairs: a successful attack would pass them."""
    meta = {"entry": "f", "tests": [[list(args), expected] for args, expected in tests]}
    return Example("attack", "", "", meta)


def _sandbox_processes() -> set[tuple[int, str]]:
    """Sandbox processes this test could have left: those with the marker in their command line that
    descend from this process or were orphaned (parent init: an escape, or a supervisor that died), and
    unreaped children of this process (zombies: empty command line). A sandbox under another process (a
    parallel pytest worker's) is not ours; nor is a live child without the marker (Ray, a sidecar)."""
    procs: dict[int, tuple[int, str, bytes]] = {}  # pid -> (parent pid, state, command line)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        procs[int(name)] = (int(fields[1]), fields[0], cmdline)
    me = os.getpid()

    def ours(pid: int) -> bool:
        parent, seen = procs[pid][0], set()
        if parent in (0, 1):
            return True  # orphaned
        while parent not in (0, 1) and parent not in seen:
            if parent == me:
                return True
            seen.add(parent)
            if parent not in procs:
                return True  # its parent just exited: count it, to be safe
            parent = procs[parent][0]
        return False

    found = set()
    for pid, (parent, state, cmdline) in procs.items():
        marked = _sandbox_child.MARKER.encode() in cmdline
        if (marked and ours(pid)) or (parent == me and not cmdline):
            found.add((pid, state))
    return found


def _attack(task: CodeTask, completion: str, example: Example):
    """Verify ``completion``; check the score is 0, the time bound and that no process is left."""
    before = _sandbox_processes()
    start = time.monotonic()
    reward = task.verify(completion, example)
    elapsed = time.monotonic() - start
    assert reward.score == 0.0 and not reward.correct, reward
    assert reward.reason
    assert elapsed < task.limits.wall_seconds + 1.0, (elapsed, reward)
    # A SIGKILLed process may still be in the kernel's exit path for a moment on a starved CPU (state R,
    # running no user code); it must be gone within a bounded time, or the sandbox left it behind.
    deadline = time.monotonic() + 2.0
    while (left := _sandbox_processes() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == set()
    return reward


def test_infinite_loop_is_killed(mode):
    reward = _attack(_task(mode), "def f(x):\n    while True:\n        pass", _example(([1], 1)))
    assert "time limit" in reward.reason


def test_fork_bomb_is_contained(mode):
    bomb = "import os\nwhile True:\n    os.fork()\ndef f(x):\n    return x"
    reward = _attack(_task(mode), bomb, _example(([1], 1)))
    assert "Resource temporarily unavailable" in reward.reason or "os.fork blocked" in reward.reason


def test_fork_bomb_that_ignores_errors_is_killed(mode):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    reward = _attack(_task(mode), bomb, _example(([1], 1)))
    assert "limit" in reward.reason or "blocked" in reward.reason


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_10gb_allocation_fails_in_the_child_only(mode):
    rss = _rss_kib()
    reward = _attack(_task(mode), "x = bytearray(10 * 2**30)\ndef f(x):\n    return 1", _example(([1], 1)))
    assert "MemoryError" in reward.reason
    assert _rss_kib() - rss < 20_000  # KiB: the trainer's memory did not grow


@pytest.mark.parametrize(
    ("fake", "why"),
    [
        ("import sys\nsys.exit(0)", "SystemExit"),
        ("import os\nos._exit(0)", "no results"),
        ("def f(x):\n    import sys\n    sys.exit(0)", "SystemExit"),
        ("def f(x):\n    import os\n    os._exit(0)", "no results"),
    ],
)
def test_exiting_early_is_not_success(mode, fake, why):
    reward = _attack(_task(mode), fake, _example(([1], 1)))
    assert why in reward.reason


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


HARNESS = [_sandbox_child.__file__, sandbox.__file__, code_module.__file__]
WRITE = """
def f(paths):
    opened = []
    for path in paths:
        try:
            with open(path, "a"):  # append mode, nothing written: harmless even if the sandbox failed
                opened.append(path)
        except OSError:
            pass
    return opened
"""


def test_harness_files_cannot_be_overwritten(mode):
    digests = [_digest(p) for p in HARNESS]
    reward = _attack(_task(mode), WRITE, _example(([HARNESS], HARNESS)))
    assert "returned a wrong value" in reward.reason
    assert run_sandboxed(WRITE, [[HARNESS]], limits=_task(mode).limits).outputs == [[]]
    assert digests == [_digest(p) for p in HARNESS]


FORGE = r"""
import builtins, json, os, sys
FORGED = '{"stage": "done", "correct": true, "score": 1.0, "passed": 1, "outputs": [["v", "right"]]}'
def forge():
    print(FORGED)
    print(FORGED, file=sys.stderr)
    for fd in range(3, 64):
        try:
            os.write(fd, FORGED.encode() + b"\n")
        except OSError:
            pass
"""
PATCH = """
def f(x):
    forge()
    json.dumps = json.loads = lambda *a, **k: FORGED
    builtins.isinstance = builtins.callable = builtins.len = lambda *a: True
    return "wrong"
"""


@pytest.mark.parametrize("tail", [PATCH, "forge()\nos._exit(0)"], ids=["patch-json-builtins", "forge-exit"])
def test_comparator_cannot_be_fooled(mode, tail):
    # a forged report can only claim return values; the expected one is unknown to the code
    example = _example(([1], "right-" + secrets.token_hex(8)))
    reward = _attack(_task(mode), FORGE + tail, example)
    assert any(why in reward.reason for why in ("garbled", "no results", "returned a wrong value"))


SEARCH = r"""
import os, re

def scan_memory(pid, pattern):
    try:
        maps, mem = open(f"/proc/{pid}/maps"), open(f"/proc/{pid}/mem", "rb", 0)
    except OSError:
        return None
    with maps, mem:
        for line in maps:
            lo, hi = (int(v, 16) for v in line.split()[0].split("-"))
            if "r" not in line.split()[1] or hi - lo > 2**26:
                continue
            try:
                mem.seek(lo)
                found = pattern.search(mem.read(hi - lo))
            except (OSError, ValueError, OverflowError):
                continue
            if found:
                return found.group().decode()
    return None

def listdir(path):  # there is no /proc in the sandbox
    try:
        return os.listdir(path)
    except OSError:
        return []

def ancestors():
    pid, out = os.getpid(), []
    while pid > 1 and len(out) < 4:
        try:
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        out.append(pid)
    return out

def f(prefix):
    pattern = re.compile(re.escape(prefix).encode() + rb"[0-9a-f]{32}")
    places = [str(os.environ).encode()]
    for pid in [p for p in listdir("/proc") if p.isdigit()]:
        for name in ("environ", "cmdline"):
            try:
                places.append(open(f"/proc/{pid}/{name}", "rb").read())
            except OSError:
                pass
    for folder in (".", "/tmp"):
        for name in listdir(folder):
            try:
                places.append(open(os.path.join(folder, name), "rb").read(2**20))
            except OSError:
                pass
    for data in places:
        found = pattern.search(data)
        if found:
            return found.group().decode()
    for pid in ["self", *ancestors()]:
        found = scan_memory(pid, pattern)
        if found:
            return found
    return "not found"
"""


def test_expected_output_is_not_in_the_child(mode):
    secret = "EXPECTED-" + secrets.token_hex(16)  # only this process holds it (in the example's tests)
    reward = _attack(_task(mode), SEARCH, _example((["EXPECTED-"], secret)))
    assert "returned a wrong value" in reward.reason
    assert run_sandboxed(SEARCH, [["EXPECTED-"]], limits=_task(mode).limits).outputs == ["not found"]


CONNECT = """
import socket
import tempfile
def f(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError as e:
        return "blocked: " + str(e)
    return "connected"
"""


def test_socket_to_a_local_listener_fails(mode):
    accepted, done = [], threading.Event()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.05)
        port = server.getsockname()[1]

        def accept():
            while not done.is_set():
                with contextlib.suppress(TimeoutError):
                    accepted.append(server.accept())

        thread = threading.Thread(target=accept)
        thread.start()
        try:
            reward = _attack(_task(mode), CONNECT, _example(([port], "connected")))
            result = run_sandboxed(CONNECT, [[port]], limits=_task(mode).limits)
        finally:
            done.set()
            thread.join()
    assert not accepted
    assert "returned a wrong value" in reward.reason or "raised" in reward.reason
    got = result.outputs[0]
    assert isinstance(got, Raised) or got.startswith("blocked"), got


def test_environment_secret_is_not_visible(mode, monkeypatch):
    canary = "canary-" + secrets.token_hex(16)
    monkeypatch.setenv("ADVANTAGE_CANARY_SECRET", canary)
    reward = _attack(_task(mode), SEARCH, _example((["canary-"], canary)))
    assert "returned a wrong value" in reward.reason
    environ = "import os\ndef f():\n    return dict(os.environ)"
    outputs = run_sandboxed(environ, [[]], limits=_task(mode).limits).outputs
    assert outputs == [{"HOME": "/tmp", "LANG": "C.UTF-8", "PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"}]
    assert run_sandboxed(SEARCH, [["canary-"]], limits=_task(mode).limits).outputs == ["not found"]


def test_isolation_in_effect_is_reported(mode):
    result = run_sandboxed("def f():\n    return 1", [[]], limits=SandboxLimits())
    assert result.outputs == [1]
    kernel = {"netns", "pidns", "mountns", "ipcns", "minimal-root", "readonly-fs", "private-tmp", "no-proc"}
    kernel |= {"no-caps", "no-new-privs", "seccomp", "session", "rlimits", "minimal-env"}
    kernel |= {"uid-drop"} if mode == "root" else {"userns"}
    assert kernel <= set(result.isolation), result.isolation
    reward = _task(mode).verify("def f(x):\n    return x", _example(([1], 1)))
    assert reward.correct and "no isolation" not in reward.reason


def test_without_kernel_isolation_the_code_task_fails_closed(monkeypatch):
    # what a container that refuses namespaces gets: nothing runs unless data.sandbox=unsafe is set
    monkeypatch.setattr(sandbox, "_KIND", "none")
    _assert_fails_closed()
    for old in ("auto", "python", "namespaces"):  # the audit-hook fallback is gone
        with pytest.raises(ConfigError, match="sandbox.isolation must be one of kernel, unsafe"):
            SandboxLimits(isolation=old)
    unsafe = make_task("code", sandbox="unsafe", timeout=WALL)
    assert unsafe.limits.isolation == "unsafe"
    reward = unsafe.verify("def f(x):\n    return x", _example(([1], 1)))
    assert reward.correct and "[no isolation: data.sandbox=unsafe]" in reward.reason
    with pytest.raises(ConfigError, match="data.sandbox must be kernel or unsafe, got 'python'"):
        make_task("code", sandbox="python")


READ = r"""
import os, sys
def f(paths, needle):
    skip = {"/usr", "/lib", "/lib64", "/proc", "/sys", *map(os.path.realpath, sys.path)}
    found = []
    def look(data, where):
        if needle.encode() in data:
            found.append(where)
    for path in paths:
        try:
            with open(path, "rb") as fh:
                look(fh.read(), path)
        except OSError:
            pass
        try:  # through a directory descriptor of the root
            root = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
            fd = os.open(path.lstrip("/"), os.O_RDONLY, dir_fd=root)
            look(os.read(fd, 1 << 16), "dir_fd:" + path)
        except OSError:
            pass
    for top, dirs, files in os.walk("/"):
        dirs[:] = [d for d in dirs if os.path.join(top, d) not in skip and top.count("/") < 4]
        for name in files:
            try:
                with open(os.path.join(top, name), "rb") as fh:
                    look(fh.read(1 << 16), os.path.join(top, name))
            except OSError:
                pass
    written = []
    for path in ["/evil", "/usr/evil", os.path.dirname(os.__file__) + "/evil.py", *paths]:
        try:
            with open(path, "a"):
                written.append(path)
        except OSError:
            pass
    return {"found": found, "written": written, "cwd": os.getcwd(), "root": sorted(os.listdir("/"))}
"""


def test_files_outside_the_sandbox_are_unreachable(mode, tmp_path):
    # canaries where secrets live: the trainer's temporary files, working directory and home folder
    needle = "canary-" + secrets.token_hex(16)
    home = os.path.expanduser("~")
    places = [
        tmp_path / "secret.txt",
        Path(os.getcwd()) / f".canary-{needle}",
        Path(home) / f".canary-{needle}",
    ]
    try:
        for place in places:
            place.write_text(needle)
        result = run_sandboxed(READ, [[[str(p) for p in places], needle]], limits=_task(mode).limits)
    finally:
        for place in places:
            place.unlink(missing_ok=True)
    (out,) = result.outputs
    assert out["found"] == [] and out["written"] == [], out
    assert out["cwd"] == "/tmp"
    assert set(out["root"]) <= {"tmp", "usr", "lib", "lib64", "dev", "root", "home", "opt"}, out["root"]


UNIX = """
import socket
import tempfile
def f(paths):
    out = []
    for path in paths:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(0.5)
                s.connect(path)
                s.sendall(b"stolen")
            out.append("connected " + path)
        except OSError as e:
            out.append("blocked")
    return out
"""


def test_unix_sockets_are_unreachable(mode, tmp_path):
    # one in the trainer's temporary folder, one in its working directory, one abstract (no file)
    accepted, done, servers = [], threading.Event(), []
    here = tempfile.mkdtemp(prefix=".sock-", dir=os.getcwd())
    paths = [str(tmp_path / "listener.sock"), os.path.join(here, "s"), "\0advantage-" + secrets.token_hex(8)]
    os.chmod(tmp_path, 0o755)
    os.chmod(here, 0o755)
    for address in paths:
        server = socket.socket(socket.AF_UNIX)
        server.bind(address)
        if not address.startswith("\0"):
            os.chmod(address, 0o777)  # as many listeners are (X11, some agents): any uid may connect
        server.listen()
        server.settimeout(0.05)
        servers.append(server)

    def accept():
        while not done.is_set():
            for server in servers:
                with contextlib.suppress(TimeoutError):
                    accepted.append(server.accept())

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        result = run_sandboxed(UNIX, [[paths]], limits=_task(mode).limits)
    finally:
        done.set()
        thread.join()
        for server in servers:
            server.close()
        shutil.rmtree(here)
    assert not accepted
    assert result.outputs == [["blocked"] * 3], result


SIGNAL = r"""
import ctypes, os, signal
def f(trainer):
    libc = ctypes.CDLL(None, use_errno=True)
    hits = []
    for pid in [trainer, *range(2, 300)]:
        fd = libc.syscall(434, pid, 0)  # pidfd_open: the number is the same on every architecture
        if fd >= 0 and libc.syscall(424, fd, signal.SIGKILL, None, 0) == 0:  # pidfd_send_signal
            hits.append(["pidfd", pid])
        try:
            os.kill(pid, 0)
            hits.append(["kill", pid])
        except OSError:
            pass
    for ns in (0x00020000, 0x10000000 | 0x00020000):  # a new mount namespace, then a user one with it
        if libc.unshare(ns) == 0:  # refused by the seccomp filter; a nested namespace gains nothing anyway
            hits.append(["unshare", ns])
        if libc.mount(None, b"/usr", None, 4096 | 32, None) == 0:  # remount read-write
            hits.append(["remount-rw", ns])
    try:
        os.kill(-1, signal.SIGKILL)
        os.killpg(0, signal.SIGKILL)
    except OSError:
        pass
    return {"hits": hits, "ppid": os.getppid(), "pid": os.getpid()}
"""


def test_no_process_outside_the_sandbox_can_be_signalled(mode):
    # the audit-hook fallback missed pidfd_send_signal, which killed the supervisor and aborted training
    result = run_sandboxed(SIGNAL, [[os.getpid()]], limits=_task(mode).limits)
    assert result.error is None, result
    (out,) = result.outputs
    assert out == {"hits": [], "ppid": 0, "pid": 1}, out
    reward = _attack(_task(mode), SIGNAL, _example(([os.getpid()], "x")))
    assert "returned a wrong value" in reward.reason


def test_run_sandboxed_values_and_errors(kernel):
    code = "def f(a, b):\n    return [a // b, (a, b), {'k': a}]"
    result = run_sandboxed(code, [[7, 2], [1, 0]], limits=SandboxLimits(wall_seconds=WALL))
    assert result.error is None and result.killed_by is None
    assert result.outputs[0] == [3, [7, 2], {"k": 7}]  # JSON values: the tuple comes back as a list
    assert result.outputs[1] == Raised("ZeroDivisionError: integer division or modulo by zero")
    syntax = run_sandboxed("def f(:", [[1]])
    assert syntax.outputs is None and syntax.stage == "syntax" and "SyntaxError" in syntax.error
    missing = run_sandboxed("g = 1", [[1]])
    assert missing.stage == "entry" and "no function 'f'" in missing.error
    with pytest.raises(ConfigError, match=r"sandbox.wall_seconds must be a number in \(0, 3600\], got 0"):
        SandboxLimits(wall_seconds=0)
    with pytest.raises(ConfigError, match="sandbox.isolation must be one of kernel, unsafe"):
        SandboxLimits(isolation="none")


def test_correct_code_passes_and_wrong_code_fails(kernel):
    task = _task()
    (ex,) = task.examples("test", 1, seed=0)
    assert task.verify(ex.target, ex).correct
    assert task.verify(f"```python\n{ex.target}\n```", ex).correct  # a fenced block is accepted
    assert task.verify(f"```\n{ex.target}\n```", ex).correct
    wrong = task.verify("def f(x):\n    return None", ex)
    assert wrong.score == 0.0 and wrong.format_ok and "returned a wrong value" in wrong.reason
    hard_coded = f"def f(x):\n    return {ex.meta['tests'][0][1]!r}"  # the prompt's example only
    reward = task.verify(hard_coded, ex)
    assert not reward.correct and "passed 1/" in reward.reason
    partial = _task(partial_credit=True).verify(hard_coded, ex)
    assert 0.0 < partial.score < 1.0 and not partial.correct


def test_format_rules(kernel):
    assert extract_code("  def f(x): return x \n", "plain") == ("def f(x): return x", "ok")
    assert extract_code("```py\ndef f(x): return x\n```", "plain")[0] == "def f(x): return x"
    for bad in (
        "Here it is:\n```python\ndef f(x): return x\n```",
        "```python\na=1\n```\n```python\nb=2\n```",
    ):
        code, why = extract_code(bad, "plain")
        assert code is None and why.startswith("extra text")
    assert extract_code("<answer>def f(x): return x</answer>", "tagged")[0] == "def f(x): return x"
    assert extract_code("def f(x): return x", "tagged") == (None, "no <answer> tag")
    task = _task()
    ex = _example(([1], 1))
    for completion, why in [
        ("", "empty completion"),
        ("def f(x) return", "SyntaxError"),
        ("g = 1", "no function"),
    ]:
        reward = task.verify(completion, ex)
        assert reward.score == 0.0 and not reward.format_ok and why in reward.reason
    loads_but_raises = task.verify("1 / 0", ex)
    assert loads_but_raises.format_ok and "ZeroDivisionError" in loads_but_raises.reason
    weighted = _task(format_reward=0.25).verify("def f(x):\n    return 2", ex)
    assert weighted.score == 0.25 and weighted.format_ok
    with pytest.raises(ConfigError, match="data.timeout must be a number of seconds in"):
        make_task("code", timeout=0)


def test_targets_verify_for_a_whole_split_in_parallel(kernel):
    task = _task()
    examples = task.examples("validation", 15, seed=1)
    assert len({ex.prompt for ex in examples}) == 15
    assert set(task.examples("test", 15, seed=1)).isdisjoint(examples)
    assert all(set(ex.prompt + ex.target) <= set(task.alphabet) for ex in examples)
    start = time.monotonic()
    rewards = task.verify_many([ex.target for ex in examples], examples, max_workers=2)
    assert all(r.correct and r.score == 1.0 for r in rewards), [r.reason for r in rewards if not r.correct]
    assert time.monotonic() - start < 10.0
    # hard-coding the prompt's example cannot pass: every problem's tests have two or more outputs
    for ex in task.examples("train", 300, seed=0):
        assert len({json.dumps(expected) for _, expected in ex.meta["tests"]}) > 1, ex.prompt


def test_sandbox_works_from_a_non_main_thread(kernel):
    task = _task()
    (ex,) = task.examples("train", 1, seed=0)
    out = {}
    thread = threading.Thread(target=lambda: out.update(reward=task.verify(ex.target, ex)))
    thread.start()
    thread.join()
    assert out["reward"].correct
