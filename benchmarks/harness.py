"""The side-by-side harness shared by the benchmarks: one process per (library, seed), interleaved, one torch
thread each; both libraries are timed the same way and the report gives medians and the ratio.

Training wall time excludes evaluation for both libraries. For Stable-Baselines3 the harness's callback
times its own evaluations and subtracts them; for advantage the run's ``eval/seconds`` are subtracted
from the ``time`` of the row where the target was first reached. Both clocks start just before the
environments and the model are built; one-time imports are paid before either clock starts.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Protocol:
    env_id: str
    target: float
    eval_every: int
    eval_episodes: int
    max_steps: int


def sb3_callback(proto: Protocol, t0: float) -> Any:
    """An SB3 callback that evaluates ``eval_episodes`` deterministic episodes every ``eval_every`` steps,
    stops training at the target and records ``hit = (steps, train_seconds)``."""
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.callbacks import BaseCallback

    eval_env = gym.make(proto.env_id)

    class Harness(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.eval_seconds, self.next_eval, self.hit = 0.0, proto.eval_every, None

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += proto.eval_every
            start = time.perf_counter()
            returns = []
            for i in range(proto.eval_episodes):
                obs, _ = eval_env.reset(seed=10_000 + i)
                done, total = False, 0.0
                while not done:
                    action, _ = self.model.predict(obs, deterministic=True)
                    obs, r, term, trunc, _ = eval_env.step(int(action))
                    total += float(r)
                    done = term or trunc
                returns.append(total)
            now = time.perf_counter()
            if np.mean(returns) >= proto.target:
                self.hit = (self.num_timesteps, start - t0 - self.eval_seconds)
                return False
            self.eval_seconds += now - start
            return True

    return Harness()


def sb3_result(model: Any, harness: Any, t0: float) -> dict[str, Any]:
    steps, train_s = harness.hit or (model.num_timesteps, None)
    return {
        "steps": steps,
        "train_seconds": train_s,
        "total_seconds": time.perf_counter() - t0,
        "reached": harness.hit is not None,
    }


def run_advantage(algo: str, proto: Protocol, seed: int, overrides: dict[str, Any]) -> dict[str, Any]:
    import advantage

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        run = advantage.train(
            algo,
            quiet=True,
            **{
                "env.id": proto.env_id,
                "trainer.seed": seed,
                "trainer.total_steps": proto.max_steps,
                "trainer.eval_every": proto.eval_every,
                "trainer.eval_episodes": proto.eval_episodes,
                "trainer.stop_at_return": proto.target,
                "trainer.tensorboard": False,
                "trainer.progress": "none",
                "trainer.torch_threads": 1,
                "trainer.run_dir": os.path.join(tmp, "run"),
                **overrides,
            },
        )
        rows = run.metrics
    total = time.perf_counter() - t0
    evals = [r for r in rows if "eval/return_mean" in r]
    hit = next((r for r in evals if r["eval/return_mean"] >= proto.target), None)
    if hit is None:
        return {"steps": proto.max_steps, "train_seconds": None, "total_seconds": total, "reached": False}
    eval_seconds = sum(r["eval/seconds"] for r in evals if r["step"] <= hit["step"])
    return {
        "steps": hit["step"],
        "train_seconds": hit["time"] - eval_seconds,
        "total_seconds": total,
        "reached": True,
    }


def worker(run: Callable[[int], dict[str, Any]], lib: str, seed: int) -> None:
    """Body of one child process: print one JSON line with the result and the peak RSS."""
    # torch imports its compiler stack (about 2 s) the first time an optimizer is built: an import, not
    # training. Pay it here, for both libraries, before either clock starts.
    import torch
    import torch._dynamo

    torch.set_num_threads(1)
    # Warm the core (clock ramp-up, first-call kernel initialisation) the same way for both libraries, so
    # the first run after an idle period is not penalised.
    w = torch.randn(256, 256, requires_grad=True)
    end = time.perf_counter() + 0.5
    while time.perf_counter() < end:
        (torch.relu(w @ w).sum()).backward()
    result = run(seed)
    result.update(lib=lib, seed=seed, peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if result["train_seconds"]:
        result["steps_per_second"] = result["steps"] / result["train_seconds"]
    print(json.dumps(result))


def run_all(script: str, seeds: int, extra_args: list[str]) -> list[dict[str, Any]]:
    """Run ``script --worker LIB --seed S`` for every seed, SB3 and advantage interleaved."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    results = []
    for seed in range(seeds):
        for lib in ("sb3", "advantage"):  # interleaved, so machine load affects both alike
            out = subprocess.run(
                [sys.executable, script, "--worker", lib, "--seed", str(seed), *extra_args],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
    return results


def report(
    results: list[dict[str, Any]], out: Path, name: str, title: str, proto: Protocol, notes: str = ""
) -> None:
    """Write ``out/name.md`` (table + medians + ratio), ``name.json`` and ``name.png``."""
    out.mkdir(parents=True, exist_ok=True)

    def med(lib: str, key: str) -> float | None:
        vals = [r[key] for r in results if r["lib"] == lib and r.get(key) is not None]
        return statistics.median(vals) if vals else None

    lines = [
        f"### {title}",
        "",
        f"Target: mean of {proto.eval_episodes} deterministic episodes ≥ {proto.target:g}, evaluated every "
        f"{proto.eval_every:,} steps, at most {proto.max_steps:,} steps; one torch thread; "
        "medians over seeds.",
        "",
        "| library | seed | reached | env steps | train s | total s | steps/s | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ts = f"{r['train_seconds']:.2f}" if r["train_seconds"] else "-"
        sps = f"{r['steps_per_second']:,.0f}" if r.get("steps_per_second") else "-"
        lines.append(
            f"| {r['lib']} | {r['seed']} | {r['reached']} | {r['steps']:,} | {ts} | "
            f"{r['total_seconds']:.2f} | {sps} | {r['peak_rss_mb']:.0f} |"
        )
    lines += [
        "",
        "| library | median env steps | median train s | median total s | median peak RSS MB |",
        "|---|---|---|---|---|",
    ]
    for lib in ("sb3", "advantage"):
        ts = med(lib, "train_seconds")
        lines.append(
            f"| {lib} | {med(lib, 'steps'):,.0f} | {ts:.2f} | {med(lib, 'total_seconds'):.2f} | "
            f"{med(lib, 'peak_rss_mb'):.0f} |"
            if ts
            else f"| {lib} | - | - | - | - |"
        )
    ours, theirs = med("advantage", "train_seconds"), med("sb3", "train_seconds")
    ratio = ours / theirs if ours and theirs else None
    lines += [
        "",
        f"**Ratio of median training wall time, advantage / SB3: {ratio:.3f}**"
        if ratio
        else "**Ratio: n/a (a library did not reach the target)**",
    ]
    if notes:
        lines += ["", notes]
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    (out / f"{name}.json").write_text(
        json.dumps({"results": results, "ratio_train_seconds": ratio}, indent=1)
    )
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for lib, color in (("sb3", "tab:blue"), ("advantage", "tab:orange")):
        rs = [r for r in results if r["lib"] == lib and r["train_seconds"]]
        ax.scatter([r["train_seconds"] for r in rs], [r["steps"] for r in rs], label=lib, color=color)
    ax.set_xlabel(f"training wall seconds to {proto.target:g}")
    ax.set_ylabel(f"environment steps to {proto.target:g}")
    ax.set_title(f"{title} (each point a seed)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=110)


# ----------------------------------------------------------------------------------------------------
# Step-time comparisons with TRL: one fresh process per (library, size, seed), interleaved. Used by
# dpo_vs_trl.py and reward_model_vs_trl.py; each worker returns per-step clocks and the loss.


BUSY_LOAD = 1.5  # a 1-minute load average from which step_report flags its numbers as measured under load


def warm_core(seconds: float = 0.5) -> None:
    """Spin the core before either clock starts (clock ramp-up, first-call kernel init), as :func:`worker`."""
    import torch

    w = torch.randn(256, 256, requires_grad=True)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        (torch.relu(w @ w).sum()).backward()


def worker_env() -> dict[str, str]:
    """The environment of a step-time worker: one thread, nothing fetched from the network."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", TQDM_DISABLE="1")
    return env


def advantage_step_clock(key: str) -> dict[str, list[float]]:
    """Patch ``RunContext.log`` (in this worker process only) to stamp wall and CPU time whenever a row
    with ``key`` (a per-step training metric) is logged; returns the stamps, filled as training runs."""
    from advantage.context import RunContext

    rec: dict[str, list[float]] = {"step_end": [], "cpu_end": [], "loss": []}
    log = RunContext.log

    def stamped(self: Any, step: int, metrics: Any) -> None:
        if key in metrics:
            rec["step_end"].append(time.perf_counter())
            rec["cpu_end"].append(time.process_time())
            rec["loss"].append(float(metrics[key]))
        log(self, step, metrics)

    RunContext.log = stamped  # type: ignore[method-assign]
    return rec


def trl_step_clock() -> tuple[Any, dict[str, list[float]]]:
    """A ``TrainerCallback`` stamping wall and CPU time at every ``on_step_end``, and the stamps."""
    from transformers import TrainerCallback

    rec: dict[str, list[float]] = {"step_end": [], "cpu_end": []}

    class Clock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            rec["step_end"].append(time.perf_counter())
            rec["cpu_end"].append(time.process_time())

    return Clock(), rec


def scratch_lm(task: Any, size: dict[str, Any], max_position_embeddings: int, seed: int) -> tuple[Any, Any]:
    """``(tokenizer, model)``: the character tokenizer over ``task``'s alphabet and a random Qwen2 model with
    ``size``'s ``hidden_size``, ``layers`` and ``heads`` (the models the LM benchmarks train)."""
    from advantage.lm.model import build_char_tokenizer, build_scratch_model

    tok = build_char_tokenizer(task.alphabet, extra_tokens=task.special_tokens)
    dims = {k: size[k] for k in ("hidden_size", "layers", "heads")}
    return tok, build_scratch_model(
        "qwen2", tok, **dims, max_position_embeddings=max_position_embeddings, seed=seed
    )


def lm_folder(
    folder: Path,
    alphabet: str,
    special_tokens: list[str],
    *,
    vocab: int,
    hidden_size: int,
    layers: int,
    heads: int,
    max_position_embeddings: int,
    seed: int,
) -> tuple[Any, Any]:
    """A random Qwen2 model and its character tokenizer, saved as a model folder both libraries load.

    With ``vocab`` > the task's alphabet the tokenizer's alphabet is padded with CJK and following code
    points (one token each, never in a prompt) up to ``vocab`` tokens, so the output layer and the
    log-softmax cost what they cost in a real model's 32k-150k vocabulary. Returns ``(tokenizer, model)``.
    """
    from advantage.lm.model import build_char_tokenizer, build_scratch_model

    tok = build_char_tokenizer(alphabet, extra_tokens=special_tokens)
    pad = max(vocab - len(tok), 0)
    if pad:
        used = set(alphabet)
        extra = "".join(c for c in map(chr, range(0x4E00, 0x4E00 + pad + len(used))) if c not in used)[:pad]
        tok = build_char_tokenizer(alphabet + extra, extra_tokens=special_tokens)
    model = build_scratch_model(
        "qwen2",
        tok,
        hidden_size=hidden_size,
        layers=layers,
        heads=heads,
        max_position_embeddings=max_position_embeddings,
        seed=seed,
    )
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return tok, model


def step_worker(run: Callable[[], dict[str, Any]], lib: str, size: str, seed: int, preload: str) -> None:
    """Body of one step-time worker: import ``preload`` (the library) and warm the core before the clock,
    run, print one JSON line with the per-step stamps, the total time and the peak RSS."""
    import importlib

    import torch
    import torch._dynamo  # paid before either clock, as in worker

    torch.set_num_threads(1)
    importlib.import_module(preload)  # imports are not training: paid before the clock, for both
    warm_core()
    t0 = time.perf_counter()
    out = run()
    out.update(
        lib=lib,
        size=size,
        seed=seed,
        total_seconds=time.perf_counter() - t0,
        threads=torch.get_num_threads(),
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    print(json.dumps(out))


def _loss_line(r: dict[str, Any]) -> str:
    return (
        f"median step {statistics.median(step_intervals(r['step_end'])):.4f}s, "
        f"loss {r['loss'][0]:.4f} → {r['loss'][-1]:.4f}"
    )


def run_step_workers(
    script: str,
    libs: tuple[str, str],
    sizes: list[str],
    seeds: int,
    steps: int,
    progress: Callable[[dict[str, Any]], str] = _loss_line,
) -> list[dict[str, Any]]:
    """``script --worker LIB --size S --seed N --steps K`` for every (size, seed, library): a fresh
    process each, the libraries interleaved and their order flipped every seed; the 1-minute load
    average before each worker is recorded as ``load_before``. ``progress(result)`` is the middle of the
    line printed after each worker."""
    results = []
    for size in sizes:
        for seed in range(seeds):
            for lib in libs if seed % 2 == 0 else libs[::-1]:
                load = os.getloadavg()[0]
                cmd = [sys.executable, script, "--worker", lib, "--size", size, "--seed", str(seed)]
                out = subprocess.run(
                    [*cmd, "--steps", str(steps)],
                    capture_output=True,
                    text=True,
                    env=worker_env(),
                    check=False,
                )
                if out.returncode != 0:
                    sys.stderr.write(out.stderr[-4000:])
                    raise SystemExit(f"worker {lib} {size} seed {seed} failed")
                r = {**json.loads(out.stdout.strip().splitlines()[-1]), "load_before": load}
                results.append(r)
                print(
                    f"{size} seed {seed} {lib}: total {r['total_seconds']:.1f}s, {progress(r)}, "
                    f"load before {load:.2f}",
                    flush=True,
                )
    return results


def step_intervals(stamps: list[float]) -> list[float]:
    """Wall (or CPU) time of steps 2..N: differences of consecutive step-end stamps."""
    return [b - a for a, b in itertools.pairwise(stamps)]


def summarize_steps(r: dict[str, Any], warmup: int) -> dict[str, float]:
    """Median wall and CPU time over steps ``warmup+1..N`` (0-based step k: ``end[k] - end[k-1]``)."""
    wall, cpu = step_intervals(r["step_end"]), step_intervals(r["cpu_end"])
    first = max(warmup, 1) - 1  # index into the intervals of step warmup+1 (0-based: step k ↔ k - 1)
    return {"step_s": statistics.median(wall[first:]), "cpu_step_s": statistics.median(cpu[first:])}


def step_report(
    results: list[dict[str, Any]],
    *,
    out: Path,
    name: str,
    title: str,
    intro: str,
    libs: tuple[str, str],
    sizes: dict[str, str],
    targets: dict[str, float],
    warmup: int,
    steps: int,
    load: list[float],
    notes: str = "",
    meta: dict[str, Any] | None = None,
) -> dict[str, dict[str, float]]:
    """Write ``out/name.{md,json,png}`` for a step-time comparison of ``libs = (theirs, ours)``: per size
    and library the medians (over processes) of the per-process median step wall and CPU time, the peak
    RSS and the first/last loss; then ours / theirs with the acceptance ``targets``. ``sizes`` maps each
    size to its description in the table. Returns the ratios."""
    import platform

    import torch
    import transformers
    import trl

    out.mkdir(parents=True, exist_ok=True)
    theirs, ours = libs
    for r in results:
        r["summary"] = summarize_steps(r, warmup)
    done = [s for s in sizes if any(r["size"] == s for r in results)]
    med = statistics.median
    max_load = max(r["load_before"] for r in results)
    seeds = len({r["seed"] for r in results})

    def pick(size: str, lib: str) -> list[dict[str, Any]]:
        return [r for r in results if r["size"] == size and r["lib"] == lib]

    def agg(size: str, lib: str, key: str) -> float:
        return med(r["summary"][key] for r in pick(size, lib))

    lines = [
        f"### {title}",
        "",
        f"{intro} {steps} steps × {seeds} fresh processes per library and size, interleaved; medians over "
        f"steps {max(warmup, 1) + 1}..{steps} and then over processes. torch {torch.__version__}, "
        f"transformers {transformers.__version__}, TRL {trl.__version__}, "
        f"{platform.processor() or platform.machine()}; 1-minute load average {load[0]:.2f} at the start and "
        f"at most {max_load:.2f} before any worker ({os.cpu_count()} cores; the just-finished worker's own "
        "share of ~1 decays in that average).",
        "",
        "| size | setting | library | step s | step CPU s | peak RSS MB | loss, step 1 | loss, last step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ratios: dict[str, dict[str, float]] = {}
    for size in done:
        for lib in libs:
            rs = pick(size, lib)
            lines.append(
                f"| {size} | {sizes[size]} | {lib} | {agg(size, lib, 'step_s'):.4f} | "
                f"{agg(size, lib, 'cpu_step_s'):.4f} | {med(r['peak_rss_mb'] for r in rs):.0f} | "
                f"{med(r['loss'][0] for r in rs):.4f} | {med(r['loss'][-1] for r in rs):.4f} |"
            )
        paired = [
            m["summary"]["step_s"] / t["summary"]["step_s"]
            for m in pick(size, ours)
            for t in pick(size, theirs)
            if m["seed"] == t["seed"]
        ]
        ratios[size] = {
            "step_time": agg(size, ours, "step_s") / agg(size, theirs, "step_s"),
            "step_time_paired": med(paired),
            "cpu_step_time": agg(size, ours, "cpu_step_s") / agg(size, theirs, "cpu_step_s"),
            "peak_rss": med(r["peak_rss_mb"] for r in pick(size, ours))
            / med(r["peak_rss_mb"] for r in pick(size, theirs)),
        }
    lines += [
        "",
        f"| size | {ours} / {theirs} median step time | target | met | median of per-seed ratios | "
        f"{ours} / {theirs} step CPU time | {ours} / {theirs} peak RSS |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in done:
        rt = ratios[size]
        ok = "yes" if rt["step_time"] <= targets[size] else "no"
        lines.append(
            f"| {size} | **{rt['step_time']:.3f}** | ≤ {targets[size]} | {ok} | "
            f"{rt['step_time_paired']:.3f} | {rt['cpu_step_time']:.3f} | {rt['peak_rss']:.3f} |"
        )
    if notes:
        lines += ["", notes]
    if max_load >= BUSY_LOAD:
        lines += [
            "",
            f"**Measured on a busy machine** (1-minute load average up to {max_load:.2f} on "
            f"{os.cpu_count()} cores, other jobs running): the wall-time ratios are noisy, the CPU-time "
            "ratio and the median of the per-seed ratios less so. Rerun on an idle machine before relying "
            "on them.",
        ]
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    payload = {**(meta or {}), "steps": steps, "warmup": warmup, "load_average": load, "ratios": ratios}
    (out / f"{name}.json").write_text(json.dumps({**payload, "results": results}, indent=1))
    print("\n".join(lines))
    _plot_steps(results, done, libs, out / f"{name}.png")
    return ratios


def _plot_steps(results: list[dict[str, Any]], sizes: list[str], libs: tuple[str, str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(sizes), figsize=(5.5 * len(sizes), 7), squeeze=False, sharex=True)
    colors = dict(zip(libs, ("tab:blue", "tab:orange"), strict=True))
    for j, size in enumerate(sizes):
        for lib in libs:
            rs = [r for r in results if r["size"] == size and r["lib"] == lib]
            for k, r in enumerate(rs):
                style = {"color": colors[lib], "alpha": 0.85, "lw": 0.9, "label": lib if k == 0 else None}
                axes[0][j].plot(range(1, len(r["loss"]) + 1), r["loss"], **style)
                wall = step_intervals(r["step_end"])
                axes[1][j].plot(range(2, len(wall) + 2), [1e3 * w for w in wall], **style)
        axes[0][j].set_title(size)
        axes[0][j].set_ylabel("training loss")
        axes[1][j].set_ylabel("step wall time (ms)")
        axes[1][j].set_xlabel("step")
        for row in axes:
            row[j].grid(alpha=0.3)
            row[j].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)


# The pipeline benchmarks (dpo_synthetic, ppo_rlhf_synthetic, reward_model_synthetic): the documented
# commands, each in a fresh process, and a results file with the versions and the machine.

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path) -> tuple[str, float]:
    """Run ``advantage ARGS`` in a fresh process (this checkout's sources, one thread); stdout, seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "advantage.cli", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"advantage {' '.join(args)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return out.stdout, time.perf_counter() - start


def versions(load: float) -> dict[str, Any]:
    """The torch and transformers versions, the machine, its CPU count and the 1-minute ``load`` average
    when the runs started: the header of a pipeline benchmark's results file."""
    import torch
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_start": load,
    }


def write_results(
    out: Path, name: str, payload: dict[str, Any], table: Callable[[dict[str, Any]], list[str]]
) -> None:
    """Write ``payload`` to ``out/NAME.json``, then ``table(payload)``'s lines to ``out/NAME.md`` (and print
    them): the JSON is saved first, so a table that fails to format loses no runs."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(payload, indent=1) + "\n")
    lines = table(payload)
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


# ----------------------------------------------------------------------------------------------------
# One command line for the side-by-side scripts (ours vs a peer library): each script configures it with
# what differs (the peer's run, our overrides, the report) and calls it from its ``main``.

Report = Callable[[list[dict[str, Any]], argparse.Namespace, list[float]], None]


def main(
    doc: str,
    *,
    libs: tuple[str, ...],
    work: Callable[[argparse.Namespace], None],
    collect: Callable[[argparse.Namespace], list[dict[str, Any]]],
    report: Report,
    sizes: list[str] | None = None,
    steps: int = 40,
    warmup: int = 5,
    rereport: bool = False,
    argv: list[str] | None = None,
    default_sizes: list[str] | None = None,
) -> None:
    """The command line of a side-by-side benchmark script whose docstring is ``doc``: ``--seeds``,
    ``--out`` and the hidden ``--worker LIB --seed N`` a child process is started with; with ``sizes``
    also ``--steps``, ``--warmup``, ``--sizes`` (default: ``default_sizes``, else all) and ``--size``;
    with ``rereport``, ``--report JSON`` to write the report again from a saved results file.

    A worker runs ``work(args)`` (one process per library and seed); otherwise ``collect(args)`` starts
    the workers, interleaved, and ``report(results, args, load)`` writes the results files, ``load``
    being the load averages (1, 5, 15 minutes) before the first worker."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if sizes:
        p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--seeds", type=int, default=3)
    if sizes:
        p.add_argument("--warmup", type=int, default=warmup)
        p.add_argument("--sizes", default=",".join(default_sizes or sizes))
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    p.add_argument("--worker", choices=libs, help=argparse.SUPPRESS)
    if sizes:
        p.add_argument("--size", choices=sizes, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    if rereport:
        again = "only write the report again from a saved results file"
        p.add_argument("--report", metavar="JSON", help=again)
    args = p.parse_args(argv)
    if args.worker:
        work(args)
    elif getattr(args, "report", None):
        saved = json.loads(Path(args.report).read_text())
        args.warmup, args.steps = saved["warmup"], saved["steps"]
        report(saved["results"], args, saved["load_average"])
    else:
        load = list(os.getloadavg())
        report(collect(args), args, load)


def sb3_main(
    doc: str,
    script: str,
    name: str,
    title: str,
    proto: Protocol,
    run_sb3: Callable[[int], dict[str, Any]],
    *,
    algo: str,
    overrides: dict[str, Any],
) -> None:
    """:func:`main` for advantage vs Stable-Baselines3 to a target return (:func:`run_all`,
    :func:`report`): ``run_sb3(seed)`` is SB3's run, ``advantage train ALGO OVERRIDES`` ours."""

    def work(args: argparse.Namespace) -> None:
        if args.worker == "sb3":
            worker(run_sb3, "sb3", args.seed)
        else:
            worker(lambda seed: run_advantage(algo, proto, seed, overrides), "advantage", args.seed)

    main(
        doc,
        libs=("sb3", "advantage"),
        work=work,
        collect=lambda args: run_all(script, args.seeds, []),
        report=lambda results, args, load: report(results, Path(args.out), name, title, proto),
    )


def step_main(
    doc: str,
    script: str,
    libs: tuple[str, str],
    sizes: list[str],
    runs: dict[str, Callable[[str, int, int], dict[str, Any]]],
    report: Callable[[list[dict[str, Any]], Path, int, int, list[float]], None],
    *,
    steps: int = 40,
    warmup: int = 5,
    rereport: bool = True,
    progress: Callable[[dict[str, Any]], str] = _loss_line,
    default_sizes: list[str] | None = None,
) -> None:
    """:func:`main` for a step-time comparison (:func:`run_step_workers`, :func:`step_worker`):
    ``runs[lib](size, seed, steps)`` is one library's run, after importing the library ``lib``;
    ``report(results, out, warmup, steps, load)`` writes the results files."""

    def work(args: argparse.Namespace) -> None:
        run, lib = runs[args.worker], args.worker
        step_worker(lambda: run(args.size, args.seed, args.steps), lib, args.size, args.seed, lib)

    main(
        doc,
        libs=libs,
        work=work,
        collect=lambda args: run_step_workers(
            script, libs, args.sizes.split(","), args.seeds, args.steps, progress
        ),
        report=lambda results, args, load: report(results, Path(args.out), args.warmup, args.steps, load),
        sizes=sizes,
        steps=steps,
        warmup=warmup,
        rereport=rereport,
        default_sizes=default_sizes,
    )
