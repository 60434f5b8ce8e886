"""Networks: MLPs and actor-critic heads for Discrete and Box action spaces."""

from advantage.nn.actor_critic import ActorCritic, CategoricalHead, GaussianHead, mlp
from advantage.nn.policy import ActorCriticPolicy, ObsNormalizer

__all__ = ["ActorCritic", "ActorCriticPolicy", "CategoricalHead", "GaussianHead", "ObsNormalizer", "mlp"]
