"""Config sections of the networks (the ``model`` sections shared by several algorithms), without torch:
:mod:`advantage.configs` imports them to list and validate configs; ``build`` imports the network."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from advantage.config import option

if TYPE_CHECKING:
    import gymnasium as gym

    from advantage.nn.actor_critic import ActorCritic


def hidden_sizes_problems(sizes: list[int], name: str = "model.hidden_sizes") -> list[str]:
    """The check every MLP's ``hidden_sizes`` gets: a non-empty list of positive sizes (an empty list would
    leave the network without a hidden layer to read its features from)."""
    if not sizes or min(sizes) < 1:
        return [f"{name} must be a non-empty list of positive sizes, got {sizes}"]
    return []


@dataclass
class ActorCriticModel:
    """The ``model`` section of the actor-critic trainers (PPO, A2C)."""

    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64], metadata={"help": "MLP hidden sizes"})
    activation: str = option("tanh", "hidden activation", choices=("tanh", "relu"))
    shared_trunk: bool = option(False, "actor and critic share one trunk")
    log_std_init: float = option(0.0, "Box actions: initial log σ")
    squash: bool = option(False, "Box actions: tanh-squash to the bounds (with log-det correction)")
    init: str = option(
        "orthogonal",
        "weight initialisation: orthogonal (zero biases; gain √2 in the trunks but 1 on their last "
        "layer, 0.01 policy head, 1 value head; after Huang et al. 2022 and SB3's ortho_init=True) or "
        "torch (PyTorch's default nn.Linear init, SB3's ortho_init=False, which the zoo's MuJoCo PPO "
        "entries set)",
        choices=("orthogonal", "torch"),
    )

    def problems(self) -> list[str]:
        return hidden_sizes_problems(self.hidden_sizes)

    def build(self, obs_space: gym.Space, action_space: gym.Space) -> ActorCritic:
        from advantage.nn.actor_critic import ActorCritic

        return ActorCritic(
            obs_space,
            action_space,
            list(self.hidden_sizes),
            self.activation,
            self.shared_trunk,
            self.log_std_init,
            self.squash,
            self.init == "orthogonal",
        )
