"""Data containers: experience replay for off-policy algorithms."""

from advantage.data.replay import PrioritizedReplayBuffer, ReplayBuffer, SumTree

__all__ = ["PrioritizedReplayBuffer", "ReplayBuffer", "SumTree"]
