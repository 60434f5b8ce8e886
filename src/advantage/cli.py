"""The ``advantage`` command: a thin layer over :mod:`advantage.runs`.

Exit codes: 0 when a run finished, 2 on bad usage or bad input (one clear message, no traceback), 130
after Ctrl-C (SIGINT) and 143 after SIGTERM, as shells report them: a stopped run checkpoints at the next
step boundary and says how to continue it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from advantage.errors import AdvantageError, EnvError

EPILOG_TRAIN = """examples:
  advantage train q_learning env.id=FrozenLake-v1 env.is_slippery=false trainer.total_steps=20000
  advantage train q_learning preset=frozenlake_slippery
  advantage train --config runs/<run>/config.yaml trainer.seed=1
  advantage train ppo env.id=Acrobot-v1                  # the env's tuned entry (advantage list ppo)
  advantage train ppo env.id=Acrobot-v1 hyperparams=none # general defaults; or hyperparams=FILE.yaml
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints usage + error)
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _split_algo(args: Sequence[str]) -> tuple[str | None, list[str]]:
    """``train [ALGO] [key=value ...]``: the first word without '=' is the algorithm."""
    args = list(args)
    return (args[0], args[1:]) if args and "=" not in args[0] else (None, args)


def _algo_and_overrides(args: Sequence[str]) -> tuple[str | None, list[str]]:
    """:func:`_split_algo`, checked: the algorithm is not a config file, every other word an override."""
    algo, rest = _split_algo(args)
    _check_algo(algo)
    stray = [a for a in rest if "=" not in a]
    if stray:
        raise AdvantageError(f"expected key=value overrides after the algorithm, got {' '.join(stray)!r}")
    return algo, rest


# The command returns when the run's checkpoint is saved; the learning-curve plot and the last TensorBoard
# events are finished by the run's sidecar process (advantage.monitoring.sidecar) a moment later.
BACKGROUND = True

EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}  # 128 + the signal's number, as shells report it


def _check_algo(algo: str | None) -> None:
    """A YAML file given where the algorithm goes is almost always a missing ``--config``."""
    if algo and (algo.endswith((".yaml", ".yml")) or "/" in algo or Path(algo).is_file()):
        from advantage.registry import all_algorithms

        if algo not in all_algorithms():
            raise AdvantageError(
                f"unknown algorithm {algo!r}: it looks like a config file; pass it with --config, "
                f"e.g. advantage train --config {algo}"
            )


def cmd_train(ns: argparse.Namespace) -> int:
    from advantage.config_sources import parse_overrides
    from advantage.distributed import launch
    from advantage.resolve import resolve_config
    from advantage.runs import train

    algo, rest = _algo_and_overrides(ns.args)
    overrides = parse_overrides(rest)
    n = _nproc(ns.config, overrides, lambda: resolve_config(algo, ns.config, overrides)[1])
    if n > 1:
        return launch(n, ns.argv)
    return _ended(train(algo, ns.config, progress=not ns.quiet, background=BACKGROUND, **overrides))


def _nproc(config: str | None, overrides: dict, cfg: Callable[[], Any]) -> int:
    """``trainer.nproc_per_node`` of a command not yet under a launcher (1 under one, or when no key or
    file names it: the config is then not built twice). The file is read as the config is
    (:data:`~advantage.config_sources.YAML_MAX_BYTES` at most), so a huge one is refused, not read whole."""
    from advantage.config_sources import YAML_MAX_BYTES
    from advantage.distributed import launched
    from advantage.safe_io.read import read_bytes

    named = "nproc_per_node" in str(overrides) or (
        config is not None
        and b"nproc_per_node"
        in read_bytes(config, YAML_MAX_BYTES, f"--config {config!r}", hint="; a config file is small")
    )
    return 1 if launched() or not named else int(getattr(cfg().trainer, "nproc_per_node", 1))


def _ended(run) -> int:
    """Print the last line of a run and return the exit code: 0 finished, 130/143 stopped by a signal."""
    if os.environ.get("RANK", "0") != "0":
        return 0  # the first rank prints the run's last line
    step = run.last_step if run.last_step is not None else run.step
    if run.stopped_by:
        print(
            f"stopped at step {step} (checkpoint saved); continue with advantage resume {run.dir}",
            flush=True,
        )
        return EXIT_CODES[run.stopped_by]
    print(final_line(run, step), flush=True)
    return 0


