"""The math core: pure tensor functions shared by every algorithm, classic and language-model.

Nothing here takes a config, holds state or does I/O. Shapes follow one convention: time is the last
dimension, so a single trajectory is ``[T]`` and a batch of rows (environments, or sequences) is ``[B, T]``.
"""

from advantage.math.advantages import (
    GROUP_ADVANTAGES,
    batch_std,
    constant_groups,
    dr_grpo,
    grpo,
    process_advantages,
    rloo,
)
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
from advantage.math.policy_gradient import (
    cumulative_weights,
    episode_returns,
    leave_one_out_mean,
    optimal_constant_baseline,
    outer_weights,
)
from advantage.math.policy_losses import POLICY_LOSSES, gspo, pg, ppo_clip, ppo_penalty
from advantage.math.preference import (
    DPO_LOSSES,
    bradley_terry_loss,
    dpo_implicit_reward,
    dpo_metrics,
    kwise_ranking_loss,
)
from advantage.math.q_targets import double_q_target, dueling_combine, polyak_update, td_target
from advantage.math.returns import (
    discounted_return,
    first_visit_mask,
    gae,
    mc_update,
    n_step_returns,
    reward_to_go,
)
from advantage.math.rewards import length_preference, overlong_penalty
from advantage.math.trust_region import (
    LineSearchResult,
    conjugate_gradient,
    fisher_vector_product,
    flat_grad,
    line_search,
    natural_step,
)
from advantage.math.value_losses import VALUE_LOSSES

__all__ = [
    "DPO_LOSSES",
    "GROUP_ADVANTAGES",
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "POLICY_LOSSES",
    "VALUE_LOSSES",
    "AdaptiveKLController",
    "LineSearchResult",
    "adaptive_kl_beta",
    "aggregate",
    "batch_std",
    "bradley_terry_loss",
    "conjugate_gradient",
    "constant_groups",
    "cumulative_weights",
    "discounted_return",
    "double_q_target",
    "dpo_implicit_reward",
    "dpo_metrics",
    "dr_grpo",
    "dueling_combine",
    "episode_returns",
    "first_visit_mask",
    "fisher_vector_product",
    "flat_grad",
    "gae",
    "grpo",
    "gspo",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "kwise_ranking_loss",
    "leave_one_out_mean",
    "length_preference",
    "line_search",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "mc_update",
    "n_step_returns",
    "natural_step",
    "optimal_constant_baseline",
    "outer_weights",
    "overlong_penalty",
    "pg",
    "polyak_update",
    "ppo_clip",
    "ppo_penalty",
    "process_advantages",
    "reward_to_go",
    "rloo",
    "td_target",
]
