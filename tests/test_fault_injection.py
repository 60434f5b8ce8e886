"""Fault injection: a checkpoint writer SIGKILLed at random moments and at every file-system operation, a
full disk (a file-size limit) during a training run, tampered checkpoints, SIGTERM through the CLI.

Complements ``test_checkpoint.py`` (one save killed at five fixed delays, one failed write, the basic
corruptions) with the cases it does not cover; ``docs/reliability.md`` lists which test proves what.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import pickle
import random
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import advantage
from advantage.checkpoint import load_checkpoint, save_checkpoint
from advantage.errors import CheckpointError

KEEP = 2


def expected_tensors(step: int) -> dict[str, torch.Tensor]:
    """About 2.4-2.9 MB whose every byte follows from ``step`` (and whose size varies with it)."""
    g = torch.Generator().manual_seed(step)
    return {
        "w": torch.randn(400_000, generator=g),  # 1.6 MB
        "b": torch.arange(100_000 + step % 7 * 10_000, dtype=torch.int64) * step,  # 0.8-1.3 MB
        "step": torch.tensor(step),
    }


# A writer process: imports torch once, then forks one worker per case (so 20 kills cost 20 forks, not 20
# interpreter starts). ``loop``: save steps latest+1, latest+2, ... reporting each completed save.
# ``op N``: one save whose N-th file-system operation SIGKILLs the worker (a write is cut after half
# its bytes; an fsync, rename, replace or rmtree is cut before it runs).
_WRITER = r"""
import os, signal, shutil, sys
import torch
from advantage import checkpoint as C

torch.set_num_threads(1)
ROOT, KEEP = sys.argv[1], int(sys.argv[2])


def emit(msg):
    os.write(1, (msg + "\n").encode())


def next_step():
    try:
        return C.load_checkpoint(ROOT).step + 1
    except C.CheckpointError:
        return 1


def save(step):
    C.save_checkpoint(ROOT, step, expected_tensors(step), {"step": step}, keep=KEEP)
    emit(f"saved {step}")