def final_line(run, step: int) -> str:
    """``done: step N, <the final evaluation> — RUN``: the return for an environment run, the accuracy
    (and the win rate, where there is one) for a language-model run. Only numbers are shown: a value of
    another kind in the row (an edited ``metrics.jsonl``) is left out, never a traceback."""
    evals = [r for r in run.metrics if any(k.startswith("eval/") for k in r)]
    last = evals[-1] if evals else {}
    if run.algo.uses_env:
        mean, std = _number(last.get("eval/return_mean")), _number(last.get("eval/return_std", 0.0))
        parts = [f"eval/return_mean {mean:.4g} ± {std or 0.0:.3g}"] if mean is not None else []
        rate = _number(last.get("eval/success_rate"))
        if rate is not None:
            parts.append(f"success_rate {rate:.3f}")
    else:
        names = ("accuracy", "win_rate", "hidden_score", "pass@1", "maj@1")
        parts = [f"eval/{n} {v:.3f}" for n in names if (v := _number(last.get(f"eval/{n}"))) is not None]
        mean = _number(last.get("eval/return_mean"))
        parts = parts or ([f"eval/return_mean {mean:.4g}"] if mean is not None else [])
    if not parts:
        return f"done: step {step} — {run.dir}"
    at = "" if last["step"] == step else f" (evaluated at step {last['step']})"
    own = _last_values(run.metrics, run.algo.plot_metrics or ())
    return f"done: step {step}, {', '.join(own + parts)}{at} — {run.dir}"


def _number(value: object) -> float | None:
    """``value`` if it is a number (not a boolean), else None."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _last_values(rows: Sequence[dict], names: Sequence[str]) -> list[str]:
    """``name value`` for the last logged value of each of the algorithm's own curves (e.g. ‖w‖ of the
    linear TD methods, where the return says nothing)."""
    out = []
    for name in names:
        value = _number(next((r[name] for r in reversed(rows) if name in r), None))
        if value is not None:
            out.append(f"{name} {value:.4g}")
    return out


def cmd_resume(ns: argparse.Namespace) -> int:
    from advantage.config_sources import parse_overrides
    from advantage.distributed import launch, launched
    from advantage.resolve import resolve_config
    from advantage.run_folder import run_config
    from advantage.runs import resume

    overrides = parse_overrides(ns.overrides)
    try:
        saved = run_config(ns.run_dir)
    except (AdvantageError, OSError):
        saved = None  # resume() names what is wrong
    n = 1
    if saved is not None and "nproc_per_node" in str(saved) + str(overrides) and not launched():
        n = int(getattr(resolve_config(None, saved, overrides)[1].trainer, "nproc_per_node", 1))
    if n > 1:
        return launch(n, ns.argv)
    return _ended(resume(ns.run_dir, progress=not ns.quiet, background=BACKGROUND, **overrides))


def cmd_eval(ns: argparse.Namespace) -> int:
    from advantage.runs import Run

    if ns.episodes is not None and ns.episodes < 1:
        raise AdvantageError(f"--episodes must be >= 1, got {ns.episodes}")
    run = Run(ns.run_dir)
    if run.algo.uses_env:
        if ns.samples is not None or ns.split is not None or ns.limit is not None:
            raise AdvantageError("--samples, --split and --limit are for language-model runs")
        res = run.evaluate(episodes=ns.episodes, seed=ns.seed, deterministic=not ns.stochastic)
    else:
        if ns.episodes is not None or ns.stochastic or ns.video:
            raise AdvantageError(
                f"{run.algo.name} trains a language model: use --samples K, --split and --limit "
                "(--episodes, --stochastic and --video are for environment runs)"
            )
        options = {"samples": ns.samples, "split": ns.split, "limit": ns.limit}
        res = run.evaluate(seed=ns.seed, **{k: v for k, v in options.items() if v is not None})
    res = {"run_dir": str(run.dir), "step": run.step, **res}
    if ns.video:
        try:
            res["video"] = str(run.video(seed=ns.seed, deterministic=not ns.stochastic))
        except EnvError as e:  # an env that draws no frames: the evaluation stands, the video is skipped
            print(f"video: skipped: {e}", file=sys.stderr)
    if ns.json:
        print(json.dumps(res))  # full precision for programs
    else:
        for k, v in res.items():
            print(f"{k:>14}: {_rounded(v)}")
    return 0


def _rounded(value: object) -> object:
    """Numbers for a person: 4 significant digits (``3.541``), integers and strings as they are."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def cmd_plot(ns: argparse.Namespace) -> int:
    from advantage.monitoring.plotting import plot_runs

    metrics = ns.metric or _default_plot_metrics(ns.run_dirs)
    if ns.out is None and len(ns.run_dirs) == 1:  # into the run folder, as every file there is written
        run = ns.run_dirs[0]
        path = plot_runs([run], Path(run) / "plots" / "learning_curve.png", metrics=metrics, inside=run)
    else:
        path = plot_runs(ns.run_dirs, ns.out or Path("learning_curves.png"), metrics=metrics)
    print(path)
    return 0


