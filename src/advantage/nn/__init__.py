"""Networks of the classic trainers (no language models: those are :mod:`advantage.lm`).

* :mod:`~advantage.nn.actor_critic`: MLPs and the actor-critic network with its heads for Discrete,
  MultiDiscrete, MultiBinary and Box actions (PPO, A2C, TRPO, REINFORCE); its config section is
  :class:`advantage.configs.models.ActorCriticModel`.
* :mod:`~advantage.nn.policy`: the trained actor-critic policy and the observation normaliser.
* :mod:`~advantage.nn.continuous`: actors and critics for ``Box`` actions (DDPG, TD3, SAC).
"""

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
