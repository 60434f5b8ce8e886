"""advantage: reinforcement learning from Q-tables to GRPO, on one verified math core.

The Python API mirrors the CLI::

    import advantage
    run = advantage.train("q_learning", **{"env.is_slippery": False, "trainer.total_steps": 20_000})
    run.evaluate(episodes=100)      # {"return_mean": 1.0, ...}
    run.act(0)                      # the trained policy's action
    advantage.Run.load(run.dir).metrics
"""

from typing import TYPE_CHECKING

from advantage.errors import (
    AdvantageError,
    CheckpointError,
    ConfigError,
    EnvError,
    NonFiniteError,
    RunDirError,
)
from advantage.versions import __version__

if TYPE_CHECKING:
    from advantage.runs import Run, resume, train

_LAZY = {"Run", "resume", "train"}  # imported on first use, so `advantage --help` starts instantly


def __getattr__(name: str):
    if name in _LAZY:
        from advantage import runs

        return getattr(runs, name)
    raise AttributeError(f"module 'advantage' has no attribute {name!r}")


__all__ = [
    "AdvantageError",
    "CheckpointError",
    "ConfigError",
    "EnvError",
    "NonFiniteError",
    "Run",
    "RunDirError",
    "__version__",
    "resume",
    "train",
]
