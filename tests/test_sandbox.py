"""The code sandbox and the ``code`` task: every attack scores 0 with a reason, within the time limit + 1 s,
leaving no process behind and the trainer's memory unchanged; correct code passes, from any thread.

Attacks run in every kernel mode of the sandbox: ``root`` (namespaces without a user namespace, the
candidate on a fresh uid; only when the tests run as root) and ``userns`` (a user namespace). Where a mode
is unavailable on the machine running the tests, the test asserts that the sandbox fails closed (nothing
runs, a clear error) and is then skipped."""

from __future__ import annotations

import contextlib
import ctypes
import errno
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

import hypothesis
import hypothesis.strategies as st
import pytest

from advantage.envs.text import CodeTask, Example, extract_code, make_task
from advantage.envs.text import code as code_module
from advantage.envs.text.code import _sandbox_child, sandbox
from advantage.envs.text.code.sandbox import Raised, SandboxLimits, run_sandboxed
from advantage.errors import ConfigError

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


def _use_kind(kind: str, monkeypatch) -> str:
    """Force the kernel mode ``kind``; where this machine cannot run it, check it fails closed, then skip."""
    monkeypatch.setattr(sandbox, "_KIND", kind)
    if sandbox.kernel_isolation_problem() is not None:
        _assert_fails_closed()
        pytest.skip(f"sandbox mode {kind} unavailable here: checked that it fails closed")
    return kind


@pytest.fixture(params=KINDS)
def mode(request, monkeypatch) -> str:
    """Each kernel mode; where this machine cannot run it, check it fails closed, then skip."""
    return _use_kind(request.param, monkeypatch)


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


# --- Results the candidate writes itself, System V IPC, socket families, output size -----------------

WRITE_RAW = """
import os
def f():
    return 1
PAYLOAD = {payload}
for fd in range(3, 64):  # its result pipe is one of these: write the bytes there, then stop
    try:
        os.write(fd, PAYLOAD)
    except OSError:
        pass
os._exit(0)
"""


def _writes(payload: str) -> str:
    """Candidate code that writes the bytes the Python expression ``payload`` evaluates to on its result
    pipe (after the sandbox's own first line) and exits before reporting anything itself."""
    return WRITE_RAW.format(payload=payload)


NESTED = "b'{\"stage\":\"done\",\"outputs\":[[\"v\",' + b'[' * 100000 + b']' * 100000 + b']]}'"


def test_result_nested_100000_deep_scores_0(mode):
    # json.loads of it raised RecursionError out of run_sandboxed, which crashed a GRPO code-task run
    result = run_sandboxed(_writes(NESTED), [[]], limits=_task(mode).limits)
    assert result.outputs is None and result.stage == "run" and "garbled" in result.error, result
    reward = _attack(_task(mode), _writes(NESTED), _example(([1], 1)))
    assert "garbled" in reward.reason
    # what GRPO's reward step calls: the batch is scored, the nested completion 0, the others as usual
    task = _task(mode)
    (ex,) = task.examples("train", 1, seed=0)
    rewards = task.verify_many([_writes(NESTED), ex.target, _writes(NESTED)], [ex] * 3, max_workers=2)
    assert [r.score for r in rewards] == [0.0, 1.0, 0.0], [r.reason for r in rewards]


