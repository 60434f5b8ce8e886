"""Checkpoints: safetensors + JSON with a SHA-256 manifest, atomic writes, rotation, clear errors."""

import json
import pickle
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from advantage.checkpoint import load_checkpoint, save_checkpoint
from advantage.errors import CheckpointError


def _save(root, step, value=1.0, keep=3):
    return save_checkpoint(
        root, step, {"w": torch.full((3,), value), "q": np.eye(2)}, {"step": step}, keep=keep
    )


def test_round_trip(tmp_path):
    _save(tmp_path, 10, 2.5)
    ck = load_checkpoint(tmp_path)
    assert ck.step == 10 and ck.state == {"step": 10}
    assert torch.equal(ck.tensors["w"], torch.full((3,), 2.5))
    assert torch.equal(ck.tensors["q"], torch.eye(2, dtype=torch.float64))
    assert (tmp_path / "latest").read_text().strip() == "step_000000000010"


def test_rotation_keeps_newest_and_latest(tmp_path):
    for step in range(1, 6):
        _save(tmp_path, step, keep=2)
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_000000000004", "step_000000000005"]
    assert load_checkpoint(tmp_path).step == 5


def test_same_step_is_replaced(tmp_path):
    _save(tmp_path, 3, 1.0)
    _save(tmp_path, 3, 2.0)
    assert load_checkpoint(tmp_path).tensors["w"][0] == 2.0
    assert (tmp_path / "latest").read_text().strip() == "step_000000000003-1"


def test_leftover_temp_folder_is_ignored_and_cleaned(tmp_path):
    _save(tmp_path, 1)
    half = tmp_path / ".tmp-step_000000000002-999"
    half.mkdir()
    (half / "tensors.safetensors").write_bytes(b"partial")
    assert load_checkpoint(tmp_path).step == 1
    _save(tmp_path, 3)
    assert not half.exists()


@pytest.mark.parametrize("damage", ["truncate", "flip", "manifest", "pointer"])
def test_corruption_is_an_error_naming_the_file(tmp_path, damage):
    folder = _save(tmp_path, 7)
    t = folder / "tensors.safetensors"
    if damage == "truncate":
        t.write_bytes(t.read_bytes()[:-5])
        match = "tensors.safetensors.*truncated"
    elif damage == "flip":
        data = bytearray(t.read_bytes())
        data[-1] ^= 0x01
        t.write_bytes(bytes(data))
        match = "tensors.safetensors.*SHA-256"
    elif damage == "manifest":
        (folder / "manifest.json").unlink()
        match = "manifest.json: manifest missing"
    else:
        (tmp_path / "latest").write_text("../../etc\n")
        match = "latest: not a pointer to a checkpoint folder"
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(tmp_path)


def test_huge_header_claim_and_pickle_payload_never_execute(tmp_path):
    """A tampered checkpoint whose manifest was rewritten to match: the safetensors parser rejects a
    header that claims a huge length, and a pickle payload is never unpickled."""
    import hashlib

    canary = tmp_path / "canary"

    class Evil:
        def __reduce__(self):
            return (open, (str(canary), "w"))

    for payload in (struct.pack("<Q", 2**60) + b"{}", pickle.dumps(Evil())):
        folder = _save(tmp_path, 1)
        (folder / "tensors.safetensors").write_bytes(payload)
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["files"]["tensors.safetensors"] = {
            "bytes": len(payload),
            "sha256": hashlib.sha256(payload).hexdigest(),
        }
        (folder / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(CheckpointError, match="tensors.safetensors: not a valid safetensors file"):
            load_checkpoint(tmp_path)
    assert not canary.exists()


def test_write_failure_keeps_previous_checkpoint(tmp_path):
    """A file-size limit (like a full disk) during the write: clear error, previous checkpoint intact."""
    _save(tmp_path, 1, 1.0)
    before = (tmp_path / "step_000000000001" / "tensors.safetensors").read_bytes()
    code = textwrap.dedent(f"""
        import resource, signal, sys, torch
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))
        from advantage.checkpoint import save_checkpoint
        from advantage.errors import CheckpointError
        try:
            save_checkpoint({str(tmp_path)!r}, 2, {{"w": torch.zeros(10000)}}, {{}})
        except CheckpointError as e:
            print("ERR", e)
            sys.exit(3)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 3, out.stderr
    assert "could not write checkpoint" in out.stdout and "previous checkpoint kept" in out.stdout
    ck = load_checkpoint(tmp_path)
    assert ck.step == 1
    assert (tmp_path / "step_000000000001" / "tensors.safetensors").read_bytes() == before
    assert not list(tmp_path.glob(".tmp-*"))


def test_killed_while_writing_leaves_previous_loadable(tmp_path):
    """SIGKILL at several moments during a large checkpoint write: `latest` always loads, and is the
    previous complete checkpoint or the new complete one, bit for bit."""
    _save(tmp_path, 1, 1.0)
    good = {1: load_checkpoint(tmp_path).tensors["w"].clone()}
    code = textwrap.dedent(f"""
        import torch
        from advantage.checkpoint import save_checkpoint
        save_checkpoint({str(tmp_path)!r}, 2, {{"w": torch.full((3_000_000,), 2.0)}}, {{}}, keep=5)
    """)
    import time

    for delay in (0.05, 0.3, 0.6, 0.9, 1.2):
        p = subprocess.Popen([sys.executable, "-c", code])
        time.sleep(delay)
        p.kill()
        p.wait()
        ck = load_checkpoint(tmp_path)
        assert ck.step in (1, 2)
        expected = good[1] if ck.step == 1 else torch.full((3_000_000,), 2.0)
        assert torch.equal(ck.tensors["w"], expected)


def test_learner_state_round_trip_keeps_key_names_and_restores_everything():
    """LearnerState writes the key names trainers have always written (``model.*``, ``optim.<i>.*``,
    ``torch_rng``, JSON under the optimizer's name) and loads them back exactly."""
    import torch

    from advantage.errors import CheckpointError
    from advantage.torch_state import LearnerState, module_tensors, optimizer_state

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    tensors, meta = LearnerState({"model": model}, {"optim": opt}).save()
    opt_tensors, opt_meta = optimizer_state("optim", opt)
    assert set(tensors) == set(module_tensors("model", model)) | set(opt_tensors) | {"torch_rng"}
    assert meta == {"optim": opt_meta}

    torch.manual_seed(1)
    other = torch.nn.Linear(3, 2)
    other_opt = torch.optim.Adam(other.parameters(), lr=5.0)
    torch.rand(3)  # move the RNG on
    LearnerState({"model": other}, {"optim": other_opt}).load(tensors, {**meta, "env": {}})
    assert torch.equal(other.weight, model.weight) and torch.equal(other.bias, model.bias)
    assert other_opt.param_groups[0]["lr"] == 1e-2
    for a, b in zip(
        other_opt.state_dict()["state"].values(), opt.state_dict()["state"].values(), strict=True
    ):
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(torch.get_rng_state(), tensors["torch_rng"])
    with pytest.raises(CheckpointError, match="optimizer 'optim'"):
        LearnerState({"model": other}, {"optim": other_opt}).load(tensors, {})
