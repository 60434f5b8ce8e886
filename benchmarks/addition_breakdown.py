"""Held-out greedy accuracy and pass@16 of addition runs, split by operand length.

    python -m benchmarks.addition_breakdown runs/sft_addition runs/grpo_addition [...]
    python -m benchmarks.addition_breakdown RUN ... --name addition_breakdown   # also write the results

``--name NAME`` writes ``benchmarks/results/NAME.{json,md}`` (the runs are labelled by ``--labels``);
docs/algorithms/grpo.md quotes ``addition_breakdown`` for seed 0's SFT and GRPO runs of
``python -m benchmarks.addition_example_seeds --runs-dir DIR`` (``DIR/sft_seed0`` and ``DIR/grpo_seed0``).

For each run folder (an ``sft`` or ``grpo`` run on ``data.task=addition``): the first ``--prompts``
validation prompts (the ones ``eval/accuracy`` uses), split into those whose operands both have the full
digit count and those with a shorter operand; greedy accuracy, pass@16 and the mean per-sample accuracy at
temperatures 0.6 and 1. It shows which errors reinforcement learning can fix by sharpening (the right
answer is already among the samples) and which it has to learn (docs/algorithms/grpo.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from benchmarks.pipeline import ROOT, write_results

if TYPE_CHECKING:
    from advantage.algos.llm.policy import LMPolicy


def breakdown(
    run_dir: str, prompts: int, samples: int, seed: int
) -> list[tuple[str, float, int, float, float, float]]:
    """``(group, temperature, n, greedy, pass@samples, mean accuracy)`` rows of one run."""
    import advantage

    policy = cast("LMPolicy", advantage.Run.load(run_dir).policy)  # an sft or grpo run's
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
    p.add_argument("--name", help="write benchmarks/results/NAME.{json,md} (default: print only)")
    p.add_argument("--labels", nargs="+", help="a label per run for the results file (default: the folders)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args()
    torch.set_num_threads(1)
    labels = args.labels or args.runs
    if len(labels) != len(args.runs):
        p.error(f"--labels has {len(labels)} labels for {len(args.runs)} runs")
    res: dict[str, Any] = {"prompts": args.prompts, "samples": args.samples, "seed": args.seed, "runs": {}}
    for label, run in zip(labels, args.runs, strict=True):
        rows = breakdown(run, args.prompts, args.samples, args.seed)
        res["runs"][label] = {
            "rows": [
                {"operands": g, "temperature": t, "n": n, "greedy": gr, "pass_at_k": pk, "mean_accuracy": m}
                for g, t, n, gr, pk, m in rows
            ],
            # greedy accuracy over all the prompts (the run's eval/accuracy)
            "greedy_all": sum(r[2] * r[3] for r in rows if r[1] == 0.6)
            / max(sum(r[2] for r in rows if r[1] == 0.6), 1),
        }
    if args.name:
        write_results(Path(args.out), args.name, res, table)
    else:
        print("\n".join(table(res)))


def table(res: dict[str, Any]) -> list[str]:
    k = res["samples"]
    lines = [
        f"| run | operands | T | n | greedy | pass@{k} | mean sample accuracy |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in res["runs"].items():
        for x in r["rows"]:
            lines.append(
                f"| {label} | {x['operands']} | {x['temperature']} | {x['n']} | {x['greedy']:.3f} "
                f"| {x['pass_at_k']:.3f} | {x['mean_accuracy']:.3f} |"
            )
    return lines


if __name__ == "__main__":
    main()
