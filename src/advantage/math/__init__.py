"""The math core: pure tensor functions shared by every algorithm, classic and language-model.

Nothing here takes a config, holds state or does I/O. Shapes follow one convention: time is the last
dimension, so a single trajectory is ``[T]`` and a batch of rows (environments, or sequences) is ``[B, T]``.

The modules load on first use (``advantage.math.gae`` imports :mod:`advantage.math.returns` and torch
then), so :mod:`advantage.math.registry`, which the configs read for their choices, costs no torch.
"""

# ruff: noqa: F401  (the names below are this package's interface, for type checkers; they load lazily)
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
        k3_from_ratio,
        kl_k1,
        kl_k2,
        kl_k3,
    )
    from advantage.math.linear_td import (
        GRADIENT_TD_METHODS,
        LinearTDSystem,
        expected_gradient_td_update,
        expected_semi_gradient_update,
        expected_td_system,
        expected_td_update,
        gradient_mc_step,
        gradient_td_step,
        linear_td_error,
        per_decision_returns,
        projected_bellman_error,
        semi_gradient_td_step,
        state_distribution,
        value_error,
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
    from advantage.math.policy_losses import (
        POLICY_LOSSES,
        gspo,
        pg,
        ppo_clip,
        ppo_penalty,
    )
    from advantage.math.preference import (
        DPO_LOSSES,
        bradley_terry_loss,
        dpo_implicit_reward,
        dpo_metrics,
        kwise_ranking_loss,
    )
    from advantage.math.q_targets import (
        double_q_target,
        dueling_combine,
        polyak_update,
        td_target,
    )
    from advantage.math.returns import (
        discounted_return,
        first_visit_mask,
        gae,
        mc_update,
        n_step_returns,
        reward_to_go,
    )
    from advantage.math.rewards import (
        length_preference,
        overlong_penalty,
    )
    from advantage.math.trust_region import (
        LineSearchResult,
        conjugate_gradient,
        fisher_vector_product,
        flat_grad,
        line_search,
        natural_step,
    )
    from advantage.math.value_losses import (
        VALUE_LOSSES,
        explained_variance,
    )
    from advantage.schedules import (
        LR_SCHEDULES,
        linear_schedule,
        remaining,
        warmup_decay,
    )


# Searched in this order for a name asked of the package (the names above, plus the schedules).
_MODULES = (
    "advantage.math.advantages",
    "advantage.math.kl",
    "advantage.math.linear_td",
    "advantage.math.masked",
    "advantage.math.policy_gradient",
    "advantage.math.policy_losses",
    "advantage.math.preference",
    "advantage.math.q_targets",
    "advantage.math.returns",
    "advantage.math.rewards",
    "advantage.math.trust_region",
    "advantage.math.value_losses",
    "advantage.schedules",
)


def __getattr__(name: str) -> object:
    if not name.startswith("_"):
        for module in _MODULES:
            value = getattr(importlib.import_module(module), name, _MISSING)
            if value is not _MISSING:
                globals()[name] = value
                return value
    raise AttributeError(f"module 'advantage.math' has no attribute {name!r}")


_MISSING = object()
