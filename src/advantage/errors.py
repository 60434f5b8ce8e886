"""Errors a user can cause. The CLI turns each into one clear message and exit code 2."""

from __future__ import annotations


class AdvantageError(Exception):
    """Base class for errors caused by the user's input (config, environment, run folder)."""


class ConfigError(AdvantageError, ValueError):
    """One or more invalid config values. ``problems`` lists every problem found, each naming the field,
    the value and what is allowed."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        many = f"{len(self.problems)} config problems: " + "; ".join(self.problems)
        super().__init__(self.problems[0] if len(self.problems) == 1 else many)


class EnvError(AdvantageError, ValueError):
    """An environment that does not exist or that the algorithm cannot handle."""


class RunDirError(AdvantageError):
    """A run folder that is missing, incomplete or not a run folder."""


class CheckpointError(AdvantageError):
    """A checkpoint that is missing, truncated, corrupt or unsafe. The message names the file."""


class NonFiniteError(AdvantageError, FloatingPointError):
    """A NaN or infinity in a reward, observation or loss; names the step and the component."""
