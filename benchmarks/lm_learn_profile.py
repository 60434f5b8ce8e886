"""Where a GRPO learn step's time goes at realistic response lengths, and how close it is to the matmul limit.

One learn step of the library's GRPO path on a random model: the packed log-probs of G responses per
prompt (:func:`advantage.lm.packing.generation_logprobs`, the lean forward and its hand-written backward),
the PPO-clip loss aggregated per token, backward, gradient clipping and fused AdamW. Sizes: ``4x128``
(4 layers, hidden 128, the 8 × 8-completion batch of ``grpo_vs_trl.py``'s medium size, a 1,000-word
vocabulary) and ``8x256`` (8 layers, hidden 256, a 32,000-word vocabulary so the output layer costs what it
costs in real models). One torch thread.

Reported per size and response length:

* step seconds (median of ``--steps`` after one warm-up step), and trained tokens per second;
* the share of the step in each kind of operator, from ``torch.profiler`` (matmuls, attention, the output
  layer's log-softmax, elementwise/normalisation, the optimizer, everything else), self CPU time;
* **the matmul limit**: every matrix product the step must do (forward and backward of each projection,
  the output layer, attention's score and value products) timed alone as a ``torch.mm`` / ``torch.bmm``
  of the same shape in fp32 on one thread. Their sum is the time a step would take if it did nothing but
  its matmuls at this machine's speed; ``matmul limit / step time`` is the fraction of that physical limit
  the step achieves (equivalently, achieved FLOP/s over the machine's FLOP/s on these shapes).

    python -m benchmarks.lm_learn_profile                       # both sizes at 32, 128 and 256 tokens
    python -m benchmarks.lm_learn_profile --sizes 8x256 --lengths 256 --steps 2
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).parent / "results"
# name: (layers, hidden, heads, vocab, prompts, completions per prompt)
SIZES = {"4x128": (4, 128, 4, 1_000, 8, 8), "8x256": (8, 256, 8, 32_000, 8, 8)}
PROMPT_LEN = 16
CATEGORIES = {
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm"),
    "attention": ("scaled_dot_product", "flash_attention", "_efficient_attention", "aten::_softmax_backward"),
    "log-softmax": ("logsumexp", "log_softmax", "aten::exp", "gather", "scatter"),
    "optimizer": ("adam", "foreach", "clip_grad", "aten::_foreach"),
}


def build(size: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM, Qwen2Config

    layers, hidden, heads, vocab, _, _ = SIZES[size]
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="sdpa").train()


def batch(size: str, length: int, prompt_len: int = PROMPT_LEN) -> tuple[torch.Tensor, ...]:
    """Random ``(prompt_ids, prompt_mask, response_ids, lengths, advantages)`` of one GRPO step of ``size``
    with responses of ``length`` tokens."""
    _, _, _, vocab, prompts, group = SIZES[size]
    return random_batch(vocab, prompts, group, length, prompt_len)


def random_batch(
    vocab: int, prompts: int, group: int, length: int, prompt_len: int
) -> tuple[torch.Tensor, ...]:
    """:func:`batch` for any vocabulary, ``prompts`` × ``group`` rows and prompt length."""
    g = torch.Generator().manual_seed(1)
    rows = prompts * group
    prompt_ids = torch.randint(3, vocab, (prompts, prompt_len), generator=g).repeat_interleave(group, 0)
    prompt_mask = torch.ones_like(prompt_ids)
    response_ids = torch.randint(3, vocab, (rows, length), generator=g)
    lengths = torch.full((rows,), length)
    advantages = torch.randn(rows, generator=g)
    return prompt_ids, prompt_mask, response_ids, lengths, advantages


def learn_step(model: torch.nn.Module, opt: torch.optim.Optimizer, data: tuple[torch.Tensor, ...]) -> None:
    from advantage.lm.packing import generation_logprobs
    from advantage.math import aggregate, ppo_clip
    from advantage.optim import clip_grad_norm

    prompt_ids, prompt_mask, response_ids, lengths, advantages = data
    logp = generation_logprobs(model, prompt_ids, prompt_mask, response_ids, lengths)  # [B, T]
    mask = torch.ones_like(logp)
    per_token, _ = ppo_clip(
        logp, logp.detach(), advantages[:, None].expand_as(logp), mask, with_metrics=False
    )
    loss = aggregate(per_token, mask, "token_mean")
    opt.zero_grad(set_to_none=True)
    loss.backward()
    clip_grad_norm([p for p in model.parameters() if p.grad is not None], 1.0)
    opt.step()


def matmul_shapes(
    dims: tuple[int, int, int, int], data: tuple[torch.Tensor, ...]
) -> list[tuple[str, int, int, int, int]]:
    """``(kind, batch, M, K, N)`` of every matrix product of one packed forward + backward: the rows of
    :func:`advantage.lm.packing.pack_prompts` (``R × L`` slots, pads included, as the lean forward
    computes them), attention over each row, the output layer on the predicting positions. ``dims``:
    ``(layers, hidden, heads, vocab)``."""
    from advantage.lm.packing import pack_prompts, response_segments

    layers, hidden, heads, vocab = dims
    prompt_ids, _, response_ids, lengths, _ = data
    prompts, responses = prompt_ids.tolist(), response_ids.tolist()
    segments = response_segments(prompts, responses)
    packed = pack_prompts([(p, [responses[r] for r in rows]) for p, rows in segments], 0)
    R, L = packed.input_ids.shape
    tokens, predicted = R * L, int(lengths.sum())
    d = hidden // heads
    shapes: list[tuple[str, int, int, int, int]] = []
    for _ in range(layers):
        for k, n in ((hidden, 3 * hidden), (hidden, hidden), (hidden, 8 * hidden), (4 * hidden, hidden)):
            # forward y = x W, backward dx = dy Wᵀ and dW = xᵀ dy
            shapes += [("mm", 1, tokens, k, n), ("mm", 1, tokens, n, k), ("mm", 1, k, tokens, n)]
        # attention over each packed row: scores Q Kᵀ and output P V, forward and two backward products each
        for m, k, n in ((L, d, L), (L, L, d)):
            shapes += [("bmm", R * heads, m, k, n), ("bmm", R * heads, m, n, k), ("bmm", R * heads, k, m, n)]
    # output layer on the predicting positions only
    shapes += [("mm", 1, predicted, hidden, vocab), ("mm", 1, predicted, vocab, hidden)]
    shapes += [("mm", 1, hidden, predicted, vocab)]
    return shapes


def time_matmuls(shapes: list[tuple[str, int, int, int, int]], repeats: int = 3) -> tuple[float, float]:
    """Seconds and FLOPs of doing every product once, each timed alone (best of ``repeats``)."""
    total_s, total_flops = 0.0, 0.0
    cache: dict[tuple[str, int, int, int, int], float] = {}
    for shape in shapes:
        if shape not in cache:
            kind, b, m, k, n = shape
            a = torch.randn(b, m, k) if kind == "bmm" else torch.randn(m, k)
            c = torch.randn(b, k, n) if kind == "bmm" else torch.randn(k, n)
            op = torch.bmm if kind == "bmm" else torch.mm
            op(a, c)
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                op(a, c)
                best = min(best, time.perf_counter() - t0)
            cache[shape] = best
        total_s += cache[shape]
        _, b, m, k, n = shape
        total_flops += 2.0 * b * m * k * n
    return total_s, total_flops


def profile_step(model: torch.nn.Module, opt: torch.optim.Optimizer, data: tuple[torch.Tensor, ...]) -> dict:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        learn_step(model, opt, data)
    shares = dict.fromkeys([*CATEGORIES, "other"], 0.0)
    for ev in prof.key_averages():
        name = ev.key.lower()
        kind = next((c for c, keys in CATEGORIES.items() if any(k.lower() in name for k in keys)), "other")
        shares[kind] += ev.self_cpu_time_total / 1e6
    total = sum(shares.values())
    return {k: v / total for k, v in shares.items()}


def measure(size: str, length: int, steps: int) -> dict:
    model = build(size)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    data = batch(size, length)
    learn_step(model, opt, data)  # warm-up
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        learn_step(model, opt, data)
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    shares = profile_step(model, opt, data)
    limit_s, flops = time_matmuls(matmul_shapes(SIZES[size][:4], data))
    rows = data[2].numel()
    return {
        "size": size,
        "response_tokens": length,
        "trained_tokens": rows,
        "step_seconds": step_s,
        "trained_tokens_per_second": rows / step_s,
        "matmul_flops": flops,
        "achieved_gflops": flops / step_s / 1e9,
        "matmul_limit_seconds": limit_s,
        "machine_gflops_on_these_shapes": flops / limit_s / 1e9,
        "fraction_of_matmul_limit": limit_s / step_s,
        "time_shares": shares,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="4x128,8x256")
    ap.add_argument("--lengths", default="32,128,256")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS / "lm_learn_profile")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    for size in args.sizes.split(","):
        for length in (int(x) for x in args.lengths.split(",")):
            r = measure(size, length, args.steps)
            rows.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "time_shares"}), flush=True)
    result = {
        "rows": rows,
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cpu": platform.machine(),
        },
        "threads": 1,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    kinds = [*CATEGORIES, "other"]
    lines = [
        "### GRPO learn step: time split and distance to the matmul limit (one torch thread, fp32)",
        "",
        "| size | response tokens | step s | trained tokens/s | achieved GFLOP/s | matmul-only GFLOP/s "
        "| fraction of matmul limit | " + " | ".join(f"{k} %" for k in kinds) + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(kinds),
    ]
    for r in rows:
        shares = " | ".join(f"{100 * r['time_shares'][k]:.0f}" for k in kinds)
        lines.append(
            f"| {r['size']} | {r['response_tokens']} | {r['step_seconds']:.2f} | "
            f"{r['trained_tokens_per_second']:,.0f} | {r['achieved_gflops']:.1f} | "
            f"{r['machine_gflops_on_these_shapes']:.1f} | {r['fraction_of_matmul_limit']:.2f} | {shares} |"
        )
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
