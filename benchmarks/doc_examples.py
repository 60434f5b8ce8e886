"""The example outputs the docs show, from the documented commands (a few seconds on CPU).

    python -m benchmarks.doc_examples   # -> benchmarks/results/doc_examples.json and doc_examples_*.md

Each command runs in a fresh process with one torch thread, in a temporary working directory (so the run
folders have their default names, ``runs/<algo>-<env>-<time>``, as a user sees them):

    advantage train q_learning preset=frozenlake          # docs/index.md: the first and last lines printed
    advantage eval RUN --episodes 1000 --json             # docs/index.md: the JSON object
    (RUN/metrics.jsonl)                                   # docs/concepts.md: a training row and the last row
    advantage train value_iteration env.id=FrozenLake-v1 trainer.run_dir=runs/vi
    advantage eval runs/vi --episodes 1000 --json         # docs/algorithms/tabular.md

The pages include the ``doc_examples_*.md`` files as they are; ``doc_examples.json`` holds the same
outputs as data.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.pipeline import ROOT, run_cli, versions


def fenced(lang: str, lines: list[str]) -> str:
    return "\n".join([f"```{lang}", *lines, "```"]) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args()
    out = Path(args.out)
    res: dict[str, Any] = versions(0.0)
    del res["load_average_start"]  # nothing here is timed
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        printed, _ = run_cli("train", "q_learning", "preset=frozenlake", "--quiet", cwd=work)
        lines = printed.strip().splitlines()
        run = lines[0].removeprefix("run folder: ").strip()
        rows = [json.loads(x) for x in (work / run / "metrics.jsonl").read_text().splitlines() if x.strip()]
        train_row = next(r for r in rows if "train/episode_return" in r)
        eval_row = [r for r in rows if "eval/return_mean" in r][-1]
        q_eval = json.loads(run_cli("eval", run, "--episodes", "1000", "--json", cwd=work)[0])
        run_cli(
            "train", "value_iteration", "env.id=FrozenLake-v1", "trainer.run_dir=runs/vi", "--quiet", cwd=work
        )
        vi_eval = json.loads(run_cli("eval", "runs/vi", "--episodes", "1000", "--json", cwd=work)[0])
    res["q_learning"] = {
        "printed_first": lines[0],
        "printed_last": lines[-1],
        "metrics_train_row": train_row,
        "metrics_last_eval_row": eval_row,
        "eval": q_eval,
    }
    res["value_iteration"] = {"eval": vi_eval}
    out.mkdir(parents=True, exist_ok=True)
    (out / "doc_examples.json").write_text(json.dumps(res, indent=1) + "\n")
    files = {
        "doc_examples_train.md": fenced("text", [lines[0], "...", lines[-1]]),
        "doc_examples_eval.md": fenced("json", [json.dumps(q_eval)]),
        "doc_examples_metrics.md": fenced("json", [json.dumps(train_row), json.dumps(eval_row)]),
        "doc_examples_value_iteration.md": fenced("json", [json.dumps(vi_eval)]),
    }
    for name, text in files.items():
        (out / name).write_text(text)
        print(f"{name}:\n{text}")


if __name__ == "__main__":
    main()