def test_any_failure_of_one_completion_scores_0_and_the_batch_goes_on(monkeypatch, caplog):
    # whatever escapes from running or judging one completion is that completion's 0, logged; only a
    # sandbox that cannot run at all (stage setup: the machine's fault) stops the run
    task = CodeTask(sandbox="unsafe", timeout=WALL, format_reward=0.5)
    real = code_module.run_sandboxed

    def flaky(code, inputs, **kw):
        if "boom" in code:
            raise RecursionError("maximum recursion depth exceeded while decoding JSON")
        if "weird" in code:
            return sandbox.SandboxResult([object()], None, 0.0, None)  # _judge cannot encode it
        return real(code, inputs, **kw)

    monkeypatch.setattr(code_module, "run_sandboxed", flaky)
    ex = _example(([1], 1))
    good = "def f(x):\n    return x"
    with caplog.at_level("WARNING", logger=code_module.__name__):
        rewards = task.verify_many(
            [good, "def f(x):\n    return 'boom'", "def weird(x): pass", good], [ex] * 4
        )
    assert [r.score for r in rewards] == [1.0, 0.0, 0.0, 1.0], [r.reason for r in rewards]
    assert "the sandbox run failed: RecursionError" in rewards[1].reason and not rewards[1].format_ok
    assert "the sandbox run failed: TypeError" in rewards[2].reason
    assert sum("scoring a completion failed" in r.message for r in caplog.records) == 2
    monkeypatch.setattr(
        code_module,
        "run_sandboxed",
        lambda *a, **k: sandbox.SandboxResult(None, "no fork", 0.0, None, "setup"),
    )
    with pytest.raises(code_module.SandboxUnavailable, match="could not run: no fork"):
        task.verify_many([good], [ex])


_PREFIX = b'{"stage":"done","outputs":[["v",'
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)
_RAW_RESULTS = st.one_of(
    st.binary(max_size=512),
    st.text(max_size=200).map(str.encode),
    _JSON_VALUES.map(lambda v: json.dumps({"stage": "done", "outputs": [["v", v]]}).encode()),
    st.tuples(_JSON_VALUES, st.integers(0, 60)).map(  # a well-formed report, cut short
        lambda vc: json.dumps({"stage": "done", "outputs": [["v", vc[0]]]}).encode()[: -vc[1] or None]
    ),
    st.tuples(  # deep nesting, of lists, objects or both, closed or not, in or outside strings
        st.integers(0, 200_000),
        st.sampled_from([b"[", b'{"a":', b'["x",', b'"[', b"[{"]),
        st.binary(max_size=40),
        st.booleans(),
    ).map(lambda t: _PREFIX + t[1] * t[0] + t[2] + (b"]" * t[0] + b"]]}" if t[3] else b"")),
    st.integers(4000, 6000).map(lambda n: _PREFIX + b"9" * n + b"]]}"),  # over int's digit limit
)


def _interpret_raw(raw: bytes, n: int) -> sandbox.SandboxResult:
    """What the trainer makes of ``raw`` written on the candidate's result pipe: the supervisor's final
    line as it builds it (the raw bytes decoded with replacement, then one protocol line), decoded and
    interpreted by the trainer."""
    final = {"nonce": "n", "overflow": False, "timeout": False, "cpu": 0.0, "error": None, "isolation": []}
    final.update(signal=None, status=0, result=raw.decode(errors="replace") if raw.strip() else None)
    line = _sandbox_child._line(final)
    state = {"inner": None, "final": sandbox._decode(line[:-1], "n"), "killed_by": None, "n": n}
    assert state["final"] is not None
    return sandbox._interpret(state, SandboxLimits(), 0.0, "")


@hypothesis.settings(max_examples=300, deadline=None, database=None)
@hypothesis.given(raw=_RAW_RESULTS, n=st.integers(1, 3))
def test_any_bytes_on_the_result_pipe_are_a_result_or_a_failure(raw, n):
    result = _interpret_raw(raw, n)
    if result.outputs is None:
        assert result.stage == "run" and result.error, result
    else:
        assert len(result.outputs) == n and result.error is None
    task = CodeTask(sandbox="unsafe", timeout=WALL)
    reward = task._judge("def f(): pass", result, ["secret-" + secrets.token_hex(8)] * n)
    assert reward.score == 0.0


@hypothesis.settings(
    max_examples=12,
    deadline=None,
    database=None,
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture, hypothesis.HealthCheck.too_slow],
)
@hypothesis.given(head=st.binary(max_size=1500), depth=st.integers(0, 200_000), tail=st.binary(max_size=40))
def test_any_bytes_written_by_the_candidate_score_0(kernel, head, depth, tail):
    # the same through the real sandbox: the candidate writes them on its pipe and exits
    payload = f"bytes.fromhex({head.hex()!r}) + b'[' * {depth} + bytes.fromhex({tail.hex()!r})"
    reward = _attack(_task(), _writes(payload), _example(([1], "secret-" + secrets.token_hex(8))))
    assert reward.reason


