r"""GRPO learning parity: advantage's ``grpo`` trainer and TRL's ``GRPOTrainer``, each started from the same
exported SFT checkpoint, trained with the same settings, rewards and prompts, and scored by the same
evaluator on the same held-out test prompts.

    python -m benchmarks.grpo_learning_vs_trl      # -> benchmarks/results/grpo_learning_vs_trl.{md,json,png}
    python -m benchmarks.grpo_learning_vs_trl --seeds 0 --steps 40 --name smoke --out /tmp/smoke

Per seed S (default 0, 1, 2):

1. **SFT start.** ``advantage train sft --config examples/sft_addition.yaml trainer.seed=S``; its final
   checkpoint is exported (``load_pretrained`` → ``save_pretrained``: the model's ``config.json`` and
   ``model.safetensors``, the tokenizer) to a plain Hugging Face folder that both libraries load.
2. **Runs from it**, each a fresh process with one torch thread, two at a time:

   * ``ours`` — ``advantage train grpo --config examples/grpo_addition.yaml`` with
     ``worker.actor.model.path=EXPORT trainer.seed=S algorithm.std_eps=1e-4`` (TRL's hard-coded ε) and
     ``algorithm.dynamic_sampling=false``: the same algorithm as TRL's;
   * ``ours+ds`` — the example as it is (dynamic sampling on, which TRL does not have);
   * ``trl`` — ``GRPOTrainer`` with the ``GRPOConfig`` that :func:`trl_config` derives from the resolved
     config of ``ours`` (every option below);
   * ``ours kl`` / ``trl kl`` — the same two with ``preset=grpo`` (β = 0.04, k3 in the loss; TRL with
     ``use_bias_correction_kl=False``, the GRPO paper's k3, which is ours).

3. **Evaluation**: every final model (ours: the run's last checkpoint; TRL: ``save_model``) is scored by
   ``advantage.algos.llm.evaluation.evaluate`` on the task's 500 test prompts, greedy. The accuracy curves
   are that evaluator on the first ``trainer.eval_episodes`` validation prompts every ``trainer.eval_every``
   steps: ours during training (``eval/accuracy``), TRL's on the checkpoints its ``save_steps`` wrote.

The option map, ours (the resolved run config) → TRL ``GRPOConfig``:

* ``data.rollout_batch_size`` × ``worker.rollout.n`` → ``per_device_train_batch_size`` (completions
  per step); ``worker.rollout.n`` → ``num_generations``; ``data.max_response_length`` →
  ``max_completion_length``; ``worker.rollout.temperature`` / ``top_p`` / ``top_k`` → the same names;
* ``algorithm.advantage`` grpo / dr_grpo → ``scale_rewards`` ``"group"`` / ``"none"``;
  ``algorithm.std_eps=1e-4`` → TRL's hard-coded ε of ``(r − mean) / (std + ε)``;
* ``worker.actor.loss_agg`` → ``loss_type`` (seq_mean_token_mean → grpo, token_mean → dapo,
  seq_mean_token_sum_norm → dr_grpo); ``clip_low`` / ``clip_high`` → ``epsilon`` / ``epsilon_high``;
* ``worker.actor.kl_coef`` with ``kl_estimator=k3`` → ``beta`` with ``use_bias_correction_kl=False``;
* ``worker.actor.ppo_epochs`` → ``num_iterations``; ``mini_batch_size`` 0 (the rollout in one step) →
  ``gradient_accumulation_steps=1``, ``steps_per_generation=1``;
* ``worker.actor.learning_rate``, ``warmup_steps``, ``lr_schedule`` (``min_lr_ratio`` 0) →
  ``learning_rate``, ``warmup_steps``, ``lr_scheduler_type``; ``weight_decay``, ``max_grad_norm`` → the
  same names; AdamW β 0.9 / 0.999, ε 1e-8 in both;
* ``trainer.total_steps``, ``trainer.seed`` → ``max_steps``, ``seed``; ``algorithm.overlong_filter``
  false → ``mask_truncated_completions=False``;
* the reward: the task's verifier score → a reward function calling the same ``task.verify``; the
  prompts: the train split (``data.seed``) → a ``datasets.Dataset`` of the same train examples;
* at their neutral value, or refused by name: process supervision, the curricula, dual clip, LoRA,
  ``min_new_tokens``, a reward model, the overlong buffer and the length preference (TRL has no
  counterpart, or its default is that value); ``data.max_prompt_length`` (8) cuts no addition prompt, and
  TRL 1.16 has no such option.

Without an equivalent, named: dynamic sampling (``ours+ds`` runs it; TRL has none), the warm-up's first
step (ours ``peak·1/W``, Hugging Face's schedule ``0``: TRL's first step does not move the weights), the
order prompts are drawn in (each library shuffles with its own generator), and the sampler's random
numbers. Step time is the median wall time between consecutive training steps of a run (evaluation steps
excluded for ours; TRL's checkpoint saves excluded the same way), with both libraries' runs sharing the
machine two at a time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.pipeline import ROOT, run_cli, versions
from benchmarks.sft_seeds import EXAMPLE as SFT_EXAMPLE
from benchmarks.sft_seeds import sft_run
from benchmarks.step_time import trl_step_clock, trl_task_prompts, worker_env

MODULE = "python -m benchmarks.grpo_learning_vs_trl"
GRPO_EXAMPLE = "examples/grpo_addition.yaml"
STD_EPS = 1e-4  # TRL's hard-coded ε
# arm -> (library, overrides of the GRPO example)
ARMS: dict[str, tuple[str, list[str]]] = {
    "ours": ("advantage", ["algorithm.dynamic_sampling=false"]),
    "ours+ds": ("advantage", []),
    "trl": ("trl", ["algorithm.dynamic_sampling=false"]),
    "ours kl": ("advantage", ["preset=grpo", "algorithm.dynamic_sampling=false"]),
    "trl kl": ("trl", ["preset=grpo", "algorithm.dynamic_sampling=false"]),
}
# transformers builds a model on the meta device under a process-wide patch: two threads of the driver
# loading at once break each other's load ("Cannot copy out of meta tensor"); the driver loads one at a time
LOAD = threading.Lock()
PAIRS = (("ours", "trl"), ("ours+ds", "trl"), ("ours kl", "trl kl"))
STYLES: dict[str, dict[str, str]] = {  # TRL dashed, each beside its counterpart
    "ours": {"color": "tab:orange", "ls": "-"},
    "ours+ds": {"color": "tab:red", "ls": "-"},
    "trl": {"color": "tab:orange", "ls": "--"},
    "ours kl": {"color": "tab:blue", "ls": "-"},
    "trl kl": {"color": "tab:blue", "ls": "--"},
}
LOSS_TYPES = {"seq_mean_token_mean": "grpo", "token_mean": "dapo", "seq_mean_token_sum_norm": "dr_grpo"}
SCALE_REWARDS = {"grpo": "group", "dr_grpo": "none"}


# ----------------------------------------------------------------------------------------------------
# The shared pieces: the resolved config, the export, the evaluator


def grpo_overrides(export: Path, seed: int, steps: int | None, sets: list[str]) -> dict[str, Any]:
    """The overrides of one GRPO run on top of ``examples/grpo_addition.yaml`` (``sets``: ``KEY=VALUE`` as
    on the command line)."""
    from advantage.config_sources import flatten, parse_overrides

    over: dict[str, Any] = {
        "worker.actor.model.path": str(export),
        "trainer.seed": seed,
        "algorithm.std_eps": STD_EPS,
    }
    if steps is not None:
        over["trainer.total_steps"] = steps
    return {**over, **flatten(parse_overrides(sets))}


def resolved(over: dict[str, Any]) -> Any:
    """The GRPO run config of ``examples/grpo_addition.yaml`` with ``over`` (what ``advantage train``
    runs)."""
    from advantage.resolve import resolve_config

    _, cfg = resolve_config("grpo", ROOT / GRPO_EXAMPLE, over, check_device=False)
    return cfg


def export(run_dir: Path, folder: Path) -> None:
    """The run's latest checkpoint as a plain ``save_pretrained`` folder (model and tokenizer)."""
    import advantage
    from advantage.lm.model import load_pretrained

    with LOAD:
        model, tok = load_pretrained(advantage.Run.load(run_dir).checkpoint.path, trust_remote_code=False)
        model.save_pretrained(folder, safe_serialization=True)
        tok.save_pretrained(folder)


