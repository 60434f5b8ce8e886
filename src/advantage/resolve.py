"""A run's config, resolved from its layers: defaults < algorithm defaults < the env's tuned entry
(:mod:`advantage.hyperparams`) < preset < file < overrides (:func:`resolve_config`), checked before anything
is created, and the ``config.yaml`` a run folder saves (:func:`config_yaml`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from advantage import distributed
from advantage.config import EnvRunConfig, RunConfig, VecEnvRunConfig, build, device_problem, suggest, to_dict
from advantage.config_sources import dump_yaml, flatten, interpolations, load_yaml, merge, nest, set_dotted
from advantage.errors import ConfigError
from advantage.registry import Algorithm, all_algorithms, get_algorithm
from advantage.run_folder import CONFIG_FILE

DEFAULT_ALGO = "ppo"


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


def _response_budget_warnings(cfg: RunConfig) -> list[str]:
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


def _env_chosen(cfg: EnvRunConfig, *layers: Mapping[str, Any]) -> bool:
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


def config_yaml(spec: Algorithm, cfg: RunConfig) -> str:
    """The saved ``config.yaml``. ``trainer.run_dir`` is left out (null): the file lives in the run folder,
    and feeding it back with ``--config`` should start a new run, not collide with this one."""
    tree = to_dict(cfg)
    tree["trainer"]["run_dir"] = None
    for key, raw in cfg.__dict__.get("_interpolations", {}).items():
        set_dotted(tree, key, raw)  # ${oc.env:VAR} stays unresolved: secrets are not written to disk
    record = cfg.__dict__.get("_hyperparams", (None, ""))[0]
    head = {"algo": spec.name, **({"hyperparams": record} if record is not None else {})}
    return dump_yaml({**head, **tree})


def _worker_problems(spec: Algorithm, cfg: RunConfig) -> list[str]:
    """``trainer.num_workers`` is allowed only where the trainer collects with Ray workers, and must split
    ``env.num_envs`` evenly (an env algorithm with workers steps several envs: ``VecEnvConfig``)."""
    n = getattr(getattr(cfg, "trainer", None), "num_workers", 0)
    if not n:
        return []
    if not spec.workers:
        able = ", ".join(sorted(a.name for a in all_algorithms().values() if a.workers))
        return [
            f"trainer.num_workers={n}: {spec.name} runs in one process; Ray workers are available for {able}"
        ]
    num_envs = cast(VecEnvRunConfig, cfg).env.num_envs if spec.uses_env else 0
    if num_envs % n:
        return [f"env.num_envs={num_envs} must be divisible by trainer.num_workers={n} (envs per worker)"]
    return []