def _default_plot_metrics(run_dirs: Sequence[str]) -> tuple[str, ...]:
    """The metrics the runs' algorithms plot by default (``‖w‖`` and the value error for the linear TD
    methods), in order and without repeats; the returns for the others."""
    from advantage.monitoring.plotting import DEFAULT_METRICS
    from advantage.registry import ALGORITHMS, all_algorithms
    from advantage.run_folder import run_config

    all_algorithms()
    out: list[str] = []
    for d in run_dirs:
        try:
            name = run_config(d).get("algo")
        except AdvantageError:
            name = None  # not a run folder: plot_runs says so
        algo = ALGORITHMS.get(name) if isinstance(name, str) else None
        out += algo.plot_metrics if algo and algo.plot_metrics else DEFAULT_METRICS
    return tuple(dict.fromkeys(out)) or DEFAULT_METRICS


def cmd_sweep(ns: argparse.Namespace) -> int:
    from advantage.config_sources import flatten, parse_overrides
    from advantage.safe_io.run_files import read_run_file
    from advantage.sweep import parse_grid, sweep

    algo, rest = _algo_and_overrides(ns.args)
    rows = sweep(
        algo,
        parse_grid(ns.grid or []),
        seeds=ns.seeds,
        config=ns.config,
        overrides=flatten(parse_overrides(rest)),
        out=ns.out,
        workers=ns.workers,
        ray_address=ns.ray_address,
        progress=not ns.quiet,
    )
    out = Path(rows[0]["run_dir"]).parent
    print(read_run_file(out, "summary.md", 1 << 24).decode())
    stopped = [r for r in rows if r.get("stopped_by")]
    if stopped:
        r = stopped[0]
        print(
            f"sweep stopped during trial {r['trial'] + 1} at step {r['step']} (checkpoint saved; "
            f"continue it with advantage resume {r['run_dir']}); sweep folder: {out}"
        )
        return EXIT_CODES[r["stopped_by"]]
    print(f"sweep folder: {out}")
    return 0


def _print_hyperparams(console: Any, algo: str) -> None:
    """The env ids with a tuned entry (applied when env.id matches; hyperparams=none turns it off)."""
    from rich.table import Table

    from advantage.hyperparams import shipped_env_ids

    entries = shipped_env_ids(algo)
    if not entries:
        console.print(f"no tuned hyperparameters for {algo}: every env gets the general defaults")
        return
    table = Table(
        "env.id with tuned hyperparameters",
        "source (applied beneath presets and keys; hyperparams=none turns it off)",
    )
    for env_id, source in entries.items():
        table.add_row(env_id, source)
    console.print(table)


def _list_console() -> Any:
    """The console of ``advantage list``: the terminal's width on a terminal; piped or redirected, no width
    limit, so every row is one line that grep and scripts read whole (at 80 columns a long option name
    was cut to ``data.max_response_leng…``)."""
    from rich.console import Console

    probe = Console()
    return probe if probe.is_terminal else Console(width=100_000, no_color=True)


def _option_table(keys: Sequence[str]) -> Any:
    """An option/default/meaning table whose option column is as wide as its longest key (never cut)."""
    from rich.table import Column, Table

    return Table(
        Column("option", min_width=max(map(len, keys), default=6), no_wrap=True), "default", "meaning"
    )