IPC = r"""
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
libc.shmdt.argtypes = [ctypes.c_void_p]
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]

class Message(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 4096)]

def f(segment, count, queue):
    out = {"shm": [], "msg": [], "sem": [], "mq": []}
    for _ in range(count):  # segments left alive after detaching: memory that RLIMIT_AS does not count
        sid = libc.shmget(0, segment, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
        if sid < 0:
            out["shm"].append(ctypes.get_errno())
            break
        addr = libc.shmat(sid, None, 0)
        if addr is not None and addr != 2**64 - 1:
            libc.memset(addr, 1, segment)
            libc.shmdt(addr)
        out["shm"].append(["created", sid])
    message = Message(1, b"x" * 4096)
    for _ in range(count):
        qid = libc.msgget(0, 0o1600)
        if qid < 0:
            out["msg"].append(ctypes.get_errno())
            break
        while libc.msgsnd(qid, ctypes.byref(message), 4096, 0o4000) == 0:  # IPC_NOWAIT: until full
            pass
        out["msg"].append(["created", qid])
    semid = libc.semget(0, 8, 0o1600)
    out["sem"].append(ctypes.get_errno() if semid < 0 else ["created", semid])
    mq = libc.mq_open(queue.encode(), 0o100 | 2, 0o600, None)  # O_CREAT | O_RDWR
    out["mq"].append(ctypes.get_errno() if mq < 0 else ["created", queue])
    return out
"""


def _sysv_objects() -> dict[str, set[str]]:
    """The host's System V IPC objects (the test's IPC namespace): one line each in /proc/sysvipc."""
    out = {}
    for name in ("shm", "msg", "sem"):
        with open(f"/proc/sysvipc/{name}") as f:
            out[name] = {" ".join(line.split()[:2]) for line in f.readlines()[1:]}  # key and id
    return out


def _meminfo_mib(field: str) -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith(field + ":"))


@pytest.fixture(params=[*KINDS, "unsafe"])
def any_mode(request, monkeypatch) -> str:
    """Each kernel mode (as :func:`mode`), and ``unsafe``: no namespace, the seccomp filter and rlimits."""
    return "unsafe" if request.param == "unsafe" else _use_kind(request.param, monkeypatch)


def _any_task(mode: str) -> CodeTask:
    if mode != "unsafe":
        return _task(mode)
    task = CodeTask(sandbox="unsafe", timeout=WALL, memory_mb=256)
    task.limits = SandboxLimits(
        wall_seconds=WALL, cpu_seconds=2, memory_bytes=256 * 2**20, isolation="unsafe"
    )
    return task


def test_system_v_ipc_and_message_queues_are_refused(any_mode):
    # shmget + shmat + memset + shmdt left 2-2.5 GiB of host memory per two completions that RLIMIT_AS
    # did not count; without an IPC namespace (unsafe) the segments outlived the run
    task, queue = _any_task(any_mode), "/advantage-" + secrets.token_hex(8)
    args = [64 * 2**20, 4, queue]  # four 64 MiB segments, four full message queues, a semaphore set
    before, shmem, start = _sysv_objects(), _meminfo_mib("Shmem"), time.monotonic()
    try:
        result = run_sandboxed(IPC, [args], limits=task.limits)
        elapsed, grown = time.monotonic() - start, _meminfo_mib("Shmem") - shmem
        reward = _attack(task, IPC, _example((args, {"shm": [], "msg": [], "sem": [], "mq": []})))
        left = {name: ids - before[name] for name, ids in _sysv_objects().items()}
    finally:
        if any_mode == "unsafe":  # the host's namespace: remove what an unfixed sandbox left there
            libc = ctypes.CDLL(None, use_errno=True)
            for name, remove in (("shm", libc.shmctl), ("msg", libc.msgctl), ("sem", libc.semctl)):
                for line in _sysv_objects()[name] - before[name]:
                    remove(int(line.split()[1]), 0, None)  # IPC_RMID
            libc.mq_unlink(queue.encode())
    assert result.error is None, result
    (out,) = result.outputs
    assert out == {"shm": [errno.EPERM], "msg": [errno.EPERM], "sem": [errno.EPERM], "mq": [errno.EPERM]}, out
    assert left == {"shm": set(), "msg": set(), "sem": set()}, left
    assert grown < 64, grown  # MiB of shared memory on the host, right after the run
    assert elapsed < WALL + 1.0 and "returned a wrong value" in reward.reason


