"""What a run ran on: the versions of Python and of the libraries whose arithmetic a run's numbers depend
on. Every checkpoint's manifest records them (:mod:`advantage.checkpoint`), and so does ``RUN/versions.json``
(the last ``train`` or ``resume`` in the folder). A resume under other versions goes on, and says so:
the same seed then need not give the same numbers as an uninterrupted run.

A library that is imported reports its ``__version__`` (what is running); one that is not is looked up in
the installed package metadata, without importing it (``transformers`` costs seconds to import). A
library that is not installed is ``None``.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Mapping
from typing import Any

__version__ = "0.1.0"  # this package's version (``advantage.__version__``, ``advantage --version``)
VERSIONS_FILE = "versions.json"  # in the run folder, beside config.yaml
LIBRARIES = ("torch", "transformers", "numpy", "gymnasium")
# Bounds of a recorded ``versions`` object: it is read back from a checkpoint's manifest, and its values
# are printed, so a forged one is refused rather than echoed.
MAX_ENTRIES, MAX_NAME, MAX_VERSION = 32, 32, 100


@functools.cache
def _installed(dist: str) -> str | None:
    import importlib.metadata  # here: a run that never checkpoints does not import it

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _library(name: str) -> str | None:
    module = sys.modules.get(name)
    version = getattr(module, "__version__", None) if module is not None else None
    return str(version) if version is not None else _installed(name)


def installed() -> dict[str, str | None]:
    """``{"python": ..., "torch": ..., "transformers": ..., "numpy": ..., "gymnasium": ..., "advantage":
    ...}`` of this process (``None``: not installed); each at most :data:`MAX_VERSION` characters."""
    import platform

    found = {
        "python": platform.python_version(),
        **{n: _library(n) for n in LIBRARIES},
        "advantage": __version__,
    }
    return {k: v if v is None else v[:MAX_VERSION] for k, v in found.items()}


def as_json() -> str:
    """The content of ``RUN/versions.json``."""
    return json.dumps(installed(), indent=1, sort_keys=True) + "\n"


def is_valid(value: Any) -> bool:
    """Whether ``value`` is a ``versions`` object as :func:`installed` writes it: a JSON object of at most
    :data:`MAX_ENTRIES` printable names of at most :data:`MAX_NAME` characters, each mapped to ``None`` or a
    printable string of at most :data:`MAX_VERSION` characters."""
    if not isinstance(value, dict) or len(value) > MAX_ENTRIES:
        return False
    for name, version in value.items():
        if not (isinstance(name, str) and 0 < len(name) <= MAX_NAME and name.isprintable()):
            return False
        if version is not None and not (
            isinstance(version, str) and len(version) <= MAX_VERSION and version.isprintable()
        ):
            return False
    return True


def changed(saved: Mapping[str, str | None], now: Mapping[str, str | None]) -> list[str]:
    """The names recorded in both whose versions differ, in ``now``'s order (a name only one side knows,
    e.g. one a later release records, is not a difference)."""
    return [name for name in now if name in saved and saved[name] != now[name]]


def listing(names: list[str], versions: Mapping[str, str | None]) -> str:
    """``"torch 2.13.0+cpu, transformers 4.57.1"`` for ``names``."""
    label = {"python": "Python"}
    return ", ".join(
        f"{label.get(n, n)} {versions[n] if versions[n] is not None else '(not installed)'}" for n in names
    )
