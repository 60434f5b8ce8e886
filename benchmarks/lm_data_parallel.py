"""Tokens per second and peak memory per rank of SFT and GRPO on 1 and 2 ranks (gloo, one torch thread each).

    python -m benchmarks.lm_data_parallel            # medium size (grpo_vs_trl.py's), 40 steps
    python -m benchmarks.lm_data_parallel --quick    # a tiny model and 4 steps: checks the script only

Each configuration is the command a user types, ``advantage train ALGO … trainer.strategy=S
trainer.nproc_per_node=N`` (N = 1: ``single``), started by torch's launcher with this file as the entry
point of each rank (``--rank``), which runs the command and then records its peak resident memory
(``ru_maxrss``). Tokens per second are the run's own ``train/tokens_per_second`` (SFT: target tokens of
the global batch; GRPO: generated tokens, summed over the ranks), the median over the logged rows after
the first (warm-up). The model is ``benchmarks/grpo_vs_trl.py``'s medium one (4 layers × 128); GRPO takes
its batch too (8 prompts × 8 samples, up to 32 new tokens); each rank decodes its share of the prompts
in one batch, from the same slot-seeded draws as one process (``advantage.lm.generate.slot_uniforms``).
SFT runs twice: on 2-digit addition (sequences of about 12 tokens) and on ``reverse`` of 64 letters
(sequences of 137 tokens, ``sft-137``), because how well a step splits depends on its size (``TASKS``).
Writes ``benchmarks/results/lm_data_parallel.{json,md}`` (``--quick`` only prints its table).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.pipeline import ROOT, versions, write_results

MODEL = {
    "medium": {"hidden_size": 128, "layers": 4, "heads": 4},
    "quick": {"hidden_size": 32, "layers": 1, "heads": 2},
}
BATCH = {  # SFT sequences; GRPO prompts × G samples, new tokens; steps
    "medium": {"batch": 32, "prompts": 8, "G": 8, "new_tokens": 32, "steps": 40},
    "quick": {"batch": 8, "prompts": 4, "G": 2, "new_tokens": 8, "steps": 4},
}
SIZES = {k: {**MODEL[k], **BATCH[k]} for k in MODEL}  # grpo_vs_trl.py's medium; the quick check's tiny
# The rows' data. SFT on 2-digit addition is sequences of about 12 tokens (answers of 3-4): each operator
# of the step is then so small that its fixed cost, not its FLOPs, sets the time, and half the rows on
# each rank save little. SFT on `reverse` of 64 letters is sequences of 137 tokens, the regime of real
# SFT data (hundreds of tokens), where the work splits.
TASKS: dict[str, dict[str, Any]] = {
    "sft": {"data.task": "addition"},
    "sft-137": {"data.task": "reverse", "data.length": 64, "data.max_response_length": 65},
    "grpo": {"data.task": "addition"},
}
RUNS = [
    (row, strategy, n)
    for row in ("sft", "sft-137", "grpo")
    for strategy, n in (("single", 1), ("ddp", 2), ("fsdp", 2))
]


def overrides(row: str, size: dict[str, Any], strategy: str, nproc: int, run_dir: Path) -> list[str]:
    algo = row.split("-")[0]
    model = "model" if algo == "sft" else "worker.actor.model"
    batch = (
        {"algorithm.batch_size": size["batch"]}
        if algo == "sft"
        else {
            "data.rollout_batch_size": size["prompts"],
            "worker.rollout.n": size["G"],
            "data.max_response_length": size["new_tokens"],
        }
    )
    over = {
        **TASKS[row],
        "data.train_size": 4096,
        f"{model}.hidden_size": size["hidden_size"],
        f"{model}.layers": size["layers"],
        f"{model}.heads": size["heads"],
        **batch,
        "trainer.total_steps": size["steps"],
        "trainer.log_every": 1 if size["steps"] < 10 else 5,
        "trainer.eval_every": 0,
        "trainer.eval_episodes": 8,
        "trainer.tensorboard": "false",
        "trainer.plot": "false",
        "trainer.torch_threads": 1,
        "trainer.strategy": strategy,
        "trainer.nproc_per_node": nproc,
        "trainer.run_dir": run_dir,
    }
    return [f"{k}={v}" for k, v in over.items()]


def measure(row: str, size: dict[str, Any], strategy: str, nproc: int, work: Path) -> dict[str, Any]:
    name = f"{row}-{strategy}-{nproc}"
    run_dir = work / name
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    cmd += [
        "-m",
        "benchmarks.lm_data_parallel",
        "--rank",
        str(work / f"rss-{name}"),
        "train",
        row.split("-")[0],
    ]
    cmd += ["--quiet"]
    cmd += overrides(row, size, strategy, nproc, run_dir)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(cmd, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rates = [r["train/tokens_per_second"] for r in rows if "train/tokens_per_second" in r][1:]
    rss = [json.loads((work / f"rss-{name}.{r}").read_text()) for r in range(nproc)]
    return {
        "algo": row,
        "task": " ".join(f"{k}={v}" for k, v in TASKS[row].items()),
        "strategy": strategy,
        "ranks": nproc,
        "tokens_per_second": statistics.median(rates),
        "peak_rss_mib_per_rank": rss,
    }


def rank_main(out: str, argv: list[str]) -> int:
    """One rank: the ``advantage`` command, then its peak resident memory in MiB to ``OUT.<rank>``."""
    from advantage.cli import main

    code = main(argv)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    Path(f"{out}.{os.environ.get('RANK', '0')}").write_text(json.dumps(round(peak, 1)))
    return code


def with_speedups(payload: dict[str, Any]) -> dict[str, Any]:
    """Each run's tokens/s over its row's one-rank run (``speedup``), and a ``speedups`` map ``ROW_STRATEGY``
    (what the docs quote)."""
    base = {r["algo"]: r["tokens_per_second"] for r in payload["runs"] if r["ranks"] == 1}
    for r in payload["runs"]:
        r["speedup"] = r["tokens_per_second"] / base[r["algo"]]
    speedups = {f"{r['algo']}_{r['strategy']}": r["speedup"] for r in payload["runs"]}
    return {**payload, "speedups": speedups}


def table(payload: dict[str, Any]) -> list[str]:
    s = payload["size"]
    lines = [
        f"{s['layers']}L × h{s['hidden_size']}; SFT: global batch {s['batch']} sequences; GRPO: "
        f"{s['prompts']} prompts × {s['G']} samples, up to {s['new_tokens']} new tokens; {s['steps']} steps, "
        f"gloo, one torch thread per rank ({payload['cpus']} CPUs, 1-minute load average "
        f"{payload.get('load_average_start', float('nan')):.2f} at the start)",
        "",
        "| row | data | strategy | ranks | tokens/s | × one rank | peak RSS per rank (MiB) |",
        "|---|---|---|---|---|---|---|",
    ]
    base = {r["algo"]: r["tokens_per_second"] for r in payload["runs"] if r["ranks"] == 1}
    for r in payload["runs"]:
        rss = ", ".join(f"{x:.0f}" for x in r["peak_rss_mib_per_rank"])
        lines.append(
            f"| {r['algo']} | `{r.get('task', '')}` | {r['strategy']} | {r['ranks']} "
            f"| {r['tokens_per_second']:.0f} | "
            f"{r['tokens_per_second'] / base[r['algo']]:.2f} | {rss} |"
        )
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a tiny model and 4 steps (checks the script)")
    p.add_argument("--rank", help=argparse.SUPPRESS)  # internal: the entry point of one rank
    p.add_argument("--report", metavar="JSON", help="only write the table again from a saved results file")
    ns, rest = p.parse_known_args()
    if ns.rank:
        sys.exit(rank_main(ns.rank, rest))
    if ns.report:
        payload = json.loads(Path(ns.report).read_text())
        write_results(ROOT / "benchmarks" / "results", "lm_data_parallel", with_speedups(payload), table)
        return
    size = SIZES["quick" if ns.quick else "medium"]
    head = versions(os.getloadavg()[0])  # the machine, and its load when the runs started
    with tempfile.TemporaryDirectory() as tmp:
        runs = [measure(algo, size, strategy, n, Path(tmp)) for algo, strategy, n in RUNS]
    payload = with_speedups({**head, "size": size, "cpus": os.cpu_count(), "runs": runs})
    if ns.quick:  # a check of the script, not a measurement: printed, not saved
        print("\n".join(table(payload)))
    else:
        write_results(ROOT / "benchmarks" / "results", "lm_data_parallel", payload, table)


if __name__ == "__main__":
    main()