def score(cfg: Any, folder: Path, split: str, limit: int | None = None) -> dict[str, Any]:
    """``advantage``'s evaluator (greedy) on ``folder``'s model: the first ``limit`` prompts of ``split``."""
    import torch

    from advantage.algos.llm.data import make_task
    from advantage.algos.llm.evaluation import evaluate
    from advantage.algos.llm.policy import LMPolicy
    from advantage.lm.model import load_pretrained

    torch.set_num_threads(1)
    with LOAD:
        model, tok = load_pretrained(folder, trust_remote_code=False)
    policy = LMPolicy(model, tok, make_task(cfg.data), cfg)
    return evaluate(cfg, policy, split=split, limit=limit, samples=1)


def trl_config(cfg: Any, output_dir: str) -> dict[str, Any]:
    """``GRPOConfig`` keyword arguments equal to the resolved run config ``cfg`` (the table above); an
    option of ``cfg`` that TRL cannot express is an error."""
    a, r, d, t = cfg.worker.actor, cfg.worker.rollout, cfg.data, cfg.trainer
    problems = []
    if a.loss != "ppo_clip":
        problems.append(f"worker.actor.loss={a.loss}")
    if a.loss_agg not in LOSS_TYPES:
        problems.append(f"worker.actor.loss_agg={a.loss_agg}")
    if cfg.algorithm.advantage not in SCALE_REWARDS:
        problems.append(f"algorithm.advantage={cfg.algorithm.advantage}")
    if a.kl_coef and a.kl_estimator != "k3":
        problems.append(f"worker.actor.kl_estimator={a.kl_estimator}")
    if a.mini_batch_size not in (0, d.rollout_batch_size) or a.min_lr_ratio:
        problems.append("worker.actor.mini_batch_size / min_lr_ratio")
    if cfg.algorithm.dynamic_sampling or cfg.algorithm.overlong_filter or cfg.algorithm.kl_reward_coef:
        problems.append("algorithm.dynamic_sampling / overlong_filter / kl_reward_coef")
    if cfg.algorithm.std_eps != STD_EPS:
        problems.append(f"algorithm.std_eps={cfg.algorithm.std_eps} (TRL's is {STD_EPS})")
    # Options that must sit at their neutral value, TRL having no counterpart (or its default being it)
    neutral = {
        "algorithm.supervision": (cfg.algorithm.supervision, "outcome"),
        "algorithm.curriculum": (cfg.algorithm.curriculum, "none"),
        "algorithm.adaptive_difficulty": (cfg.algorithm.adaptive_difficulty, False),
        "worker.actor.dual_clip": (a.dual_clip, None),
        "worker.actor.lora.rank": (a.model.lora.rank, 0),
        "worker.rollout.min_new_tokens": (r.min_new_tokens, 0),
        "worker.reward.model": (cfg.worker.reward.model, None),
        "worker.reward.overlong_buffer": (cfg.worker.reward.overlong_buffer, 0),
        "worker.reward.length_preference": (cfg.worker.reward.length_preference, 0.0),
    }
    problems += [f"{k}={v}" for k, (v, ok) in neutral.items() if v != ok]
    if problems:
        raise SystemExit(f"no TRL equivalent for: {', '.join(problems)}")
    return {
        "output_dir": output_dir,
        "per_device_train_batch_size": d.rollout_batch_size * r.n,
        "num_generations": r.n,
        "max_completion_length": d.max_response_length,
        "temperature": r.temperature,
        "top_p": r.top_p,
        "top_k": r.top_k,
        "scale_rewards": SCALE_REWARDS[cfg.algorithm.advantage],
        "loss_type": LOSS_TYPES[a.loss_agg],
        "epsilon": a.clip_low,
        "epsilon_high": a.clip_high if a.clip_high is not None else a.clip_low,
        "beta": a.kl_coef,
        "use_bias_correction_kl": False,
        "num_iterations": a.ppo_epochs,
        "gradient_accumulation_steps": 1,
        "steps_per_generation": 1,
        "learning_rate": a.learning_rate,
        "lr_scheduler_type": a.lr_schedule,
        "warmup_steps": a.warmup_steps,
        "weight_decay": a.weight_decay,
        "max_grad_norm": a.max_grad_norm,
        "optim": "adamw_torch",
        "adam_beta1": 0.9,
        "adam_beta2": 0.999,
        "adam_epsilon": 1e-8,
        "mask_truncated_completions": False,
        "max_steps": t.total_steps,
        "seed": t.seed,
        "report_to": [],
        "use_cpu": True,
        "bf16": False,
        "logging_steps": 1,
        "save_strategy": "steps",
        "save_steps": t.eval_every,
        "save_only_model": True,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }


