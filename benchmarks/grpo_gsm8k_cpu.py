"""What ``examples/grpo_gsm8k.yaml`` costs on a CPU with a tiny model of one's own: the three commands of a
GSM8K run (SFT, GRPO, eval) on ``examples/data/gsm8k.jsonl``, with a local model folder built here (a tiny
Qwen2 and a BPE tokenizer trained with ``tokenizers``, no pad token: :mod:`advantage.lm.tiny_folder`).

    python -m benchmarks.grpo_gsm8k_cpu   # -> benchmarks/results/grpo_gsm8k_cpu.{md,json}  (about a minute)

Each command runs as its own process with one torch thread, timed from start to exit (imports included);
peak memory is the process's maximum resident set (``wait4``'s ``ru_maxrss``); training seconds per step
come from the run's own ``metrics.jsonl`` (its ``time`` at the last step, evaluations excluded).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
DATA = ROOT / "examples" / "data" / "gsm8k.jsonl"
CONFIG = ROOT / "examples" / "grpo_gsm8k.yaml"
MODEL = {"hidden_size": 64, "layers": 2, "heads": 4, "kv_heads": 2, "vocab_size": 400}
SFT_STEPS = 30


def _run(args: list[str]) -> dict[str, float]:
    """``python -m advantage.cli ARGS`` in its own process: wall seconds and peak RSS in MiB."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "advantage.cli", *args], env=env, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"command failed ({proc.returncode}): advantage {' '.join(args)}")
    return {"wall_seconds": wall, "peak_rss_mib": usage.ru_maxrss / 1024}


def _train_seconds(run_dir: Path) -> tuple[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    last = max((r for r in rows if "time" in r), key=lambda r: r["step"])
    return last["step"], last["time"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(OUT), help="folder for grpo_gsm8k_cpu.{md,json}")
    out = Path(p.parse_args().out)
    from advantage.envs.text.samples import word_problems
    from advantage.lm.tiny_folder import save_tiny_folder

    with tempfile.TemporaryDirectory() as tmp:
        tmp_dir = Path(tmp)
        texts = [f"{p['question']} {p['reasoning']} \\boxed{{{p['answer']}}}" for p in word_problems(500, 1)]
        m = MODEL
        folder = save_tiny_folder(
            tmp_dir / "tiny-qwen2",
            texts,
            vocab_size=m["vocab_size"],
            hidden_size=m["hidden_size"],
            layers=m["layers"],
            heads=m["heads"],
            kv_heads=m["kv_heads"],
        )
        sft_dir, grpo_dir = tmp_dir / "sft_gsm8k", tmp_dir / "grpo_gsm8k"
        common = ["trainer.tensorboard=false", "trainer.torch_threads=1"]
        rows = {}
        rows["sft"] = _run(
            [
                "train",
                "sft",
                "--quiet",
                "data.task=math",
                f"data.path={DATA}",
                "data.max_response_length=48",
                f"model.path={folder}",
                "algorithm.batch_size=8",
                "algorithm.warmup_steps=5",
                f"trainer.total_steps={SFT_STEPS}",
                "trainer.eval_every=0",
                f"trainer.run_dir={sft_dir}",
                *common,
            ]
        )
        rows["sft"].update(zip(("steps", "train_seconds"), _train_seconds(sft_dir), strict=True))
        rows["grpo"] = _run(
            [
                "train",
                "grpo",
                "--quiet",
                "--config",
                str(CONFIG),
                f"data.path={DATA}",
                f"worker.actor.model.path={sft_dir}",
                f"trainer.run_dir={grpo_dir}",
                *common,
            ]
        )
        rows["grpo"].update(zip(("steps", "train_seconds"), _train_seconds(grpo_dir), strict=True))
        rows["eval"] = _run(["eval", str(grpo_dir), "--samples", "8", "--json"])
        import yaml

        config = yaml.safe_load((grpo_dir / "config.yaml").read_text())
    import torch
    import transformers

    result = {
        "model": MODEL,
        "data": str(DATA.relative_to(ROOT)),
        "max_prompt_length": config["data"]["max_prompt_length"],
        "train_size": config["data"]["train_size"],
        "rows": rows,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "grpo_gsm8k_cpu.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "### The three commands of a GSM8K run on CPU, tiny model of one's own",
        "",
        f"`examples/grpo_gsm8k.yaml` on `{result['data']}` ({result['train_size']} training rows; "
        f"data.max_prompt_length measured: {result['max_prompt_length']} tokens), a local Qwen2 folder "
        f"(hidden {MODEL['hidden_size']}, {MODEL['layers']} layers, {MODEL['vocab_size']}-token BPE, no pad "
        f"token), one torch thread per process. torch {result['torch']}, transformers "
        f"{result['transformers']}, {result['machine']}, {result['cpus']} CPUs.",
        "",
        "| command | steps | training s | s / step | whole process s | peak RSS MiB |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        steps = r.get("steps")
        per = f"{r['train_seconds'] / steps:.2f}" if steps else "-"
        train = f"{r['train_seconds']:.1f}" if steps else "-"
        wall, rss = f"{r['wall_seconds']:.1f}", f"{r['peak_rss_mib']:.0f}"
        lines.append(f"| {name} | {steps or '-'} | {train} | {per} | {wall} | {rss} |")
    lines += [
        "",
        "SFT: `advantage train sft data.task=math` (the targets are the GSM8K reasoning with `\\boxed{N}`); "
        "GRPO: the example config from that run (8 prompts x 8 completions of up to 48 tokens per step); "
        "eval: `advantage eval RUN --samples 8` on the test split. The whole-process time includes the "
        "imports (torch, transformers) and the final evaluation and checkpoint.",
    ]
    (out / "grpo_gsm8k_cpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
