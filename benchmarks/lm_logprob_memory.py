"""Peak memory of the per-token log-prob path: the full-vocabulary logits against the chunked path.

Shape of a GRPO learn step: ``B × T`` response tokens (64 × 256 by default) through an output layer of
``V`` words (32,000) from hidden size ``H`` (256). Each variant runs forward and backward of
``sum(w · log π(y))`` in a fresh process with one torch thread; the extra peak is the process's peak RSS
(``ru_maxrss``) minus its RSS just before the step, once the inputs exist. The full path is
``token_logprobs(F.linear(h, W), y)`` (what the library did before: the ``[B·T, V]`` fp32 logits and their
softmax are held for the backward); the chunked path is :func:`advantage.lm.chunked.chunked_logprobs`.
Also reports the largest gradient difference between the two.

    python -m benchmarks.lm_logprob_memory            # 64 × 256 × 32k, writes results/lm_logprob_memory.*
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def child(variant: str, tokens: int, hidden: int, vocab: int, out: str) -> None:
    import torch
    import torch.nn.functional as F

    from advantage.lm.chunked import chunked_logprobs, token_logprobs

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    h = torch.randn(tokens, hidden, generator=g).requires_grad_()
    w = (torch.randn(vocab, hidden, generator=g) / hidden**0.5).requires_grad_()
    y = torch.randint(0, vocab, (tokens,), generator=g)
    weights = torch.randn(tokens, generator=g)
    # warm the allocator and kernels on a small slice so the measured step sees no one-time costs
    small = slice(0, 8)
    token_logprobs(F.linear(h[small], w), y[small]).sum().backward()
    chunked_logprobs(h[small], w, y[small])[0].sum().backward()
    h.grad = w.grad = None
    before = _rss_bytes()
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    logp = token_logprobs(F.linear(h, w), y) if variant == "full" else chunked_logprobs(h, w, y)[0]
    (weights * logp).sum().backward()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    torch.save({"h": h.grad, "w": w.grad}, out + ".grads")
    result = {
        "variant": variant,
        "extra_peak_bytes": peak - before,
        "peak_before_step_bytes": peak_before,
        "rss_before_step_bytes": before,
        "seconds": seconds,
    }
    Path(out).write_text(json.dumps(result))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=32_000)
    ap.add_argument("--child", nargs=2, metavar=("VARIANT", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=RESULTS / "lm_logprob_memory")
    args = ap.parse_args()
    tokens = args.batch * args.length
    if args.child:
        child(args.child[0], tokens, args.hidden, args.vocab, args.child[1])
        return

    import tempfile

    import torch

    rows = []
    grads = {}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in ("full", "chunked"):
            out = f"{tmp}/{variant}.json"
            cmd = [sys.executable, __file__, "--batch", str(args.batch), "--length", str(args.length)]
            cmd += ["--hidden", str(args.hidden), "--vocab", str(args.vocab), "--child", variant, out]
            subprocess.run(cmd, check=True)
            rows.append(json.loads(Path(out).read_text()))
            grads[variant] = torch.load(out + ".grads")
    full_tensor = tokens * args.vocab * 4
    diff = max(float((grads["full"][k] - grads["chunked"][k]).abs().max()) for k in ("h", "w"))
    scale = max(float(grads["full"][k].abs().max()) for k in ("h", "w"))
    result = {
        "shape": {"batch": args.batch, "length": args.length, "hidden": args.hidden, "vocab": args.vocab},
        "full_fp32_logits_bytes": full_tensor,
        "rows": rows,
        "chunked_extra_fraction_of_full_tensor": rows[1]["extra_peak_bytes"] / full_tensor,
        "full_extra_fraction_of_full_tensor": rows[0]["extra_peak_bytes"] / full_tensor,
        "max_abs_grad_difference": diff,
        "max_abs_grad": scale,
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cpu": platform.machine(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    mib = 1024**2
    lines = [
        "### Log-prob path peak memory: full-vocabulary logits vs chunked",
        "",
        f"B × T × V = {args.batch} × {args.length} × {args.vocab:,}, hidden {args.hidden}; forward + "
        f"backward of Σ w·log π(y), fp32, one torch thread, a fresh process each. The full fp32 logits "
        f"tensor is {full_tensor / mib:,.0f} MiB.",
        "",
        "| path | extra peak MiB | fraction of the full logits tensor | seconds |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['extra_peak_bytes'] / mib:,.0f} | "
            f"{r['extra_peak_bytes'] / full_tensor:.3f} | {r['seconds']:.2f} |"
        )
    lines += ["", f"Largest gradient difference, chunked vs full: {diff:.2e} (largest gradient {scale:.2e})."]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
