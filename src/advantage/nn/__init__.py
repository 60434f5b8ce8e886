"""Networks: MLPs and actor-critic heads for Discrete and Box action spaces."""

from advantage.nn.actor_critic import ActorCritic, ActorCriticModel, CategoricalHead, GaussianHead, mlp
from advantage.nn.policy import ActorCriticPolicy, ObsNormalizer

__all__ = [
    "ActorCritic",
    "ActorCriticModel",
    "ActorCriticPolicy",
    "CategoricalHead",
    "GaussianHead",
    "ObsNormalizer",
    "mlp",
]