def die_at(n):
    count = [0]

    def tick():
        count[0] += 1
        return count[0] == n

    def wrap(real):
        def op(*args, **kwargs):
            if tick():
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)
        return op

    class HalfWrite:
        def __init__(self, f):
            self.f = f
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            self.f.close()
        def write(self, data):
            if tick():
                self.f.write(data[: len(data) // 2])
                self.f.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            return self.f.write(data)
        def __getattr__(self, name):
            return getattr(self.f, name)

    for mod, name in ((os, "fsync"), (os, "rename"), (os, "replace"), (shutil, "rmtree")):
        setattr(mod, name, wrap(getattr(mod, name)))
    C.open = lambda *a, **k: HalfWrite(open(*a, **k))
    return count


for line in sys.stdin:
    cmd = line.split()
    pid = os.fork()
    if pid == 0:
        if cmd[0] == "loop":
            step = next_step()
            while True:
                save(step)
                step += 1
        count = die_at(int(cmd[1]))
        save(next_step())
        emit(f"complete {count[0]}")
        os._exit(0)
    emit(f"pid {pid}")
    os.waitpid(pid, 0)
    emit("dead")
"""


class Writer:
    def __init__(self, root: Path):
        script = inspect.getsource(expected_tensors) + _WRITER
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.p = subprocess.Popen(
            [sys.executable, "-c", "import torch\n" + script, str(root), str(KEEP)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def start(self, cmd: str) -> int:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline().split()
        assert line[0] == "pid", line
        return int(line[1])

    def wait(self) -> list[str]:
        """The messages of the worker until it died: ``saved S`` and ``complete N``."""
        assert self.p.stdout is not None
        out = []
        for line in self.p.stdout:
            if line.strip() == "dead":
                return out
            out.append(line.strip())
        raise AssertionError(f"writer exited: {self.p.wait()}")

    def close(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.close()
        self.p.wait(timeout=30)


def _check_after_crash(root: Path, confirmed: int) -> tuple[int, int]:
    """``latest`` loads, is the newest confirmed save (or the one in flight, if it got as far as replacing
    ``latest``), bit for bit. Returns the step it holds and the bytes lost: tensor bytes that differ from
    what that step's checkpoint must hold, plus the whole confirmed checkpoint if ``latest`` is older."""
    ck = load_checkpoint(root)
    lost = 0
    if ck.step < confirmed:
        lost += sum(t.numpy().nbytes for t in expected_tensors(confirmed).values())
    assert ck.step in (confirmed, confirmed + 1) or confirmed == 0, (ck.step, confirmed)
    want = expected_tensors(ck.step)
    assert ck.tensors.keys() == want.keys()
    for k, t in want.items():
        a, b = (np.frombuffer(x.numpy().tobytes(), np.uint8) for x in (ck.tensors[k], t))
        n = min(a.size, b.size)
        lost += int(np.count_nonzero(a[:n] != b[:n])) + abs(a.size - b.size)
    assert ck.state == {"step": ck.step}
    assert ck.path.name == (root / "latest").read_text().strip()
    return ck.step, lost


def test_sigkill_at_20_random_moments_never_loses_a_checkpoint(tmp_path, capsys):
    """A process saving ~2.5 MB checkpoints in a loop (rotation keep=2) is SIGKILLed at 20 seeded random
    delays. After each kill ``latest`` loads, is the newest checkpoint the writer reported complete (or the
    one it was finishing), bit for bit; half-written temp folders are ignored."""
    root = tmp_path / "ck"
    rng = random.Random(20240601)
    writer = Writer(root)
    confirmed, cases, survived, lost, temp_left, saves = 0, 0, 0, 0, 0, 0
    try:
        for _ in range(20):
            pid = writer.start("loop")
            time.sleep(rng.uniform(0.0, 0.3))
            os.kill(pid, signal.SIGKILL)
            saved = [int(m.split()[1]) for m in writer.wait() if m.startswith("saved")]
            saves += len(saved)
            confirmed = saved[-1] if saved else confirmed
            cases += 1
            temp_left += bool(list(root.glob(".tmp-*")))
            if confirmed == 0 and not (root / "latest").exists():
                survived += 1  # killed before the very first checkpoint: nothing to lose
                continue
            confirmed, case_lost = _check_after_crash(root, confirmed)
            lost += case_lost
            survived += case_lost == 0
        # The next save removes the leftovers of every earlier kill.
        writer.start("op 0")
        assert writer.wait()[-1].startswith("complete")
    finally:
        writer.close()
    # The next complete save removed every leftover and rotated back to `keep` folders (on a loaded machine
    # every kill may have come before the first save finished: then fewer folders exist to keep).
    kept = len(list(root.glob("step_*")))
    assert not list(root.glob(".tmp-*")) and (kept == KEEP or (saves == 0 and 1 <= kept <= KEEP)), (
        kept,
        saves,
    )
    with capsys.disabled():
        print(
            f"\n[fault injection] SIGKILL at random moments: {cases} cases tried, {survived} faults "
            f"survived, {lost} bytes lost ({saves} saves completed, {temp_left} kills left a "
            "half-written temp folder)"
        )
    # Where a kill lands depends on the machine's speed (benchmarks/fault_injection.py records one run); the
    # next test kills a save at every one of its file operations, so no moment is left to chance.
    assert cases == 20 and survived == 20 and lost == 0


def test_sigkill_at_every_file_operation_of_a_save(tmp_path, capsys):
    """Exhaustive version: one save killed before each of its fsyncs, renames, replaces and rmtrees and in
    the middle of each file write, with older checkpoints present so rotation has work to do."""
    root = tmp_path / "ck"
    for step in (1, 2, 3):
        save_checkpoint(root, step, expected_tensors(step), {"step": step}, keep=KEEP)
    writer = Writer(root)
    cases, survived, lost, n = 0, 0, 0, 0
    try:
        while True:
            n += 1
            confirmed = load_checkpoint(root).step
            writer.start(f"op {n}")
            msgs = writer.wait()
            if msgs and msgs[-1].startswith("complete"):
                total_ops = int(msgs[-1].split()[1])
                break
            assert not msgs, msgs  # killed: the save never reported completion
            cases += 1
            case_lost = _check_after_crash(root, confirmed)[1]
            lost += case_lost
            survived += case_lost == 0
    finally:
        writer.close()
    with capsys.disabled():
        print(
            f"\n[fault injection] SIGKILL at every file operation of a save: {cases} cases tried "
            f"({total_ops} operations per save), {survived} faults survived, {lost} bytes lost"
        )
    assert cases >= total_ops >= 10 and survived == cases and lost == 0
    assert not list(root.glob(".tmp-*")) and len(list(root.glob("step_*"))) == KEEP
    assert load_checkpoint(root).step >= 4


def test_next_save_removes_a_leftover_latest_temp_file(tmp_path):
    save_checkpoint(tmp_path, 1, {"w": torch.ones(1)}, {})
    leftover = tmp_path / ".latest.tmp-99999"  # what a kill just before os.replace leaves
    leftover.write_text("step_000000000002\n")
    save_checkpoint(tmp_path, 2, {"w": torch.ones(1)}, {})
    assert load_checkpoint(tmp_path).step == 2
    assert not leftover.exists()


# ---- a full disk during training ----------------------------------------------------------------------

Q_RUN = {
    "preset": "frozenlake",
    "trainer.total_steps": 4000,
    "trainer.checkpoint_every": 1000,
    "trainer.eval_every": 0,
    "trainer.eval_episodes": 5,
    "trainer.tensorboard": False,
    "trainer.progress": "none",
}

_DISK_FULL = r"""
import resource, signal, sys
import advantage.context
from advantage.cli import main

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so a write past the limit raises OSError (EFBIG)
real, calls = advantage.context.save_checkpoint, []


def save_checkpoint(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:  # the disk "fills up" before the second checkpoint
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))
    return real(*args, **kwargs)


advantage.context.save_checkpoint = save_checkpoint
sys.exit(main(sys.argv[1:]))
"""


def _strip_clock(rows):
    return [
        {k: v for k, v in r.items() if k != "time" and not k.endswith(("per_second", "seconds"))}
        for r in rows
    ]


def test_disk_full_during_training_keeps_the_last_checkpoint_and_resumes_exactly(tmp_path):
    """A training run whose second checkpoint hits a file-size limit (as a full disk would): exit 2 with
    one line naming the checkpoint, the first checkpoint intact, no temp folder, and `resume` finishes
    the run with the same Q-table and metrics as an uninterrupted run."""
    straight = advantage.train("q_learning", quiet=True, **Q_RUN, **{"trainer.run_dir": str(tmp_path / "a")})
    over = [f"{k}={v}" for k, v in {**Q_RUN, "trainer.run_dir": str(tmp_path / "b")}.items()]
    out = subprocess.run(
        [sys.executable, "-c", _DISK_FULL, "train", "q_learning", *over],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    err = out.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "could not write checkpoint" in err and "step_000000002000" in err, err
    assert "File too large" in err and "previous checkpoint kept" in err, err
    ckpts = tmp_path / "b" / "checkpoints"
    assert load_checkpoint(ckpts).step == 1000
    assert not list(ckpts.glob(".tmp-*"))

    resumed = advantage.resume(tmp_path / "b", quiet=True)
    assert resumed.step == straight.step == 4000
    assert torch.equal(resumed.checkpoint.tensors["q"], straight.checkpoint.tensors["q"])
    assert resumed.checkpoint.state["algo"] == straight.checkpoint.state["algo"]
    assert _strip_clock(resumed.metrics) == _strip_clock(straight.metrics)


# ---- tampered checkpoints (the manifest rewritten to match, so only parsing can catch them) --------------


class _Canary:
    """A pickle whose loading would create a file."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def _torch_save_bytes(tmp_path: Path) -> bytes:
    f = tmp_path / "model.pt"
    torch.save({"w": torch.zeros(3), "evil": _Canary(tmp_path / "canary")}, f)
    return f.read_bytes()


def _header(n: int, body: bytes = b"") -> bytes:
    return struct.pack("<Q", n) + body


_TAMPERED = {
    # tensors.safetensors
    "pickle protocol 0": ("tensors.safetensors", lambda p: pickle.dumps(_Canary(p / "canary"), protocol=0)),
    "torch.save zip with a pickle": ("tensors.safetensors", _torch_save_bytes),
    "header length 2**64-1": ("tensors.safetensors", lambda p: _header(2**64 - 1, b"{}")),
    "header one byte past the end": ("tensors.safetensors", lambda p: _header(3, b"{}")),
    "data offsets past the end": (
        "tensors.safetensors",
        lambda p: _header(
            64, b'{"w":{"dtype":"F32","shape":[1000000],"data_offsets":[0,4000000]}}'.ljust(64)
        ),
    ),
    "empty file": ("tensors.safetensors", lambda p: b""),
    # state.json
    "pickle as state.json": ("state.json", lambda p: pickle.dumps(_Canary(p / "canary"))),
    "binary garbage as state.json": ("state.json", lambda p: bytes(range(256))),
}


@pytest.mark.parametrize("case", list(_TAMPERED))
def test_tampered_checkpoint_is_an_error_naming_the_file_and_never_unpickled(tmp_path, case):
    fname, make = _TAMPERED[case]
    folder = save_checkpoint(tmp_path / "ck", 1, {"w": torch.ones(3)}, {"step": 1})
    payload = make(tmp_path)
    (folder / fname).write_bytes(payload)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"][fname] = {"bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    what = "not a valid safetensors file" if fname.endswith("safetensors") else "not valid JSON"
    with pytest.raises(CheckpointError, match=f"{fname}: {what}"):
        load_checkpoint(tmp_path / "ck")
    assert not (tmp_path / "canary").exists()


@pytest.mark.parametrize(
    "damage, message",
    [
        ("extra file flipped", "model.safetensors: SHA-256 does not match"),
        ("extra file deleted", "model.safetensors: file missing"),
        ("manifest lists ../escape", "lists '../escape', which is not a plain file name"),
        ("manifest not JSON", "manifest.json: not a valid manifest"),
        ("manifest format 99", "manifest.json: unsupported checkpoint format 99"),
        ("latest names a missing folder", "names 'step_000000000009', which is not a checkpoint folder"),
        ("state.json truncated", "state.json: .* bytes, manifest says"),
    ],
)
def test_damaged_checkpoint_layout_is_an_error_naming_the_file(tmp_path, damage, message):
    """Damage beyond the tensors file: a language-model checkpoint's extra files, the manifest itself,
    the `latest` pointer and the JSON state."""
    root = tmp_path / "ck"
    folder = save_checkpoint(
        root, 1, {"w": torch.ones(3)}, {"step": 1}, files={"model.safetensors": b"weights" * 100}
    )
    manifest_path = folder / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    if damage == "extra file flipped":
        data = bytearray((folder / "model.safetensors").read_bytes())
        data[10] ^= 0x80
        (folder / "model.safetensors").write_bytes(bytes(data))
    elif damage == "extra file deleted":
        (folder / "model.safetensors").unlink()
    elif damage == "manifest lists ../escape":
        manifest["files"]["../escape"] = {"bytes": 0, "sha256": hashlib.sha256(b"").hexdigest()}
        manifest_path.write_text(json.dumps(manifest))
    elif damage == "manifest not JSON":
        manifest_path.write_text(manifest_path.read_text()[:-20])
    elif damage == "manifest format 99":
        manifest["format"] = 99
        manifest_path.write_text(json.dumps(manifest))
    elif damage == "latest names a missing folder":
        (root / "latest").write_text("step_000000000009\n")
    else:
        state = folder / "state.json"
        state.write_bytes(state.read_bytes()[:-1])
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(root)


# ---- SIGTERM through the CLI, then an exact resume -------------------------------------------------------

PPO_RUN = {
    "trainer.total_steps": 6000,
    "trainer.eval_every": 0,
    "trainer.eval_episodes": 2,
    "trainer.tensorboard": False,
    "trainer.progress": "none",
    "algorithm.n_epochs": 4,
}


def test_sigterm_through_the_cli_then_resume_equals_an_uninterrupted_ppo_run(tmp_path):
    """`advantage train ppo` gets a real SIGTERM from outside while it trains: exit 143, a checkpoint at the
    step boundary, and resuming to the same total gives bit-identical parameters, Adam state, torch RNG
    and environment state as a run that was never interrupted. (tests/test_ppo.py proves the resume with
    a signal raised inside the loop; this one is asynchronous, through the CLI.)"""
    straight = advantage.train("ppo", quiet=True, **PPO_RUN, **{"trainer.run_dir": str(tmp_path / "a")})
    run_b = tmp_path / "b"
    over = [f"{k}={v}" for k, v in {**PPO_RUN, "trainer.run_dir": str(run_b)}.items()]
    p = subprocess.Popen(
        [sys.executable, "-m", "advantage.cli", "train", "ppo", *over],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = run_b / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while not (metrics.exists() and metrics.read_text().count("\n") >= 2):  # training is under way
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.01)
    time.sleep(random.Random(7).uniform(0.0, 0.1))
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    stopped = load_checkpoint(run_b / "checkpoints").step
    assert 0 < stopped < PPO_RUN["trainer.total_steps"], "the signal arrived after the run had finished"
    assert json.loads(metrics.read_text().splitlines()[-1])["run/stopped_by"] == "SIGTERM"

    resumed = advantage.resume(run_b, quiet=True)
    assert resumed.step == straight.step
    a, b = straight.checkpoint, resumed.checkpoint
    assert a.tensors.keys() == b.tensors.keys()
    assert any(k.startswith("optim.") for k in a.tensors) and "torch_rng" in a.tensors
    for k in a.tensors:
        assert torch.equal(a.tensors[k], b.tensors[k]), k
    assert a.state["algo"] == b.state["algo"]  # Adam hyperparameters, env state and RNGs, KL β
