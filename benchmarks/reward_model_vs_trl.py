"""Reward-model step time: advantage's ``reward_model`` trainer vs TRL's ``RewardTrainer``, side by side,
fully offline.

    python -m benchmarks.reward_model_vs_trl   # -> benchmarks/results/reward_model_vs_trl.{md,json,png}

The same task, sizes, pairs, order, initial backbone and tokenizer as ``benchmarks/dpo_vs_trl.py`` (see
its docstring; ``SIZES``, ``TRAIN_SIZE`` and the learning rate are imported from it): the synthetic
preference task with K = 2, 8 pairs per step on a 2-layer × 64 Qwen2 (small) and 32 pairs of up to 59
tokens on a 4-layer × 128 one (medium). TRL trains a ``Qwen2ForSequenceClassification`` (its
``AutoModelForSequenceClassification`` with ``num_labels=1``) whose transformer holds the scratch model's
weights and whose ``score`` row is advantage's head weight for the same seed, so both start as the same
function (advantage's head also has a bias, zero at the start; it cancels in the Bradley–Terry difference).

Matched settings: the pairwise Bradley–Terry loss, mean over the step's pairs, no centring term (TRL
``center_rewards_coefficient=None``, ours ``algorithm.center_rewards_coef=0``), no margin; one optimizer
step per batch; torch's fused AdamW (TRL's default ``optim="adamw_torch_fused"``, ours ``fused=True``) with
betas (0.9, 0.999) (ours ``algorithm.betas``; its default is (0.9, 0.98)), a constant learning rate (ours
``lr_schedule=constant``, ``warmup_steps=0``), weight decay 0, gradient-norm clip 1; fp32, eager attention,
no gradient checkpointing; no length filter (TRL ``max_length=None``; every sequence fits); metrics logged
every step; one torch thread. TRL's own choices are kept: it tokenizes prompt + response + EOS as one text
and right-pads chosen and rejected rows, and logs min/mean/max reward, accuracy and margin with ``.item()``
every step.

Timing, exactly as ``dpo_vs_trl.py`` (``step_time.run_step_workers``, ``step_time.step_report``): a fresh
process per (library, size, seed), interleaved; step time between consecutive step ends (TRL's
``on_step_end``; advantage's per-step metrics row), warm-up excluded; step CPU time, peak RSS and the load
average are recorded. Loss and gradient parity on a fixed batch is tested in
``tests/test_reward_model_trl_parity.py``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import step_time
from benchmarks.dpo_vs_trl import (
    LEARNING_RATE,
    MAX_POSITIONS,
    SIZES,
    TARGETS,
    TRAIN_SIZE,
    describe,
    limits,
    task_of,
)

LIBS = ("trl", "advantage")  # (theirs, ours)
BETAS = (0.9, 0.999)  # TRL's (TrainingArguments adam_beta1, adam_beta2) defaults


def advantage_overrides(size: str, seed: int, steps: int, run_dir: str) -> dict[str, Any]:
    """The ``advantage.train("reward_model", ...)`` settings of one run (matched to :func:`run_trl`)."""
    s = SIZES[size]
    max_prompt, max_response = limits(task_of(size))
    return {
        "data.task": "synthetic",
        **{f"data.{k}": v for k, v in s["task"].items()},
        "data.train_size": TRAIN_SIZE,
        "data.validation_size": 8,
        "data.test_size": 8,
        "data.max_prompt_length": max_prompt,
        "data.max_response_length": max_response,
        "model.arch": "qwen2",
        "model.hidden_size": s["hidden_size"],
        "model.layers": s["layers"],
        "model.heads": s["heads"],
        "model.max_position_embeddings": MAX_POSITIONS,
        "algorithm.loss": "pairwise",
        "algorithm.center_rewards_coef": 0.0,
        "algorithm.learning_rate": LEARNING_RATE,
        "algorithm.lr_schedule": "constant",
        "algorithm.warmup_steps": 0,
        "algorithm.batch_size": s["pairs"],
        "algorithm.micro_batch_size": 0,
        "algorithm.weight_decay": 0.0,
        "algorithm.betas": list(BETAS),
        "algorithm.max_grad_norm": 1.0,
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
        advantage.train(
            "reward_model", quiet=True, **advantage_overrides(size, seed, steps, os.path.join(tmp, "run"))
        )
    return rec


def trl_rows(size: str, seed: int) -> list[dict[str, str]]:
    """The training pairs as TRL rows, in advantage's first-epoch order (``build_items`` + ``data_order``)."""
    from advantage.algos.llm.data import data_order
    from advantage.algos.llm.reward_model import build_items

    examples = task_of(size).examples("train", TRAIN_SIZE, 0)
    items = build_items(examples, "pairwise")
    rows = []
    for i in data_order(len(items), seed, 0).tolist():
        e, (better, worse) = items[i]
        ex = examples[e]
        rows.append({"prompt": ex.prompt, "chosen": ex.responses[better], "rejected": ex.responses[worse]})
    return rows


