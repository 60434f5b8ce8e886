"""DPO step time: advantage's ``dpo`` trainer vs TRL's ``DPOTrainer``, side by side, fully offline.

    python -m benchmarks.dpo_vs_trl   # -> benchmarks/results/dpo_vs_trl.{md,json,png}  (about 3 minutes)

Both libraries train the same randomly initialised Qwen2 scratch model (``build_scratch_model``, same seed,
so the same initial weights; eager attention) with the same character tokenizer (``build_char_tokenizer``
over the task's alphabet) on the same pairs of the ``synthetic`` preference task (K = 2: one pair per
prompt), in the same order: TRL gets the training pairs already in advantage's first-epoch order
(``common.data_order``) and reads them sequentially (``train_sampling_strategy="sequential"``), so step k
of both sees the same batch. Sizes: **small**, 2 layers × hidden 64, 8 pairs per step, the task's default
lengths (sequences of at most 13 tokens); **medium**, 4 layers × hidden 128, 32 pairs per step, 26 letters,
prompts of 25 letters and responses of up to 32 (sequences of at most 26 + 33 = 59 tokens: the synthetic
task's limits are prompt_length < letters ≤ 26 and response_length ≤ 32).

Matched settings: β = 0.1, the sigmoid loss, no label smoothing; the reference = the initial policy, its
log-probs computed once for the whole training set before the first step in both (TRL
``precompute_ref_log_probs=True``, ours ``algorithm.precompute_ref=true``, the default); one optimizer step
per batch (no accumulation, ours ``micro_batch_size=0``); torch's fused AdamW (TRL's default
``optim="adamw_torch_fused"``, ours ``fused=True``) with a constant learning rate, betas (0.9, 0.999),
weight decay 0, gradient-norm clip 1; fp32, no gradient checkpointing; no
truncation (TRL ``max_length=None``; every sequence fits); metrics logged every step (TRL
``logging_steps=1``, ours ``trainer.log_every=1``); one torch thread (``OMP_NUM_THREADS=1`` and
``torch.set_num_threads(1)``). TRL's own choices kept as they are: its fused LM head, which also computes
the entropy, mean logit and top-1 metrics over every position, and its per-step ``.item()`` metrics.

Timing: each (library, size, seed) runs in a fresh process (``step_time.run_step_workers``), the two
libraries interleaved and their order flipped every seed. Step time is the wall time between consecutive
step ends (a TrainerCallback's ``on_step_end`` for TRL; the moment advantage logs the step's metrics row,
stamped by patching ``RunContext.log`` in the worker), so it includes data loading, logging and all
per-step bookkeeping; one-time work (tokenizing, the reference pass) happens before the first step end and
is excluded, as are the first ``--warmup`` steps. Step CPU time is the process's CPU time over the same
interval. Peak RSS is the process's ``ru_maxrss``. The 1-minute load average before each worker is
recorded: run it on an otherwise idle machine. Loss and gradient parity of the two on a fixed batch is
tested in ``tests/test_dpo_trl_parity.py``.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import step_time

SIZES: dict[str, dict[str, Any]] = {
    "small": {"hidden_size": 64, "layers": 2, "heads": 4, "pairs": 8, "task": {}},
    "medium": {
        "hidden_size": 128,
        "layers": 4,
        "heads": 4,
        "pairs": 32,
        "task": {"letters": 26, "prompt_length": 25, "response_length": 32},
    },
}
TARGETS = {"small": 0.5, "medium": 0.75}  # acceptance: ours / TRL median step time at most this
# Equal-work rows "MODEL-LENGTH": pairs from a file whose prompts are PROMPT_TOKENS letters and whose chosen
# and rejected responses are exactly LENGTH letters (LENGTH + 1 tokens with the EOS), random over the
# synthetic task's 26 letters; the large model has a 32,000-token vocabulary (step_time.lm_folder), loaded by
# both libraries from one saved model folder.
MODELS: dict[str, dict[str, int]] = {
    "medium": {"hidden_size": 128, "layers": 4, "heads": 4, "pairs": 16, "vocab": 0},
    "large": {"hidden_size": 256, "layers": 8, "heads": 8, "pairs": 8, "vocab": 32_000},
}
PROMPT_TOKENS = 16
for _model, _length in itertools.product(MODELS, (128, 256)):
    SIZES[f"{_model}-{_length}"] = {**MODELS[_model], "length": _length, "task": {"letters": 26}}
    TARGETS[f"{_model}-{_length}"] = 0.5
TRAIN_SIZE = 2000  # pairs: more than steps × pairs per step, so the benchmark stays within one epoch
FIXED_STEPS = 10  # the equal-work rows' files hold this many steps' pairs (the reference pass covers them)
BETA = 0.1
LEARNING_RATE = 1e-3
MAX_POSITIONS = 64
LIBS = ("trl", "advantage")  # (theirs, ours)


def task_of(size: str, folder: str | None = None) -> Any:
    """The synthetic task of a size, or the pairs file of an equal-work row in ``folder``."""
    from advantage.envs.text.preference import make_preference_task

    if "length" in SIZES[size]:
        return make_preference_task("dataset", path=os.path.join(str(folder), "pairs.jsonl"))
    return make_preference_task("synthetic", **SIZES[size]["task"])


def limits(size: str) -> tuple[int, int]:
    """``(max prompt tokens, max response tokens with EOS)``: ``data.max_*_length``."""
    if "length" in SIZES[size]:
        return PROMPT_TOKENS + 1, SIZES[size]["length"] + 1
    task = task_of(size)
    return task.prompt_length + 1, task.response_length + 1


def fixed_data(size: str, seed: int, folder: str) -> tuple[Any, Any]:
    """An equal-work row's files in ``folder``: ``pairs.jsonl`` (train, validation and test pairs of
    exactly-sized random strings) and the model (:func:`step_time.lm_folder`). Returns (tokenizer, model)."""
    s = SIZES[size]
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"

    def text(n: int) -> str:
        return "".join(rng.choice(letters) for _ in range(n))

    n_train = s["pairs"] * FIXED_STEPS
    with open(os.path.join(folder, "pairs.jsonl"), "w") as f:
        for i in range(n_train + 16):
            split = "train" if i < n_train else ("validation" if i < n_train + 8 else "test")
            row = {"prompt": text(PROMPT_TOKENS - 1) + "=", "chosen": text(s["length"])}
            row.update(rejected=text(s["length"]), split=split)
            f.write(json.dumps(row) + "\n")
    dims = {k: s[k] for k in ("hidden_size", "layers", "heads", "vocab")}
    return step_time.lm_folder(
        Path(folder), letters + "=", [], max_position_embeddings=512, seed=seed, **dims
    )


def advantage_overrides(
    size: str, seed: int, steps: int, run_dir: str, folder: str | None = None
) -> dict[str, Any]:
    """The ``advantage.train("dpo", ...)`` settings of one run (matched to :func:`run_trl`); ``folder``
    holds an equal-work row's pairs file and model."""
    s = SIZES[size]
    max_prompt, max_response = limits(size)
    data: dict[str, Any] = {
        "data.task": "synthetic",
        **{f"data.{k}": v for k, v in s["task"].items()},
        "data.train_size": TRAIN_SIZE,
        "model.arch": "qwen2",
        "model.hidden_size": s["hidden_size"],
        "model.layers": s["layers"],
        "model.heads": s["heads"],
        "model.max_position_embeddings": MAX_POSITIONS,
    }
    if folder is not None:
        data = {
            "data.task": "dataset",
            "data.path": os.path.join(folder, "pairs.jsonl"),
            "data.train_size": s["pairs"] * FIXED_STEPS,
            "model.path": folder,
        }
    return {
        **data,
        "data.validation_size": 8,
        "data.test_size": 8,
        "data.max_prompt_length": max_prompt,
        "data.max_response_length": max_response,
        "algorithm.beta": BETA,
        "algorithm.loss_type": "sigmoid",
        "algorithm.label_smoothing": 0.0,
        "algorithm.learning_rate": LEARNING_RATE,
        "algorithm.lr_schedule": "constant",
        "algorithm.warmup_steps": 0,
        "algorithm.batch_size": s["pairs"],
        "algorithm.micro_batch_size": 0,
        "algorithm.weight_decay": 0.0,
        "algorithm.max_grad_norm": 1.0,
        "algorithm.precompute_ref": True,
        "trainer.seed": seed,
        "trainer.total_steps": steps,
        "trainer.eval_every": 0,
        "trainer.eval_episodes": 8,
        "trainer.log_every": 1,
        "trainer.checkpoint_every": 0,
        "trainer.tensorboard": False,
        "trainer.progress": "none",
        "trainer.torch_threads": 1,
        "trainer.run_dir": run_dir,
    }