def cmd_list(ns: argparse.Namespace) -> int:
    from rich.table import Table

    from advantage.config import describe
    from advantage.registry import all_algorithms, get_algorithm

    console = _list_console()
    if ns.algo:
        algo = get_algorithm(ns.algo)
        console.print(f"[bold]{algo.name}[/bold] — {algo.summary}")
        table = _option_table([k for k, _, _ in describe(algo.config)])
        defaults = dict(algo.defaults)
        for key, default, help_ in describe(algo.config):
            table.add_row(key, repr(defaults.get(key, default)), help_)
        console.print(table)
        if algo.task_options is not None:
            _print_task_options(console, algo, ns.overrides)
        elif ns.overrides:
            raise AdvantageError(
                f"{algo.name} has no data tasks; `advantage list {algo.name}` takes no key=value"
            )
        _print_hyperparams(console, algo.name)
        if algo.presets:
            presets = Table("preset", "what it sets")
            for name, p in algo.presets.items():
                presets.add_row(name, p.summary + "\n" + " ".join(f"{k}={v}" for k, v in p.overrides.items()))
            console.print(presets)
        return 0
    table = Table("algorithm", "what it is", "presets")
    for name, algo in sorted(all_algorithms().items()):
        table.add_row(name, algo.summary, ", ".join(algo.presets) or "-")
    console.print(table)
    console.print(
        "`advantage list ALGO` shows its options; `advantage train ALGO preset=NAME` uses a preset."
    )
    return 0


def _print_task_options(console: Any, algo: Any, overrides: Sequence[str]) -> None:
    """The ``data.*`` options of the task named by ``data.task=NAME`` (default: the algorithm's)."""
    from advantage.config import describe
    from advantage.config_sources import flatten, parse_overrides

    given = flatten(parse_overrides(overrides))
    unknown = [k for k in given if k != "data.task"]
    if unknown:
        raise AdvantageError(f"`advantage list` takes only data.task=NAME, got {', '.join(unknown)}")
    defaults = {key: default for key, default, _ in describe(algo.config)}
    name = str(given.get("data.task", algo.defaults.get("data.task", defaults.get("data.task"))))
    rows = algo.task_options(name)
    table = _option_table([key for key, _, _ in rows])
    for key, default, help_ in rows:
        table.add_row(key, repr(default), help_)
    console.print(
        f"[bold]data.task={name}[/bold]: its own options (`advantage list {algo.name} data.task=NAME`)"
    )
    console.print(table)


