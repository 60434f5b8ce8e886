r"""Language-model learners across processes: ``trainer.strategy`` (``single``, ``ddp``, ``fsdp``) over
``torch.distributed``, launched by ``torchrun`` or by ``advantage train … trainer.nproc_per_node=N``.

Every rank runs the same training loop on a disjoint, deterministic share of each global batch
(:meth:`World.share`: the contiguous slice ``[r·B/N, (r+1)·B/N)`` of the batch the one-process run would
take). Losses keep the global normalizer (token or pair counts of the whole batch), and the gradients of
the ranks are **summed** (:meth:`World.clip_grad_norm`: ``ddp`` all-reduces them here, one flat buffer;
``fsdp`` reduce-scatters them with the divide factor set to 1), so a step on N ranks is the step of one
process on the same global batch, up to float rounding:

.. math::
    \nabla L = \sum_{r=1}^{N} \nabla \frac{1}{Z}\sum_{i \in \text{share}_r} \ell_i,
    \qquad Z = \sum_{i \in \text{batch}} n_i

Rank 0 alone writes the run folder, metrics, TensorBoard, progress and checkpoints
(:class:`RankContext`); the others read the checkpoint to resume and write nothing. Each step the ranks
agree on whether a snapshot is due and whether to stop (two one-number all-reduces), so an evaluation,
a checkpoint or a signal never leaves one rank in a collective the others skip.

The process group comes from the ``env://`` variables that ``torchrun`` sets (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``), gloo on CPUs and NCCL on GPUs, with
``trainer.worker_timeout`` as the timeout of every collective: a rank that dies or hangs ends the job
within it (the launcher stops the other ranks and names the one that failed).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from advantage.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from advantage.config import LMRunConfig, TrainerConfig
    from advantage.context import RunContext, Snapshot

STRATEGIES = ("single", "ddp", "fsdp")
RENDEZVOUS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
# The algorithms that learn across processes, and the option each one splits across the ranks.
SHARDED_BATCH = {
    "sft": "algorithm.batch_size",
    "reward_model": "algorithm.batch_size",
    "dpo": "algorithm.batch_size",
    "grpo": "data.rollout_batch_size",
    "ppo_rlhf": "data.rollout_batch_size",
}
# Options that need the whole batch on one rank (adaptive difficulty's thresholds and extra samples):
# (key, the value needed, why).
ONE_RANK_OPTIONS = {
    "grpo": (("algorithm.adaptive_difficulty", False, "its thresholds read the whole batch"),),
}
T = TypeVar("T")


def launched() -> bool:
    """Whether this process was started by a launcher (``torchrun``, or ``nproc_per_node``)."""
    return any(v in os.environ for v in RENDEZVOUS)


def ranks(t: TrainerConfig) -> int:
    """How many ranks the run will have: ``WORLD_SIZE`` under a launcher, else ``trainer.nproc_per_node``."""
    size = os.environ.get("WORLD_SIZE")
    return int(size) if size and size.isdigit() else int(getattr(t, "nproc_per_node", 1))


def problems(algo: str, cfg: LMRunConfig) -> list[str]:
    """Config problems of a run on several ranks, found before any process starts: an algorithm that
    learns in one process, a batch the ranks cannot share equally (naming both numbers), ``fsdp`` with
    options it does not support."""
    t = cfg.trainer
    strategy = getattr(t, "strategy", "single")
    n = ranks(t)
    if strategy == "single":
        if n > 1:
            return [
                f"trainer.strategy=single runs in one process, but {n} ranks were asked for "
                f"(trainer.nproc_per_node or WORLD_SIZE={n}): set trainer.strategy=ddp or fsdp"
            ]
        return []
    key = SHARDED_BATCH.get(algo)
    if key is None:
        able = ", ".join(SHARDED_BATCH)
        return [f"trainer.strategy={strategy}: {algo} learns in one process; ddp and fsdp are for {able}"]
    out = []
    batch = _get(cfg, key)
    if batch < n:
        out.append(
            f"{n} ranks (trainer.nproc_per_node or WORLD_SIZE) are more than {key}={batch} "
            f"allows: each rank needs at least one item of the batch"
        )
    elif batch % n:
        out.append(
            f"{key}={batch} is not divisible by the {n} ranks (trainer.nproc_per_node or "
            f"WORLD_SIZE): each rank takes an equal share; use a multiple of {n}"
        )
    for k, need, why in ONE_RANK_OPTIONS.get(algo, ()):
        if _get(cfg, k) != need:
            out.append(f"trainer.strategy={strategy} needs {k}={need!r}, got {_get(cfg, k)!r}: {why}")
    if algo == "grpo" and _get(cfg, "algorithm.supervision") == "process":
        from advantage.math.registry import static_specs

        name = _get(cfg, "algorithm.advantage")
        spec = static_specs("advantages:GROUP_ADVANTAGES").get(str(name))
        if spec is not None and spec.get("batch"):
            out.append(
                f"trainer.strategy={strategy} with process supervision needs a group advantage, not "
                f"{name} (its step rewards' batch statistic is taken on one rank)"
            )
    if (
        algo == "grpo"
        and _get(cfg, "algorithm.adaptive_difficulty")
        and _get(cfg, "algorithm.dynamic_sampling")
    ):
        out.append(
            f"trainer.strategy={strategy} with algorithm.adaptive_difficulty and algorithm.dynamic_sampling "
            "is not supported: with dynamic sampling every rank samples the whole batch and takes an equal "
            "share of its prompts, and adaptive difficulty gives prompts different numbers of samples; turn "
            "one of them off, or train on one rank"
        )
    if strategy == "fsdp" and cfg.model.lora.rank > 0:
        out.append(
            f"trainer.strategy=fsdp with LoRA (model.lora.rank={cfg.model.lora.rank}) is not supported: "
            "use trainer.strategy=ddp, whose ranks hold the adapters whole"
        )
    return out


def _get(cfg: LMRunConfig, key: str) -> Any:
    """The option at dotted ``key`` of ``cfg`` (of the algorithm named with it: its own sections)."""
    node: object = cfg
    for part in key.split("."):
        node = getattr(node, part)
    return node


@dataclass
class World:
    """This process's place among the ranks: ``strategy``, ``rank`` and ``size`` (1 and rank 0 for
    ``single``, which never touches ``torch.distributed``)."""

    strategy: str = "single"
    rank: int = 0
    size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def group(self) -> bool:
        """Whether a process group exists (``ddp`` or ``fsdp``, even on one rank)."""
        return self.strategy != "single"

    def share(self, items: Sequence[T]) -> list[T]:
        """This rank's contiguous slice of a global batch of ``len(items)`` (a multiple of ``size``)."""
        k, r = divmod(len(items), self.size)
        if r:
            raise ConfigError(f"a batch of {len(items)} items does not split into {self.size} equal shares")
        return list(items[self.rank * k : (self.rank + 1) * k])

    def reduce(self, values: Sequence[float], op: str = "sum") -> list[float]:
        """``values`` summed (or their ``max``) over the ranks, in float64; as they are on one rank."""
        if not self.group:
            return [float(v) for v in values]
        import torch
        import torch.distributed as dist

        x = torch.tensor([float(v) for v in values], dtype=torch.float64)
        dist.all_reduce(x, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        return x.tolist()

    def mean(self, row: dict[str, Any], summed: Sequence[str] = ()) -> dict[str, Any]:
        """A metrics row averaged over the ranks (the ``summed`` keys added up), in one all-reduce."""
        if not self.group:
            return row
        keys = [k for k, v in row.items() if isinstance(v, int | float) and not isinstance(v, bool)]
        values = self.reduce([row[k] for k in keys])
        return {**row, **{k: v if k in summed else v / self.size for k, v in zip(keys, values, strict=True)}}

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """The ranks' tensors ``x`` (equal shapes) concatenated along the first dimension, in rank order."""
        if self.size == 1:
            return x
        import torch
        import torch.distributed as dist

        parts = [torch.empty_like(x) for _ in range(self.size)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts)

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if self.size == 1:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def clip_grad_norm(self, params: Sequence[torch.Tensor], max_norm: float) -> float:
        """Sum the ranks' gradients (``ddp``: one all-reduce of a flat buffer; ``fsdp`` did it in the
        backward), then clip their global 2-norm to ``max_norm`` (0: no clip) and return it."""
        import torch

        from advantage import optim

        if self.strategy == "ddp" and self.size > 1:
            import torch.distributed as dist

            grads = [p.grad for p in params if p.grad is not None]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat)
            with torch.no_grad():
                for g, summed in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
                    g.copy_(summed.view_as(g))
        if self.strategy != "fsdp":
            return float(optim.clip_grad_norm(params, max_norm))
        if max_norm <= 0:
            return 0.0
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)  # DTensor shards: the global norm
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