# ----------------------------------------------------------------------------------------------------
# The TRL worker (its own process)


def trl_worker(spec_path: Path, out_path: Path) -> None:
    """Train TRL's ``GRPOTrainer`` as ``spec`` says; write per-step clocks, rewards and the checkpoints."""
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from advantage.algos.llm.data import make_task
    from advantage.lm.model import load_pretrained

    torch.set_num_threads(1)
    spec = json.loads(spec_path.read_text())
    cfg = resolved(spec["overrides"])
    task = make_task(cfg.data)
    examples = task.examples("train", cfg.data.train_size, cfg.data.seed)
    model, tok = load_pretrained(Path(spec["export"]), trust_remote_code=False)
    first = examples[0].prompt  # TRL tokenizes a plain prompt with the special tokens; ours without
    if tok(first)["input_ids"] != tok(first, add_special_tokens=False)["input_ids"]:
        raise SystemExit("the tokenizer adds special tokens to a prompt: TRL's prompts would differ")
    dataset, verifier = trl_task_prompts(task, examples)
    clock, rec = trl_step_clock(begin=True)

    out_dir = Path(spec["out_dir"])
    args = GRPOConfig(**trl_config(cfg, str(out_dir)))
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=verifier,
        args=args,
        train_dataset=dataset,
        processing_class=tok,
        callbacks=[clock],
    )
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    trainer.save_model(str(out_dir / "final"))
    tok.save_pretrained(out_dir / "final")
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    # step k's time: from its begin to its end (a checkpoint save happens after on_step_end, outside it)
    steps = [e - b for b, e in zip(rec["step_begin"], rec["step_end"], strict=True)]
    out_path.write_text(json.dumps({"reward": rewards, "step_s": steps, "train_seconds": seconds}))


