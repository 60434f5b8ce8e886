"""The math core: pure tensor functions shared by every algorithm, classic and language-model.

Nothing here takes a config, holds state or does I/O. Shapes follow one convention: time is the last
dimension, so a single trajectory is ``[T]`` and a batch of rows (environments, or sequences) is ``[B, T]``.
"""

from advantage.math.kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    adaptive_kl_beta,
    kl_k1,
    kl_k2,
    kl_k3,
)
from advantage.math.masked import (
    LOSS_AGGREGATIONS,
    aggregate,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)
from advantage.math.policy_losses import POLICY_LOSSES, pg, ppo_clip, ppo_penalty
from advantage.math.q_targets import double_q_target, dueling_combine, polyak_update, td_target
from advantage.math.returns import (
    discounted_return,
    first_visit_mask,
    gae,
    mc_update,
    n_step_returns,
    reward_to_go,
)
from advantage.math.value_losses import VALUE_LOSSES

__all__ = [
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "POLICY_LOSSES",
    "VALUE_LOSSES",
    "AdaptiveKLController",
    "adaptive_kl_beta",
    "aggregate",
    "discounted_return",
    "double_q_target",
    "dueling_combine",
    "first_visit_mask",
    "gae",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "mc_update",
    "n_step_returns",
    "pg",
    "polyak_update",
    "ppo_clip",
    "ppo_penalty",
    "reward_to_go",
    "td_target",
]