def run_advantage(size: str, seed: int, steps: int) -> dict[str, Any]:
    import advantage

    rec = step_time.advantage_step_clock("train/loss")
    with tempfile.TemporaryDirectory() as tmp:
        folder = None
        if "length" in SIZES[size]:
            folder = os.path.join(tmp, "model")
            os.mkdir(folder)
            fixed_data(size, seed, folder)
        over = advantage_overrides(size, seed, steps, os.path.join(tmp, "run"), folder)
        advantage.train("dpo", quiet=True, **over)
    return rec


def trl_pairs(size: str, seed: int, folder: str | None = None) -> list[dict[str, str]]:
    """The training pairs as TRL rows, in advantage's first-epoch order."""
    from advantage.algos.llm.data import data_order
    from advantage.algos.llm.dpo import pairs_of

    n = SIZES[size]["pairs"] * FIXED_STEPS if folder else TRAIN_SIZE
    pairs = pairs_of(task_of(size, folder).examples("train", n, 0))
    return [
        dict(zip(("prompt", "chosen", "rejected"), pairs[i], strict=True))
        for i in data_order(len(pairs), seed, 0).tolist()
    ]


def run_trl(size: str, seed: int, steps: int) -> dict[str, Any]:
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    s = SIZES[size]
    clock, rec = step_time.trl_step_clock()
    with tempfile.TemporaryDirectory() as tmp:
        folder = None
        if "length" in s:
            folder = os.path.join(tmp, "model")
            os.mkdir(folder)
            tok, model = fixed_data(size, seed, folder)
        else:
            tok, model = step_time.scratch_lm(task_of(size), s, MAX_POSITIONS, seed)
        args = DPOConfig(
            output_dir=tmp,
            report_to=[],
            use_cpu=True,
            bf16=False,
            seed=seed,
            max_steps=steps,
            per_device_train_batch_size=s["pairs"],
            gradient_accumulation_steps=1,
            train_sampling_strategy="sequential",  # the rows are already in advantage's order
            beta=BETA,
            loss_type=["sigmoid"],
            label_smoothing=0.0,
            precompute_ref_log_probs=True,
            max_length=None,
            padding_free=False,
            learning_rate=LEARNING_RATE,
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            max_grad_norm=1.0,
            optim="adamw_torch_fused",  # TRL's default with torch >= 2.8; ours is fused too
            gradient_checkpointing=False,
            logging_steps=1,
            save_strategy="no",
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = DPOTrainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_list(trl_pairs(size, seed, folder)),
            processing_class=tok,
            callbacks=[clock],
        )
        trainer.train()
        history = trainer.state.log_history
    rec["loss"] = [h["loss"] for h in history if "loss" in h]
    return rec


