"""The algorithm registry: the one place where a config picks code by name (``advantage train NAME``).

Each algorithm's config module (``advantage.configs.*``: its config dataclasses, presets and this record)
builds an :class:`Algorithm` and calls :func:`register`; :func:`get_algorithm` imports the one it needs
and :func:`all_algorithms` all of them (:mod:`advantage.configs`). The
training code is named, not imported: :class:`Entry` (``"advantage.algos.ppo:train"``) imports its module
on the first call, so listing algorithms, reading and validating a config, and reporting a config error
import neither torch nor the algorithms (the layering is in ``docs/architecture.md``). Everything a run
needs is on the record: the config dataclass, the training function, and the function that rebuilds the
trained policy from checkpoint tensors (for ``eval`` and ``Run.act``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from advantage.config import Preset, suggest
from advantage.errors import ConfigError

if TYPE_CHECKING:
    import gymnasium as gym

    from advantage.checkpoint import Checkpoint
    from advantage.context import RunContext


class Entry:
    """A function named ``"package.module:attribute"``, imported on its first call, with keyword
    arguments bound as by :func:`functools.partial` (``Entry("advantage.algos.tabular.td:train",
    method="sarsa")``). Picklable (it holds only the name and the arguments), so Ray workers rebuild it."""

    def __init__(self, target: str, /, **kwargs: Any):
        module, sep, attr = target.partition(":")
        if not sep or not module or not attr:
            raise ValueError(f"Entry target must be 'module:attribute', got {target!r}")
        self.target, self.kwargs = target, kwargs
        self._fn: Callable[..., Any] | None = None

    def resolve(self) -> Callable[..., Any]:
        if self._fn is None:
            module, _, attr = self.target.partition(":")
            self._fn = getattr(importlib.import_module(module), attr)
        return self._fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **self.kwargs, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        return {"target": self.target, "kwargs": self.kwargs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.target, self.kwargs, self._fn = state["target"], state["kwargs"], None

    def __repr__(self) -> str:
        args = "".join(f", {k}={v!r}" for k, v in self.kwargs.items())
        return f"Entry({self.target!r}{args})"


class Policy(Protocol):
    """A trained policy: maps one observation to one action."""

    def act(self, obs: Any, deterministic: bool = True) -> Any: ...


@dataclass(frozen=True)
class Algorithm:
    """A registered algorithm.

    Attributes:
        name: the CLI name, e.g. ``q_learning``.
        summary: one line for ``advantage list``.
        config: the config dataclass (sections env/algorithm/model/trainer).
        train: ``train(cfg, ctx)`` runs the loop; it reads ``ctx.restored`` to resume. This and the other
            functions below are usually :class:`Entry` objects, so the record imports no training code.
        policy: ``policy(cfg, env, tensors) -> Policy`` rebuilds the trained policy from a checkpoint.
        check_env: ``check_env(cfg, env)`` raises :class:`~advantage.errors.EnvError` for spaces the
            algorithm cannot handle (called before the run folder is created).
        defaults: dotted overrides applied before presets (e.g. ``{"algorithm.method": "sarsa"}``).
        presets: named overrides, ``preset=NAME``.
        load_policy: for algorithms without a Gymnasium environment (language models):
            ``load_policy(cfg, checkpoint) -> Policy`` replaces ``policy``.
        evaluate: for those algorithms: ``evaluate(cfg, policy, **options) -> metrics`` replaces the
            episode evaluation; its ``return_mean`` is what ``trainer.stop_at_return`` compares.
        check: ``check(cfg) -> problems`` — extra validation before the run folder is created (for
            example the task's options).
        workers: the trainer can collect with Ray workers (``trainer.num_workers > 0``).
        plot_metrics: what ``advantage plot`` and the run's own learning curve show by default (None:
            the training and evaluation returns).
        task_options: for algorithms that train on a task's data: ``task_options(name)`` lists the
            ``data.*`` options of task ``name`` as ``(key, default, meaning)`` (for ``advantage list``);
            an unknown name is a :class:`~advantage.errors.ConfigError`.
        observation_spaces, action_spaces: the Gymnasium space classes (by name, e.g. ``"Box"``) the
            method handles; a refusal names the algorithms whose record lists the env's spaces
            (:func:`advantage.envs.make.algorithms_for`). Empty for the algorithms without an env.
    """

    name: str
    summary: str
    config: type
    train: Callable[[Any, RunContext], None]
    policy: Callable[[Any, gym.Env, Mapping[str, Any]], Policy] | None = None
    check_env: Callable[[Any, gym.Env], None] | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    presets: Mapping[str, Preset] = field(default_factory=dict)
    load_policy: Callable[[Any, Checkpoint], Policy] | None = None
    evaluate: Callable[..., dict[str, Any]] | None = None
    check: Callable[[Any], list[str]] | None = None
    workers: bool = False
    plot_metrics: tuple[str, ...] | None = None
    task_options: Callable[[str], list[tuple[str, Any, str]]] | None = None
    observation_spaces: tuple[str, ...] = ()
    action_spaces: tuple[str, ...] = ()

    @property
    def uses_env(self) -> bool:
        """False for algorithms that train on data (SFT, DPO, GRPO) rather than a Gymnasium env."""
        return self.load_policy is None


ALGORITHMS: dict[str, Algorithm] = {}


def register(algo: Algorithm) -> Algorithm:
    if algo.name in ALGORITHMS:
        raise RuntimeError(f"algorithm {algo.name!r} registered twice")
    ALGORITHMS[algo.name] = algo
    return algo


def get_algorithm(name: str) -> Algorithm:
    """The registered algorithm ``name``; an unknown name is a :class:`ConfigError` with suggestions."""
    from advantage.configs import load, load_all

    load(name)  # its config module only (imports no training code)
    if name not in ALGORITHMS:
        load_all()  # every name, for the suggestions
        from advantage.migration import algorithm_hint

        hint = algorithm_hint(name, ALGORITHMS) or suggest(name, ALGORITHMS, cutoff=0.5, n=3)
        raise ConfigError(
            f"unknown algorithm {name!r}{hint} "
            f"(available: {', '.join(sorted(ALGORITHMS))}; see `advantage list`)"
        )
    return ALGORITHMS[name]


def all_algorithms() -> dict[str, Algorithm]:
    from advantage.configs import load_all

    load_all()
    return dict(ALGORITHMS)