_WORLD = World()


def current() -> World:
    """The world of this process (:func:`init`), one rank of ``single`` before it."""
    return _WORLD


def init(t: TrainerConfig) -> World:
    """Join the ranks of ``trainer`` section ``t``: the process group from the ``env://`` variables with
    ``trainer.worker_timeout`` as its timeout (a group of one for ``ddp``/``fsdp`` without a launcher;
    nothing for ``single``). A launch that sets some rendezvous variables but not all is an error naming
    the missing ones."""
    global _WORLD
    strategy = getattr(t, "strategy", "single")
    have = [v for v in RENDEZVOUS if v in os.environ]
    if have and len(have) < len(RENDEZVOUS):
        missing = [v for v in RENDEZVOUS if v not in os.environ]
        raise ConfigError(
            f"a distributed launch needs the rendezvous variables {', '.join(RENDEZVOUS)}; "
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set (torchrun sets them all)"
        )
    nproc = getattr(t, "nproc_per_node", 1)  # a language-model trainer section's option
    if not have and nproc > 1:
        raise ConfigError(
            f"trainer.nproc_per_node={nproc}: the processes are started by the command line "
            "(advantage train … trainer.nproc_per_node=N) or by torchrun, not from Python"
        )
    if strategy == "single":
        _WORLD = World()
        return _WORLD
    import torch.distributed as dist

    timeout = timedelta(seconds=float(t.worker_timeout))
    backend = "nccl" if str(t.device).startswith("cuda") else "gloo"
    if backend == "nccl" and str(t.device) == "cuda" and have:
        import torch

        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))  # "cuda" is then this rank's own GPU
    if not dist.is_initialized():
        if have:
            dist.init_process_group(backend, init_method="env://", timeout=timeout)
        else:  # one rank without a launcher: the same code path as N ranks (to compare them)
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    _WORLD = World(strategy, dist.get_rank(), dist.get_world_size())
    return _WORLD


