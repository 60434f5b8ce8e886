"""Tuned hyperparameters per environment, shipped as data: one YAML file per algorithm, keyed by env id.

``ppo.yml`` holds, for instance::

    Acrobot-v1:
      source: "rl-baselines3-zoo hyperparams/ppo.yml @ 22e3ff2 (Acrobot-v1)"
      env.num_envs: 16
      algorithm.n_steps: 256
      ...

When a run's ``env.id`` has an entry it is applied beneath the preset, the ``--config`` file and the
explicit keys (which all win over it), above the algorithm's general defaults. The top-level key
``hyperparams`` picks the table: ``auto`` (the shipped file, the default), ``none`` (general defaults
only) or the path of a user's YAML file of the same shape. Every entry names its ``source``; ``notes``
says what the source sets that cannot be expressed here. Both are reserved keys; every other key is a
dotted config key, checked against the algorithm's config (unknown key or wrong type: a
:class:`~advantage.errors.ConfigError` naming the file, the env id and the key).

The saved ``config.yaml`` records the entry used as a mapping ``hyperparams: {file, env_id, source}``;
such a record applies nothing when the file is read back (every value is already in it), so a saved
config reproduces its run whatever the shipped tables hold later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advantage.config import build
from advantage.config_sources import flatten, nest
from advantage.errors import ConfigError

DIR = Path(__file__).parent
RESERVED = ("source", "notes")
AUTO, NONE = "auto", "none"


@dataclass(frozen=True)
class TableEntry:
    """One environment's tuned values: ``overrides`` are dotted config keys."""

    file: str
    env_id: str
    source: str
    notes: str | None
    overrides: Mapping[str, Any]

    def record(self) -> dict[str, str]:
        """What ``config.yaml`` keeps of it."""
        return {"file": self.file, "env_id": self.env_id, "source": self.source}

    def describe(self) -> str:
        return f"hyperparams: {self.env_id} from {self.file} (source: {self.source})"


def shipped_file(algo: str) -> Path | None:
    """The shipped table of ``algo`` (``advantage/hyperparams/<algo>.yml``), or None."""
    path = DIR / f"{algo}.yml"
    return path if path.is_file() else None


def _display(path: Path) -> str:
    """Shipped files by their place in the package (stable across installs), others as given."""
    try:
        return str(Path("advantage") / "hyperparams" / path.resolve().relative_to(DIR.resolve()))
    except ValueError:
        return str(path)


def _read(path: Path, name: str) -> Any:
    """The YAML value of a hyperparameter file, bounded as a config file is
    (:func:`advantage.config_sources.load_yaml`): at most :data:`~advantage.config_sources.YAML_MAX_BYTES`
    read, and values, aliases and nesting counted before anything is built, so an alias bomb costs
    nothing. The loader is libyaml's where PyYAML has it: the tables are read on every run."""
    from advantage.config_sources import YAML_MAX_BYTES, YAML_MAX_DEPTH, YAML_MAX_NODES
    from advantage.safe_io.read import load_yaml_file

    return load_yaml_file(
        path,
        YAML_MAX_BYTES,
        name,
        max_nodes=YAML_MAX_NODES,
        max_depth=YAML_MAX_DEPTH,
        hint="; a hyperparameter table is small",
    )


def load_table(path: str | Path, config_cls: type) -> dict[str, TableEntry]:
    """Read and check every entry of a hyperparameter file against the config class ``config_cls``.

    Raises:
        ConfigError: a missing or unreadable file, an entry that is not a mapping, a missing ``source``,
            an unknown key or a value of the wrong type or range; each problem names the file, the env
            id and the key.
    """
    p = Path(path)
    name = _display(p)
    if not p.exists():
        raise ConfigError(f"hyperparams file {str(path)!r}: no such file (use auto, none or a YAML path)")
    data = _read(p, f"hyperparams file {name!r}")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"hyperparams file {name!r} must map env ids to entries, got {type(data).__name__}")
    table: dict[str, TableEntry] = {}
    problems: list[str] = []
    for env_id, raw in data.items():
        where = f"hyperparams file {name!r}, entry {str(env_id)!r}"
        if not isinstance(raw, dict):
            problems.append(f"{where} must be a mapping of config keys, got {raw!r}")
            continue
        source, notes = raw.get("source"), raw.get("notes")
        if not isinstance(source, str) or not source.strip():
            problems.append(f"{where} needs a `source:` string saying where its values come from")
        if notes is not None and not isinstance(notes, str):
            problems.append(f"{where}: notes must be a string, got {notes!r}")
        overrides = flatten({k: v for k, v in raw.items() if k not in RESERVED})
        bad = [k for k in overrides if "." not in str(k)]
        for k in bad:
            problems.append(f"{where}: key {k!r} must be a dotted config key such as algorithm.gamma")
        overrides = {k: v for k, v in overrides.items() if k not in bad}
        if "env.id" in overrides:
            problems.append(f"{where}: env.id is the entry's key and cannot be set inside it")
        _, found = build(config_cls, nest(overrides), cross_checks=False)
        problems.extend(f"{where}: {msg}" for msg in found)
        table[str(env_id)] = TableEntry(name, str(env_id), str(source), notes, overrides)
    if problems:
        raise ConfigError(problems)
    return table


def shipped_env_ids(algo: str) -> dict[str, str]:
    """``{env id: source}`` of the shipped table of ``algo`` (empty when it has none); unchecked."""
    path = shipped_file(algo)
    if path is None:
        return {}
    data = _read(path, f"hyperparams file {_display(path)!r}") or {}
    if not isinstance(data, dict):
        return {}  # load_table says what is wrong when a run uses it
    return {str(k): str(v.get("source", "")) for k, v in data.items() if isinstance(v, dict)}


def choose(algo: str, config_cls: type, choice: Any, env_id: str | None) -> tuple[TableEntry | None, str]:
    """The entry a run uses and a one-line note of what was chosen.

    Args:
        algo: the algorithm's name (its shipped file is ``<algo>.yml``).
        config_cls: its config dataclass (entries are checked against it).
        choice: ``auto``/None (the shipped table), ``none``, or a YAML path.
        env_id: the run's ``env.id`` (None for algorithms without an environment).
    """
    if choice is None:
        choice = AUTO
    if not isinstance(choice, str | Path):
        raise ConfigError(f"hyperparams must be auto, none or the path of a YAML file; got {choice!r}")
    if str(choice) == NONE:
        return None, "hyperparams=none: the general defaults are used"
    if env_id is None:
        return None, ""
    path = shipped_file(algo) if str(choice) == AUTO else Path(choice)
    if path is None:  # an algorithm without a table (tabular, REINFORCE): nothing to say on every run
        return None, ""
    table = load_table(path, config_cls)
    entry = table.get(env_id)
    if entry is None:
        return None, f"hyperparams: no entry for {env_id} in {_display(path)}; the general defaults are used"
    return entry, entry.describe()
