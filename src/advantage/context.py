"""What a training loop needs from the run around it: envs, logging, evaluation, checkpoints, signals.

An algorithm's ``train(cfg, ctx)`` keeps its loop visible and calls into the context:

* ``ctx.make_env()`` — the training environment (seeded from ``trainer.seed``);
* ``ctx.restored`` — the checkpoint to resume from, or ``None``;
* ``ctx.episode(step, ret, length)`` — a finished training episode;
* ``ctx.log(step, metrics)`` — algorithm metrics (losses, ε, ...);
* ``ctx.tick(step, snapshot)`` — evaluate / checkpoint when due; returns True when the run must stop
  (SIGTERM or SIGINT: the loop breaks and ``finish`` checkpoints at that step boundary);
* ``ctx.finish(step, snapshot)`` — final evaluation and checkpoint (the learning-curve plot and the
  TensorBoard events are written by :mod:`advantage.monitoring.sidecar`).

``snapshot`` is a zero-argument function returning a :class:`Snapshot`, so nothing is copied unless an
evaluation or checkpoint is actually due.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym

from advantage.checkpoint import Checkpoint, save_checkpoint
from advantage.config import EnvConfig, EnvRunConfig, RunConfig
from advantage.envs import flatten_observations, make_env
from advantage.errors import CheckpointError, NonFiniteError
from advantage.evaluation import EVAL_SEED_OFFSET, envs_for, evaluate_policy
from advantage.monitoring.plotting import DEFAULT_METRICS
from advantage.monitoring.progress import ENV_FIELDS, LM_FIELDS, Fields, Progress
from advantage.monitoring.writer import MetricsWriter
from advantage.registry import Algorithm, Policy
from advantage.safe_io.run_files import Folder

if TYPE_CHECKING:  # checkpoint tensors; this module does not import them at run time
    import numpy as np
    import torch


# what happened to a run besides its metrics (an env restarted on resume, other library versions)
EVENTS_FILE = "events.jsonl"


@dataclass
class Snapshot:
    """The algorithm's state at a step boundary: its policy, its tensors and its JSON state (and, for a
    language model, its ``save_pretrained`` files, so the checkpoint is also a model folder)."""

    policy: Policy
    tensors: Mapping[str, torch.Tensor | np.ndarray]
    state: Mapping[str, Any]
    # Extra checkpoint files, or a function giving them (called only when a checkpoint is written).
    files: Mapping[str, bytes] | Callable[[], Mapping[str, bytes]] = field(default_factory=dict)


@dataclass
class _Window:
    """Episodes finished since the last training log row."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)


def _run_state(restored: Checkpoint) -> dict[str, Any]:
    """The checkpoint's ``run`` state, each field checked (a damaged or edited state.json is an error
    naming it, not a traceback or a NaN written into later metrics rows)."""
    where = restored.path / "state.json"
    run = restored.state.get("run", {})
    if not isinstance(run, dict):
        raise CheckpointError(f"{where}: 'run' must be a JSON object")

    def finite(x: Any) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)

    elapsed = run.get("elapsed", 0.0)
    if not finite(elapsed) or elapsed < 0:
        raise CheckpointError(f"{where}: run.elapsed must be a finite number of seconds >= 0")
    episodes = run.get("episodes", 0)
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 0:
        raise CheckpointError(f"{where}: run.episodes must be an integer >= 0")
    for key in ("window_returns", "window_lengths", "recent_returns"):
        value = run.get(key, [])
        if not isinstance(value, list) or not all(finite(v) for v in value):
            raise CheckpointError(f"{where}: run.{key} must be a list of finite numbers")
    return run


def _next_multiple(step: int, every: int) -> float:
    """The first multiple of ``every`` after ``step`` (never, for ``every=0``)."""
    return step - step % every + every if every else math.inf


def _progress_fields(algo: Algorithm) -> Fields:
    """What the progress line shows: the algorithm's own curves when it names them (e.g. ‖w‖ and the value
    error of the linear TD methods, whose return is always 0), else the return or the LM fields."""
    if algo.plot_metrics:
        return tuple((m.split("/")[-1], (m,)) for m in algo.plot_metrics)
    return ENV_FIELDS if algo.uses_env else LM_FIELDS


