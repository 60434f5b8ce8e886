"""The Python API: ``train``, ``resume`` and ``Run``. The CLI is a thin layer over these.

>>> import advantage
>>> run = advantage.train("q_learning", **{"env.is_slippery": False, "trainer.total_steps": 20_000})
>>> run.evaluate(episodes=100)["return_mean"]
1.0
>>> run.act(0)   # the trained policy's action in state 0
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advantage import distributed, kernels, versions
from advantage.checkpoint import LATEST, Checkpoint, load_checkpoint
from advantage.config import (
    YAML_MAX_BYTES,
    build,
    device_problem,
    dump_yaml,
    flatten,
    interpolations,
    load_yaml,
    merge,
    nest,
    parse_yaml,
    set_dotted,
    suggest,
    to_dict,
)
from advantage.errors import AdvantageError, CheckpointError, ConfigError, EnvError, RunDirError
from advantage.metrics import read_metrics, truncate_metrics
from advantage.registry import Algorithm, Policy, all_algorithms, get_algorithm
from advantage.runfiles import Folder, pseudo_filesystem, read_run_file, write_run_file

if TYPE_CHECKING:
    from advantage.context import RunContext

# Gymnasium, numpy, the run context and evaluation are imported by the functions that use them: a config
# error or `advantage list` answers without them (docs/startup.md).

DEFAULT_ALGO = "ppo"
STOP_SIGNALS = ("SIGINT", "SIGTERM")  # a run stopped by one of these ends with a checkpoint, unfinished
CONFIG_FILE = "config.yaml"
_TOP_KEYS = ("algo", "preset")


def resolve_config(
    algo: str | None = None,
    config: str | Path | Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    check_device: bool = True,
) -> tuple[Algorithm, Any]:
    """Build and validate a run config from defaults < algorithm defaults < the env's tuned entry
    (:mod:`advantage.hyperparams`) < preset < file < overrides.

    A preset named in ``overrides`` (on the command line) is what the user asks for now: it goes above the
    file, for the keys it sets, and below the other overrides (defaults < entry < file < that preset <
    overrides); it replaces a preset the file names. ``cfg._preset_note`` then says which of the file's
    values it changed (printed by :func:`train`). A preset named only in the file stays below the file.

    Args:
        algo: registered algorithm name; defaults to the file's ``algo`` key, then ``ppo``.
        config: a YAML path or a nested mapping (same shape as the saved ``config.yaml``).
        overrides: dotted keys (``{"algorithm.gamma": 0.9}``) or nested mappings; ``preset`` picks a preset;
            ``hyperparams`` picks the tuned table: ``auto`` (default), ``none`` or a YAML path.
        check_device: also check that ``trainer.device`` exists on this machine (not when only reading a
            run folder's config, which may come from a GPU machine).

    Raises:
        ConfigError: listing every problem (unknown keys, types, ranges, env id and env kwargs).
    """
    tree = load_yaml(config) if isinstance(config, str | Path) else dict(config or {})
    over = nest(flatten(dict(overrides or {})))
    file_algo = tree.pop("algo", None)
    name = algo or file_algo or DEFAULT_ALGO
    if algo and file_algo and algo != file_algo:
        raise ConfigError(f"the config file is for algorithm {file_algo!r}, but {algo!r} was asked for")
    spec = get_algorithm(name)
    typed_preset, file_preset = over.pop("preset", None), tree.pop("preset", None)
    preset_name = typed_preset if typed_preset is not None else file_preset
    preset: dict[str, Any] = {}
    if preset_name is not None:
        if preset_name not in spec.presets:
            hint = suggest(str(preset_name), spec.presets, cutoff=0.5)
            raise ConfigError(
                f"preset {preset_name!r} is not a preset of {name}{hint} "
                f"(available: {', '.join(spec.presets) or 'none'})"
            )
        preset = nest(dict(spec.presets[preset_name].overrides))
    defaults = nest(dict(spec.defaults))
    # a preset typed next to a file applies over the file's values (the docstring)
    above_file = typed_preset is not None and bool(tree)
    order = (tree, preset) if above_file else (preset, tree)
    entry, hp_note, record = _hyperparams(spec, over, tree, merge(defaults, *order, over))
    tuned = nest(dict(entry.overrides)) if entry is not None else {}
    merged = merge(defaults, tuned, *order, over)
    interpolated = interpolations(defaults, tuned, *order, over)
    preset_note = ""
    if above_file:
        below = {**flatten(to_dict(spec.config())), **flatten(merge(defaults, tuned, tree))}
        preset_note = _preset_note(str(preset_name), preset, below, over)
    refused = _paths_from_environment(interpolated)
    if refused:  # before any check that could name the path (and so the value) in its message
        raise ConfigError(refused)
    try:
        cfg, problems = build(spec.config, merged)
        if spec.uses_env and _env_chosen(cfg, preset, tree, over):
            from advantage.envs import check_env_config

            problems.extend(check_env_config(cfg.env))
        if spec.check is not None and not problems:
            problems.extend(spec.check(cfg))
        problems.extend(_worker_problems(spec, cfg))
        problems.extend(distributed.problems(spec.name, cfg) if not spec.uses_env else [])
        if check_device and not problems:
            problem = device_problem(cfg.trainer.device)
            if problem:
                problems.append(problem)
    except ConfigError as e:
        problems = list(e.problems)
    if problems:
        problems = [_foreign_name(p, spec) for p in problems]
        raise ConfigError(_redact(problems, merged, interpolated))
    cfg.__dict__["_interpolations"] = interpolated
    cfg.__dict__["_hyperparams"] = (record, hp_note)
    cfg.__dict__["_preset_note"] = preset_note
    warnings = [*cfg.__dict__.get("_warnings", []), *_response_budget_warnings(cfg)]
    cfg.__dict__["_warnings"] = list(dict.fromkeys(warnings))  # one line each, however often checked
    return spec, cfg


def _response_budget_warnings(cfg: Any) -> list[str]:
    """A warning when the policy comes from an SFT run folder that trained on longer responses than this
    run generates: GSM8K's recipe trains 256-token answers, then GRPO with 48 new tokens cut almost every
    answer before its end, and so before the \\boxed{} that the reward reads, without a word."""
    worker = getattr(cfg, "worker", None)
    actor = getattr(worker, "actor", None)
    path = getattr(getattr(actor, "model", None), "path", None)
    budget = getattr(getattr(cfg, "data", None), "max_response_length", None)
    if not path or not isinstance(budget, int) or not (Path(path) / CONFIG_FILE).is_file():
        return []
    try:
        trained = load_yaml(Path(path) / CONFIG_FILE).get("data", {}).get("max_response_length")
    except (ConfigError, AttributeError, OSError):
        return []  # not a run folder's config: nothing to compare
    if not isinstance(trained, int) or trained <= budget:
        return []
    return [
        f"warning: worker.actor.model.path={path} was trained on responses of up to {trained} tokens "
        f"(its data.max_response_length) but data.max_response_length={budget} here: a longer answer is "
        f"cut before its end (and before a final \\boxed{{}}); raise data.max_response_length to {trained}"
    ]


def _preset_note(
    name: str, preset: Mapping[str, Any], below: Mapping[str, Any], over: Mapping[str, Any]
) -> str:
    """The line a run prints when a preset typed on the command line changes values of the config file:
    each key the preset sets to another value than the file (or the defaults under it, ``below``, dotted)
    had, unless a key typed on the command line sets it anyway."""
    typed = flatten(dict(over))
    changed = [
        f"{key} {below[key]!r} -> {value!r}" if key in below else f"{key} (unset) -> {value!r}"
        for key, value in flatten(dict(preset)).items()
        if key not in typed and (key not in below or below[key] != value)
    ]
    if not changed:
        return f"preset {name}: the config file already has every value it sets"
    return f"preset {name} over the config file: " + ", ".join(changed)


_UNKNOWN_FOR = re.compile(r"(unknown (?:key|option) ([\w.]+) for [^(;]*?)(?=\s\(|;|$)")


def _foreign_name(problem: str, spec: Algorithm) -> str:
    """An environment's or a task's unknown-option line (``unknown key env.n_envs for CartPole-v1 (...)``)
    with the other library's name behind it (:mod:`advantage.migration`): ``...; SB3's n_envs is
    env.num_envs``. The config's own unknown keys get theirs where they are found."""
    m = _UNKNOWN_FOR.match(problem)
    if m is None:
        return problem
    from advantage.config import describe
    from advantage.migration import hint

    found = hint([m.group(2)], [k for k, _, _ in describe(spec.config)])
    return problem[: m.end(1)] + found + problem[m.end(1) :] if found else problem


def _env_chosen(cfg: Any, *layers: Mapping[str, Any]) -> bool:
    """Whether the env section needs checking against Gymnasium: an id set by a preset, a file or a key,
    or keyword arguments. The algorithms' own default ids are checked once, by the tests
    (tests/test_startup.py), so a config error in another section answers without importing Gymnasium."""
    return bool(getattr(cfg.env, "kwargs", None)) or any(
        isinstance(layer.get("env"), Mapping) and "id" in layer["env"] for layer in layers
    )


# Options whose value names a file or folder. The path is printed ("run folder: ..."), becomes a folder
# name and shows in every message about the file, so it is never read from the environment, where
# secrets are passed: ${oc.env:TOKEN} there would put the token on the screen and on disk.
PATH_OPTIONS = frozenset(
    {
        "trainer.run_dir",
        "model.path",
        "worker.actor.model.path",
        "worker.reward.model",
        "data.path",
        "data.validation_path",
        "data.test_path",
        "algorithm.policy",
    }
)
_RESOLVER = re.compile(r"\$\{\s*[\w.-]+\s*:")  # ${oc.env:X}, ${oc.decode:...}, any resolver call
_REFERENCE = re.compile(r"\$\{\s*([^${}:]*?)\s*\}")  # ${trainer.seed}: another key of the config


def _paths_from_environment(interpolated: Mapping[str, str]) -> list[str]:
    """A problem for each path option (:data:`PATH_OPTIONS`) whose ``${...}`` interpolation calls a
    resolver such as ``oc.env``, directly or through the keys it references. A reference to another
    plain key (``runs/seed-${trainer.seed}``) is allowed; one this cannot follow (relative) is not."""

    def resolved_elsewhere(raw: str, seen: frozenset[str]) -> bool:
        if _RESOLVER.search(raw):
            return True
        for ref in _REFERENCE.findall(raw):
            if ref.startswith(".") or ref in seen:
                return True
            if ref in interpolated and resolved_elsewhere(interpolated[ref], seen | {ref}):
                return True
        return False

    return [
        f"{key}={raw}: a path option takes no value from the environment or another resolver (the path "
        "is printed, becomes a folder name and shows in messages); write the path itself"
        for key, raw in sorted(interpolated.items())
        if key in PATH_OPTIONS and resolved_elsewhere(raw, frozenset({key}))
    ]


def _redact(problems: list[str], merged: Mapping[str, Any], interpolated: Mapping[str, str]) -> list[str]:
    """``problems`` with the values that came from ``${...}`` interpolations (``${oc.env:TOKEN}``: a
    secret, perhaps) replaced by the interpolation's text: an error names the key and the reason, never
    such a value."""
    values = flatten(dict(merged))
    out = []
    for problem in problems:
        for key, raw in interpolated.items():
            value = values.get(key)
            if value is None or isinstance(value, bool):
                continue
            text = str(value)
            if key in problem or len(text) >= 4:  # a short value is only hidden where its key is named
                problem = problem.replace(repr(value), raw).replace(text, raw)
        out.append(problem)
    return out


def _hyperparams(
    spec: Algorithm, over: dict[str, Any], tree: dict[str, Any], merged: Mapping[str, Any]
) -> tuple[Any, str, Any]:
    """The tuned-hyperparameters entry for the run's env id (:mod:`advantage.hyperparams`), the line that
    says what was chosen, and what ``config.yaml`` records. ``hyperparams`` is a top-level key, like
    ``preset``: an explicit key wins over the file's; a file's recorded entry (a mapping) applies nothing,
    since the saved file already holds every value."""
    from advantage.hyperparams import NONE, choose

    choice = over.pop("hyperparams", None)
    saved = tree.pop("hyperparams", None)
    env = merged.get("env")
    env_id = env.get("id") if isinstance(env, Mapping) else None
    env_id = env_id if isinstance(env_id, str) else None
    moved = ""
    if choice is None and isinstance(saved, Mapping):
        if not spec.uses_env or env_id is None or saved.get("env_id") in (None, env_id):
            return None, "", dict(saved)
        # A saved config reused on another env: its old entry's values would carry over under the old
        # label. They are taken out of the file and the new env's entry is chosen as for a fresh run.
        moved, choice = _drop_saved_entry(spec, saved, tree, env_id)
    if choice is None:
        choice = saved
    if not spec.uses_env:
        if choice not in (None, "auto", NONE):
            raise ConfigError(f"{spec.name} trains on data, not an env: hyperparams takes no file")
        return None, "", None
    entry, note = choose(spec.name, spec.config, choice, env_id)
    note = f"{moved}; {note.removeprefix('hyperparams: ')}" if moved and note else moved or note
    if entry is not None:
        return entry, note, entry.record()
    return None, note, NONE if str(choice) == NONE else None


def _drop_saved_entry(
    spec: Algorithm, saved: Mapping[str, Any], tree: dict[str, Any], env_id: str
) -> tuple[str, str]:
    """For a saved config whose ``hyperparams`` record names another env than the run's: remove from the
    file (``tree``, in place) the values it holds only because of the old resolution, so the new env's
    entry applies as on a fresh run: every key of the old or the new entry whose value in the file is
    what the old resolution gave (the old entry's value, else the algorithm's default). Returns the note
    that says so and the table to choose the new entry from (the shipped one, or the recorded file when
    it is still there); a value the user changed in the file stays and wins, as a file's values do."""
    from advantage.hyperparams import AUTO, load_table, shipped_file

    old_id, recorded = str(saved.get("env_id")), str(saved.get("file", ""))
    shipped = shipped_file(spec.name)
    if recorded == str(Path("advantage") / "hyperparams" / f"{spec.name}.yml") and shipped is not None:
        table_choice, path = AUTO, shipped
    elif recorded and Path(recorded).is_file():
        table_choice, path = recorded, Path(recorded)
    else:
        gone = f"hyperparams: the config file was tuned for {old_id} ({recorded}, no longer found)"
        return f"{gone}; its values are kept for {env_id}", AUTO
    table = load_table(path, spec.config)
    old, new = table.get(old_id), table.get(env_id)
    before = {**flatten(to_dict(spec.config())), **flatten(nest(dict(spec.defaults)))}
    before.update(old.overrides if old else {})
    keys = {*(old.overrides if old else ()), *(new.overrides if new else ())}
    flat = flatten(tree)
    dropped = sorted(k for k in keys if k in flat and k in before and flat[k] == before[k])
    for key in dropped:
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        del node[leaf]
    return (
        f"hyperparams: the config file was tuned for {old_id}; env.id is {env_id}, so its values of the "
        f"entries' keys are dropped ({', '.join(dropped) or 'none'})",
        table_choice,
    )


def config_yaml(spec: Algorithm, cfg: Any) -> str:
    """The saved ``config.yaml``. ``trainer.run_dir`` is left out (null): the file lives in the run folder,
    and feeding it back with ``--config`` should start a new run, not collide with this one."""
    tree = to_dict(cfg)
    tree["trainer"]["run_dir"] = None
    for key, raw in cfg.__dict__.get("_interpolations", {}).items():
        set_dotted(tree, key, raw)  # ${oc.env:VAR} stays unresolved: secrets are not written to disk
    record = cfg.__dict__.get("_hyperparams", (None, ""))[0]
    head = {"algo": spec.name, **({"hyperparams": record} if record is not None else {})}
    return dump_yaml({**head, **tree})


def run_subject(spec: Algorithm, cfg: Any) -> str:
    """What a run trains on: the env id, or the language-model task."""
    return cfg.env.id if spec.uses_env else cfg.data.task


def _default_run_dir(spec: Algorithm, cfg: Any) -> Path:
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
    the file it points to (:mod:`advantage.runfiles`)."""

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


def _new_run_folder(run_dir: Path) -> Folder:
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


def _check_spaces(spec: Algorithm, cfg: Any) -> None:
    if spec.check_env is None:
        return
    from advantage.envs import flatten_observations, make_env
    from advantage.envs.make import check_env_api

    env = make_env(cfg.env, flatten_obs=flatten_observations(cfg))  # as the algorithm will see it
    try:
        spec.check_env(cfg, env)
        check_env_api(cfg.env.id, env)
    finally:
        env.close()


def train(
    algo: str | None = None,
    config: str | Path | Mapping[str, Any] | None = None,
    *,
    env: Any = None,
    quiet: bool = False,
    progress: bool = True,
    background: bool = False,
    **overrides: Any,
) -> Run:
    """Train ``algo`` and return the :class:`Run`, finished or stopped by a signal (then
    ``run.stopped_by`` is ``"SIGINT"`` or ``"SIGTERM"`` and the run can be resumed).

    Args:
        algo: algorithm name (``advantage list``); default: the config's ``algo`` or ``ppo``.
        config: a YAML file or a nested mapping.
        env: the environment: a registered id (``"CartPole-v1"``), a ``gymnasium.Env`` subclass, or a
            function of no arguments that returns an env (:mod:`advantage.envs.user`); the same as
            ``env.id=...``, which also takes ``"my_package:MyEnv-v0"`` and ``"my_package.module:MyEnv"``.
        quiet: no progress display and no "run folder" line.
        progress: False: no progress display, but the "run folder" line is still printed (``--quiet``).
        background: return without waiting for the learning-curve plot and the last TensorBoard events,
            which a separate process finishes (:mod:`advantage.sidecar`; what the command line does).
        **overrides: dotted keys, e.g. ``train("q_learning", **{"algorithm.gamma": 0.9})``, or
            ``preset="frozenlake"``.

    Everything is validated before the run folder is created, so a bad input leaves nothing behind.
    """
    if isinstance(env, Mapping):  # overrides of the env section, e.g. from the command line
        overrides, env = {**overrides, "env": env}, None
    if env is not None:
        from advantage.envs.user import env_id_for

        overrides = {**overrides, "env.id": env_id_for(env)}
    spec, cfg = resolve_config(algo, config, overrides)
    from advantage.context import RunContext

    _check_spaces(spec, cfg)
    if not distributed.init(cfg.trainer).is_main:
        return _follow()
    run_dir = Path(cfg.trainer.run_dir) if cfg.trainer.run_dir else _default_run_dir(spec, cfg)
    with _new_run_folder(run_dir) as run:
        lock = RunLock(run)  # taken before the emptiness check, so the check and the claim are one step
        try:
            if any(name != LOCK_FILE for name in run.names()):
                lock.release(remove=True)
                raise RunDirError(
                    f"trainer.run_dir {str(run_dir)!r} already exists and is not empty; "
                    f"pick another folder, or continue it with `advantage resume {run_dir}`"
                )
            cfg.trainer.run_dir = str(run_dir)
            run.write_atomic(CONFIG_FILE, config_yaml(spec, cfg))
            run.write_atomic(versions.VERSIONS_FILE, versions.as_json())  # what this run runs on
            hp_note = cfg.__dict__.get("_hyperparams", (None, ""))[1]
            if not quiet:
                print(f"run folder: {run_dir}", flush=True)  # first: scripts read where the run went
            if not quiet and hp_note:
                print(hp_note, flush=True)
            notes = [cfg.__dict__.get("_preset_note", ""), *cfg.__dict__.get("_warnings", [])]
            for note in notes if not quiet else ():
                if note:
                    print(note, flush=True)
            ctx = RunContext(spec, cfg, run_dir, quiet=quiet or not progress, background=background)
            try:
                _train(spec, cfg, ctx)
            finally:
                ctx.close()
        finally:
            lock.release()
    return _ended(run_dir, ctx, background)


def _ended(run_dir: Path, ctx: RunContext, background: bool) -> Run:
    if not background:
        ctx.wait_outputs()
    run = Run(run_dir)
    signal = ctx.stop_requested
    run.stopped_by = signal if signal in STOP_SIGNALS else None
    run.last_step = ctx.saved_since_start
    return run


def resume(
    run_dir: str | Path,
    *,
    env: Any = None,
    quiet: bool = False,
    progress: bool = True,
    background: bool = False,
    **overrides: Any,
) -> Run:
    """Continue a run from its latest checkpoint, in the same folder. Typically
    ``resume(run, **{"trainer.total_steps": 200_000})``. Changing a non-``trainer`` value prints a
    warning with the old and new value (the run then mixes two settings); the values the checkpoint's
    tensors depend on (:func:`fixed_on_resume`) cannot change. Library versions other than those the
    checkpoint records (:mod:`advantage.versions`) print one line and add a row to ``RUN/events.jsonl``;
    the run goes on. ``quiet``, ``progress`` and ``background`` as in :func:`train`; ``env``: the env
    class or function the run was trained with, for a run whose ``env.id`` a new process cannot import
    (:mod:`advantage.envs.user`)."""
    if isinstance(env, Mapping):  # overrides of the env section, e.g. from the command line
        overrides, env = {**overrides, "env": env}, None
    run_dir = Path(run_dir)
    old = Run(run_dir, env)
    if os.environ.get("RANK", "0") != "0":  # a rank of a launch other than the first
        _, cfg = resolve_config(old.algo.name, run_config(run_dir), overrides)
        distributed.init(cfg.trainer)
        return _follow()
    lock = RunLock(run_dir)
    try:
        return _resume(run_dir, old, quiet, progress, background, overrides)
    finally:
        lock.release()


def _resume(
    run_dir: Path,
    old: Run,
    quiet: bool,
    progress: bool,
    background: bool,
    overrides: Mapping[str, Any],
) -> Run:
    spec, cfg = resolve_config(old.algo.name, run_config(run_dir), overrides)
    from advantage.context import RunContext

    distributed.init(cfg.trainer)
    before, after = flatten(to_dict(old.config)), flatten(to_dict(cfg))
    fixed = [
        f"{key} cannot change on resume: the checkpoint was trained with {before.get(key)!r}, got "
        f"{after.get(key)!r} (start a new run: advantage train --config {run_dir / CONFIG_FILE} "
        f"{key}=...)"
        for key in sorted(set(before) | set(after))
        if fixed_on_resume(key) and before.get(key) != after.get(key)
    ]
    if fixed:
        raise ConfigError(fixed)
    for key in sorted(set(before) | set(after)):
        if not key.startswith("trainer.") and before.get(key) != after.get(key):
            print(
                f"warning: {key} changed on resume: {before.get(key)!r} -> {after.get(key)!r} (config.yaml "
                "keeps the new value, so it no longer reproduces the steps before the resume)",
                file=sys.stderr,
            )
    cfg.trainer.run_dir = str(run_dir)
    if not _has_checkpoint(run_dir):
        # killed before its first checkpoint: start it again from its saved config, in the same folder
        truncate_metrics(run_dir, -1)  # every row: the run starts again
        if not quiet:
            print(f"run folder: {run_dir} (no checkpoint yet: starting from step 0)", flush=True)
        write_run_file(run_dir, CONFIG_FILE, config_yaml(spec, cfg))
        write_run_file(run_dir, versions.VERSIONS_FILE, versions.as_json())
        ctx = RunContext(spec, cfg, run_dir, quiet=quiet or not progress, background=background)
        try:
            _train(spec, cfg, ctx)
        finally:
            ctx.close()
        return _ended(run_dir, ctx, background)
    ckpt = _load_latest(run_dir)
    if ckpt.step >= cfg.trainer.total_steps:
        if not quiet:
            print(
                f"{run_dir} is already at step {ckpt.step} >= trainer.total_steps={cfg.trainer.total_steps}; "
                "pass a larger trainer.total_steps to train longer",
                file=sys.stderr,
            )
        distributed.current().broadcast(None)  # the other ranks: nothing to train
        distributed.shutdown()
        return Run(run_dir)
    truncate_metrics(run_dir, ckpt.step)
    if "trainer.schedule_steps" not in flatten(dict(overrides)):
        cfg.trainer.schedule_steps = schedule_parts(old.config.trainer, cfg.trainer, ckpt.step)
    if not quiet:
        print(f"run folder: {run_dir} (resuming at step {ckpt.step})", flush=True)
    previous = read_run_file(run_dir, CONFIG_FILE, YAML_MAX_BYTES)
    write_run_file(run_dir, CONFIG_FILE, config_yaml(spec, cfg))
    write_run_file(run_dir, versions.VERSIONS_FILE, versions.as_json())  # this session's, as config.yaml
    ctx = RunContext(spec, cfg, run_dir, restored=ckpt, quiet=quiet or not progress, background=background)
    try:
        ctx.versions_changed(ckpt)  # other versions than the checkpoint's: one line and an event, no refusal
        _train(spec, cfg, ctx)
    except BaseException as e:
        if ctx.saved_since_start is None:  # nothing was saved under the new config: keep the old one
            write_run_file(run_dir, CONFIG_FILE, previous)
        # raised while the algorithm read its state back, before its first step: a state.json that does
        # not fit this run (edited, or of another version), not a bug of the training loop
        unfit = isinstance(e, KeyError | TypeError | IndexError | ValueError | AttributeError)
        if ctx.restoring and unfit and not isinstance(e, AdvantageError):
            what = f"{type(e).__name__}: {str(e)[:200]}"
            raise CheckpointError(f"{ckpt.path / 'state.json'}: does not fit this run ({what})") from e
        raise
    finally:
        ctx.close()
    return _ended(run_dir, ctx, background)


def schedule_parts(before: Any, after: Any, step: int) -> list[list[int]]:
    """``trainer.schedule_steps`` of a run resumed at ``step`` from trainer section ``before`` with
    ``after``'s ``total_steps``: the steps before ``step`` ran their schedules against ``before``'s total
    (and its own earlier parts), the rest run against the new one. With the pair ``[step, old total]``
    appended, the run folder's config.yaml reproduces the resumed run (:func:`advantage.schedules.
    schedule_total`); without it, a run trained from that file would decay its learning rate, ε and
    clip range over the new total from step 0 and end elsewhere."""
    parts = [list(p) for p in before.schedule_steps]
    last = parts[-1][0] if parts else 0
    if after.total_steps != before.total_steps and step > last:
        parts.append([int(step), int(before.total_steps)])
    return parts


def _has_checkpoint(run_dir: Path) -> bool:
    """Whether ``RUN/checkpoints/latest`` exists (``checkpoints`` not followed through a link)."""
    with Folder.open(run_dir) as run:
        if not run.exists("checkpoints"):
            return False
        with run.child("checkpoints") as checkpoints:
            return checkpoints.exists(LATEST)


def _load_latest(run_dir: Path) -> Checkpoint:
    """The run's latest checkpoint, ``checkpoints`` opened without following a link."""
    with Folder.open(run_dir) as run:
        if not run.exists("checkpoints"):
            raise CheckpointError(f"no checkpoint: {run_dir / 'checkpoints' / LATEST} does not exist")
        with run.child("checkpoints") as checkpoints:
            return load_checkpoint(checkpoints)


_EAGER_OPTIMIZERS = False


def eager_optimizers() -> None:
    """Let :func:`_train` install :func:`advantage.optim.eager.install` (torch.optim's methods without the
    import of torch's compiler module, for the whole process) before a run whose algorithm uses torch.
    Called by the ``advantage`` command only: a program that imports the library keeps torch as it is."""
    global _EAGER_OPTIMIZERS
    _EAGER_OPTIMIZERS = True


def _train(spec: Algorithm, cfg: Any, ctx: RunContext) -> None:
    """``spec.train`` on rank 0 (or alone): on several ranks it first tells the others where the run is
    and what it resumes (:func:`_follow`), and trains with a :class:`~advantage.distributed.RankContext`."""
    on = kernels.parse(cfg.trainer.kernels)
    if _EAGER_OPTIMIZERS and "no_dynamo" in on and "torch" in sys.modules:  # tabular runs never import torch
        from advantage.optim import eager

        eager.install()
    world = distributed.current()
    try:
        with kernels.using(on):  # the run's fast paths (advantage.kernels)
            if not world.group:
                return spec.train(cfg, ctx)
            restored = str(ctx.restored.path) if ctx.restored is not None else None
            world.broadcast({"run_dir": str(ctx.run_dir), "restored": restored})
            rank_ctx: Any = distributed.RankContext(world, ctx, ctx.restored)  # a RunContext to the trainer
            spec.train(cfg, rank_ctx)
    finally:
        distributed.shutdown()


def _follow() -> Run:
    """A rank other than the first: train beside rank 0 in its run folder (from its saved config and the
    checkpoint it resumes), writing nothing."""
    world = distributed.current()
    try:
        got = world.broadcast(None)
        if got is None:  # rank 0 had nothing to train
            raise SystemExit(0)
        run_dir = Path(got["run_dir"])
        spec, cfg = resolve_config(None, run_config(run_dir))
        cfg.trainer.run_dir = str(run_dir)
        restored = load_checkpoint(got["restored"]) if got["restored"] else None
        rank_ctx: Any = distributed.RankContext(world, None, restored)
        with kernels.using(cfg.trainer.kernels):
            spec.train(cfg, rank_ctx)
    finally:
        distributed.shutdown()
    return Run(run_dir)


def fixed_on_resume(key: str) -> bool:
    """Keys a resumed run must keep: what it trains on (``env.id``, ``data.task``). (A changed network
    shape is caught when the checkpoint is loaded, with the mismatching tensors listed.)"""
    return key in ("env.id", "data.task")


def _worker_problems(spec: Algorithm, cfg: Any) -> list[str]:
    """``trainer.num_workers`` is allowed only where the trainer collects with Ray workers, and must split
    ``env.num_envs`` evenly."""
    n = getattr(getattr(cfg, "trainer", None), "num_workers", 0)
    if not n:
        return []
    if not spec.workers:
        able = ", ".join(sorted(a.name for a in all_algorithms().values() if a.workers))
        return [
            f"trainer.num_workers={n}: {spec.name} runs in one process; Ray workers are available for {able}"
        ]
    if spec.uses_env and cfg.env.num_envs % n:
        return [
            f"env.num_envs={cfg.env.num_envs} must be divisible by trainer.num_workers={n} (envs per worker)"
        ]
    return []


class Run:
    """A run folder: its config, metrics, latest checkpoint and trained policy.

    ``Run(path)`` and ``Run.load(path)`` are the same. The checkpoint and policy load lazily.
    """

    def __init__(self, run_dir: str | Path, env: Any = None):
        self.dir = Path(run_dir)
        if not self.dir.is_dir():
            raise RunDirError(f"run folder {str(self.dir)!r} does not exist")
        with Folder.open(self.dir) as run:
            if not run.exists(CONFIG_FILE):
                raise RunDirError(f"{str(self.dir)!r} is not a run folder: {CONFIG_FILE} is missing")
        saved = run_config(self.dir)
        if env is not None and not isinstance(env, str):  # the user's env object, under the id recorded
            env_id = (saved.get("env") or {}).get("id") if isinstance(saved.get("env"), dict) else None
            if isinstance(env_id, str):
                from advantage.envs.user import register_object

                register_object(env_id, env)
        self.algo, self.config = resolve_config(None, saved, check_device=False)
        # Set by train/resume: the signal that stopped the run ("SIGINT", "SIGTERM") or None, and the
        # step of the last checkpoint they wrote.
        self.stopped_by: str | None = None
        self.last_step: int | None = None
        self._checkpoint: Checkpoint | None = None
        self._policy: Policy | None = None
        self._raw_space: Any = None  # gymnasium spaces, set when the policy reads encoded observations
        self._encoded_space: Any = None

    @classmethod
    def load(cls, run_dir: str | Path, env: Any = None) -> Run:
        return cls(run_dir, env)

    def __repr__(self) -> str:
        kind = "env" if self.algo.uses_env else "task"
        return (
            f"Run({str(self.dir)!r}, algo={self.algo.name!r}, {kind}={run_subject(self.algo, self.config)!r})"
        )

    @property
    def checkpoint(self) -> Checkpoint:
        if self._checkpoint is None:
            self._checkpoint = _load_latest(self.dir)
        return self._checkpoint

    @property
    def step(self) -> int:
        """Environment steps of the latest checkpoint."""
        return self.checkpoint.step

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """Every row of ``metrics.jsonl``."""
        return read_metrics(self.dir)

    @property
    def policy(self) -> Policy:
        if self._policy is None and self.algo.load_policy is not None:
            self._policy = self.algo.load_policy(self.config, self.checkpoint)
        if self._policy is None:
            assert self.algo.policy is not None
            from advantage.envs import flatten_observations, make_env

            env = make_env(self.config.env, flatten_obs=flatten_observations(self.config))
            try:
                self._policy = self.algo.policy(self.config, env, self.checkpoint.tensors)
                # the env's own observations -> what the network reads (act takes the raw ones)
                import gymnasium as gym

                raw = env
                while isinstance(raw, gym.ObservationWrapper):
                    raw = raw.env
                if raw is not env:
                    self._raw_space, self._encoded_space = raw.observation_space, env.observation_space
            finally:
                env.close()
        return self._policy

    def act(self, obs: Any, deterministic: bool = True) -> Any:
        """The trained policy's action for one observation (for a language model: the greedy completion
        of one prompt)."""
        import numpy as np

        policy = self.policy
        if self._raw_space is not None and np.shape(obs) != self._encoded_space.shape:  # a raw observation
            import gymnasium as gym

            obs = np.asarray(gym.spaces.flatten(self._raw_space, obs), dtype=self._encoded_space.dtype)
        action = policy.act(obs, deterministic=deterministic)
        return action.item() if isinstance(action, np.generic) else action

    def evaluate(
        self,
        episodes: int | None = None,
        seed: int | None = None,
        deterministic: bool = True,
        **options: Any,
    ) -> dict[str, Any]:
        """Evaluate the latest checkpoint's policy. Defaults: ``trainer.eval_episodes`` episodes and the
        evaluation seeds used during training, so a deterministic policy reproduces ``eval/return_mean``.

        For a language model, ``options`` go to the algorithm's evaluation (``samples=K`` for pass@K and
        maj@K, ``split`` — default ``"test"`` —, ``limit=N`` prompts)."""
        t = self.config.trainer
        if self.algo.evaluate is not None:
            if seed is not None:
                options["seed"] = seed
            options.setdefault("split", "test")  # held out from training and from model selection
            return self.algo.evaluate(self.config, self.policy, **options)
        if options:
            raise ConfigError(f"{self.algo.name} evaluation takes no options {sorted(options)}")
        from advantage.envs import flatten_observations, make_env
        from advantage.evaluation import EVAL_SEED_OFFSET, envs_for, evaluate_policy

        episodes = episodes or t.eval_episodes
        flat = flatten_observations(self.config)  # the policy sees observations as in training
        envs = [
            make_env(self.config.env, flatten_obs=flat)
            for _ in range(envs_for(self.policy, episodes, deterministic))
        ]
        try:
            return evaluate_policy(
                self.policy,
                envs[0],
                episodes,
                seed=t.seed + EVAL_SEED_OFFSET if seed is None else seed,
                deterministic=deterministic,
                more_envs=envs[1:],
            )
        finally:
            for env in envs:
                env.close()

    def video(
        self, path: str | Path | None = None, seed: int | None = None, deterministic: bool = True
    ) -> Path:
        """Record one evaluation episode as an mp4 (default ``RUN/videos/step_<N>.mp4``)."""
        from advantage.envs import flatten_observations, make_env
        from advantage.evaluation import EVAL_SEED_OFFSET, record_video

        if not self.algo.uses_env:
            raise ConfigError(f"{self.algo.name} trains a language model: there is no episode to film")
        if path:
            out = Path(path)
            out.parent.mkdir(parents=True, exist_ok=True)
        # Frames are drawn off-screen: without this, pygame's SDL looks for a display and prints
        # "XDG_RUNTIME_DIR is invalid or not set" on a machine without one.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        try:
            env = make_env(
                self.config.env, render_mode="rgb_array", flatten_obs=flatten_observations(self.config)
            )
        except (EnvError, AssertionError) as e:  # the env draws no rgb_array frames
            why = str(e).split(". ")[-1] if isinstance(e, AssertionError) else str(e)
            env_id = self.config.env.id
            raise EnvError(f"{env_id} cannot draw video frames (render_mode=rgb_array): {why}") from None
        modes = list(env.metadata.get("render_modes") or [])
        if "rgb_array" not in modes:
            env.close()
            raise EnvError(
                f"{self.config.env.id} cannot draw video frames: its render modes are {modes}, not rgb_array"
            )
        try:
            t = self.config.trainer
            # The default goes into the run folder: the encoder writes by name, so into a private
            # folder of its own, and the finished file is copied in as every run file is written
            # (`videos` and the name opened without following a link: advantage.runfiles).
            with tempfile.TemporaryDirectory() as private:
                target = out if path else Path(private) / "video.mp4"
                record_video(
                    self.policy,
                    env,
                    str(target),
                    seed=t.seed + EVAL_SEED_OFFSET if seed is None else seed,
                    deterministic=deterministic,
                )
                if not path:
                    with open(target, "rb") as f:
                        chunks = iter(lambda: f.read(1 << 20), b"")
                        out = write_run_file(self.dir, Path("videos") / f"step_{self.step}.mp4", chunks)
        finally:
            env.close()
        return out

    def plot(self, out: str | Path | None = None) -> Path:
        from advantage.plotting import DEFAULT_METRICS, plot_runs

        metrics = self.algo.plot_metrics or DEFAULT_METRICS
        if out is not None:
            return plot_runs([self.dir], out, metrics=metrics)
        return plot_runs(
            [self.dir], self.dir / "plots" / "learning_curve.png", metrics=metrics, inside=self.dir
        )
