"""Torch objects <-> checkpoint tensors + JSON (never pickle): modules, optimizers, RNG, running stats."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from advantage.errors import CheckpointError


def module_tensors(prefix: str, module: nn.Module) -> dict[str, torch.Tensor]:
    return {f"{prefix}.{k}": v for k, v in module.state_dict().items()}


def load_module(
    prefix: str, module: nn.Module, tensors: dict[str, torch.Tensor], where: str = "checkpoint"
) -> None:
    """Strict load: missing keys, unexpected keys and shape mismatches are one error listing them all."""
    own = module.state_dict()
    got = {k[len(prefix) + 1 :]: v for k, v in tensors.items() if k.startswith(prefix + ".")}
    missing = sorted(set(own) - set(got))
    unexpected = sorted(set(got) - set(own))
    shapes = [
        f"{k}: checkpoint {tuple(got[k].shape)} vs model {tuple(own[k].shape)}"
        for k in sorted(set(own) & set(got))
        if got[k].shape != own[k].shape
    ]
    found = {"missing keys": missing, "unexpected keys": unexpected, "wrong shapes": shapes}
    parts = [f"{what} {items}" for what, items in found.items() if items]
    if parts:
        raise CheckpointError(
            f"{where}: the checkpoint's {prefix!r} tensors do not fit the network built from the config: "
            + "; ".join(parts)
        )
    module.load_state_dict(got)


def optimizer_state(
    prefix: str, opt: torch.optim.Optimizer
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split ``opt.state_dict()`` into tensors (moments, step counts) and JSON (param groups)."""
    sd = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, st in sd["state"].items():
        for key, value in st.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{prefix}.{idx}.{key}"] = value
            else:
                scalars.setdefault(str(idx), {})[key] = value
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in sd["param_groups"]]
    return tensors, {"param_groups": groups, "scalars": scalars}


def load_optimizer(
    prefix: str, opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict[str, Any]
) -> None:
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if name.startswith(prefix + "."):
            idx, key = name[len(prefix) + 1 :].split(".", 1)
            state.setdefault(int(idx), {})[key] = value
    for idx, extra in meta.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(extra)
    groups = [{k: (tuple(v) if k == "betas" else v) for k, v in g.items()} for g in meta["param_groups"]]
    opt.load_state_dict({"state": state, "param_groups": groups})


class LearnerState:
    """What every trainer's learner puts into a checkpoint: named modules, named optimizers and the torch
    RNG (which dropout, sampling and target noise draw from), saved and loaded in one place.

    Key names are those the trainers have always written: a module ``name`` gives tensors ``name.<param>``;
    an optimizer ``name`` gives tensors ``name.<index>.<moment>`` and a JSON entry ``name`` (its param
    groups and scalar state); the RNG is the tensor ``torch_rng``. :meth:`save` returns the tensors and
    ``{optimizer name: JSON}``; a trainer stores the latter flat in its algorithm state (``{**meta, ...}``)
    or under one key (``{"learner": meta}``) and hands the same mapping back to :meth:`load`.

    An optimizer may be a ``torch.optim.Optimizer`` or a wrapper that holds one as ``.opt`` (e.g. the
    language-model trainers' full FSDP state); the wrapped optimizer's state is what is saved.
    Language-model trainers pass no modules: their weights travel as a model folder, not as tensors here.
    """

    def __init__(
        self,
        modules: dict[str, nn.Module] | None = None,
        optimizers: dict[str, Any] | None = None,
        *,
        rng: bool = True,
    ):
        self.modules = dict(modules or {})
        self.optimizers = {k: getattr(o, "opt", o) for k, o in (optimizers or {}).items()}
        self.rng = rng

    def save(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Module weights, optimizer moments and (``rng=True``) the torch RNG state as named tensors, and
        ``{optimizer name: param groups and scalar state}`` (JSON-serialisable)."""
        tensors: dict[str, torch.Tensor] = {}
        meta: dict[str, Any] = {}
        for name, module in self.modules.items():
            tensors.update(module_tensors(name, module))
        for name, opt in self.optimizers.items():
            opt_tensors, meta[name] = optimizer_state(name, opt)
            tensors.update(opt_tensors)
        if self.rng:
            tensors["torch_rng"] = torch.get_rng_state()
        return tensors, meta

    def load(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any], where: str = "checkpoint") -> None:
        """Restore modules (strictly: every key, every shape), optimizers and the RNG from what
        :meth:`save` wrote; ``meta`` is the mapping that holds the optimizer entries."""
        for name, module in self.modules.items():
            load_module(name, module, tensors, where)
        for name, opt in self.optimizers.items():
            if name not in meta:
                raise CheckpointError(f"{where}: the checkpoint has no state for optimizer {name!r}")
            load_optimizer(name, opt, tensors, meta[name])
        if self.rng:
            torch.set_rng_state(tensors["torch_rng"])


class RunningMeanStd:
    """Running mean and variance of a stream of batches (Chan et al. parallel update), float64.

    Used for observation normalisation and for reward scaling by the std of the discounted return
    (the VecNormalize scheme of Stable-Baselines3 / OpenAI baselines)."""

    def __init__(self, shape: tuple[int, ...] = ()):
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = 1e-4

    def update(self, batch: np.ndarray) -> None:
        batch = np.asarray(batch, dtype=np.float64)
        n = batch.shape[0]
        if n == 0:  # e.g. every env is at its reset step: nothing to add (and no empty-mean warning)
            return
        if n == 1:  # one env: the row is its own mean and its variance is 0 (the same numbers, no reductions)
            b_mean, b_var = batch[0], 0.0
        else:
            b_mean, b_var = batch.mean(axis=0), batch.var(axis=0)
        delta = b_mean - self.mean
        total = self.count + n
        self.mean = self.mean + delta * n / total
        m2 = self.var * self.count + b_var * n + delta**2 * self.count * n / total
        self.var = m2 / total
        self.count = total

    def tensors(self, prefix: str) -> dict[str, torch.Tensor]:
        return {
            f"{prefix}.mean": torch.from_numpy(np.array(self.mean, dtype=np.float64)),
            f"{prefix}.var": torch.from_numpy(np.array(self.var, dtype=np.float64)),
            f"{prefix}.count": torch.tensor(self.count, dtype=torch.float64),
        }

    def load(self, prefix: str, tensors: dict[str, torch.Tensor]) -> None:
        self.mean = tensors[f"{prefix}.mean"].numpy().copy()
        self.var = tensors[f"{prefix}.var"].numpy().copy()
        self.count = float(tensors[f"{prefix}.count"])
