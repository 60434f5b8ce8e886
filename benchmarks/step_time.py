"""The step-time harness: advantage beside TRL, per-step wall and CPU time, one fresh process per
(library, size, seed), interleaved, one torch thread each (``dpo_vs_trl``, ``grpo_vs_trl``,
``reward_model_vs_trl``); each worker returns per-step clocks and the loss, and the report gives medians,
the ratios and their targets.
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
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.pipeline import ROOT
from benchmarks.side_by_side import main, warm_core

BUSY_LOAD = 1.5  # a 1-minute load average from which step_report flags its numbers as measured under load


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


def trl_step_clock(begin: bool = False) -> tuple[Any, dict[str, list[float]]]:
    """A ``TrainerCallback`` stamping wall and CPU time at every ``on_step_end`` (``step_end``,
    ``cpu_end``) and, with ``begin``, wall time at every ``on_step_begin`` (``step_begin``: a step's own
    time, without what the trainer does between steps), and the stamps."""
    from transformers import TrainerCallback

    rec: dict[str, list[float]] = {"step_end": [], "cpu_end": []}
    if begin:
        rec["step_begin"] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if begin:
                rec["step_begin"].append(time.perf_counter())

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            rec["step_end"].append(time.perf_counter())
            rec["cpu_end"].append(time.process_time())

    return Clock(), rec


def trl_task_prompts(task: Any, examples: list[Any]) -> tuple[Any, Callable[..., list[float]]]:
    """TRL's view of a text task: a ``datasets.Dataset`` of the examples' prompts (each with its index) and a
    reward function giving each completion our verifier's score against its example."""
    from datasets import Dataset

    dataset = Dataset.from_list([{"prompt": e.prompt, "idx": i} for i, e in enumerate(examples)])

    def verifier(completions: list[str], idx: list[int], **_: Any) -> list[float]:
        return [float(task.verify(c, examples[i]).score) for c, i in zip(completions, idx, strict=True)]

    return dataset, verifier


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
    special_tokens: Sequence[str],
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
    import torch._dynamo  # paid before either clock, as in time_to_target.worker

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
    module: str,
    libs: tuple[str, str],
    sizes: list[str],
    seeds: int,
    steps: int,
    progress: Callable[[dict[str, Any]], str] = _loss_line,
) -> list[dict[str, Any]]:
    """``python -m MODULE --worker LIB --size S --seed N --steps K`` (from the repository root) for every
    (size, seed, library): a fresh process each, the libraries interleaved and their order flipped every
    seed; the 1-minute load average before each worker is recorded as ``load_before``.
    ``progress(result)`` is the middle of the line printed after each worker."""
    results = []
    for size in sizes:
        for seed in range(seeds):
            for lib in libs if seed % 2 == 0 else libs[::-1]:
                load = os.getloadavg()[0]
                cmd = [sys.executable, "-m", module, "--worker", lib, "--size", size, "--seed", str(seed)]
                out = subprocess.run(
                    [*cmd, "--steps", str(steps)],
                    cwd=ROOT,
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


def step_main(
    doc: str,
    module: str,
    libs: tuple[str, str],
    sizes: list[str],
    runs: Mapping[str, Callable[[str, int, int], dict[str, Any]]],
    report: Callable[[list[dict[str, Any]], Path, int, int, list[float]], None],
    *,
    steps: int = 40,
    warmup: int = 5,
    rereport: bool = True,
    progress: Callable[[dict[str, Any]], str] = _loss_line,
    default_sizes: list[str] | None = None,
) -> None:
    """:func:`main` for a step-time comparison (:func:`run_step_workers`, :func:`step_worker`) in the
    script ``module`` (``benchmarks.NAME``, run again as each worker):
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
            module, libs, args.sizes.split(","), args.seeds, args.steps, progress
        ),
        report=lambda results, args, load: report(results, Path(args.out), args.warmup, args.steps, load),
        sizes=sizes,
        steps=steps,
        warmup=warmup,
        rereport=rereport,
        default_sizes=default_sizes,
    )
