"""Held-out greedy accuracy and pass@16 of addition runs, split by operand length.

    python benchmarks/addition_breakdown.py runs/sft_addition runs/grpo_addition [...]

For each run folder (an ``sft`` or ``grpo`` run on ``data.task=addition``): the first ``--prompts``
validation prompts (the ones ``eval/accuracy`` uses), split into those whose operands both have the full
digit count and those with a shorter operand; greedy accuracy, pass@16 and the mean per-sample accuracy at
temperatures 0.6 and 1. It shows which errors reinforcement learning can fix by sharpening (the right
answer is already among the samples) and which it has to learn (docs/algorithms/grpo.md).
"""

from __future__ import annotations

import argparse

import torch


def breakdown(
    run_dir: str, prompts: int, samples: int, seed: int
) -> list[tuple[str, float, int, float, float, float]]:
    """``(group, temperature, n, greedy, pass@samples, mean accuracy)`` rows of one run."""
    import advantage

    policy = advantage.Run.load(run_dir).policy
    task = policy.task
    examples = task.examples("validation", prompts, policy.cfg.data.seed)
    full = 10 ** (task.digits - 1)
    group = ["full" if min(e.meta["a"], e.meta["b"]) >= full else "short" for e in examples]
    _, greedy = policy.complete([e.prompt for e in examples])
    right = [task.verify(g, e).correct for g, e in zip(greedy, examples, strict=True)]
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for temperature in (0.6, 1.0):
        _, texts = policy.complete(
            [e.prompt for e in examples], temperature=temperature, samples=samples, generator=gen
        )
        hits = [
            sum(task.verify(x, e).correct for x in texts[i * samples : (i + 1) * samples])
            for i, e in enumerate(examples)
        ]
        for name in ("full", "short"):
            idx = [i for i, g in enumerate(group) if g == name]
            n = max(len(idx), 1)
            rows.append(
                (
                    name,
                    temperature,
                    len(idx),
                    sum(right[i] for i in idx) / n,
                    sum(hits[i] > 0 for i in idx) / n,
                    sum(hits[i] / samples for i in idx) / n,
                )
            )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run folders of sft or grpo runs on data.task=addition")
    p.add_argument("--prompts", type=int, default=200, help="validation prompts (eval/accuracy's 200)")
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"| run | operands | T | n | greedy | pass@{args.samples} | mean sample accuracy |")
    print("|---|---|---|---|---|---|---|")
    for run in args.runs:
        for name, temperature, n, greedy, passk, mean in breakdown(
            run, args.prompts, args.samples, args.seed
        ):
            print(f"| {run} | {name} | {temperature} | {n} | {greedy:.3f} | {passk:.3f} | {mean:.3f} |")


if __name__ == "__main__":
    main()
