"""Safe, atomic checkpoints: tensors in safetensors, everything else in JSON, never pickle.

Layout of ``RUN/checkpoints``::

    step_000000020000/
        tensors.safetensors   networks, optimizer state, Q-tables, torch RNG state
        state.json            counters, numpy/env RNG states, anything JSON
        manifest.json         {"format": 1, "step": ..., "files": {name: {"bytes": n, "sha256": h}},
                               "versions": {"python": ..., "torch": ..., ...}}
    latest                    the name of the newest complete checkpoint folder

An algorithm may add files of its own (``files=``): a language model's checkpoint carries its
``save_pretrained`` files (``config.json``, ``model.safetensors``, tokenizer files), so the folder is also
a model folder that ``from_pretrained`` and ``model.path`` accept. They are in the manifest and verified
like the others.

The manifest's ``versions`` are those of Python, torch, transformers, numpy, gymnasium and advantage that
wrote the checkpoint (:mod:`advantage.versions`; ``resume`` says when they differ from its own). A
checkpoint written before the field existed has none (``Checkpoint.versions`` is ``None``).

A checkpoint is written into a hidden temporary folder, every file fsynced, the folder renamed into place
and the parent fsynced; only then is ``latest`` replaced (temp file + fsync + rename). A process killed at
any moment leaves ``latest`` pointing at the previous complete checkpoint; leftover temporary folders are
ignored and removed by the next save. Rotation never deletes the checkpoint ``latest`` names.

Loading checks each file's size and SHA-256 against the manifest before parsing it, so a truncated or
flipped-byte file is an error naming that file, and nothing is ever unpickled.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advantage import versions as _versions
from advantage.errors import CheckpointError
from advantage.safe_io.run_files import Folder

if TYPE_CHECKING:
    import numpy as np
    import torch

FORMAT = 1
TENSORS, STATE, MANIFEST, LATEST = "tensors.safetensors", "state.json", "manifest.json", "latest"


def _plain_name(name: str) -> bool:
    """A printable name of a file or folder directly in the checkpoint folder: no separator, not hidden."""
    return not ("/" in name or "\\" in name or name.startswith(".")) and name.isprintable()


def atomic_write(path: str | Path, data: bytes | str) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new content, never a mix (a link
    at ``path`` is refused: :meth:`advantage.safe_io.run_files.Folder.write_atomic`)."""
    path = Path(path)
    with Folder.open(path.parent) as folder:
        folder.write_atomic(path.name, data)


def _folder(path: str | Path | Folder, *, create: bool = False) -> tuple[Folder, bool]:
    """``path`` as an open :class:`Folder` (checkpoint errors), and whether this call opened it (and so
    closes it)."""
    if isinstance(path, Folder):
        return path, False
    return Folder.open(path, create=create, error=CheckpointError), True


@dataclass
class Checkpoint:
    """A loaded checkpoint: ``tensors`` (name -> torch tensor), ``state`` (JSON), ``step``, ``path``, and the
    library ``versions`` that wrote it (``None``: a checkpoint from before they were recorded)."""

    step: int
    tensors: dict[str, torch.Tensor]
    state: dict[str, Any]
    path: Path
    files: tuple[str, ...] = ()  # extra verified files in ``path`` (e.g. a model's save_pretrained files)
    versions: dict[str, str | None] | None = None


def _to_tensor(name: str, value: Any) -> torch.Tensor:
    import numpy as np  # here, not at the top: reading configs and listing runs need neither
    import torch

    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value))
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"checkpoint tensor {name!r} must be a numpy array or torch tensor, got {type(value)}"
        )
    return value.detach().cpu().contiguous().clone()


def _safetensors(tensors: Mapping[str, torch.Tensor | np.ndarray], step: int) -> bytes:
    """The safetensors bytes of ``tensors``. All numpy arrays (a Q-table run): written by safetensors'
    numpy writer, the same format, so a tabular run never imports torch (2 s of its few seconds)."""
    import numpy as np

    meta = {"step": str(step)}
    if all(isinstance(v, np.ndarray) for v in tensors.values()):
        from safetensors.numpy import save as np_save

        return np_save({k: np.ascontiguousarray(v) for k, v in tensors.items()}, metadata=meta)
    from safetensors.torch import save as st_save

    return st_save({k: _to_tensor(k, v) for k, v in tensors.items()}, metadata=meta)