class RunContext:
    def __init__(
        self,
        algo: Algorithm,
        cfg: RunConfig,
        run_dir: Path,
        restored: Checkpoint | None = None,
        quiet: bool = False,
        background: bool = False,
    ):
        self.algo, self.cfg, self.run_dir, self.restored = algo, cfg, Path(run_dir), restored
        t = cfg.trainer
        run_state = _run_state(restored) if restored else {}
        start = restored.step if restored else 0
        self.episodes: int = run_state.get("episodes", 0)
        self._window = _Window(run_state.get("window_returns", []), run_state.get("window_lengths", []))
        # The mean return of the last 100 episodes (``recent_return``), carried across resume.
        self._recent: deque[float] = deque(run_state.get("recent_returns", []), maxlen=100)
        self._next_log = _next_multiple(start, t.log_every)
        self._next_eval = _next_multiple(start, t.eval_every)
        self._next_ckpt = _next_multiple(start, t.checkpoint_every)
        self._stop_signal: str | None = None
        self._stepped = False
        self._old_handlers: dict[int, Any] = {}
        self.writer = MetricsWriter(
            self.run_dir,
            tensorboard=t.tensorboard,
            elapsed=run_state.get("elapsed", 0.0),
            purge_step=start + 1 if restored else None,
            plot_metrics=(algo.plot_metrics or DEFAULT_METRICS) if t.plot else None,
            background=background,
        )
        self.progress = Progress(
            t.total_steps,
            start=start,
            mode="none" if quiet else t.progress,
            description=algo.name,
            fields=_progress_fields(algo),
        )
        self._eval_envs: list[gym.Env] = []  # made when first needed: a run may never evaluate
        self._last_eval: tuple[int, dict[str, Any]] | None = None
        self._last_saved: int | None = None
        self._install_signal_handlers()

    # -- environments --------------------------------------------------------------------------------
    def make_env(self) -> gym.Env:
        return make_env(self._env_section(), flatten_obs=flatten_observations(self.cfg))

    def _env_section(self) -> EnvConfig:
        """The ``env`` section: only the algorithms that train on an env make or evaluate one here."""
        return cast(EnvRunConfig, self.cfg).env

    # -- signals: stop at the next step boundary -----------------------------------------------------
    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if name == "SIGINT" and self._stop_signal == "SIGINT":
            raise KeyboardInterrupt  # a second Ctrl-C: quit now (the last checkpoint is kept)
        if self._stop_signal is None:
            again = " (Ctrl-C again to quit now)" if name == "SIGINT" else ""
            # os.write, not sys.stderr: the signal may arrive in the middle of a progress line, and a
            # buffered stream cannot be re-entered.
            msg = f"{name}: stopping at the next step boundary with a checkpoint{again}\n"
            os.write(2, msg.encode())
        self._stop_signal = name

    @property
    def stop_requested(self) -> str | None:
        return self._stop_signal

    @property
    def recent_return(self) -> float | None:
        """Mean return of the last 100 training episodes (None before the first)."""
        return sum(self._recent) / len(self._recent) if self._recent else None

    # -- logging -------------------------------------------------------------------------------------
    def check_finite(self, step: int, what: str, value: float) -> None:
        """Stop at the first NaN/inf, naming the step and the component (e.g. ``reward``)."""
        if not math.isfinite(value):
            raise NonFiniteError(f"step {step}: {what} is {value}; stopping (the last checkpoint is kept)")

    @property
    def restoring(self) -> bool:
        """True until the algorithm's first step after a resume (no episode, log or tick yet): errors
        raised until then come from reading the checkpoint back."""
        return self.restored is not None and not self._stepped

    def episode(self, step: int, ret: float, length: int) -> None:
        self._stepped = True
        self.episodes += 1
        self._window.returns.append(float(ret))
        self._window.lengths.append(int(length))
        self._recent.append(float(ret))

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        self._stepped = True
        self.writer.log(step, metrics)
        self.progress.observe(metrics)

    def _log_train(self, step: int) -> None:
        w = self._window
        row: dict[str, Any] = {"train/episodes": self.episodes}
        if w.returns:
            row["train/episode_return"] = sum(w.returns) / len(w.returns)
            row["train/episode_length"] = sum(w.lengths) / len(w.lengths)
        row["train/steps_per_second"] = self.progress.rate
        self.log(step, row)
        self._window = _Window()

    # -- evaluation and checkpoints ------------------------------------------------------------------
    def evaluate(self, step: int, policy: Policy) -> dict[str, Any]:
        start = time.perf_counter()
        examples = getattr(policy, "examples", None) if self.algo.evaluate is not None else None
        if callable(examples) and not examples("validation", 1):
            res: dict[str, Any] = {"n": 0}  # a data file without validation rows: nothing to score
        elif self.algo.evaluate is not None:  # a language model: accuracy, pass@K, maj@K on prompts
            res = dict(self.algo.evaluate(self.cfg, policy))
        else:
            n = envs_for(policy, self.cfg.trainer.eval_episodes)
            while len(self._eval_envs) < n:
                # observations encoded as the trainer's envs encode them
                self._eval_envs.append(
                    make_env(self._env_section(), flatten_obs=flatten_observations(self.cfg))
                )
            res = evaluate_policy(
                policy,
                self._eval_envs[0],
                self.cfg.trainer.eval_episodes,
                seed=self.cfg.trainer.seed + EVAL_SEED_OFFSET,
                more_envs=self._eval_envs[1:n],
            )
        res["seconds"] = time.perf_counter() - start
        self.log(step, {f"eval/{k}": v for k, v in res.items() if isinstance(v, int | float | bool)})
        self._last_eval = (step, res)
        target = self.cfg.trainer.stop_at_return
        if target is not None and res.get("return_mean", -math.inf) >= target:
            self._stop_signal = self._stop_signal or "stop_at_return"
        return res

    def env_restarted(self, step: int, why: str) -> None:
        """A resume whose envs could not be put back exactly (:func:`advantage.rollout.envsteps.
        restore_or_restart`): one line on stderr, and a row in ``RUN/events.jsonl``."""
        import sys

        print(
            f"resume: the environment could not be restored exactly at step {step} ({why}); "
            "training goes on from the checkpoint with fresh episodes",
            file=sys.stderr,
            flush=True,
        )
        self.event({"step": step, "event": "env_restarted", "reason": why})

    def versions_changed(self, restored: Checkpoint) -> bool:
        """A resume under other library versions than the ``restored`` checkpoint's (its manifest's
        ``versions``; none recorded: nothing to compare): one line on stderr naming the libraries that
        differ, and a row in ``RUN/events.jsonl``. The run goes on. Returns whether they differ."""
        import sys

        from advantage import versions

        if restored.versions is None:
            return False
        now = versions.installed()
        names = versions.changed(restored.versions, now)
        if not names:
            return False
        print(
            f"resume: this checkpoint was written with {versions.listing(names, restored.versions)}; "
            f"now {versions.listing(names, now)}: the continuation may not be bit-identical to an "
            "uninterrupted run",
            file=sys.stderr,
            flush=True,
        )
        self.event(
            {
                "step": restored.step,
                "event": "versions_changed",
                "checkpoint": {n: restored.versions[n] for n in names},
                "now": {n: now[n] for n in names},
            }
        )
        return True

    def event(self, row: Mapping[str, Any]) -> None:
        """Append ``row`` to ``RUN/events.jsonl`` (opened without following a link)."""
        import json

        with Folder.open(self.run_dir) as folder, folder.open_file(EVENTS_FILE, "a") as f:
            f.write(json.dumps(dict(row)) + "\n")

    @property
    def saved_since_start(self) -> int | None:
        """The step of the last checkpoint this session wrote, or None."""
        return self._last_saved

    def save(self, step: int, snap: Snapshot) -> Path:
        self._last_saved = step
        run_state = {
            "elapsed": self.writer.elapsed,
            "episodes": self.episodes,
            "window_returns": self._window.returns,
            "window_lengths": self._window.lengths,
            "recent_returns": list(self._recent),
        }
        # `checkpoints` and every name in it opened without following a link (advantage.safe_io.run_files)
        with Folder.open(self.run_dir) as run, run.child("checkpoints", create=True) as checkpoints:
            return save_checkpoint(
                checkpoints,
                step,
                snap.tensors,
                {"algo": dict(snap.state), "run": run_state},
                keep=self.cfg.trainer.keep_checkpoints,
                files=snap.files() if callable(snap.files) else snap.files,
            )

    def due(self, step: int) -> bool:
        """Whether :meth:`tick` at ``step`` evaluates or checkpoints (so it takes a snapshot)."""
        return step >= self._next_eval or step >= self._next_ckpt

    def tick(self, step: int, snapshot: Callable[[], Snapshot]) -> bool:
        """Call after every step (or rollout). Logs, evaluates and checkpoints when due; returns True if
        the loop should stop now (a signal arrived)."""
        self._stepped = True
        self.progress.at(step)
        t = self.cfg.trainer
        if step >= self._next_log:
            self._log_train(step)
            self._next_log = _next_multiple(step, t.log_every)
        due_eval, due_ckpt = step >= self._next_eval, step >= self._next_ckpt
        if due_eval or due_ckpt:
            snap = snapshot()
            if due_eval:
                self._next_eval = _next_multiple(step, t.eval_every)
                self.evaluate(step, snap.policy)
            if due_ckpt:
                self._next_ckpt = _next_multiple(step, t.checkpoint_every)
                self.save(step, snap)
        self.progress.update(step)  # after logging and evaluating: it shows this step's values
        return self._stop_signal is not None

    def finish(self, step: int, snap: Snapshot) -> dict[str, Any] | None:
        """End of training (or a stop signal): evaluate (unless stopped), checkpoint, close."""
        result = None
        try:
            # stopped by a signal between log steps: no extra training row; the window goes into the
            # checkpoint, so the resumed run logs the same rows as an uninterrupted one
            signalled = self._stop_signal is not None and self._stop_signal != "stop_at_return"
            if self._window.returns and not signalled:
                self._log_train(step)
            if self._last_eval is not None and self._last_eval[0] == step:
                result = self._last_eval[1]
            elif self._stop_signal is None:
                result = self.evaluate(step, snap.policy)
            if self._stop_signal is not None:
                self.writer.log(step, {"run/stopped_by": self._stop_signal})
            if self._last_saved != step:
                self.save(step, snap)
        finally:
            self.close()
        return result

    def wait_outputs(self) -> None:
        """Complete the TensorBoard events and the learning-curve plot (drawn here, or by the sidecar
        when the run is in the background); a warning goes to the progress stream."""
        warning = self.writer.wait()
        if warning:
            self.progress.stream.write(warning.rstrip("\n") + "\n")

    def close(self) -> None:
        self.progress.close()
        self.writer.close()
        for env in self._eval_envs:
            env.close()
        self._eval_envs.clear()
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers.clear()
