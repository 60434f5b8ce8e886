"""Write the example data files of this folder: the same 40 word problems in every layout advantage reads
(docs/algorithms/datasets.md). Run from the repository root: ``python examples/data/make_examples.py``."""

from pathlib import Path

from advantage.envs.text.samples import write_examples, write_verl_files

if __name__ == "__main__":
    for fmt, path in write_examples(Path(__file__).parent, n=40, seed=0).items():
        print(f"{fmt:>18}: {path}")
    for split, path in write_verl_files(Path(__file__).parent, n=40, seed=0).items():
        print(f"{'verl ' + split:>18}: {path}")
