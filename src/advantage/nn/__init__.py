"""Networks: MLPs and actor-critic heads for Discrete and Box action spaces."""

from advantage.nn.actor_critic import ActorCritic, CategoricalHead, GaussianHead, mlp

__all__ = ["ActorCritic", "CategoricalHead", "GaussianHead", "mlp"]
