"""The language-model side of :mod:`advantage.distributed`: the module a rank trains, its full weights for
evaluation and checkpoints, and an optimizer state that reads and writes today's checkpoint format.

* ``single`` and ``ddp``: every rank trains the model itself (a whole replica; ``ddp`` sums the gradients
  in :meth:`advantage.distributed.World.clip_grad_norm`), and its optimizer saves as it always has.
* ``fsdp``: the ranks train an FSDP2 copy (``fully_shard`` on each decoder layer, then on the root;
  ``param_dtype=bfloat16``, ``reduce_dtype=float32`` on a GPU), whose parameters, gradients and AdamW
  moments are split across the ranks; the plain model stays beside it as the *inference replica*
  (evaluation, GRPO's and PPO-RLHF's sampling, ``save_pretrained`` files) and receives the full weights
  when a snapshot is taken or a rollout begins (:func:`unshard`). The replica costs one full copy of the
  weights per rank, next to 1/N of the weights, gradients and two moments each; see
  ``docs/distributed.md``. The lean forward of :mod:`advantage.lm.lean` does not run on sharded layers
  (it reads whole parameters): ``fsdp`` takes the transformers forward.
* Checkpoints hold the *full* optimizer state, keyed like a one-process optimizer's (``optim.<i>.exp_avg``
  by the index of the trainable parameter), gathered with ``torch.distributed.checkpoint``'s full state
  dict offloaded to the CPU (:class:`FullOptimizerState`), so a checkpoint written by N ranks resumes on
  M ranks, M = 1 included, and the checkpoint folder is a model folder as before.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from advantage.distributed import World


def wrap(world: World, model: PreTrainedModel) -> PreTrainedModel:
    """The module this rank trains: ``model`` itself, or for ``fsdp`` its sharded copy (gradients summed
    across the ranks, not averaged)."""
    if world.strategy != "fsdp":
        return model
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    net = copy.deepcopy(model)
    cuda = next(model.parameters()).device.type == "cuda"
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if cuda else None
    kw: dict[str, Any] = {"mp_policy": mp} if mp is not None else {}
    for layer in [m for m in net.modules() if type(m).__name__.endswith("DecoderLayer")]:
        fully_shard(layer, **kw)
    fully_shard(net, **kw)
    # Summed, not averaged: each rank's loss already has the global normalizer. A plain SUM reduction
    # (gloo has no pre-multiplied sum).
    for module in net.modules():  # each fully_shard'ed module has its own setting
        if hasattr(module, "set_force_sum_reduction_for_comms"):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return net


def unshard(world: World, net: PreTrainedModel, model: PreTrainedModel, *, everywhere: bool = False) -> None:
    """Put the trained weights of ``net`` into ``model`` (``fsdp``: gathered from the shards, a collective
    every rank calls; on rank 0 only unless ``everywhere``). Nothing to do otherwise: they are one module."""
    if net is model:
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=not everywhere)
    full = get_model_state_dict(net, options=opts)
    if full:
        model.load_state_dict(full)


def reshard(world: World, net: torch.nn.Module, model: torch.nn.Module) -> None:
    """The inverse of :func:`unshard`: ``model``'s weights (e.g. a value head just restored from a
    checkpoint) into the shards of ``net``."""
    if net is model:
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(net, model.state_dict(), options=StateDictOptions(full_state_dict=True))


class FullOptimizerState:
    """``state_dict`` / ``load_state_dict`` of a sharded model's optimizer in the one-process layout (the
    full moments, keyed by the index of the trainable parameter), for
    :class:`~advantage.torch_state.LearnerState`. Collective: every rank calls them."""

    def __init__(self, net: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.net, self.optimizer = net, optimizer
        self.names = [n for n, p in net.named_parameters() if p.requires_grad]

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        sd: Any = get_optimizer_state_dict(self.net, self.optimizer, options=opts)
        index = {n: i for i, n in enumerate(self.names)}
        groups = [{**g, "params": [index[n] for n in g["params"]]} for g in sd.get("param_groups", [])]
        return {"state": {index[n]: s for n, s in sd.get("state", {}).items()}, "param_groups": groups}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        names = self.names
        full: Any = {
            "state": {names[int(i)]: s for i, s in sd["state"].items()},
            "param_groups": [
                {**g, "params": [names[int(i)] for i in g["params"]]} for g in sd["param_groups"]
            ],
        }
        set_optimizer_state_dict(
            self.net, self.optimizer, full, options=StateDictOptions(full_state_dict=True)
        )


def global_permutation(world: World, n_rows: int) -> torch.Tensor:
    """A random order of the global batch's ``world.size × n_rows`` rows: ``torch.randperm`` from the
    global generator, drawn by rank 0 as one process draws it and sent to the other ranks."""
    perm = torch.randperm(n_rows * world.size) if world.rank == 0 else None
    return world.broadcast(perm)


def local_rows(world: World, rows: torch.Tensor, n_rows: int) -> torch.Tensor:
    """This rank's rows (indices into its ``n_rows``) among global row indices ``rows``, in their order:
    a mini-batch of the global batch, of which each rank holds the rows of its own share."""
    lo = world.rank * n_rows
    return rows[(rows >= lo) & (rows < lo + n_rows)] - lo


def even_micro_batches(
    world: World, micros: list[torch.Tensor], filler: torch.Tensor
) -> list[tuple[torch.Tensor, bool]]:
    """``(rows, real)`` for each of ``micros``, then ``(filler, False)`` until every rank has as many as
    the rank with the most: with ``fsdp`` each forward and backward is a collective, so the ranks must
    make the same number of them; a filler's loss is multiplied by 0 (its gradients are zeros)."""
    n = int(world.reduce([len(micros)], op="max")[0])
    return [(m, True) for m in micros] + [(filler, False)] * (n - len(micros))


def whiten_across_ranks(world: World, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """:func:`advantage.math.masked_whiten` with the mean and unbiased variance of every rank's valid
    elements (two all-reduces); the same function on one rank."""
    from advantage.math import masked_whiten as whiten

    if not world.group:
        return whiten(x, mask)
    w = mask.to(x.dtype)
    total, n = world.reduce([float((x * w).sum()), float(w.sum())])
    mu = total / max(n, 1.0)
    ss = world.reduce([float(((x - mu) ** 2 * w).sum())])[0]
    var = ss / (n - 1) if n > 1 else 0.0
    return torch.where(w != 0, (x - mu) * (var + 1e-8) ** -0.5, torch.zeros_like(x))


def optimizer(world: World, net: torch.nn.Module, opt: torch.optim.Optimizer) -> Any:
    """What a checkpoint saves of ``opt``: the optimizer itself, or for ``fsdp`` its full state
    (:class:`FullOptimizerState`)."""
    return FullOptimizerState(net, opt) if world.strategy == "fsdp" else opt
