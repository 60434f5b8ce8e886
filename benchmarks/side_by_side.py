"""What the two side-by-side harnesses (:mod:`benchmarks.time_to_target`, :mod:`benchmarks.step_time`)
share: the command line of a script comparing advantage with a peer library, and the warm-up of the core
before either library's clock starts.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def warm_core(seconds: float = 0.5) -> None:
    """Spin the core before either clock starts (clock ramp-up, first-call kernel init), the same way for
    both libraries."""
    import torch

    w = torch.randn(256, 256, requires_grad=True)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        (torch.relu(w @ w).sum()).backward()


# One command line for the side-by-side scripts (ours vs a peer library): each script configures it with
# what differs (the peer's run, our overrides, the report) and calls it from its ``main``.

Report = Callable[[list[dict[str, Any]], argparse.Namespace, list[float]], None]


def main(
    doc: str,
    *,
    libs: tuple[str, ...],
    work: Callable[[argparse.Namespace], None],
    collect: Callable[[argparse.Namespace], list[dict[str, Any]]],
    report: Report,
    sizes: list[str] | None = None,
    steps: int = 40,
    warmup: int = 5,
    rereport: bool = False,
    argv: list[str] | None = None,
    default_sizes: list[str] | None = None,
) -> None:
    """The command line of a side-by-side benchmark script whose docstring is ``doc``: ``--seeds``,
    ``--out`` and the hidden ``--worker LIB --seed N`` a child process is started with; with ``sizes``
    also ``--steps``, ``--warmup``, ``--sizes`` (default: ``default_sizes``, else all) and ``--size``;
    with ``rereport``, ``--report JSON`` to write the report again from a saved results file.

    A worker runs ``work(args)`` (one process per library and seed); otherwise ``collect(args)`` starts
    the workers, interleaved, and ``report(results, args, load)`` writes the results files, ``load``
    being the load averages (1, 5, 15 minutes) before the first worker."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if sizes:
        p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--seeds", type=int, default=3)
    if sizes:
        p.add_argument("--warmup", type=int, default=warmup)
        p.add_argument("--sizes", default=",".join(default_sizes or sizes))
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    p.add_argument("--worker", choices=libs, help=argparse.SUPPRESS)
    if sizes:
        p.add_argument("--size", choices=sizes, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    if rereport:
        again = "only write the report again from a saved results file"
        p.add_argument("--report", metavar="JSON", help=again)
    args = p.parse_args(argv)
    if args.worker:
        work(args)
    elif getattr(args, "report", None):
        saved = json.loads(Path(args.report).read_text())
        args.warmup, args.steps = saved["warmup"], saved["steps"]
        report(saved["results"], args, saved["load_average"])
    else:
        load = list(os.getloadavg())
        report(collect(args), args, load)
