"""One GRPO configuration on a CUDA device: a randomly initialised 0.5B-parameter Qwen2 in bf16.

    python -m benchmarks.grpo_gpu_step --out benchmarks/results   # needs a CUDA device; a few minutes

The model has the shapes of Qwen2.5-0.5B (hidden 896, 24 layers, 14 query / 2 key-value heads, MLP 4864,
vocabulary 151 936, tied embeddings: 494 M parameters), randomly initialised from the config, so nothing
is downloaded. The tokenizer is the local character tokenizer of the ``addition`` task
(``build_char_tokenizer``); the model's vocabulary is larger than the tokenizer's, and the ids beyond it
decode to nothing. The folder is written with ``save_pretrained`` and trained by the ordinary trainer,
``advantage.train("grpo", worker.actor.model.path=..., worker.actor.model.dtype=bfloat16,
trainer.device=cuda)``: the same code path a user runs.

A random model seldom emits EOS, so almost every completion runs to ``data.max_response_length``: the
step does the full amount of generation and learning. Its rewards are all 0 (the answers are noise), so
the advantages are 0; the forward and backward passes and the optimizer step still run in full.

Reported per configuration, over the steps after ``--warmup``: median step time (between consecutive
step ends), the trainer's phase times (``train/time/{generate,score,learn}``), generated tokens/s
(response tokens / step time), trained tokens/s (prompt + response tokens through the policy's forward
and backward / learn time), and the peak GPU memory (``torch.cuda.max_memory_allocated``) of the run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

# Qwen2.5-0.5B's published config (hidden, layers, heads, kv heads, MLP, vocabulary, RoPE base).
QWEN2_05B = {
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "vocab_size": 151936,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
# (prompts per step, G, new tokens, worker.actor.micro_batch_size: 0 = the whole rollout in one pass).
# The log-softmax over 151 936 logits per token is what fills the memory: 128 × 520 tokens in one pass
# would need about 37 GiB for the fp32 logits alone, so the larger rollout goes through in micro-batches.
CONFIGS = {"64x256": (8, 8, 256, 0), "128x512": (16, 8, 512, 32)}


def build_model_folder(path: Path, max_positions: int) -> int:
    """Write the random bf16 0.5B model and the task's tokenizer to ``path``; return the parameter count."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from advantage.envs.text import make_task
    from advantage.lm.model import build_char_tokenizer

    task = make_task("addition", digits=3)
    tok = build_char_tokenizer(task.alphabet, extra_tokens=task.special_tokens)
    cfg = Qwen2Config(
        **QWEN2_05B,
        max_position_embeddings=max_positions,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    n = sum(p.numel() for p in model.parameters())
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return n


def _mean_prompt_tokens(folder: Path) -> float:
    """Mean token count of the task's training prompts under the folder's tokenizer."""
    from transformers import AutoTokenizer

    from advantage.envs.text import make_task

    tok = AutoTokenizer.from_pretrained(folder)
    prompts = [e.prompt for e in make_task("addition", digits=3).examples("train", 256, 0)]
    return statistics.mean(len(tok(p)["input_ids"]) for p in prompts)


def run_config(name: str, folder: Path, steps: int, warmup: int, device: str = "cuda") -> dict[str, Any]:
    import torch

    import advantage

    prompts, G, new_tokens, micro = CONFIGS[name]
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as tmp:
        settings: dict[str, Any] = {
            "data.task": "addition",
            "data.digits": 3,
            "data.train_size": 2000,
            "data.validation_size": 8,
            "data.test_size": 8,
            "data.rollout_batch_size": prompts,
            "data.max_response_length": new_tokens,
            "worker.rollout.n": G,
            "worker.rollout.temperature": 1.0,
            "worker.actor.model.path": str(folder),
            "worker.actor.model.dtype": "bfloat16",
            "worker.actor.learning_rate": 1e-6,
            "worker.actor.ppo_epochs": 1,
            "worker.actor.micro_batch_size": micro,
            "worker.actor.kl_coef": 0.0,
            "trainer.device": device,
            "trainer.seed": 0,
            "trainer.total_steps": steps,
            "trainer.eval_every": 0,
            "trainer.eval_episodes": 8,
            "trainer.log_every": 1,
            "trainer.tensorboard": False,
            "trainer.progress": "none",
            "trainer.run_dir": str(Path(tmp) / "run"),
        }
        t0 = time.perf_counter()
        run = advantage.train(
            "grpo",
            quiet=True,
            **settings,
        )
        wall = time.perf_counter() - t0
        rows = [r for r in run.metrics if "train/time/learn" in r]
    rows.sort(key=lambda r: r["step"])
    ends = [r["time"] for r in rows]
    step_times = [b - a for a, b in itertools.pairwise(ends)][max(warmup - 1, 0) :]
    kept = rows[warmup:]
    completions = prompts * G
    gen_tokens = [r["train/response/length_mean"] * completions for r in kept]
    med = statistics.median(step_times)
    learn = statistics.median(r["train/time/learn"] for r in kept)
    prompt_len = _mean_prompt_tokens(folder)
    return {
        "config": name,
        "prompts": prompts,
        "G": G,
        "max_new_tokens": new_tokens,
        "micro_batch_size": micro,
        "steps_timed": len(step_times),
        "step_s_median": med,
        "generate_s": statistics.median(r["train/time/generate"] for r in kept),
        "score_s": statistics.median(r["train/time/score"] for r in kept),
        "learn_s": learn,
        "response_len_mean": statistics.mean(r["train/response/length_mean"] for r in kept),
        "generated_tokens_per_s": statistics.median(gen_tokens) / med,
        "trained_tokens_per_s": statistics.median(
            (r["train/response/length_mean"] + prompt_len) * completions for r in kept
        )
        / learn,
        "peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else 0.0,
        "run_wall_s": wall,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = p.parse_args()

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("grpo_gpu_step.py needs a CUDA device (torch.cuda.is_available() is False)")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "qwen2-0.5b-random"
        n_params = build_model_folder(folder, max_positions=1024)
        print(f"model: {n_params / 1e6:.1f} M parameters, bf16, {torch.cuda.get_device_name()}", flush=True)
        for name in args.configs:
            r = run_config(name, folder, args.steps, args.warmup)
            r["parameters"] = n_params
            print(json.dumps(r), flush=True)
            results.append(r)
    env = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "grpo_gpu_step.json").write_text(json.dumps({"env": env, "results": results}, indent=2))
    lines = [
        f"# GRPO step, random Qwen2 0.5B ({n_params / 1e6:.0f} M parameters), bf16, {env['device']}",
        "",
        f"torch {env['torch']} (CUDA {env['cuda']}); `python -m benchmarks.grpo_gpu_step`; "
        f"{args.steps} steps per configuration, the first {args.warmup} not timed; β = 0, μ = 1, "
        "one optimizer step per rollout, fused AdamW.",
        "",
        "| prompts × G | new tokens | micro-batch | step (median) | generate | score | learn "
        "| generated tok/s | trained tok/s | peak GPU memory |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['prompts']} × {r['G']} | {r['max_new_tokens']} (mean {r['response_len_mean']:.0f}) "
            f"| {r['micro_batch_size'] or 'whole rollout'} | {r['step_s_median']:.2f} s "
            f"| {r['generate_s']:.2f} s | {r['score_s']:.3f} s "
            f"| {r['learn_s']:.2f} s | {r['generated_tokens_per_s']:,.0f} | {r['trained_tokens_per_s']:,.0f} "
            f"| {r['peak_gpu_gib']:.1f} GiB |"
        )
    (args.out / "grpo_gpu_step.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
