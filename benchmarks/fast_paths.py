r"""What each fast path buys: every (fast path, reference path) pair of :mod:`advantage.kernels` switched
off one at a time, at the sizes the README quotes, plus ``torch.compile`` as a third arm.

    python -m benchmarks.fast_paths                      # -> benchmarks/results/fast_paths.{md,json}
    python -m benchmarks.fast_paths --baseline-src DIR   # also an arm running DIR's sources (an older
                                                         # checkout's src/, e.g. a git worktree of main)
    python -m benchmarks.fast_paths --quick              # one repeat, short runs (a smoke run)

Three parts, every arm a fresh process with one torch thread, arms interleaved within each repeat:

Times are CPU seconds (user + system) of the process or of the step, the wall times beside them in the
JSON: on a shared machine the CPU time is what the work itself costs.

1. **Whole runs** of the command line (launch to exit): PPO and DQN on
   CartPole-v1 and SAC on Pendulum-v1 for a fixed number of steps (no evaluation, no TensorBoard, no
   plot), with ``trainer.kernels`` = ``fast`` (the default), ``fast`` without one path, and ``reference``.
   A fixed budget, not "until 475": a path that changes the float rounding (DQN's hand-written TD
   gradient) changes the trajectory, and a time-to-threshold would then measure luck, not speed.
2. **Language-model steps**: GRPO and DPO on the medium model (4 layers × hidden 128) with responses of
   exactly 32 and 128 tokens, the equal-work rows of ``grpo_vs_trl.py`` / ``dpo_vs_trl.py``; the median
   step time over steps 3.. of each process, then over processes.
3. **torch.compile** (inductor, CPU): the learn step alone -- PPO's minibatch update on CartPole
   (64 × 4 observations, 64-64 tanh actor-critic, clip loss, value loss, Adam) and GRPO's learn step on
   the medium model (64 sequences of 10 prompt + 32 response tokens: log-probs, clip loss, backward,
   AdamW) -- eager with the fast paths, eager reference, and the reference model compiled
   (``torch.compile(fn)``; its compile time, with an empty inductor cache, reported apart, the step time
   measured after warm-up).

A path is kept where switching it off costs at least 10 % of the whole-step time at one of these sizes
(the ``off / on`` column); the report marks each pair.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
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
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
KEEP = 1.10  # a fast path stays where switching it off costs at least 10 % somewhere

# part 1: the command lines (fixed budgets) and the paths each exercises
RUNS: dict[str, dict[str, Any]] = {
    "ppo-CartPole-v1": {"args": ["ppo", "env.id=CartPole-v1"], "steps": 20_000, "quick": 4_000},
    "dqn-CartPole-v1": {"args": ["dqn", "env.id=CartPole-v1"], "steps": 20_000, "quick": 3_000},
    "sac-Pendulum-v1": {"args": ["sac", "env.id=Pendulum-v1"], "steps": 3_000, "quick": 600},
}
# Every path this script has measured, in report order; those no longer in advantage.kernels.FAST_PATHS were
# removed after a measurement showed them under the line (the results file keeps their numbers).
REPORT_ORDER = ["optimizer_step", "clip_grad_norm", "no_dynamo", "dqn_td_backward"]
REPORT_ORDER += ["lm_forward", "lm_backward"]
CLASSIC_PATHS = ["optimizer_step", "clip_grad_norm", "no_dynamo", "dqn_td_backward"]
LM_PATHS = ["optimizer_step", "clip_grad_norm", "lm_forward", "lm_backward"]
# GRPO: the equal-work rows at 32 and 128 response tokens; DPO: its medium row (64-token responses, the
# README's) and the equal-work 128-token one (dpo_vs_trl.py has no 32-token row)
LM_ROWS = ["grpo-medium-32", "grpo-medium-128", "dpo-medium", "dpo-medium-128"]
ALL_PATHS = list(REPORT_ORDER)
# The rows whose code a path is on: SAC clips no gradient, DQN alone has the hand TD gradient, the
# command-line runs alone install no_dynamo (the LM rows use the Python API). Switching a path off elsewhere
# changes no code that runs: those arms measure the spread of identical runs, and the report gives it.
APPLIES: dict[str, set[str]] = {
    "optimizer_step": {*RUNS, *LM_ROWS},
    "clip_grad_norm": {"ppo-CartPole-v1", "dqn-CartPole-v1", *LM_ROWS},
    "no_dynamo": set(RUNS),
    "dqn_td_backward": {"dqn-CartPole-v1"},
    "lm_forward": set(LM_ROWS),
    "lm_backward": set(LM_ROWS),
}


def existing(paths: list[str]) -> list[str]:
    """The paths of ``paths`` this tree still has (a removed one cannot be switched off)."""
    from advantage.kernels import FAST_PATHS

    return [p for p in paths if p in FAST_PATHS]


def kernels_without(path: str | None) -> str:
    """The ``trainer.kernels`` value with every fast path but ``path`` (``None``: all of them)."""
    if path is None:
        return "fast"
    rest = [p for p in existing(ALL_PATHS) if p != path]
    return ",".join(rest)


def child_env(src: Path | None) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(src or ROOT / "src"))
    return env


# -- part 1: whole runs ------------------------------------------------------------------------------------
def whole_run(name: str, kernels: str | None, steps: int, src: Path | None) -> tuple[float, float]:
    """Seconds from launch to exit of ``advantage train`` for ``name``, and the CPU seconds the process used
    (user + system: what it costs on a core of its own, far less sensitive than the wall time to what else
    the machine runs). ``kernels`` None: the option unset, for a baseline checkout that does not have it."""
    spec = RUNS[name]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "advantage", "train", *spec["args"], f"trainer.total_steps={steps}"]
        cmd += ["trainer.eval_every=0", "trainer.eval_episodes=1", "trainer.tensorboard=false"]
        cmd += ["trainer.plot=false", "trainer.torch_threads=1", "trainer.run_dir=run", "--quiet"]
        if kernels is not None:
            cmd.append(f"trainer.kernels={kernels}")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        out = subprocess.run(cmd, cwd=tmp, env=child_env(src), capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


# -- part 2: language-model steps (in a child process: python -m benchmarks.fast_paths --lm-child ...) -------
def lm_child(row: str, kernels: str | None, steps: int) -> dict[str, Any]:
    """One process of a GRPO or DPO equal-work row: the step-end stamps and learn times. The row's
    settings come from the ``benchmarks/`` beside the sources run where that is a baseline checkout from
    before ``benchmarks`` was a package (its scripts, loaded by path, import their own ``harness.py``),
    else from this checkout's."""
    from benchmarks.side_by_side import warm_core

    algo, size = row.split("-", 1)
    module: ModuleType
    bench = Path(os.environ.get("PYTHONPATH", str(ROOT / "src"))).parent / "benchmarks"
    if (bench / "harness.py").exists():
        spec = importlib.util.spec_from_file_location(f"{algo}_vs_trl", bench / f"{algo}_vs_trl.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(f"benchmarks.{algo}_vs_trl")
    overrides = module.advantage_overrides

    def with_kernels(*args: Any, **kwargs: Any) -> dict[str, Any]:
        over = overrides(*args, **kwargs)
        return over if kernels is None else {**over, "trainer.kernels": kernels}

    module.advantage_overrides = with_kernels  # type: ignore[attr-defined]  # in this child process only
    import torch

    torch.set_num_threads(1)
    warm_core()
    r = module.run_advantage(size, 0, steps)
    wall, cpu = r["step_end"], r["cpu_end"]
    return {
        "step_s": [b - a for a, b in itertools.pairwise(wall)],
        "cpu_step_s": [b - a for a, b in itertools.pairwise(cpu)],
    }


def lm_row(row: str, kernels: str | None, steps: int, src: Path | None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.fast_paths", "--lm-child", row, "--kernels", kernels or ""]
    out = subprocess.run(
        [*cmd, "--steps", str(steps)], cwd=ROOT, env=child_env(src), capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"{row} kernels={kernels} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- part 3: torch.compile -----------------------------------------------------------------------------------
def compile_child(kind: str, arm: str, iters: int) -> dict[str, Any]:
    """Median seconds of one learn step (``kind`` ppo or grpo) in ``arm``: fast, reference or compile."""
    import torch

    from advantage import kernels, optim

    torch.set_num_threads(1)
    torch.manual_seed(0)
    mode = "fast" if arm == "fast" else "reference"
    step_fn = _ppo_update() if kind == "ppo" else _grpo_learn()
    compile_s = 0.0
    if arm == "compile":
        fn = torch.compile(step_fn["loss"])
        t0 = time.perf_counter()
        with kernels.using(mode):
            _one(step_fn, fn, optim)
        compile_s = time.perf_counter() - t0
    else:
        fn = step_fn["loss"]
    times = []
    with kernels.using(mode):
        for _ in range(3):
            _one(step_fn, fn, optim)
        for _ in range(iters):
            t0 = time.process_time()
            _one(step_fn, fn, optim)
            times.append(time.process_time() - t0)
    return {"step_s": statistics.median(times), "compile_s": compile_s}


def _one(step_fn: dict[str, Any], loss_fn: Any, optim: Any) -> None:
    params, opt = step_fn["params"], step_fn["opt"]
    optim.zero_grad(params)
    loss_fn().backward()
    optim.clip_grad_norm(params, step_fn["max_norm"])
    optim.step(opt)


def _ppo_update() -> dict[str, Any]:
    """PPO's minibatch update on CartPole at the default sizes (64 observations, 64-64 tanh)."""
    import gymnasium as gym
    import torch

    from advantage import optim
    from advantage.configs.ppo import PPOConfig
    from advantage.math import ppo_clip
    from advantage.math.value_losses import mse

    cfg = PPOConfig()
    env = gym.make("CartPole-v1")
    model = cfg.model.build(env.observation_space, env.action_space)
    obs, act = torch.randn(64, 4), torch.randint(0, 2, (64,))
    old_logp, adv = torch.full((64,), -0.69), torch.randn(64)
    old_v, ret = torch.randn(64), torch.randn(64)

    def loss() -> torch.Tensor:
        logp, entropy, value = model.evaluate(obs, act)
        pl, _ = ppo_clip(logp, old_logp, adv, None, clip_low=0.2, with_metrics=False)
        vl = mse(value, old_v, ret, None)
        return pl.mean() + 0.5 * vl.mean() - 0.0 * entropy.mean()

    params = list(model.parameters())
    return {"loss": loss, "params": params, "opt": optim.adam(params, 3e-4, eps=1e-5), "max_norm": 0.5}


def _grpo_learn() -> dict[str, Any]:
    """GRPO's learn step on the medium model: 64 sequences of 10 prompt + 32 response tokens."""
    import torch

    from advantage import optim
    from advantage.lm.model import build_char_tokenizer, build_scratch_model, sequence_logprobs
    from advantage.math import ppo_clip

    tok = build_char_tokenizer("0123456789+= ")
    model = build_scratch_model("qwen2", tok, hidden_size=128, layers=4, heads=4, seed=0)
    model.train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, len(tok), (64, 42), generator=g)
    mask = torch.ones_like(ids)
    old_logp = torch.full((64, 32), -2.5)
    adv = torch.randn(64, 1, generator=g).expand(64, 32)

    def loss() -> torch.Tensor:
        logp = sequence_logprobs(model, ids, mask, response_start=10)
        pl, _ = ppo_clip(logp, old_logp, adv, None, clip_low=0.2, with_metrics=False)
        return pl.mean()

    params = [p for p in model.parameters() if p.requires_grad]
    opt = optim.adam(params, 1e-3, decoupled=True)
    return {"loss": loss, "params": params, "opt": opt, "max_norm": 1.0}


def compile_row(kind: str, arm: str, iters: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--compile-child", kind, "--arm", arm, "--steps", str(iters)]
    with tempfile.TemporaryDirectory() as cache:  # a cold compile, as a new machine's first run
        env = {**child_env(None), "TORCHINDUCTOR_CACHE_DIR": cache}
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1][:300] if out.stderr.strip() else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the report ---------------------------------------------------------------------------------------------
def _commit(root: Path) -> str:
    cmd = ["git", "-C", str(root), "rev-parse", "--short", "HEAD"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def paired(arms: dict[str, list[float]], arm: str) -> float:
    """The median over repeats of ``arm``'s time over the all-fast time of the same repeat (a repeat's
    arms run back to back, so a change of the machine's load between repeats cancels)."""
    return _med([a / b for a, b in zip(arms[arm], arms["fast"], strict=False)])


def table(payload: dict[str, Any]) -> list[str]:
    lines = ["### Fast paths: each switched off, and torch.compile", ""]
    lines.append(
        "Times are the CPU seconds (user + system) of the process, or of a step: what the work costs on a "
        "core of its own, which other load on the machine changes far less than the wall time (kept in the "
        "JSON). "
        f"{payload['repeats']} repeat(s) of the whole runs and {payload['lm_repeats']} of the LM rows, arms "
        "interleaved, each a fresh process with one torch thread; "
        f"torch {payload['torch']}, transformers {payload['transformers']}, Python {payload['python']}, "
        f"{payload['machine']}, {payload['cpus']} cores, 1-minute load {payload['load_start']:.2f} at the "
        f"start and {payload['load_end']:.2f} at the end. `off / on` (in brackets): the median over "
        "repeats of "
        "the time with the path switched off over the time with every path on (`trainer.kernels=fast`) in "
        "the same repeat; a path is kept where it is at least "
        f"{KEEP:.2f} for one row. Sources measured: commit {payload.get('commit', 'unknown')}; a path no "
        "longer in `advantage.kernels.FAST_PATHS` was removed after this measurement. Written by "
        "`benchmarks/fast_paths.py`."
    )
    lines += ["", "#### Whole runs (launch to exit) and language-model steps, CPU seconds", ""]
    shown = [p for p in REPORT_ORDER if any(p in arms for arms in payload["rows"].values())]
    offs = " | ".join(f"off: {p}" for p in shown)
    lines.append(f"| row | unit | all fast paths | {offs} | reference |")
    lines.append("|---|---|---|" + "---|" * len(shown) + "---|")
    for row, arms in payload["rows"].items():
        base = _med(arms["fast"])
        unit = "CPU s / run" if row in RUNS else "CPU s / step"
        cells = [f"{base:.3f}"]
        for p in shown:
            xs = arms.get(p)
            cells.append("—" if not xs else f"{_med(xs):.3f} ({paired(arms, p):.2f}×)")
        ref = arms.get("reference")
        cells.append("—" if not ref else f"{_med(ref):.3f} ({paired(arms, 'reference'):.2f}×)")
        lines.append(f"| {row} | {unit} | " + " | ".join(cells) + " |")
    if payload.get("baseline"):
        lines += ["", f"Baseline arm: `{payload['baseline']}` (the same commands on those sources).", ""]
        lines.append("| row | this tree, all fast paths | baseline | this / baseline |")
        lines.append("|---|---|---|---|")
        for row, arms in payload["rows"].items():
            if arms.get("baseline"):
                a, b = _med(arms["fast"]), _med(arms["baseline"])
                lines.append(f"| {row} | {a:.3f} | {b:.3f} | {payload['vs_baseline'][row]:.3f} |")
    if payload.get("training"):
        lines += ["", "#### The training itself: a run less the same command with no steps, CPU seconds", ""]
        lines.append(f"| row | all fast paths | {offs} | reference |")
        lines.append("|---|---|" + "---|" * len(shown) + "---|")
        for row, t in payload["training"].items():
            cells = [f"{t['fast']:.3f}"]
            for p in [*shown, "reference"]:
                cells.append("—" if p not in t else f"{t[p]:.3f} ({t[p] / t['fast']:.2f}×)")
            lines.append(f"| {row} | " + " | ".join(cells) + " |")
    noise = payload.get("noise", {})
    if noise.get("arms"):
        lines += [
            "",
            f"Arms that switch off a path the row does not run (e.g. the gradient clip on SAC, which clips "
            f"nothing) repeat identical work: their `off / on` ratios, {noise['arms']} of them, are within "
            f"±{noise['max_abs_deviation']:.2f} of 1, the spread of these measurements.",
        ]
    noise_t = payload.get("noise_training", {})
    if noise_t.get("arms"):
        lines[-1] += (
            f" In the training phase (a difference of two medians) such arms, {noise_t['arms']} of them, "
            f"are within ±{noise_t['max_abs_deviation']:.2f}."
        )
    lines += ["", "#### Verdict per fast path (largest `off / on` over the rows it applies to)", ""]
    lines.append("| fast path | largest off / on | row | kept (≥ 1.10) |")
    lines.append("|---|---|---|---|")
    for p, v in payload["verdict"].items():
        lines.append(f"| {p} | {v['ratio']:.3f} | {v['row']} | {'yes' if v['kept'] else 'no'} |")
    lines += ["", "#### The learn step alone: eager fast paths, eager reference, torch.compile", ""]
    lines.append("| learn step | fast paths | reference | compiled reference | compile time (s) |")
    lines.append("|---|---|---|---|---|")
    for kind, arms in payload["compile"].items():

        def cell(r: dict[str, Any]) -> str:
            return f"error: {r['error']}" if "error" in r else f"{r['step_s'] * 1e3:.2f} ms"

        comp = arms["compile"]
        ctime = "—" if "error" in comp else f"{comp['compile_s']:.1f}"
        fast, ref = cell(arms["fast"]), cell(arms["reference"])
        lines.append(f"| {kind} | {fast} | {ref} | {cell(comp)} | {ctime} |")
    return lines


def training(
    rows: dict[str, dict[str, list[float]]], fixed: dict[str, dict[str, list[float]]]
) -> dict[str, dict[str, float]]:
    """Per whole-run row and arm, the CPU seconds of the training itself: the run's median less the median of
    the same command with no steps (start-up, the final evaluation, exit)."""
    out: dict[str, dict[str, float]] = {}
    for row, arms in rows.items():
        if row not in fixed:
            continue
        out[row] = {a: _med(xs) - _med(fixed[row][a]) for a, xs in arms.items() if fixed[row].get(a)}
    return out


def derive(payload: dict[str, Any]) -> None:
    """The figures computed from the measurements: the training phase, the verdict per path, and each
    row's time on this tree over the baseline's (paired by repeat)."""
    rows, fixed = payload["rows"], payload.get("fixed", {})
    payload["training"] = training(rows, fixed)
    payload["verdict"] = verdict(rows, payload["training"])
    payload["vs_baseline"] = {row: 1 / paired(a, "baseline") for row, a in rows.items() if a.get("baseline")}
    # arms that switch off a path not on the row's code: identical runs, their spread is the noise
    same = [
        paired(a, p) for row, a in rows.items() for p in REPORT_ORDER if a.get(p) and row not in APPLIES[p]
    ]
    payload["noise"] = {"arms": len(same), "max_abs_deviation": max((abs(r - 1) for r in same), default=0.0)}
    # the same in the training phase (a difference of two medians: a wider spread); no_dynamo is a start-up
    # path, so its arm repeats the training's work on every row
    same_t = [
        t[p] / t["fast"]
        for row, t in payload["training"].items()
        for p in t
        if p not in ("fast", "reference", "baseline") and (p == "no_dynamo" or row not in APPLIES[p])
    ]
    payload["noise_training"] = {
        "arms": len(same_t),
        "max_abs_deviation": max((abs(r - 1) for r in same_t), default=0.0),
    }


def verdict(
    rows: dict[str, dict[str, list[float]]], train: dict[str, dict[str, float]]
) -> dict[str, dict[str, Any]]:
    """Per path, its largest cost when switched off: the whole-run ratio for ``no_dynamo`` (a start-up
    path), the training phase's (or an LM step's) for the others."""
    out = {}
    for p in REPORT_ORDER:
        if not any(a.get(p) for a in rows.values()):
            continue
        found = []
        for row, a in rows.items():
            if not a.get(p) or row not in APPLIES[p]:
                continue
            if row in train and p != "no_dynamo" and p in train[row]:
                found.append((train[row][p] / train[row]["fast"], row + " (training)"))
            else:
                found.append((paired(a, p), row))
        best = max(found, default=(float("nan"), "—"))
        out[p] = {"ratio": best[0], "row": best[1], "kept": best[0] >= KEEP}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lm-repeats", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--baseline-src", type=Path, default=None, help="an older src/ as one more arm")
    ap.add_argument("--only", default="", help="comma-separated parts: runs, lm, compile (default all)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json, run nothing")
    ap.add_argument("--commit", default=None, help="the commit measured, where the .json does not say it")
    ap.add_argument("--lm-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--compile-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--kernels", default="", help=argparse.SUPPRESS)
    ap.add_argument("--arm", default="", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.lm_child:
        print(json.dumps(lm_child(ns.lm_child, ns.kernels or None, ns.steps)))
        return
    if ns.compile_child:
        print(json.dumps(compile_child(ns.compile_child, ns.arm, ns.steps)))
        return
    if ns.report_only:
        payload = json.loads((ns.out / "fast_paths.json").read_text())
        if ns.commit and not payload.get("commit"):
            payload["commit"] = ns.commit
        derive(payload)
        (ns.out / "fast_paths.json").write_text(json.dumps(payload, indent=1) + "\n")
        (ns.out / "fast_paths.md").write_text("\n".join(table(payload)) + "\n")
        return
    import torch
    import transformers

    parts = set(ns.only.split(",")) if ns.only else {"runs", "fixed", "lm", "compile"}
    repeats, lm_repeats = (1, 1) if ns.quick else (ns.repeats, ns.lm_repeats)
    base = ns.baseline_src.resolve() if ns.baseline_src else None
    out_json = ns.out / "fast_paths.json"
    old = json.loads(out_json.read_text()) if out_json.exists() and ns.only else {}
    rows: dict[str, dict[str, list[float]]] = {} if not ns.only else old.get("rows", {})
    compiled: dict[str, dict[str, Any]] = old.get("compile", {})
    walls: dict[str, dict[str, list[float]]] = old.get("wall", {}) if ns.only else {}
    fixed: dict[str, dict[str, list[float]]] = old.get("fixed", {}) if ns.only else {}
    load_start = os.getloadavg()[0]

    def save() -> dict[str, Any]:  # after every part: a later part that fails loses nothing measured
        payload = {
            "repeats": repeats,
            "lm_repeats": lm_repeats,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "load_start": load_start,
            "load_end": os.getloadavg()[0],
            "baseline": str(ns.baseline_src) if base else old.get("baseline"),
            "commit": _commit(ROOT),  # the sources measured (a removed path was measured before its removal)
            "rows": rows,  # CPU seconds (per run, or per LM step)
            "wall": walls,  # the same runs' wall seconds
            "fixed": fixed,  # CPU seconds of the same commands with trainer.total_steps=0
            "compile": compiled,
        }
        derive(payload)
        ns.out.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps(payload, indent=1) + "\n")
        return payload

    if "runs" in parts:
        for name in RUNS:
            rows[name] = {}
        for rep in range(repeats):
            for name, spec in RUNS.items():
                steps = spec["quick"] if ns.quick else spec["steps"]
                arms: list[tuple[str, str | None, Path | None]] = [("fast", "fast", None)]
                arms += [(p, kernels_without(p), None) for p in existing(CLASSIC_PATHS)]
                arms.append(("reference", "reference", None))
                if base is not None:
                    arms.append(("baseline", None, base))
                arms = arms[rep % len(arms) :] + arms[: rep % len(arms)]  # each arm first in turn
                for arm, kern, src in arms:
                    wall, cpu = whole_run(name, kern, steps, src)
                    rows[name].setdefault(arm, []).append(cpu)
                    walls.setdefault(name, {}).setdefault(arm, []).append(wall)
                    print(f"[{rep + 1}/{repeats}] {name} {arm}: {cpu:.2f} CPU s ({wall:.2f} s)", flush=True)
        save()
    if "fixed" in parts:  # the same commands with trainer.total_steps=0: start-up, final evaluation, exit
        fixed = {name: {} for name in RUNS}
        for rep in range(repeats):
            for name in RUNS:
                fixed_arms = [("fast", "fast"), *[(p, kernels_without(p)) for p in existing(CLASSIC_PATHS)]]
                fixed_arms.append(("reference", "reference"))
                turn = rep % len(fixed_arms)
                for arm, kern in fixed_arms[turn:] + fixed_arms[:turn]:
                    _, cpu = whole_run(name, kern, 0, None)
                    fixed[name].setdefault(arm, []).append(cpu)
                    print(f"[{rep + 1}/{repeats}] {name} {arm} (0 steps): {cpu:.2f} CPU s", flush=True)
        save()
    if "lm" in parts:
        for row in LM_ROWS:
            rows[row] = {}
        steps = 4 if ns.quick else 6
        for rep in range(lm_repeats):
            for row in LM_ROWS:
                arms = [("fast", "fast", None)]
                arms += [(p, kernels_without(p), None) for p in existing(LM_PATHS)]
                arms.append(("reference", "reference", None))
                if base is not None:
                    arms.append(("baseline", None, base))
                arms = arms[rep % len(arms) :] + arms[: rep % len(arms)]
                for arm, kern, src in arms:
                    r = lm_row(row, kern, steps, src)
                    t = _med(r["cpu_step_s"][1:])  # steps 3.. (the first interval is step 2)
                    rows[row].setdefault(arm, []).append(t)
                    walls.setdefault(row, {}).setdefault(arm, []).append(_med(r["step_s"][1:]))
                    print(f"[{rep + 1}/{lm_repeats}] {row} {arm}: {t:.3f} CPU s/step", flush=True)
                save()
    if "compile" in parts:
        iters = 20 if ns.quick else 200
        for kind in ("ppo", "grpo"):
            n = iters if kind == "ppo" else max(5, iters // 20)
            compiled[kind] = {arm: compile_row(kind, arm, n) for arm in ("fast", "reference", "compile")}
            print(kind, compiled[kind], flush=True)

    payload = save()
    lines = table(payload)
    (ns.out / "fast_paths.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
