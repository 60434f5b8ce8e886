"""Which fast paths a run takes: the ``trainer.kernels`` option.

A *fast path* computes what a reference path computes (torch's public API, or transformers' modules) with
less per-call work; each is tested against its reference. Some change the float rounding of a run (a
hand-written backward sums in another order), so the choice is an option written to ``config.yaml`` like
every other, never an environment variable:

* ``fast`` (the default): every fast path below, where it applies;
* ``reference``: none of them, torch's and transformers' own code only (to compare, or to rule the fast
  paths out when debugging);
* a comma-separated list of names from :data:`FAST_PATHS`: those only.

What each buys, on and off, at the sizes the README quotes: ``benchmarks/results/fast_paths.md``
(``benchmarks/fast_paths.py``). The trainers read :func:`enabled`; :func:`using` sets the choice for the
duration of a run (``advantage.runs`` wraps every training in it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["FAST_PATHS", "configure", "enabled", "parse", "problems", "using"]

FAST_PATHS: dict[str, str] = {
    "clip_grad_norm": "the gradient-norm clip as two foreach kernels without clip_grad_norm_'s grouping",
    "no_dynamo": "optimizer methods without importing torch's compiler module (the advantage command only)",
    "lm_forward": "the lean Qwen2/Llama forward and decode (advantage.lm.lean) instead of transformers' "
    "modules",
    "lm_backward": "the hand-written backward of the lean forward instead of autograd",
    "dqn_td_backward": "DQN's TD gradient written out by hand for a plain MLP instead of autograd",
}

_on: frozenset[str] = frozenset(FAST_PATHS)


def parse(value: str) -> frozenset[str]:
    """The fast paths a ``trainer.kernels`` value turns on. Raises ``ValueError`` naming what is allowed."""
    text = str(value).strip()
    if text == "fast":
        return frozenset(FAST_PATHS)
    if text == "reference":
        return frozenset()
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in FAST_PATHS]
    if not names or unknown:
        shown = unknown[0] if unknown else text
        raise ValueError(
            f"{shown[:80]!r} is not a fast path; allowed: fast, reference, or a comma-separated list of "
            + ", ".join(FAST_PATHS)
        )
    return frozenset(names)


def problems(value: str) -> list[str]:
    """``[]`` or the one message for an invalid ``trainer.kernels`` value (config validation)."""
    try:
        parse(value)
    except ValueError as e:
        return [f"kernels={str(value)[:80]!r}: {e}"]
    return []


def enabled(name: str) -> bool:
    """Whether the fast path ``name`` (a key of :data:`FAST_PATHS`) is on."""
    return name in _on


def configure(value: str) -> None:
    """Take the fast paths of ``value`` for the rest of this process: a worker process that serves one run
    (a Ray rollout worker), where no block encloses the run."""
    global _on
    _on = parse(value)


@contextmanager
def using(value: str | frozenset[str]) -> Iterator[None]:
    """Take the fast paths of ``value`` (a ``trainer.kernels`` string or a set of names) inside the block."""
    global _on
    before = _on
    _on = parse(value) if isinstance(value, str) else frozenset(value)
    try:
        yield
    finally:
        _on = before