def trl_model(size: str, seed: int) -> tuple[Any, Any]:
    """TRL's sequence-classification model with advantage's initial backbone and head, and the tokenizer."""
    import copy

    import torch
    from transformers import AutoModelForSequenceClassification

    from advantage.algos.llm.reward_models import RewardModel
    from advantage.lm.model import ATTN_IMPLEMENTATION

    s = SIZES[size]
    task = task_of(size)
    tok, backbone = step_time.scratch_lm(task, s, MAX_POSITIONS, seed)
    ours = RewardModel(backbone, tok, seed=seed)
    config = copy.deepcopy(backbone.config)
    config.num_labels = 1
    model = AutoModelForSequenceClassification.from_config(
        config, attn_implementation=ATTN_IMPLEMENTATION, dtype=torch.float32
    )
    model.model.load_state_dict(backbone.model.state_dict())
    with torch.no_grad():
        model.score.weight.copy_(ours.head.weight)
    return model, tok


def run_trl(size: str, seed: int, steps: int) -> dict[str, Any]:
    from datasets import Dataset
    from trl import RewardConfig, RewardTrainer

    s = SIZES[size]
    model, tok = trl_model(size, seed)
    clock, rec = step_time.trl_step_clock()
    with tempfile.TemporaryDirectory() as tmp:
        args = RewardConfig(
            output_dir=tmp,
            report_to=[],
            use_cpu=True,
            bf16=False,
            seed=seed,
            max_steps=steps,
            per_device_train_batch_size=s["pairs"],
            gradient_accumulation_steps=1,
            train_sampling_strategy="sequential",  # the rows are already in advantage's order
            center_rewards_coefficient=None,
            max_length=None,
            learning_rate=LEARNING_RATE,
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            adam_beta1=BETAS[0],
            adam_beta2=BETAS[1],
            max_grad_norm=1.0,
            optim="adamw_torch_fused",  # TRL's default with torch >= 2.8; ours is fused too
            gradient_checkpointing=False,
            logging_steps=1,
            save_strategy="no",
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = RewardTrainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_list(trl_rows(size, seed)),
            processing_class=tok,
            callbacks=[clock],
        )
        trainer.train()
        history = trainer.state.log_history
    rec["loss"] = [h["loss"] for h in history if "loss" in h]
    return rec


def main() -> None:
    runs = {"trl": run_trl, "advantage": run_advantage}
    step_time.step_main(__doc__, "benchmarks.reward_model_vs_trl", LIBS, list(SIZES), runs, report)


def report(results: list[dict[str, Any]], out: Path, warmup: int, steps: int, load: list[float]) -> None:
    """Write ``out/NAME.{md,json,png}`` (:func:`step_time.step_report`)."""
    step_time.step_report(
        results,
        out=out,
        name="reward_model_vs_trl",
        title="Reward-model step time: advantage vs TRL `RewardTrainer`",
        intro=(
            "Synthetic preference task (K = 2), Qwen2 scratch backbones with the same initial weights and "
            "head, the same char tokenizer, the same pairs in the same order; pairwise Bradley–Terry loss, "
            f"no centring, fused AdamW at a constant {LEARNING_RATE:g}, betas {BETAS}, weight decay 0, "
            "clip 1, fp32, eager attention, no gradient checkpointing; one torch thread."
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
            "tests/test_reward_model_trl_parity.py."
        ),
        meta={"sizes": SIZES, "betas": BETAS, "learning_rate": LEARNING_RATE, "train_size": TRAIN_SIZE},
    )


if __name__ == "__main__":
    main()
