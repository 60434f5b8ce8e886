"""Files inside a run folder, opened relative to the folder's descriptor and never through a link.

A run folder is written and read by name: ``.lock``, ``config.yaml``, ``metrics.jsonl``, ``sidecar.log``,
``checkpoints/latest``, ``checkpoints/step_*/…``, ``plots/learning_curve.png``. Someone who could write
into the folder before (a shared folder, an unpacked archive of a run) could have left a symbolic link
at one of those names, and a program that opens the name follows the link: ``RUN/.lock ->
~/.bashrc`` and the pid overwrites the user's file. So the folder the user names is opened once (its own
path is the user's, followed as given), and every name inside it is opened with ``openat`` relative to
that descriptor with ``O_NOFOLLOW``: the kernel refuses a link at the last component, and subfolders
(``checkpoints``, ``plots``) are walked the same way, one component at a time. A name that is not a
regular file (a FIFO, which would block a reader, or a device) is refused from the opened descriptor's
``fstat``, and a file written in place (the lock, appended logs) must have one name only: a hard link
to another file would otherwise change that file. Whole-file writes go to a fresh temporary name and are
renamed over the old one, which replaces a directory entry and never writes through it.

Every refusal is one line naming the file (:class:`~advantage.errors.RunDirError`, or the error class a
caller passes, e.g. :class:`~advantage.errors.CheckpointError` for a checkpoint).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from advantage.errors import AdvantageError, RunDirError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
LINK_REFUSED = "a symbolic link; files in a run folder are never opened through links"


def _plain(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


class Folder:
    """An open folder: ``fd`` is its descriptor, ``path`` how messages name it. Names passed to the
    methods are single components (``"metrics.jsonl"``), or for :meth:`walk` a relative path whose every
    component is opened without following a link. Close it (or use ``with``)."""

    def __init__(self, path: Path, fd: int, error: type[AdvantageError] = RunDirError):
        self.path, self.fd, self.error = path, fd, error

    @classmethod
    def open(
        cls, path: str | Path, *, create: bool = False, error: type[AdvantageError] = RunDirError
    ) -> Folder:
        """Open the folder ``path`` (created with its parents when ``create``). The path is the user's and
        is followed as given; what is inside is not."""
        path = Path(path)
        if "\0" in str(path):
            raise error(f"{str(path)!r}: a path cannot hold a NUL character")
        try:
            if create:
                path.mkdir(parents=True, exist_ok=True)
            return cls(path, os.open(path, _DIR), error)
        except FileExistsError:
            raise error(f"{str(path)!r} is a file, not a folder") from None
        except NotADirectoryError:
            what = "is a file, not a folder" if path.exists() else "is inside a file, not a folder"
            raise error(f"{str(path)!r} {what}") from None
        except FileNotFoundError:
            raise error(f"folder {str(path)!r} does not exist") from None
        except OSError as e:
            raise error(f"cannot open folder {str(path)!r}: {e.strerror or e}") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a folder dropped without close() does not leak its descriptor
        with contextlib.suppress(Exception):
            self.close()

    # -- names ---------------------------------------------------------------------------------------
    def _name(self, name: str) -> str:
        if not _plain(name):
            raise ValueError(f"{name!r} is not a single file name")
        return name

    def _refuse(self, name: str, why: str) -> AdvantageError:
        return self.error(f"{self.path / name}: {why}")

    def _is_link(self, name: str) -> bool:
        """Whether ``name`` is a symbolic link: only to word a refusal the kernel already made (or, before
        a rename, to refuse what the rename would anyway have replaced rather than followed)."""
        try:
            return stat.S_ISLNK(os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode)
        except OSError:
            return False

    def exists(self, name: str) -> bool:
        """Whether anything (a link included) has this name."""
        try:
            os.stat(self._name(name), dir_fd=self.fd, follow_symlinks=False)
            return True
        except FileNotFoundError:
            return False

    def is_dir(self, name: str) -> bool:
        """Whether ``name`` is a folder (not a link to one)."""
        try:
            return stat.S_ISDIR(os.stat(self._name(name), dir_fd=self.fd, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            return False

    def names(self) -> list[str]:
        """The names in the folder, sorted."""
        return sorted(os.listdir(self.fd))

    # -- folders -------------------------------------------------------------------------------------
    def child(self, name: str, *, create: bool = False, exclusive: bool = False) -> Folder:
        """The subfolder ``name``, opened without following a link (created first when ``create``;
        ``exclusive``: it must not exist yet)."""
        self._name(name)
        if create or exclusive:
            try:
                os.mkdir(name, 0o777, dir_fd=self.fd)
            except FileExistsError:
                if exclusive:
                    raise
        try:
            fd = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=self.fd)
        except NotADirectoryError:  # O_DIRECTORY | O_NOFOLLOW on a link: ENOTDIR
            raise self._refuse(name, LINK_REFUSED if self._is_link(name) else "not a folder") from None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise self._refuse(name, LINK_REFUSED) from None
            raise
        return Folder(self.path / name, fd, self.error)

    def walk(self, rel: str | Path, *, create: bool = False) -> Folder:
        """The subfolder at the relative path ``rel`` (``"checkpoints"``, ``"plots"``), each component
        opened without following a link."""
        folder = Folder(self.path, os.dup(self.fd), self.error)
        for part in Path(rel).parts:
            try:
                nxt = folder.child(part, create=create)
            finally:
                folder.close()
            folder = nxt
        return folder

    # -- files ---------------------------------------------------------------------------------------
    def open_fd(self, name: str, flags: int, mode: int = 0o644) -> int:
        """A descriptor of the regular file ``name`` (``flags`` as for ``os.open``). A link, a FIFO or a
        device is refused; a file opened for writing must have no other name (a hard link)."""
        self._name(name)
        try:
            # O_NONBLOCK: opening a FIFO neither blocks nor waits for a peer (it is refused just below)
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode, dir_fd=self.fd)
        except OSError as e:
            if e.errno == errno.ELOOP or (e.errno == errno.ENOTDIR and self._is_link(name)):
                raise self._refuse(name, LINK_REFUSED) from None
            if e.errno in (errno.ENXIO, errno.EISDIR, errno.ENOTDIR):
                raise self._refuse(name, "not a regular file") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise self._refuse(name, "not a regular file")
            if flags & (os.O_WRONLY | os.O_RDWR) and st.st_nlink != 1:
                raise self._refuse(
                    name, f"has {st.st_nlink} names (a hard link); writing it would change another file"
                )
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def opener(self, *, exclusive: bool = False) -> Callable[[str, int], int]:
        """An ``opener=`` for the builtin ``open``: the name opened in this folder by :meth:`open_fd`
        (``exclusive``: created, never an existing file)."""
        extra = os.O_EXCL if exclusive else 0
        return lambda name, flags: self.open_fd(name, flags | extra)

    def open_file(self, name: str, mode: str = "r") -> IO[Any]:
        """``open()`` for a file in the folder: modes ``r``, ``rb``, ``a``, ``ab`` (append, created if
        missing)."""
        flags = {"r": os.O_RDONLY, "a": os.O_WRONLY | os.O_APPEND | os.O_CREAT}[mode[0]]
        return os.fdopen(self.open_fd(name, flags), mode)

    def size(self, name: str) -> int:
        """The size of the regular file ``name``, from its opened descriptor."""
        fd = self.open_fd(name, os.O_RDONLY)
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def read_bytes(self, name: str, limit: int) -> bytes:
        """The content of ``name``, refused (one line) when it is over ``limit`` bytes: nothing larger is
        ever read into memory."""
        try:
            fd = self.open_fd(name, os.O_RDONLY)
        except FileNotFoundError:
            raise self._refuse(name, "no such file") from None
        try:
            size = os.fstat(fd).st_size
            if size > limit:
                raise self._refuse(name, f"{size} bytes, over the {limit} expected here")
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read(limit + 1)
        finally:
            os.close(fd)
        if len(data) > limit:  # grew since fstat
            raise self._refuse(name, f"over the {limit} bytes expected here")
        return data

    def write_new(self, name: str, data: bytes, *, sync: bool = True) -> None:
        """Create ``name``, which must not exist (``O_EXCL``: never an existing file or a link), with
        ``data``; fsynced when ``sync``."""
        fd = self.open_fd(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def write_atomic(self, name: str, data: bytes | str | Iterable[bytes]) -> None:
        """Replace ``name`` with ``data`` (bytes, text, or chunks of bytes) so that a reader sees the old or
        the new content, never a mix: a fresh temporary file, fsynced, renamed over ``name``, then the
        folder fsynced. A link at ``name`` is refused (the rename would replace the link, not write
        through it, but a link there was not put there by this program)."""
        self._name(name)
        if self._is_link(name):
            raise self._refuse(name, LINK_REFUSED)
        tmp = f".{name}.tmp-{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=self.fd)  # left by a killed process with this pid
        chunks = [data.encode()] if isinstance(data, str) else [data] if isinstance(data, bytes) else data
        fd = self.open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                for chunk in chunks:
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=self.fd)
        self.sync()

    def sync(self) -> None:
        """fsync the folder itself (a new or renamed entry survives a crash)."""
        os.fsync(self.fd)

    def unlink(self, name: str, missing_ok: bool = True) -> None:
        """Remove the entry ``name`` (a link itself, never its target)."""
        try:
            os.unlink(self._name(name), dir_fd=self.fd)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def rename(self, src: str, dst: str) -> None:
        os.rename(self._name(src), self._name(dst), src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def remove_tree(self, name: str) -> None:
        """Remove the subfolder ``name`` and what it holds, never following a link out of it
        (``shutil.rmtree`` with ``dir_fd`` walks by descriptors); errors are ignored, as for a leftover."""
        shutil.rmtree(self._name(name), ignore_errors=True, dir_fd=self.fd)


def read_run_file(
    run_dir: str | Path, rel: str | Path, limit: int, error: type[AdvantageError] = RunDirError
) -> bytes:
    """The file ``rel`` of the run folder ``run_dir`` (e.g. ``"config.yaml"``), read as
    :meth:`Folder.read_bytes` reads it."""
    rel = Path(rel)
    with Folder.open(run_dir, error=error) as run, run.walk(rel.parent) as folder:
        return folder.read_bytes(rel.name, limit)


def write_run_file(run_dir: str | Path, rel: str | Path, data: bytes | str | Iterable[bytes]) -> Path:
    """Write the file ``rel`` of the folder ``run_dir`` atomically (:meth:`Folder.write_atomic`), its
    subfolders created without following a link. Returns ``run_dir / rel``."""
    rel = Path(rel)
    with Folder.open(run_dir, create=True) as run, run.walk(rel.parent, create=True) as folder:
        folder.write_atomic(rel.name, data)
    return Path(run_dir) / rel


# ---- where a run folder may be ---------------------------------------------------------------------------

# Filesystems the kernel makes up from its own state: a "file" there is a kernel interface, and writing a
# pid or a config into one changes the system, not a run.
PSEUDO_FILESYSTEMS = frozenset(
    {
        "proc",
        "sysfs",
        "cgroup",
        "cgroup2",
        "debugfs",
        "tracefs",
        "securityfs",
        "configfs",
        "devpts",
        "devtmpfs",
        "bpf",
        "pstore",
        "efivarfs",
        "fusectl",
        "binfmt_misc",
        "mqueue",
        "hugetlbfs",
        "rpc_pipefs",
        "nsfs",
    }
)
_MOUNTINFO = "/proc/self/mountinfo"


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in a mount point as octal escapes."""
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def filesystem_type(path: str | Path) -> str | None:
    """The type of the filesystem that holds ``path`` (its real path, or that of its nearest existing
    ancestor), from the kernel's mount table; None where there is no such table (not Linux)."""
    real = os.path.realpath(path)
    try:
        with open(_MOUNTINFO, "rb") as f:
            table = f.read(1 << 24).decode(errors="replace")
    except OSError:
        return None
    best, kind = "", None
    for line in table.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split(" ")
        if not sep or len(fields) < 5 or not right:
            continue
        mount = _unescape(fields[4])
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):  # the deepest mount wins; of equals, the later (on top)
            best, kind = mount, right.split(" ", 1)[0]
    return kind


def pseudo_filesystem(path: str | Path) -> str | None:
    """Why ``path`` cannot hold a run folder (it is on a kernel pseudo-filesystem such as ``/proc`` or
    ``/sys``), or None."""
    if "\0" in str(path):
        return "a path cannot hold a NUL character"
    real = os.path.realpath(path)
    for top in ("/proc", "/sys"):
        if real == top or real.startswith(top + "/"):
            return f"it is under {top}, a kernel interface, not storage"
    kind = filesystem_type(path)
    if kind in PSEUDO_FILESYSTEMS:
        return f"it is on a {kind} filesystem, a kernel interface, not storage"
    return None
