r"""GRPO step time: advantage's ``grpo`` trainer vs TRL's ``GRPOTrainer``, side by side, fully offline.

    python -m benchmarks.grpo_vs_trl   # -> benchmarks/results/grpo_vs_trl.{md,json,png}  (about 3 minutes)
    python -m benchmarks.grpo_vs_trl --sizes medium-32,medium-128,medium-256,large-32,large-128,large-256 \
        --steps 6 --warmup 2           # -> benchmarks/results/grpo_vs_trl_lengths.{md,json,png}

The second command runs the equal-work rows ``MODEL-LENGTH``: every response is exactly LENGTH (32, 128
or 256) tokens in both libraries (our ``worker.rollout.min_new_tokens``, TRL's ``generation_kwargs``
``min_new_tokens``), for the medium model (4 layers × hidden 128, 8 prompts × 8 completions) and a large
one (8 layers × hidden 256, 8 heads, a 32,000-token vocabulary, 4 prompts × 8 completions), both loaded by
both libraries from one saved model folder. Its report adds the learn phase's achieved FLOP/s as a
fraction of this machine's single-thread matmul speed on the same shapes.

Both libraries train the same randomly initialised Qwen2 scratch model (``build_scratch_model``, same seed,
so the same initial weights) with the same character tokenizer (``build_char_tokenizer`` over the task's
alphabet) on the same task: ``addition`` with ``digits=2``, plain answers, and reward = our verifier's
score (TRL gets a reward function that calls ``task.verify`` on the same ``Example``). The verifier gives
``format_reward`` for a bare integer, so a scratch model has a signal to learn from within 30 steps.

Matched settings: temperature 1, top-p 1, top-k off; β = 0 (no reference model); μ = 1 (TRL
``num_iterations=1``: on-policy, old log-probs = sg(log-probs) in both); PPO clip ε = 0.2; group mean /
Bessel-corrected std advantages with the same ε = 1e-4 (TRL's hard-coded value; ours
``algorithm.std_eps``); per-sequence token mean (TRL ``loss_type="grpo"``, ours ``loss_agg=
seq_mean_token_mean``); the whole rollout in one optimizer step; torch AdamW (TRL ``optim="adamw_torch"``)
with constant learning rate, weight decay 0, gradient-norm clip 1; fp32, no gradient checkpointing, eager
attention; one torch thread (``OMP_NUM_THREADS=1`` and ``torch.set_num_threads(1)``).

Generation stops, in both, when every row has emitted EOS or after ``max_new_tokens``; the number of
tokens generated therefore depends on the policy, and the table reports generated tokens per second
(response tokens up to and including the EOS, divided by the step's wall time) next to the step time.

Timing: each (library, size, seed) runs in a fresh process (``step_time.run_step_workers``), the two libraries
interleaved. Step time is the wall time between consecutive step ends (a TrainerCallback's
``on_step_end`` for TRL; the ``time`` stamp of advantage's per-step metrics row), so it includes all per-step
bookkeeping; the first ``--warmup`` steps are excluded. Phases: advantage's own ``train/time/{generate,
score,learn}`` metrics; for TRL, ``GRPOTrainer._generate`` (tokenize, ``model.generate``, decode) is
"generate", ``_calculate_rewards`` is "score", and the rest of ``training_step`` plus the optimizer step
(``on_step_begin`` → ``on_step_end``) is "learn". "other" is step time minus the three phases (logging,
callbacks, the data loader). Step CPU time is the process's CPU time over the same interval. Peak RSS is the
process's ``ru_maxrss``. The 1-minute load average before each worker is recorded: run it on an otherwise
idle machine (it was ≤ 1 for the committed results). Besides the ratio of the per-library medians, the
report gives the median of the per-seed ratios and the ratio of time per generated token, since the two
libraries' policies (hence their answer lengths) drift apart within a run.
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import step_time

SIZES: dict[str, dict[str, int]] = {
    # hidden, layers, heads; prompts per step, G, new tokens
    "small": {"hidden_size": 64, "layers": 2, "heads": 4, "prompts": 2, "G": 8, "new_tokens": 16},
    "medium": {"hidden_size": 128, "layers": 4, "heads": 4, "prompts": 8, "G": 8, "new_tokens": 32},
}
TARGETS = {"small": 0.4, "medium": 0.7}  # acceptance: ours / TRL median step time at most this
# Equal-work rows "MODEL-LENGTH": every response is exactly LENGTH tokens in both libraries (ours:
# worker.rollout.min_new_tokens = data.max_response_length; TRL: generation_kwargs min_new_tokens =
# max_completion_length), so both generate and train on the same tokens whatever the policy does. The
# large model has a 32,000-token vocabulary (step_time.lm_folder), so its output layer and log-softmax cost
# what they cost in a real model; both libraries load the same saved model folder.
MODELS: dict[str, dict[str, int]] = {
    "medium": {"hidden_size": 128, "layers": 4, "heads": 4, "prompts": 8, "G": 8, "vocab": 0},
    "large": {"hidden_size": 256, "layers": 8, "heads": 8, "prompts": 4, "G": 8, "vocab": 32_000},
}
LENGTHS = (32, 128, 256)
for _model, _length in itertools.product(MODELS, LENGTHS):
    SIZES[f"{_model}-{_length}"] = {**MODELS[_model], "new_tokens": _length, "fixed": 1}
    TARGETS[f"{_model}-{_length}"] = 0.5 if _length <= 32 else 0.7
TASK = {"digits": 2, "answer_format": "plain", "format_reward": 0.5}
TRAIN_SIZE = 2000
LEARNING_RATE = 1e-3
STD_EPS = 1e-4  # TRL's (r - mean) / (std + 1e-4), hard-coded in GRPOTrainer
CLIP = 0.2
MAX_POSITIONS = 256
FIXED_MAX_POSITIONS = 512  # a prompt of up to ~10 tokens and 256 new ones
LIBS = ("trl", "advantage")


# ----------------------------------------------------------------------------------------------------
# Workers (one process each)


def advantage_overrides(
    size: str, seed: int, steps: int, run_dir: str, folder: str | None = None
) -> dict[str, Any]:
    """The ``advantage.train("grpo", ...)`` settings of one run (matched to :func:`run_trl`); with
    ``folder`` (the equal-work rows) the model is loaded from it and every response is exactly
    ``new_tokens`` long."""
    s = SIZES[size]
    model: dict[str, Any] = {
        "worker.actor.model.arch": "qwen2",
        "worker.actor.model.hidden_size": s["hidden_size"],
        "worker.actor.model.layers": s["layers"],
        "worker.actor.model.heads": s["heads"],
        "worker.actor.model.max_position_embeddings": MAX_POSITIONS,
    }
    if folder is not None:
        model = {"worker.actor.model.path": folder, "worker.rollout.min_new_tokens": s["new_tokens"]}
    return {
        **model,
        "data.task": "addition",
        **{f"data.{k}": v for k, v in TASK.items()},
        "data.train_size": TRAIN_SIZE,
        "data.validation_size": 8,
        "data.test_size": 8,
        "data.rollout_batch_size": s["prompts"],
        "data.max_response_length": s["new_tokens"],
        "worker.rollout.n": s["G"],
        "worker.rollout.temperature": 1.0,
        "worker.actor.learning_rate": LEARNING_RATE,
        "worker.actor.lr_schedule": "constant",
        "worker.actor.max_grad_norm": 1.0,
        "worker.actor.ppo_epochs": 1,
        "worker.actor.clip_low": CLIP,
        "worker.actor.loss": "ppo_clip",
        "worker.actor.loss_agg": "seq_mean_token_mean",
        "worker.actor.kl_coef": 0.0,
        "algorithm.advantage": "grpo",
        "algorithm.std_eps": STD_EPS,
        "trainer.seed": seed,
        "trainer.total_steps": steps,
        "trainer.eval_every": 0,
        "trainer.eval_episodes": 8,
        "trainer.log_every": 1,
        "trainer.tensorboard": False,
        "trainer.progress": "none",
        "trainer.torch_threads": 1,
        "trainer.run_dir": run_dir,
    }


def fixed_model(size: str, seed: int, folder: Path) -> tuple[Any, Any]:
    """``(tokenizer, model)`` of an equal-work row, also saved to ``folder`` (:func:`step_time.lm_folder`)."""
    from advantage.envs.text import make_task

    s, task = SIZES[size], make_task("addition", **TASK)
    keys = ("hidden_size", "layers", "heads", "vocab")
    dims = {k: s[k] for k in keys}
    return step_time.lm_folder(
        folder,
        task.alphabet,
        task.special_tokens,
        max_position_embeddings=FIXED_MAX_POSITIONS,
        seed=seed,
        **dims,
    )


def run_advantage(size: str, seed: int, steps: int) -> dict[str, Any]:
    import advantage
    from advantage.context import RunContext

    s = SIZES[size]
    cpu: dict[int, float] = {}  # process CPU time when each step's metrics row is logged
    log = RunContext.log

    def stamped(self: Any, step: int, metrics: Any) -> None:
        if "train/time/learn" in metrics:
            cpu[step] = time.process_time()
        log(self, step, metrics)

    RunContext.log = stamped  # type: ignore[method-assign]  # this worker process only
    with tempfile.TemporaryDirectory() as tmp:
        folder = None
        if s.get("fixed"):
            folder = os.path.join(tmp, "model")
            fixed_model(size, seed, Path(folder))
        over = advantage_overrides(size, seed, steps, os.path.join(tmp, "run"), folder)
        rows = advantage.train("grpo", quiet=True, **over).metrics
    by_step: dict[int, dict[str, Any]] = {}
    for r in rows:
        if "train/time/learn" in r:
            by_step[r["step"]] = r
    ordered = [by_step[k] for k in sorted(by_step)]
    G = s["G"] * s["prompts"]
    return {
        "step_end": [r["time"] for r in ordered],
        "cpu_end": [cpu[r["step"]] for r in ordered],
        "generate": [r["train/time/generate"] for r in ordered],
        "score": [r["train/time/score"] for r in ordered],
        "learn": [r["train/time/learn"] for r in ordered],
        "tokens": [r["train/response/length_mean"] * G for r in ordered],
        "reward": [r["train/reward/mean"] for r in ordered],
    }


def run_trl(size: str, seed: int, steps: int) -> dict[str, Any]:
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from advantage.envs.text import make_task

    s = SIZES[size]
    task = make_task("addition", **TASK)
    examples = task.examples("train", TRAIN_SIZE, 0)
    extra: dict[str, Any] = {}
    if s.get("fixed"):  # the model folder advantage loads, built the same way; exactly new_tokens per answer
        with tempfile.TemporaryDirectory() as folder:
            tok, model = fixed_model(size, seed, Path(folder))
        extra["generation_kwargs"] = {"min_new_tokens": s["new_tokens"]}
    else:
        tok, model = step_time.scratch_lm(task, s, MAX_POSITIONS, seed)
    dataset, verifier = step_time.trl_task_prompts(task, examples)
    clock, rec = step_time.trl_step_clock(begin=True)
    rec.update(generate=[], score=[], tokens=[])

    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(
            output_dir=tmp,
            report_to=[],
            use_cpu=True,
            bf16=False,
            seed=seed,
            max_steps=steps,
            per_device_train_batch_size=s["prompts"] * s["G"],  # completions per step
            num_generations=s["G"],
            max_completion_length=s["new_tokens"],
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            beta=0.0,
            num_iterations=1,
            epsilon=CLIP,
            loss_type="grpo",
            scale_rewards="group",
            learning_rate=LEARNING_RATE,
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            max_grad_norm=1.0,
            optim="adamw_torch",
            gradient_checkpointing=False,
            logging_steps=1,
            save_strategy="no",
            disable_tqdm=True,
            dataloader_num_workers=0,
            **extra,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=verifier,
            args=args,
            train_dataset=dataset,
            processing_class=tok,
            callbacks=[clock],
        )

        def timed(name: str, fn: Any, count: bool = False) -> Any:
            def wrapper(*a: Any, **k: Any) -> Any:
                t0 = time.perf_counter()
                out = fn(*a, **k)
                rec[name].append(time.perf_counter() - t0)
                if count:  # _generate returns (prompt_ids, completion_ids, ...)
                    rec["tokens"].append(float(sum(len(c) for c in out[1])))
                return out

            return wrapper

        trainer._generate = timed("generate", trainer._generate, count=True)
        trainer._calculate_rewards = timed("score", trainer._calculate_rewards)
        trainer.train()
        history = trainer.state.log_history
    rewards = [h["reward"] for h in history if "reward" in h]
    n = len(rec["step_end"])
    inner = [rec["step_end"][i] - rec["step_begin"][i] for i in range(n)]
    learn = [inner[i] - rec["generate"][i] - rec["score"][i] for i in range(n)]
    assert torch.get_num_threads() == 1
    return {
        "step_end": rec["step_end"],
        "cpu_end": rec["cpu_end"],
        "generate": rec["generate"][:n],
        "score": rec["score"][:n],
        "learn": learn,
        "tokens": rec["tokens"][:n],
        "reward": rewards[:n],
    }


# ----------------------------------------------------------------------------------------------------
# Driver and report


def summarize(r: dict[str, Any], warmup: int) -> dict[str, Any]:
    """Medians over steps ``warmup+1 ..`` of step time, phases and tokens/s."""
    step = _steps(r)  # step[k - 1] is the wall time of step k (0-based), k >= 1
    idx = range(max(warmup, 1), len(r["step_end"]))
    step_s = [step[k - 1] for k in idx]
    phases = ("generate", "score", "learn")
    med = statistics.median
    cpu = [b - a for a, b in itertools.pairwise(r["cpu_end"])]
    out = {"step_s": med(step_s), "cpu_step_s": med(cpu[k - 1] for k in idx)}
    out.update({f"{p}_s": med(r[p][k] for k in idx) for p in phases})
    out["other_s"] = med(step[k - 1] - sum(r[p][k] for p in phases) for k in idx)
    out["tokens_per_step"] = med(r["tokens"][k] for k in idx)
    out["tokens_per_s"] = sum(r["tokens"][k] for k in idx) / sum(step_s)
    out["reward_last10"] = statistics.fmean(r["reward"][-10:])
    return out


def _steps(r: dict[str, Any]) -> list[float]:
    return step_time.step_intervals(r["step_end"])


def _progress(r: dict[str, Any]) -> str:
    return f"median step {statistics.median(_steps(r)):.3f}s, reward(last) {r['reward'][-1]:.3f}"


def report(results: list[dict[str, Any]], out: Path, warmup: int, steps: int, load: list[float]) -> None:
    """Write ``out/grpo_vs_trl.*`` for the small/medium rows and ``out/grpo_vs_trl_lengths.*`` for the
    equal-work rows (with the learn phase's distance to the matmul limit)."""
    fixed = [r for r in results if SIZES[r["size"]].get("fixed")]
    plain = [r for r in results if not SIZES[r["size"]].get("fixed")]
    for name, rows in (("grpo_vs_trl", plain), ("grpo_vs_trl_lengths", fixed)):
        if rows:
            write_report(rows, out, warmup, steps, load, name)


def matmul_limit(size: str) -> dict[str, float]:
    """The learn phase's matrix products (``lm_learn_profile.matmul_shapes``: forward and backward of every
    projection, attention and the output layer, prompts once per group) each timed alone as a ``torch.mm``
    / ``torch.bmm`` of the same shape, fp32, one thread: their FLOPs and seconds, i.e. the time the learn
    phase would take if it ran at this machine's matmul speed and did nothing else."""
    import torch

    from advantage.envs.text import make_task
    from advantage.lm.model import build_char_tokenizer
    from benchmarks import lm_learn_profile

    torch.set_num_threads(1)
    s, task = SIZES[size], make_task("addition", **TASK)
    tok = build_char_tokenizer(task.alphabet, extra_tokens=task.special_tokens)
    prompts = task.examples("train", 64, 0)
    prompt_len = round(statistics.median(len(tok(e.prompt).input_ids) for e in prompts))
    vocab = max(s["vocab"], len(tok))
    data = lm_learn_profile.random_batch(vocab, s["prompts"], s["G"], s["new_tokens"], prompt_len)
    dims = (s["layers"], s["hidden_size"], s["heads"], vocab)
    seconds, flops = lm_learn_profile.time_matmuls(lm_learn_profile.matmul_shapes(dims, data))
    return {"matmul_seconds": seconds, "matmul_flops": flops, "prompt_tokens": prompt_len}


def write_report(
    results: list[dict[str, Any]], out: Path, warmup: int, steps: int, load: list[float], name: str
) -> None:
    import torch
    import transformers
    import trl

    out.mkdir(parents=True, exist_ok=True)
    for r in results:
        r["summary"] = summarize(r, warmup)
    sizes = list(dict.fromkeys(r["size"] for r in results))
    max_load = max(r["load_before"] for r in results)
    seeds = len({r["seed"] for r in results})
    med = statistics.median

    def agg(size: str, lib: str, key: str) -> float:
        return med(r["summary"][key] for r in results if r["size"] == size and r["lib"] == lib)

    def rss(size: str, lib: str) -> float:
        return med(r["peak_rss_mb"] for r in results if r["size"] == size and r["lib"] == lib)

    lines = [
        "### GRPO step time: advantage vs TRL `GRPOTrainer`",
        "",
        f"Task `addition` (digits 2, plain answers, format_reward {TASK['format_reward']}), reward = "
        "advantage's verifier for both; Qwen2 scratch models with the same initial weights and the same char "
        f"tokenizer; temperature 1, β = 0, μ = 1, ε = {CLIP}, std ε = {STD_EPS}, per-sequence token mean, "
        f"AdamW at a constant {LEARNING_RATE:g}, fp32, no gradient checkpointing; one torch thread. "
        f"{steps} steps × {seeds} fresh processes per library and size, interleaved; medians over steps "
        f"{warmup + 1}..{steps} and then over processes. torch {torch.__version__}, transformers "
        f"{transformers.__version__}, TRL {trl.__version__}, {platform.processor() or platform.machine()}; "
        f"1-minute load average {load[0]:.2f} at the start and at most {max_load:.2f} before any worker "
        f"({os.cpu_count()} cores; the just-finished worker's own share of ~1 decays in that average).",
        "",
        "| size | model | completions × new tokens | library | step s | step CPU s | generate s | score s | "
        "learn s | other s | gen tokens / step | gen tokens/s | peak RSS MB | mean reward, last 10 steps |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratios = {}
    for size in sizes:
        s = SIZES[size]
        for lib in LIBS:
            lines.append(
                f"| {size} | {s['layers']}L × h{s['hidden_size']} | {s['prompts']}×{s['G']} × "
                f"{s['new_tokens']} | {lib} | {agg(size, lib, 'step_s'):.3f} | "
                f"{agg(size, lib, 'cpu_step_s'):.3f} | "
                f"{agg(size, lib, 'generate_s'):.3f} | {agg(size, lib, 'score_s'):.4f} | "
                f"{agg(size, lib, 'learn_s'):.3f} | {agg(size, lib, 'other_s'):.3f} | "
                f"{agg(size, lib, 'tokens_per_step'):.0f} | {agg(size, lib, 'tokens_per_s'):,.0f} | "
                f"{rss(size, lib):.0f} | {agg(size, lib, 'reward_last10'):.3f} |"
            )
        paired = [
            mine["summary"]["step_s"] / theirs["summary"]["step_s"]
            for mine in results
            for theirs in results
            if mine["size"] == theirs["size"] == size
            and mine["seed"] == theirs["seed"]
            and (mine["lib"], theirs["lib"]) == ("advantage", "trl")
        ]
        ratios[size] = {
            "step_time": agg(size, "advantage", "step_s") / agg(size, "trl", "step_s"),
            "step_time_paired": med(paired),
            "cpu_step_time": agg(size, "advantage", "cpu_step_s") / agg(size, "trl", "cpu_step_s"),
            "tokens_per_s": agg(size, "advantage", "tokens_per_s") / agg(size, "trl", "tokens_per_s"),
        }
    lines += [
        "",
        "| size | ours / TRL median step time | target | met | median of per-seed ratios | "
        "ours / TRL step CPU time | ours / TRL time per generated token |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in sizes:
        rt, target = ratios[size]["step_time"], TARGETS[size]
        lines.append(
            f"| {size} | **{rt:.3f}** | ≤ {target} | {'yes' if rt <= target else 'no'} | "
            f"{ratios[size]['step_time_paired']:.3f} | {ratios[size]['cpu_step_time']:.3f} | "
            f"{1 / ratios[size]['tokens_per_s']:.3f} |"
        )
    lines += [
        "",
        "Step time is the wall time between consecutive step ends (step CPU time: the process's CPU time "
        "over the same interval, less sensitive to other load on the machine); generate / score / learn "
        "are advantage's "
        "`train/time/*` and, for TRL, `_generate` / `_calculate_rewards` / the rest of the step; *other* is "
        "the remainder (logging, callbacks, data loading). Generated tokens count each response up to and "
        "including its EOS; both samplers stop once every row has ended, so a policy that has learnt short "
        "answers decodes fewer steps. Loss parity of the two (same batch, same loss and gradients to 1e-5) "
        "is tested in tests/test_grpo_trl_parity.py.",
    ]
    limits = {}
    if name == "grpo_vs_trl_lengths":
        lines += [
            "",
            "Every response is exactly the row's number of new tokens in both libraries (so generated = "
            "trained tokens). The learn phase against this machine's matmul limit: the FLOPs of its matrix "
            "products (forward and backward of every projection, attention and the output layer, prompts "
            "counted once per group) over the learn time, as a fraction of the same products' speed when "
            "each is timed alone as a `torch.mm`/`torch.bmm` of its shape (fp32, one thread):",
            "",
            "| size | matmul GFLOP per learn phase | matmul-only s | library | learn s | achieved GFLOP/s | "
            "fraction of matmul limit |",
            "|---|---|---|---|---|---|---|",
        ]
        for size in sizes:
            lim = limits[size] = matmul_limit(size)
            for lib in LIBS:
                learn = agg(size, lib, "learn_s")
                lines.append(
                    f"| {size} | {lim['matmul_flops'] / 1e9:.1f} | {lim['matmul_seconds']:.3f} | {lib} | "
                    f"{learn:.3f} | {lim['matmul_flops'] / learn / 1e9:.1f} | "
                    f"**{lim['matmul_seconds'] / learn:.2f}** |"
                )
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    (out / f"{name}.json").write_text(
        json.dumps(
            {
                "sizes": SIZES,
                "task": TASK,
                "steps": steps,
                "warmup": warmup,
                "load_average": load,
                "ratios": ratios,
                "matmul_limits": limits,
                "results": results,
            },
            indent=1,
        )
    )
    print("\n".join(lines))
    plot(results, sizes, out / f"{name}.png")


def plot(results: list[dict[str, Any]], sizes: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, len(sizes), figsize=(5.5 * len(sizes), 10), squeeze=False, sharex=True)
    colors = {"trl": "tab:blue", "advantage": "tab:orange"}
    for j, size in enumerate(sizes):
        for lib in LIBS:
            rs = [r for r in results if r["size"] == size and r["lib"] == lib]
            for k, r in enumerate(rs):
                style = {"color": colors[lib], "alpha": 0.85, "lw": 0.9, "antialiased": False}
                style["label"] = lib if k == 0 else None
                steps = _steps(r)  # steps 2..N
                per_token = [1e3 * t / n for t, n in zip(steps, r["tokens"][1:], strict=True)]
                axes[0][j].plot(range(1, len(r["reward"]) + 1), r["reward"], **style)
                axes[1][j].plot(range(2, len(steps) + 2), steps, **style)
                axes[2][j].plot(range(2, len(steps) + 2), per_token, **style)
        s = SIZES[size]
        n = s["prompts"] * s["G"]
        axes[0][j].set_title(f"{size}: {s['layers']}L × h{s['hidden_size']}, {n} completions per step")
        axes[0][j].set_ylabel("mean reward per step")
        axes[1][j].set_ylabel("step wall time (s)")
        axes[2][j].set_ylabel("step wall time per generated token (ms)")
        axes[2][j].set_xlabel("step")
        for row in axes:
            row[j].grid(alpha=0.3)
            row[j].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main() -> None:
    runs = {"trl": run_trl, "advantage": run_advantage}
    step_time.step_main(
        __doc__,
        "benchmarks.grpo_vs_trl",
        LIBS,
        list(SIZES),
        runs,
        report,
        steps=30,
        warmup=3,
        rereport=False,
        progress=_progress,
        default_sizes=["small", "medium"],
    )


if __name__ == "__main__":
    main()