FAMILIES = r"""
import ctypes, socket
libc = ctypes.CDLL(None, use_errno=True)

def f():
    opened, refused = set(), {}
    for family in range(46):  # AF_UNSPEC .. AF_MCTP (AF_MAX is 46)
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW, socket.SOCK_SEQPACKET):
            fd = libc.socket(family, kind, 0)
            if fd >= 0:
                opened.add(family)
                libc.close(fd)
            else:
                refused.setdefault(family, ctypes.get_errno())
        pair = (ctypes.c_int * 2)()
        if libc.socketpair(family, socket.SOCK_STREAM, 0, pair) == 0:
            opened.add(family)
            libc.close(pair[0])
            libc.close(pair[1])
    try:  # a vsock listener shares the host's port space: no network namespace confines it
        with socket.socket(40, socket.SOCK_STREAM) as s:
            s.bind((0xFFFFFFFF, 5555))  # VMADDR_CID_ANY
            s.listen()
        vsock = "listening"
    except OSError as e:
        vsock = e.errno
    a, b = socket.socketpair()  # what asyncio and multiprocessing need still works
    a.sendall(b"ok")
    pair = b.recv(2).decode()
    return {"opened": sorted(opened), "vsock": vsock, "netlink": refused.get(16), "socketpair": pair}
"""


def test_only_isolated_socket_families_can_be_created(any_mode):
    # AF_VSOCK sockets bound and listened on the host's port space from inside the network namespace
    task = _any_task(any_mode)
    result = run_sandboxed(FAMILIES, [[]], limits=task.limits)
    assert result.error is None, result
    (out,) = result.outputs
    # the families docs/reliability.md lists as allowed: unix (its own namespace's), inet and inet6
    allowed = {socket.AF_UNIX, socket.AF_INET, socket.AF_INET6}
    assert set(out["opened"]) <= allowed, out
    assert set(_sandbox_child.SOCKET_FAMILIES.values()) == allowed
    assert out["vsock"] == errno.EAFNOSUPPORT and out["netlink"] == errno.EAFNOSUPPORT, out
    assert out["socketpair"] == "ok"
    assert "seccomp" in result.isolation, result.isolation
    reward = _attack(task, FAMILIES, _example(([], "x")))
    assert "returned a wrong value" in reward.reason


@pytest.mark.parametrize(
    ("value", "fits"),
    [
        ("'é' * 400_000", True),  # 800 KB of UTF-8; 2.4 MB as \u00e9 escapes
        ("'\\U0001F600' * 200_000", True),  # 800 KB of UTF-8; 2.4 MB as surrogate-pair escapes
        ("'\\ud800' + 'x'", True),  # a lone surrogate is not UTF-8: it travels escaped
        ("'é' * 1_000_000", False),  # 2 MB of UTF-8: over the 1 MiB limit
    ],
)
def test_output_limit_counts_the_utf8_bytes_of_the_value(kernel, value, fits):
    limits = SandboxLimits(wall_seconds=WALL)
    assert limits.output_bytes == 2**20
    result = run_sandboxed(f"def f():\n    return {value}", [[]], limits=limits)
    expected = eval(value)  # our own expression
    if fits:
        assert result.error is None and result.outputs == [expected], (result.error, result.killed_by)
        task = _task()
        assert task.verify(f"def f(x):\n    return {value}", _example(([1], expected))).correct
    else:
        assert result.outputs is None and result.killed_by == "output", result.error
        assert result.error == f"results over {2**20} bytes"