def shutdown() -> None:
    """Leave the process group (if any); the world is one rank of ``single`` again."""
    global _WORLD
    if _WORLD.group:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    _WORLD = World()


class RankContext:
    """The :class:`~advantage.context.RunContext` of one rank: rank 0 forwards to the real context
    ``inner``; the other ranks write nothing. :meth:`tick` calls ``snapshot`` on every rank when one is
    due (with ``fsdp`` a snapshot gathers the shards: all ranks take part) and returns the ranks' joint
    decision to stop."""

    def __init__(self, world: World, inner: RunContext | None, restored: Any):
        self.world, self.inner, self.restored = world, inner, restored
        self._signal: str | None = None
        if inner is None and sys.platform != "win32":  # rank 0's context handles its own signals
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signal = signal.Signals(signum).name

    def log(self, step: int, metrics: Any) -> None:
        if self.inner is not None:
            self.inner.log(step, metrics)

    def tick(self, step: int, snapshot: Callable[[], Snapshot]) -> bool:
        inner = self.inner
        due, _ = self.world.reduce([inner.due(step) if inner else 0, 0], "max")
        snap = snapshot() if due else None
        stop = inner.tick(step, lambda: snap) if inner else False  # type: ignore[arg-type,return-value]
        return bool(self.world.reduce([stop or self._signal is not None], "max")[0])

    def finish(self, step: int, snap: Snapshot) -> Any:
        return self.inner.finish(step, snap) if self.inner is not None else None

    def __getattr__(self, name: str) -> Any:  # anything else of rank 0's context
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)


def launch(nproc: int, argv: Sequence[str]) -> int:
    """Run ``python -m advantage ARGV`` on ``nproc`` local ranks with torch's elastic launcher (a
    standalone rendezvous on a free port); 0 when every rank finished; 143 (130) after a SIGTERM (SIGINT),
    which the launcher passes on to the ranks (they stop at the next step boundary with a checkpoint);
    else 1 after naming the rank that failed and why (its exit code or the signal that killed it; its own
    error line is above)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    args = parse_args(["--standalone", f"--nproc-per-node={nproc}", "--monitor-interval=0.1", "-m",
                       "advantage", *argv])  # fmt: skip
    try:
        run(args)
    except ChildFailedError as e:

        def how(f: Any) -> str:
            return f"was killed by {f.signal_name()}" if f.exitcode < 0 else f"exited with code {f.exitcode}"

        # The root cause first: a rank killed by a signal other than the launcher's SIGTERM, else the
        # earliest failure; the others usually failed because of it (a collective lost its peer).
        failed = sorted(
            e.failures.items(),
            key=lambda kv: (kv[1].exitcode >= 0 or kv[1].signal_name() == "SIGTERM", kv[1].timestamp),
        )
        rank, failure = failed[0]
        print(f"error: rank {rank} of {nproc} {how(failure)}; the other ranks were stopped", file=sys.stderr)
        for rank, failure in failed[1:]:
            print(f"  (then rank {rank} of {nproc} {how(failure)})", file=sys.stderr)
        return 1
    except SignalException as e:  # SIGTERM or SIGINT: passed on, the ranks stopped with a checkpoint
        return 128 + int(e.sigval)
    return 0
