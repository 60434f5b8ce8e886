"""A run folder on disk: its name (:func:`default_run_dir`), creation (:func:`new_run_folder`), the lock
one writer holds (:class:`RunLock`), the saved ``config.yaml`` (:func:`run_config`) and the latest
checkpoint (:func:`load_latest`). Every file is opened without following a link
(:mod:`advantage.safe_io.run_files`)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from pathlib import Path
from typing import Any, cast

from advantage.checkpoint import LATEST, Checkpoint, load_checkpoint
from advantage.config import EnvRunConfig, LMRunConfig, RunConfig
from advantage.config_sources import YAML_MAX_BYTES, parse_yaml
from advantage.errors import CheckpointError, RunDirError
from advantage.registry import Algorithm
from advantage.safe_io.run_files import Folder, pseudo_filesystem, read_run_file

CONFIG_FILE = "config.yaml"


def run_subject(spec: Algorithm, cfg: RunConfig) -> str:
    """What a run trains on: the env id, or the language-model task."""
    if spec.uses_env:
        return cast(EnvRunConfig, cfg).env.id
    return cast(LMRunConfig, cfg).data.task


def default_run_dir(spec: Algorithm, cfg: RunConfig) -> Path:
    """A fresh folder ``runs/<algo>-<subject>-<time>[-i]``, created here: ``mkdir`` fails if another run
    took the name first, so two runs started in the same second get different folders."""
    env = re.sub(r"[^A-Za-z0-9._-]+", "_", run_subject(spec, cfg))
    base = Path("runs") / f"{spec.name}-{env}-{time.strftime('%Y%m%d-%H%M%S')}"
    base.parent.mkdir(parents=True, exist_ok=True)
    path, i = base, 1
    while True:
        try:
            path.mkdir()
            return path
        except FileExistsError:
            path, i = base.with_name(f"{base.name}-{i}"), i + 1


LOCK_FILE = ".lock"


class RunLock:
    """An exclusive ``flock`` on ``RUN/.lock`` held for the life of a run (``train`` or ``resume``), so a
    second writer of the same folder stops at once instead of interleaving checkpoints and metrics. The
    file holds the holder's pid for the message. The kernel releases the lock when the holder exits,
    even by SIGKILL, so a stale lock file never blocks a later resume.

    The lock file is opened relative to the run folder without following a link, and must be a regular
    file with no other name: a link planted at ``RUN/.lock`` would otherwise have the pid written into
    the file it points to (:mod:`advantage.safe_io.run_files`)."""

    def __init__(self, run_dir: Path | Folder):
        run = run_dir if isinstance(run_dir, Folder) else Folder.open(run_dir)
        self.path = run.path / LOCK_FILE
        self._folder = Folder(run.path, os.dup(run.fd), run.error)  # this lock's own descriptor
        if run is not run_dir:
            run.close()
        try:
            try:  # created here (O_EXCL), so a refused `train` removes what it made and nothing else
                self.fd = self._folder.open_fd(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                self.created = True
            except FileExistsError:
                self.fd = self._folder.open_fd(LOCK_FILE, os.O_RDWR, 0o644)
                self.created = False
        except BaseException:
            self._folder.close()
            raise
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 32, 0).decode(errors="replace").strip() or "unknown"
            self.release()
            raise RunDirError(
                f"run folder {str(run.path)!r} is in use by another advantage process (pid {holder}); "
                "wait for it to finish or stop it first"
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self, *, remove: bool = False) -> None:
        """Drop the lock; ``remove``: also remove the lock file when this lock created it and it is still
        the file at ``RUN/.lock`` (a refused ``train`` leaves the folder as it found it)."""
        if self.fd >= 0:
            if remove and self.created:
                with contextlib.suppress(OSError):
                    st = os.stat(LOCK_FILE, dir_fd=self._folder.fd, follow_symlinks=False)
                    if os.path.samestat(st, os.fstat(self.fd)):
                        self._folder.unlink(LOCK_FILE)
            os.close(self.fd)  # closing the last descriptor drops the flock
            self.fd = -1
        self._folder.close()


def run_config(run_dir: str | Path) -> dict[str, Any]:
    """The run folder's saved ``config.yaml`` as a mapping, read without following a link."""
    path = Path(run_dir) / CONFIG_FILE
    return parse_yaml(read_run_file(run_dir, CONFIG_FILE, YAML_MAX_BYTES), f"{str(path)!r}", str(path))


def new_run_folder(run_dir: Path) -> Folder:
    """The folder ``trainer.run_dir`` names, created (with its parents) and opened; one line, exit 2, for a
    path that cannot hold a run: a file, a folder that cannot be created, a kernel pseudo-filesystem
    (``/proc``, ``/sys``), checked before anything is created there."""
    why = pseudo_filesystem(run_dir)
    if why:
        raise RunDirError(f"trainer.run_dir {str(run_dir)!r} cannot hold a run: {why}")
    try:
        return Folder.open(run_dir, create=True)
    except RunDirError as e:
        raise RunDirError(f"trainer.run_dir: {e}") from None


def has_checkpoint(run_dir: Path) -> bool:
    """Whether ``RUN/checkpoints/latest`` exists (``checkpoints`` not followed through a link)."""
    with Folder.open(run_dir) as run:
        if not run.exists("checkpoints"):
            return False
        with run.child("checkpoints") as checkpoints:
            return checkpoints.exists(LATEST)


def load_latest(run_dir: Path) -> Checkpoint:
    """The run's latest checkpoint, ``checkpoints`` opened without following a link."""
    with Folder.open(run_dir) as run:
        if not run.exists("checkpoints"):
            raise CheckpointError(f"no checkpoint: {run_dir / 'checkpoints' / LATEST} does not exist")
        with run.child("checkpoints") as checkpoints:
            return load_checkpoint(checkpoints)
