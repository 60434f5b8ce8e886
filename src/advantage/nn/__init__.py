"""Networks: MLPs and actor-critic heads for Discrete, MultiDiscrete, MultiBinary and Box action spaces."""

from advantage.nn.actor_critic import (
    ActorCritic,
    BernoulliHead,
    CategoricalHead,
    GaussianHead,
    MultiCategoricalHead,
    make_head,
    mlp,
)
from advantage.nn.policy import ActorCriticPolicy, ObsNormalizer

__all__ = [
    "ActorCritic",
    "ActorCriticPolicy",
    "BernoulliHead",
    "CategoricalHead",
    "GaussianHead",
    "MultiCategoricalHead",
    "ObsNormalizer",
    "make_head",
    "mlp",
]
