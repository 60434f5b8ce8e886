"""What the ddpg, td3 and sac configs share (their training code shares
:mod:`advantage.algos.offpolicy_common`)."""

from __future__ import annotations

from typing import Any


def config_problems(cfg: Any) -> list[str]:
    """Cross-field checks shared by the ddpg, td3 and sac configs: the batch fits in the buffer, the first
    update has a full batch, and both network size lists are non-empty and positive."""
    from advantage.data.replay import replay_problems  # numpy: not for `advantage list`

    out = replay_problems(cfg.algorithm)
    for name in ("actor_hidden", "critic_hidden"):
        sizes = getattr(cfg.model, name)
        if not sizes or min(sizes) < 1:
            out.append(f"model.{name} must be a non-empty list of positive sizes, got {sizes}")
    return out