def describe(size: str) -> str:
    s = SIZES[size]
    prompt, response = limits(size)
    if "length" in s:
        vocab = f", vocab {s['vocab']:,}" if s["vocab"] else ""
        return (
            f"{s['layers']}L × h{s['hidden_size']}{vocab}, {s['pairs']} pairs/step, prompts of {prompt - 1} "
            f"and responses of exactly {response} tokens"
        )
    return f"{s['layers']}L × h{s['hidden_size']}, {s['pairs']} pairs/step, ≤ {prompt + response} tokens"


def main() -> None:
    runs = {"trl": run_trl, "advantage": run_advantage}
    step_time.step_main(
        __doc__, "benchmarks.dpo_vs_trl", LIBS, list(SIZES), runs, report, default_sizes=["small", "medium"]
    )


def report(results: list[dict[str, Any]], out: Path, warmup: int, steps: int, load: list[float]) -> None:
    """Write ``out/dpo_vs_trl.{md,json,png}`` for the small/medium rows and ``out/dpo_vs_trl_lengths.*``
    for the equal-work rows (:func:`step_time.step_report`)."""
    fixed = [r for r in results if "length" in SIZES[r["size"]]]
    plain = [r for r in results if "length" not in SIZES[r["size"]]]
    for name, rows in (("dpo_vs_trl", plain), ("dpo_vs_trl_lengths", fixed)):
        if rows:
            write_report(rows, out, warmup, steps, load, name)


