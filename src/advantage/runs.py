"""The Python API: ``train``, ``resume`` and ``Run``. The CLI is a thin layer over these.

>>> import advantage
>>> run = advantage.train("q_learning", **{"env.is_slippery": False, "trainer.total_steps": 20_000})
>>> run.evaluate(episodes=100)["return_mean"]
1.0
>>> run.act(0)   # the trained policy's action in state 0
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from advantage import distributed, kernels, versions
from advantage.checkpoint import Checkpoint, load_checkpoint
from advantage.config import EnvRunConfig, RunConfig, TrainerConfig, to_dict
from advantage.config_sources import YAML_MAX_BYTES, flatten
from advantage.errors import AdvantageError, CheckpointError, ConfigError, EnvError, RunDirError
from advantage.monitoring.metrics import read_metrics, truncate_metrics
from advantage.registry import Algorithm, Policy
from advantage.resolve import config_yaml, resolve_config
from advantage.run_folder import (
    CONFIG_FILE,
    LOCK_FILE,
    RunLock,
    default_run_dir,
    has_checkpoint,
    load_latest,
    new_run_folder,
    run_config,
    run_subject,
)
from advantage.safe_io.run_files import Folder, read_run_file, write_run_file

if TYPE_CHECKING:
    from advantage.context import RunContext

# Gymnasium, numpy, the run context and evaluation are imported by the functions that use them: a config
# error or `advantage list` answers without them (docs/startup.md).

STOP_SIGNALS = ("SIGINT", "SIGTERM")  # a run stopped by one of these ends with a checkpoint, unfinished


def _check_spaces(spec: Algorithm, cfg: RunConfig) -> None:
    """``spec.check_env`` on the run's env, made as the algorithm will see it (an algorithm with that
    check trains on an env: its config has an ``env`` section)."""
    if spec.check_env is None:
        return
    from advantage.envs import flatten_observations, make_env
    from advantage.envs.make import check_env_api

    env_cfg = cast(EnvRunConfig, cfg).env
    env = make_env(env_cfg, flatten_obs=flatten_observations(cfg))
    try:
        spec.check_env(cfg, env)
        check_env_api(env_cfg.id, env)
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
            which a separate process finishes (:mod:`advantage.monitoring.sidecar`; what the command line
            does).
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
    run_dir = Path(cfg.trainer.run_dir) if cfg.trainer.run_dir else default_run_dir(spec, cfg)
    with new_run_folder(run_dir) as run:
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
    if not has_checkpoint(run_dir):
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
    ckpt = load_latest(run_dir)
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


def schedule_parts(before: TrainerConfig, after: TrainerConfig, step: int) -> list[list[int]]:
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


_EAGER_OPTIMIZERS = False


def eager_optimizers() -> None:
    """Let :func:`_train` install :func:`advantage.optim.eager.install` (torch.optim's methods without the
    import of torch's compiler module, for the whole process) before a run whose algorithm uses torch.
    Called by the ``advantage`` command only: a program that imports the library keeps torch as it is."""
    global _EAGER_OPTIMIZERS
    _EAGER_OPTIMIZERS = True


def _train(spec: Algorithm, cfg: RunConfig, ctx: RunContext) -> None:
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
            self._checkpoint = load_latest(self.dir)
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
            # (`videos` and the name opened without following a link: advantage.safe_io.run_files).
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
        from advantage.monitoring.plotting import DEFAULT_METRICS, plot_runs

        metrics = self.algo.plot_metrics or DEFAULT_METRICS
        if out is not None:
            return plot_runs([self.dir], out, metrics=metrics)
        return plot_runs(
            [self.dir], self.dir / "plots" / "learning_curve.png", metrics=metrics, inside=self.dir
        )
