"""The math core: pure tensor functions shared by every algorithm, classic and language-model.

Nothing here takes a config, holds state or does I/O. Shapes follow one convention: time is the last
dimension, so a single trajectory is ``[T]`` and a batch of rows (environments, or sequences) is ``[B, T]``.
"""

from advantage.math.returns import (
    discounted_return,
    first_visit_mask,
    gae,
    mc_update,
    n_step_returns,
    reward_to_go,
)

__all__ = [
    "discounted_return",
    "first_visit_mask",
    "gae",
    "mc_update",
    "n_step_returns",
    "reward_to_go",
]