def write_report(
    results: list[dict[str, Any]], out: Path, warmup: int, steps: int, load: list[float], name: str
) -> None:
    step_time.step_report(
        results,
        out=out,
        name=name,
        title="DPO step time: advantage vs TRL `DPOTrainer`",
        intro=(
            (
                "Synthetic preference task (K = 2)"
                if name == "dpo_vs_trl"
                else f"Random pairs from a file (prompts of {PROMPT_TOKENS} tokens, chosen and rejected "
                "responses of exactly the row's length plus EOS)"
            )
            + ", Qwen2 scratch models with the same initial weights and the "
            f"same char tokenizer, the same pairs in the same order; β = {BETA}, sigmoid loss, reference "
            "log-probs precomputed once in both, fused AdamW at a constant "
            f"{LEARNING_RATE:g}, weight decay 0, clip 1, fp32, eager attention, no gradient checkpointing; "
            "one torch thread."
        ),
        libs=LIBS,
        sizes={s: describe(s) for s in SIZES},
        targets=TARGETS,
        warmup=warmup,
        steps=steps,
        load=load,
        notes=(
            "Step time is the wall time between consecutive step ends (step CPU time: the process's CPU "
            "time over the same interval, less sensitive to other load on the machine), steps after the "
            "warm-up. Loss and gradient parity of the two on a fixed batch (to 1e-5) is tested in "
            "tests/test_dpo_trl_parity.py."
        ),
        meta={"sizes": SIZES, "beta": BETA, "learning_rate": LEARNING_RATE, "train_size": TRAIN_SIZE},
    )
    if name == "dpo_vs_trl_lengths":
        append_matmul_limits(results, out / f"{name}.md", out / f"{name}.json")


def matmul_limit(size: str) -> dict[str, float]:
    """One step's matrix products (``lm_learn_profile.matmul_shapes``: forward and backward of every
    projection, attention and the output layer; chosen and rejected as a group of two with their prompt),
    each timed alone as a ``torch.mm`` / ``torch.bmm`` of its shape, fp32, one thread: FLOPs and seconds."""
    import torch

    from benchmarks import lm_learn_profile

    torch.set_num_threads(1)
    s = SIZES[size]
    vocab = max(s["vocab"], 64)  # the letters' tokenizer has ~35 tokens; the output layer is negligible
    data = lm_learn_profile.random_batch(vocab, s["pairs"], 2, s["length"] + 1, PROMPT_TOKENS)
    dims = (s["layers"], s["hidden_size"], s["heads"], vocab)
    seconds, flops = lm_learn_profile.time_matmuls(lm_learn_profile.matmul_shapes(dims, data))
    return {"matmul_seconds": seconds, "matmul_flops": flops}


def append_matmul_limits(results: list[dict[str, Any]], md: Path, js: Path) -> None:
    """Add each equal-work row's distance to the matmul limit (achieved FLOP/s of a step over the machine's
    speed on the same products) to the report files."""
    import statistics

    lines = [
        "",
        "A step against this machine's matmul limit: the FLOPs of its matrix products over the step time, "
        "as a fraction of the same products' speed when each is timed alone as a `torch.mm`/`torch.bmm` of "
        "its shape (fp32, one thread):",
        "",
        "| size | matmul GFLOP per step | matmul-only s | library | step s | achieved GFLOP/s | "
        "fraction of matmul limit |",
        "|---|---|---|---|---|---|---|",
    ]
    limits = {}
    for size in dict.fromkeys(r["size"] for r in results):
        lim = limits[size] = matmul_limit(size)
        for lib in LIBS:
            step = statistics.median(
                r["summary"]["step_s"] for r in results if r["size"] == size and r["lib"] == lib
            )
            flops, seconds = lim["matmul_flops"], lim["matmul_seconds"]
            lines.append(
                f"| {size} | {flops / 1e9:.1f} | {seconds:.3f} | {lib} | {step:.3f} | "
                f"{flops / step / 1e9:.1f} | **{seconds / step:.2f}** |"
            )
    md.write_text(md.read_text() + "\n".join(lines) + "\n")
    saved = json.loads(js.read_text())
    saved["matmul_limits"] = limits
    js.write_text(json.dumps(saved, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