def build_parser() -> argparse.ArgumentParser:
    from advantage.versions import __version__

    p = _Parser(prog="advantage", description="Reinforcement learning, from Q-tables to GRPO.")
    p.add_argument("--version", action="version", version=f"advantage {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    t = sub.add_parser(
        "train",
        help="train an algorithm; prints the run folder",
        description="Train ALGO (default ppo, on CartPole-v1). Options are key=value overrides of "
        "the config sections env/algorithm/model/trainer, or preset=NAME.",
        epilog=EPILOG_TRAIN,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument("args", nargs="*", metavar="[ALGO] [key=value ...]")
    t.add_argument("--config", metavar="F", help="YAML config file (e.g. a run's config.yaml)")
    t.set_defaults(fn=cmd_train)

    r = sub.add_parser(
        "resume",
        help="continue a run from its latest checkpoint",
        description="Continue RUN_DIR from its latest checkpoint, e.g. with a larger trainer.total_steps.",
    )
    r.add_argument("run_dir")
    r.add_argument("overrides", nargs="*", metavar="key=value")
    r.set_defaults(fn=cmd_resume)
    for parser in (t, r):
        parser.add_argument(
            "--quiet", action="store_true", help="no progress display (the run folder and the last line stay)"
        )

    e = sub.add_parser(
        "eval",
        help="evaluate a run's latest checkpoint",
        description="Evaluate the latest checkpoint of RUN_DIR: whole episodes for an environment run; "
        "greedy accuracy, pass@K and maj@K on held-out prompts for a language-model run.",
    )
    e.add_argument("run_dir")
    e.add_argument("--episodes", type=int, help="episodes (default: the run's trainer.eval_episodes)")
    e.add_argument("--seed", type=int, help="seed of the first episode (default: the run's evaluation seed)")
    e.add_argument("--stochastic", action="store_true", help="sample actions instead of acting greedily")
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.add_argument("--video", action="store_true", help="also record one episode to RUN_DIR/videos/*.mp4")
    e.add_argument(
        "--samples",
        type=int,
        metavar="K",
        help="language models: sample K completions per prompt for pass@K and maj@K",
    )
    e.add_argument("--split", help="language models: the prompt split (default test)")
    e.add_argument("--limit", type=int, metavar="N", help="language models: evaluate the first N prompts")
    e.set_defaults(fn=cmd_eval)

    pl = sub.add_parser(
        "plot",
        help="plot learning curves of one or more runs",
        description="Plot learning curves of RUN_DIRs on one figure.",
    )
    pl.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    pl.add_argument(
        "--out",
        metavar="F.png",
        help="output file (default: RUN_DIR/plots/learning_curve.png "
        "for one run, ./learning_curves.png for several)",
    )
    pl.add_argument(
        "--metric",
        action="append",
        help="metric to plot (repeatable; default: the algorithm's, e.g. train/episode_return and "
        "eval/return_mean)",
    )
    pl.set_defaults(fn=cmd_plot)

    sw = sub.add_parser(
        "sweep",
        help="run a grid of hyperparameters x seeds, one run folder per trial",
        description="Run every combination of the --grid values, for --seeds seeds each, and write "
        "OUT/summary.md. Trials run one after another, or --workers N at a time as Ray tasks.",
    )
    sw.add_argument("args", nargs="*", metavar="[ALGO] [key=value ...]")
    sw.add_argument("--grid", action="append", metavar="KEY=V1,V2", help="a swept key (repeatable)")
    sw.add_argument("--seeds", type=int, default=1, help="seeds per grid point (default 1)")
    sw.add_argument("--config", metavar="F", help="YAML config file")
    sw.add_argument(
        "--out", metavar="DIR", help="sweep folder (default runs/sweep-ALGO, or sweep-ALGO-1, ... if taken)"
    )
    sw.add_argument("--workers", type=int, default=0, help="trials at a time on Ray (default 0: in turn)")
    sw.add_argument("--ray-address", help="join this Ray cluster (auto or host:port)")
    sw.add_argument(
        "--quiet", action="store_true", help="no per-trial progress (the summary and the folder stay)"
    )
    sw.set_defaults(fn=cmd_sweep)

    ls = sub.add_parser(
        "list", help="algorithms and presets", description="List algorithms, or one's options."
    )
    ls.add_argument("algo", nargs="?", help="show this algorithm's options and presets")
    ls.add_argument(
        "overrides", nargs="*", metavar="data.task=NAME", help="also show this task's own options"
    )
    ls.set_defaults(fn=cmd_list)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    # The command's optimizers skip importing torch's compiler (the no_dynamo fast path). It changes
    # torch.optim for the whole process, so only this entry point asks for it, never a library import.
    from advantage import runs

    runs.eager_optimizers()
    parser = build_parser()
    ns, extra = parser.parse_known_args(argv)
    ns.argv = list(sys.argv[1:] if argv is None else argv)  # what a launcher runs on every rank
    # Options may come between the overrides (`train sft a=1 --quiet b=2`): argparse leaves the
    # overrides after the option unparsed, so they join the others here.
    target = {"train": "args", "sweep": "args", "resume": "overrides"}.get(ns.command)
    if extra and (target is None or any("=" not in x or x.startswith("-") for x in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        assert target is not None  # parser.error above exits otherwise
        setattr(ns, target, [*getattr(ns, target), *extra])
    try:
        return ns.fn(ns)
    except AdvantageError as e:
        from advantage.errors import ConfigError

        if isinstance(e, ConfigError) and len(e.problems) > 1:
            print(f"error: {len(e.problems)} config problems:", file=sys.stderr)
            for problem in e.problems:
                print(f"  - {problem}", file=sys.stderr)
        else:
            print(f"error: {_rank()}{e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "interrupted (a run keeps its last checkpoint; continue it with advantage resume RUN)",
            file=sys.stderr,
        )
        return 130
    except Exception as e:  # a bug or a lost peer: the traceback follows; under a launcher, say whose
        if _rank():
            print(f"error: {_rank()}{type(e).__name__}: {e}", file=sys.stderr)
        raise


def _rank() -> str:
    """``rank R: `` in a process started by a launcher (every rank's error reaches the console)."""
    return f"rank {os.environ['RANK']}: " if "RANK" in os.environ and "WORLD_SIZE" in os.environ else ""


if __name__ == "__main__":
    sys.exit(main())