def save_checkpoint(
    root: str | Path | Folder,
    step: int,
    tensors: Mapping[str, torch.Tensor | np.ndarray],
    state: Mapping[str, Any],
    keep: int = 3,
    files: Mapping[str, bytes] | None = None,
) -> Path:
    """Write checkpoint ``root/step_<step>`` atomically, point ``latest`` at it, and keep the newest
    ``keep``. ``files`` are extra plain files (name -> bytes) written, hashed and verified with the rest.
    Returns the checkpoint folder. An OSError (disk full, file-size limit) leaves the previous
    checkpoint and ``latest`` untouched. ``root`` may be an open
    :class:`~advantage.safe_io.run_files.Folder` (a run's ``checkpoints``, opened without following a
    link); every name inside it is opened the same way."""
    for fname in files or {}:
        if fname in (TENSORS, STATE, MANIFEST) or not _plain_name(fname):
            raise ValueError(f"checkpoint file name {fname!r} is reserved or not a plain file name")
    folder, own = _folder(root, create=True)
    try:
        return _save(folder, step, tensors, state, keep, files)
    finally:
        if own:
            folder.close()


def _save(
    root: Folder,
    step: int,
    tensors: Mapping[str, torch.Tensor | np.ndarray],
    state: Mapping[str, Any],
    keep: int,
    files: Mapping[str, bytes] | None,
) -> Path:
    for stale in root.names():
        if stale.startswith(".tmp-"):
            root.remove_tree(stale)
        elif stale.startswith(f".{LATEST}.tmp-"):  # a `latest` replacement cut short by a kill
            root.unlink(stale)
    # A step saved before (a resumed run ending where it started) gets a new folder: the old one is never
    # touched before `latest` points at the new one, and rotation then removes it.
    name, n = f"step_{step:012d}", 0
    while root.exists(name):
        n += 1
        name = f"step_{step:012d}-{n}"
    final = root.path / name
    blobs = {
        TENSORS: _safetensors(tensors, step),
        STATE: json.dumps(dict(state), sort_keys=True).encode(),
        **dict(files or {}),
    }
    manifest = {
        "format": FORMAT,
        "step": step,
        "files": {n: {"bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()} for n, b in blobs.items()},
        "versions": _versions.installed(),
    }
    blobs[MANIFEST] = json.dumps(manifest, indent=1, sort_keys=True).encode()
    tmp_name = f".tmp-{name}-{os.getpid()}"
    try:
        with root.child(tmp_name, exclusive=True) as tmp:
            for fname, data in blobs.items():
                with open(fname, "wb", opener=tmp.opener(exclusive=True)) as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            tmp.sync()
        root.rename(tmp_name, name)
        root.sync()
        root.write_atomic(LATEST, name + "\n")
    except OSError as e:
        root.remove_tree(tmp_name)
        raise CheckpointError(
            f"could not write checkpoint {final}: {e.strerror or e}; previous checkpoint kept"
        ) from e
    _rotate(root, keep, protect=name)
    return final


def _rotate(root: Folder, keep: int, protect: str) -> None:
    folders = [n for n in root.names() if n.startswith("step_") and root.is_dir(n)]
    for old in folders[: max(0, len(folders) - keep)]:
        if old != protect:
            root.remove_tree(old)


def latest_checkpoint(root: str | Path | Folder) -> Path:
    """The folder ``root/latest`` names. Raises :class:`CheckpointError` naming what is missing; a pointer
    that is not a short text naming a ``step_*`` folder inside ``root`` is refused (its content is never
    echoed: it could be any file)."""
    folder, own = _folder(root)
    try:
        with _open_latest(folder) as step:
            return step.path
    finally:
        if own:
            folder.close()


def _open_latest(root: Folder) -> Folder:
    """The checkpoint folder ``root/latest`` names, opened (neither the pointer nor the folder through a
    link: a link could lead out of the run)."""
    pointer = root.path / LATEST
    if not root.exists(LATEST):
        raise CheckpointError(f"no checkpoint: {pointer} does not exist")
    bad = CheckpointError(f"{pointer}: not a pointer to a checkpoint folder in {root.path}")
    try:
        raw = root.read_bytes(LATEST, 256)  # a link, a FIFO, a folder or a long file: refused
        name = raw.decode("ascii").strip()
    except (CheckpointError, UnicodeDecodeError):
        raise bad from None
    if not name.startswith("step_") or not _plain_name(name):
        raise bad
    try:
        return root.child(name)
    except (CheckpointError, FileNotFoundError):
        raise CheckpointError(
            f"{pointer} names {name!r}, which is not a checkpoint folder in {root.path}"
        ) from None


_CHUNK = 1 << 20
# state.json holds counters, random-generator states and short lists (tensors go to the safetensors
# file): its size is bounded here, whatever the manifest says
STATE_MAX_BYTES = 256 << 20


def _open_sized(folder: Folder, fname: str, entry: Mapping[str, Any]) -> int:
    """A descriptor of ``fname``: a regular file (never a link out of the folder) of the manifest's size,
    checked from the opened file's metadata before a byte is read."""
    path = folder.path / fname
    try:
        fd = folder.open_fd(fname, os.O_RDONLY)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file missing or not a regular file") from None
    size = os.fstat(fd).st_size
    if size != entry.get("bytes"):
        os.close(fd)
        raise CheckpointError(
            f"{path}: {size} bytes, manifest says {entry.get('bytes')} (truncated or altered)"
        )
    return fd


def _read_verified(folder: Folder, fname: str, entry: Mapping[str, Any]) -> bytes:
    path = folder.path / fname
    with os.fdopen(_open_sized(folder, fname, entry), "rb") as f:
        data = f.read(entry["bytes"] + 1)
    if len(data) != entry.get("bytes"):  # changed since the size check
        raise CheckpointError(f"{path}: {len(data)} bytes, manifest says {entry.get('bytes')} (altered)")
    if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        raise CheckpointError(f"{path}: SHA-256 does not match the manifest (corrupt or altered)")
    return data


def _verify_streamed(folder: Folder, fname: str, entry: Mapping[str, Any]) -> None:
    """:func:`_read_verified` without holding the file in memory (model weights can be gigabytes)."""
    path = folder.path / fname
    digest, seen = hashlib.sha256(), 0
    with os.fdopen(_open_sized(folder, fname, entry), "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            seen += len(chunk)
    if seen != entry.get("bytes"):
        raise CheckpointError(f"{path}: {seen} bytes, manifest says {entry.get('bytes')} (altered)")
    if digest.hexdigest() != entry.get("sha256"):
        raise CheckpointError(f"{path}: SHA-256 does not match the manifest (corrupt or altered)")


# weights formats that are pickles: never loaded from a checkpoint, whatever the manifest says
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def _read_manifest(
    folder: Folder,
) -> tuple[int, dict[str, dict[str, Any]], dict[str, str | None] | None]:
    """The manifest's step, files and versions (``None`` when it has none), every field checked. Raises
    :class:`CheckpointError` naming it."""
    mpath = folder.path / MANIFEST
    if not folder.exists(MANIFEST):
        raise CheckpointError(f"{mpath}: manifest missing; the checkpoint cannot be verified")
    if folder.size(MANIFEST) > 1 << 20:
        raise CheckpointError(f"{mpath}: over 1 MiB, not a manifest")
    try:
        manifest = json.loads(
            folder.read_bytes(MANIFEST, 1 << 20).decode("utf-8"), parse_constant=_no_constant
        )
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise CheckpointError(f"{mpath}: not a valid manifest (not JSON: {type(e).__name__})") from None
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{mpath}: not a valid manifest (not a JSON object)")
    step, files = manifest.get("step"), manifest.get("files")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2**63:
        raise CheckpointError(f"{mpath}: not a valid manifest (step must be an integer >= 0)")
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"{mpath}: unsupported checkpoint format {manifest.get('format')!r}")
    if not isinstance(files, dict) or not {TENSORS, STATE} <= set(files):
        raise CheckpointError(f"{mpath}: not a valid manifest (files must map {TENSORS} and {STATE})")
    for fname, entry in files.items():
        if fname == MANIFEST or not _plain_name(fname):
            raise CheckpointError(f"{mpath}: lists {fname!r}, which is not a plain file name")
        if fname.lower().endswith(_PICKLE_SUFFIXES):
            raise CheckpointError(
                f"{folder.path / fname}: a pickle-based weights file; checkpoints never load pickles"
            )
        ok = isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
        size = entry.get("bytes") if isinstance(entry, dict) else None
        if not ok or isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise CheckpointError(
                f"{mpath}: not a valid manifest (entry of {fname!r} needs bytes and sha256)"
            )
    versions = manifest.get("versions")
    if versions is not None and not _versions.is_valid(versions):
        raise CheckpointError(
            f"{mpath}: not a valid manifest (versions must map at most {_versions.MAX_ENTRIES} library names "
            f"to version strings of at most {_versions.MAX_VERSION} printable characters, or null)"
        )
    return step, files, versions


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def verify_checkpoint(folder: str | Path | Folder) -> Path:
    """Check every file of the checkpoint ``folder`` against its manifest (sizes first, then SHA-256,
    streamed) and refuse files the manifest does not list, e.g. a ``pytorch_model.bin`` put next to the
    weights. Every read of a run's checkpoint goes through this or :func:`load_checkpoint`. Returns the
    folder."""
    opened, own = _folder(folder)
    try:
        _, files, _ = _read_manifest(opened)
        for name in opened.names():
            if name != MANIFEST and name not in files:
                raise CheckpointError(
                    f"{opened.path / name}: not listed in the manifest {opened.path / MANIFEST}"
                )
        for fname, entry in files.items():
            _verify_streamed(opened, fname, entry)
        return opened.path
    finally:
        if own:
            opened.close()


def load_checkpoint(path: str | Path | Folder) -> Checkpoint:
    """Load and verify a checkpoint folder, or the ``latest`` of a ``checkpoints`` folder (a path, or an
    open :class:`~advantage.safe_io.run_files.Folder`: a run's ``checkpoints``, opened without following
    a link). Every file is opened relative to the checkpoint folder, never through a link."""
    given, own = _folder(path)
    try:
        if given.path.name.startswith("step_"):
            return _load(given)
        with _open_latest(given) as folder:
            return _load(folder)
    finally:
        if own:
            given.close()


def _load(folder: Folder) -> Checkpoint:
    step, files, versions = _read_manifest(folder)
    if files[STATE]["bytes"] > STATE_MAX_BYTES:  # the manifest's word is not a reason to read it all
        raise CheckpointError(
            f"{folder.path / STATE}: {files[STATE]['bytes']} bytes, over the {STATE_MAX_BYTES} a state file "
            "holds; refused before it is read"
        )
    extra = tuple(sorted(set(files) - {TENSORS, STATE}))
    for fname in extra:
        _verify_streamed(folder, fname, files[fname])
    raw_tensors = _read_verified(folder, TENSORS, files[TENSORS])
    raw_state = _read_verified(folder, STATE, files[STATE])
    from safetensors import SafetensorError
    from safetensors.torch import load as st_load

    where = folder.path
    try:
        tensors = st_load(raw_tensors)
    except (SafetensorError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{where / TENSORS}: not a valid safetensors file ({e})") from None
    try:
        state = json.loads(raw_state.decode("utf-8"))  # NaN allowed: an algorithm's state may hold one
    except (ValueError, RecursionError) as e:
        raise CheckpointError(
            f"{where / STATE}: not valid JSON ({type(e).__name__}: {str(e)[:100]})"
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{where / STATE}: not a JSON object")
    return Checkpoint(step=step, tensors=tensors, state=state, path=where, files=extra, versions=versions)