# ----------------------------------------------------------------------------------------------------
# One run of an arm; the driver


def run_arm(arm: str, seed: int, export: Path, folder: Path, steps: int | None) -> dict[str, Any]:
    """Train ``arm`` from ``export``; its curves (validation accuracy, mean reward), step times and final
    test accuracy."""
    lib, sets = ARMS[arm]
    over = grpo_overrides(export, seed, steps, sets)
    cfg = resolved(over)
    t = cfg.trainer
    run_dir = folder / f"{arm.replace(' ', '_').replace('+', '_')}_seed{seed}"
    start = time.perf_counter()
    if lib == "advantage":
        args = [f"{k}={json.dumps(v) if isinstance(v, bool) else v}" for k, v in over.items()]
        run_cli(
            "train",
            "grpo",
            "--config",
            GRPO_EXAMPLE,
            *args,
            f"trainer.run_dir={run_dir}",
            "trainer.tensorboard=false",
            "trainer.progress=none",
            cwd=ROOT,
        )
        from advantage.monitoring.metrics import read_metrics

        rows = read_metrics(run_dir)
        train = [r for r in rows if "train/time/learn" in r]
        stamps = {r["step"]: r["time"] for r in train}
        # a step's wall time: from the previous step's row to its own, when no evaluation came between
        evals = {r["step"] for r in rows if "eval/accuracy" in r}
        step_s = [stamps[k] - stamps[k - 1] for k in sorted(stamps) if k - 1 in stamps and k - 1 not in evals]
        curve = [(r["step"], r["eval/accuracy"]) for r in rows if "eval/accuracy" in r]
        reward = [r["train/reward/mean"] for r in train]
        import advantage

        final = Path(advantage.Run.load(run_dir).checkpoint.path)
    else:
        spec = folder / f"{run_dir.name}.json"
        result = folder / f"{run_dir.name}.result.json"
        spec.write_text(json.dumps({"overrides": over, "export": str(export), "out_dir": str(run_dir)}))
        cmd = [sys.executable, "-m", MODULE.split()[-1], "--trl-worker", str(spec), str(result)]
        env = {**worker_env(), "PYTHONPATH": str(ROOT / "src")}
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"TRL run {arm} seed {seed} failed:\n{out.stderr[-4000:]}")
        res = json.loads(result.read_text())
        step_s, reward = res["step_s"][1:], res["reward"]
        ckpts = sorted(run_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        n_val = t.eval_episodes
        curve = [(int(p.name.split("-")[1]), score(cfg, p, "validation", n_val)["accuracy"]) for p in ckpts]
        final = run_dir / "final"
        if not curve or curve[-1][0] != t.total_steps:  # ours evaluates at the last step too
            curve.append((t.total_steps, score(cfg, final, "validation", t.eval_episodes)["accuracy"]))
    wall = time.perf_counter() - start
    test = score(cfg, final, "test")
    r = {
        "arm": arm,
        "lib": lib,
        "seed": seed,
        "overrides": over,
        "steps": t.total_steps,
        "test_accuracy": test["accuracy"],
        "test_n": test["n"],
        "validation_curve": curve,
        "reward": reward,
        "median_step_s": statistics.median(step_s),
        "wall_s": wall,
    }
    print(f"seed {seed} {arm}: test {r['test_accuracy']:.3f}, step {r['median_step_s']:.3f}s, {wall:.0f}s")
    return r


def sft_start(seed: int, folder: Path, sft_runs: Path | None) -> tuple[Path, float]:
    """The exported SFT checkpoint of ``seed`` and the SFT run's wall seconds (0 when reused)."""
    run_dir, seconds = sft_run(seed, folder, sft_runs)
    out = folder / f"export_seed{seed}"
    export(run_dir, out)
    return out, seconds or 0.0


def binomial_se(p: float, n: int) -> float:
    """Standard error of an accuracy ``p`` measured on ``n`` prompts."""
    return math.sqrt(p * (1 - p) / n)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    p.add_argument("--steps", type=int, default=None, help="trainer.total_steps (default: the example's)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--sft-runs", default=None, help="reuse SFT runs FOLDER/seedS instead of training them")
    p.add_argument("--name", default="grpo_learning_vs_trl")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--runs-dir", default=None, help="keep the run folders here (default: a temporary folder)")
    p.add_argument("--trl-worker", nargs=2, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.trl_worker:
        trl_worker(Path(args.trl_worker[0]), Path(args.trl_worker[1]))
        return
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.runs_dir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        sft_runs = Path(args.sft_runs) if args.sft_runs else None
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            made = pool.map(lambda s: sft_start(s, folder, sft_runs), args.seeds)
            starts = dict(zip(args.seeds, made, strict=True))
            cfg0 = resolved(grpo_overrides(starts[args.seeds[0]][0], args.seeds[0], args.steps, []))
            start_acc = {s: score(cfg0, e, "test")["accuracy"] for s, (e, _) in starts.items()}
            n_val = cfg0.trainer.eval_episodes
            start_val = {s: score(cfg0, e, "validation", n_val)["accuracy"] for s, (e, _) in starts.items()}
            jobs = [(arm, s) for s in args.seeds for arm in args.arms]
            runs = list(pool.map(lambda j: run_arm(j[0], j[1], starts[j[1]][0], folder, args.steps), jobs))
    import torch
    import transformers
    import trl

    res: dict[str, Any] = {
        **versions(load),
        "trl": trl.__version__,
        "command": MODULE + (f" --steps {args.steps}" if args.steps else ""),
        "seeds": args.seeds,
        "jobs": args.jobs,
        "sft_reused": args.sft_runs is not None,  # the SFT runs of an earlier call (same command, same seed)
        "sft": {
            str(s): {"test_accuracy": start_acc[s], "validation_accuracy": start_val[s], "wall_s": w}
            for s, (_, w) in starts.items()
        },
        "runs": runs,
        "pairs": pairs(runs, args.seeds),
    }
    del torch, transformers
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(res, indent=1) + "\n")
    lines = table(res)
    (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(res, out / f"{args.name}.png")


def pairs(runs: list[dict[str, Any]], seeds: list[int]) -> list[dict[str, Any]]:
    """Per seed and pair (ours, TRL): final test accuracies, TRL's standard error, whether ours ≥ TRL − 1 SE,
    and the ratio of median step times."""
    by = {(r["arm"], r["seed"]): r for r in runs}
    out = []
    for mine, theirs in PAIRS:
        for s in seeds:
            if (mine, s) not in by or (theirs, s) not in by:
                continue
            m, t = by[(mine, s)], by[(theirs, s)]
            se = binomial_se(t["test_accuracy"], t["test_n"])
            out.append(
                {
                    "ours": mine,
                    "trl": theirs,
                    "seed": s,
                    "ours_test": m["test_accuracy"],
                    "trl_test": t["test_accuracy"],
                    "trl_se": se,
                    "holds": m["test_accuracy"] >= t["test_accuracy"] - se,
                    "step_time_ratio": m["median_step_s"] / t["median_step_s"],
                }
            )
    return out


def table(res: dict[str, Any]) -> list[str]:
    runs = res["runs"]
    steps = runs[0]["steps"]
    lines = [
        "### GRPO learning parity: advantage vs TRL `GRPOTrainer` from the same SFT checkpoint",
        "",
        f"`{res['command']}`: per seed, `{SFT_EXAMPLE}` (trainer.seed = seed) exported, then {steps} GRPO "
        f"steps of `{GRPO_EXAMPLE}` in each library (the option map is in the script's docstring); test "
        f"accuracy on {runs[0]['test_n']} held-out prompts by advantage's evaluator (greedy) for both. "
        f"torch {res['torch']}, transformers {res['transformers']}, TRL {res['trl']}, {res['cpus']} CPUs, "
        f"{res['jobs']} runs at a time, one torch thread each.",
        "",
        "| seed | SFT start | " + " | ".join(dict.fromkeys(r["arm"] for r in runs)) + " |",
        "|---|---|" + "---|" * len(dict.fromkeys(r["arm"] for r in runs)),
    ]
    by = {(r["arm"], r["seed"]): r for r in runs}
    arms = list(dict.fromkeys(r["arm"] for r in runs))
    for s in res["seeds"]:
        cells = [f"{by[(a, s)]['test_accuracy']:.3f}" if (a, s) in by else "–" for a in arms]
        lines.append(f"| {s} | {res['sft'][str(s)]['test_accuracy']:.3f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| ours | TRL | seed | ours test | TRL test ± 1 SE | ours ≥ TRL − 1 SE | "
        "ours / TRL median step time |",
        "|---|---|---|---|---|---|---|",
    ]
    for q in res["pairs"]:
        lines.append(
            f"| {q['ours']} | {q['trl']} | {q['seed']} | {q['ours_test']:.3f} | {q['trl_test']:.3f} ± "
            f"{q['trl_se']:.3f} | {'yes' if q['holds'] else 'no'} | {q['step_time_ratio']:.2f} |"
        )
    lines += [
        "",
        "| arm | median step s (over seeds) | run wall s (median) |",
        "|---|---|---|",
    ]
    for a in arms:
        rs = [r for r in runs if r["arm"] == a]
        lines.append(
            f"| {a} | {statistics.median(r['median_step_s'] for r in rs):.3f} | "
            f"{statistics.median(r['wall_s'] for r in rs):.0f} |"
        )
    lines += [
        "",
        "SE: the binomial standard error of TRL's test accuracy, √(p(1 − p)/n). Step time: the median wall "
        "time of a training step (generation, reward, update), evaluation and checkpoint writes excluded; "
        "`ours+ds` samples extra prompts when whole groups are right or wrong (dynamic sampling), so its "
        "steps generate more and its mean reward is that of the groups it kept.",
    ]
    return lines


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, seeds = res["runs"], res["seeds"]
    fig, axes = plt.subplots(2, len(seeds), figsize=(5.5 * len(seeds), 8), squeeze=False)
    for j, s in enumerate(seeds):
        for r in (r for r in runs if r["seed"] == s):
            style = {**STYLES[r["arm"]], "lw": 1.0, "label": r["arm"]}
            steps, acc = zip(*r["validation_curve"], strict=True) if r["validation_curve"] else ((), ())
            axes[0][j].plot([0, *steps], [res["sft"][str(s)]["validation_accuracy"], *acc], **style)
            k = 10  # a 10-step moving average of the per-step mean reward
            rew = r["reward"]
            smooth = [statistics.fmean(rew[max(0, i - k + 1) : i + 1]) for i in range(len(rew))]
            axes[1][j].plot(range(1, len(rew) + 1), smooth, **style)
        axes[0][j].set_title(f"seed {s}: SFT start {res['sft'][str(s)]['test_accuracy']:.3f} (test)")
        axes[0][j].set_ylabel("validation accuracy (greedy)")
        axes[1][j].set_ylabel("mean reward per step (10-step average)")
        axes[1][j].set_xlabel("step")
        for row in axes:
            row[j].grid(alpha=0.3)
            row[j].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


if __name__ == "__main__":
    main()
