r"""Curricula over a fixed set of prompts: which prompts to train on next, and how many samples each gets.

* **Hard-example mining**: every prompt's pass rate :math:`p_i = \text{passes}_i / \text{tries}_i` is
  tracked; the next prompts are drawn with weight :math:`w_i = 1 - p_i + \text{floor}`
  (:func:`hard_example_weights`, :func:`sample_hard_prompts`).
* **Adaptive difficulty**: a prompt's difficulty :math:`d` is the mean reward of its samples in a step;
  the thresholds :math:`(\tau_\text{hard}, \tau_\text{easy})` are EMAs of two quantiles of the step's
  difficulties (:func:`difficulty_thresholds`); a prompt is easy when :math:`d \ge \tau_\text{easy}` and
  hard when :math:`d \le \tau_\text{hard}` (:func:`split_by_difficulty`). :func:`grouped_order` puts a
  hard prompt's extra samples next to its first ones.

Pure torch on plain numbers: GRPO's rollout (:mod:`advantage.algos.llm.grpo_rollout`) calls these with its
config's values.
"""

from __future__ import annotations

import torch
from torch import Tensor

# ----------------------------------------------------------------------------------------------------
# Hard-example mining


def hard_example_weights(passes: Tensor, tries: Tensor, floor: float) -> Tensor:
    r"""The hard-example sampling weight of every prompt, ``[N]``:

    .. math::
        w_i = 1 - \frac{\text{passes}_i}{\text{tries}_i} + \text{floor}

    ``passes`` counts the correct samples of a prompt so far and ``tries`` all its samples; a prompt not
    tried yet has pass rate 0 (it counts as hard). ``floor`` keeps solved prompts in the draw."""
    rate = torch.where(tries > 0, passes / tries.clamp(min=1), torch.zeros_like(tries))
    return 1.0 - rate + floor


def sample_hard_prompts(
    passes: Tensor, tries: Tensor, n: int, floor: float, generator: torch.Generator
) -> list[int]:
    r"""``n`` distinct prompts by :func:`hard_example_weights`: drawn one after another, each with
    probability proportional to its weight among the prompts not drawn yet (``torch.multinomial`` without
    replacement; for n = 1, exactly :math:`w_i / \sum_j w_j`). With ``floor = 0`` a prompt solved every
    time has weight 0; it is drawn only when fewer than n others remain, uniformly among such prompts."""
    weights = hard_example_weights(passes, tries, floor)
    positive = int((weights > 0).sum())
    if positive >= n:
        return torch.multinomial(weights, n, replacement=False, generator=generator).tolist()
    first = torch.multinomial(weights, positive, replacement=False, generator=generator) if positive else None
    solved = (weights <= 0).nonzero().squeeze(-1)
    rest = solved[torch.randperm(len(solved), generator=generator)[: n - positive]]
    return (rest if first is None else torch.cat([first, rest])).tolist()


# ----------------------------------------------------------------------------------------------------
# Adaptive difficulty


def difficulty_thresholds(
    prev: Tensor, difficulty: Tensor, *, hard_quantile: float, easy_quantile: float, rate: float
) -> Tensor:
    r"""Adaptive difficulty's thresholds ``(τ_hard, τ_easy)`` ``[2]`` (float64) after a step whose P prompts
    had difficulties ``difficulty`` ``[P]`` (each the mean shaped reward of the prompt's G samples):

    .. math::
        q_t = \big(Q_{q_h}(d_t),\ Q_{q_e}(d_t)\big), \qquad
        \tau_t = q_t \ \text{(first step: prev is NaN)}, \qquad
        \tau_t = (1-\alpha)\,\tau_{t-1} + \alpha\, q_t \ \text{(after)}

    with :math:`Q_q` the q-quantile (``torch.quantile``, linear interpolation), :math:`q_h, q_e`
    ``hard_quantile`` < ``easy_quantile`` and α ``rate``. The EMA lets the thresholds follow the model as
    it improves without jumping with the few prompts of one step."""
    q = torch.tensor([hard_quantile, easy_quantile], dtype=torch.float64)
    now = torch.quantile(difficulty.to(torch.float64), q)
    if bool(prev.isnan().any()):
        return now
    return (1 - rate) * prev + rate * now


def split_by_difficulty(difficulty: Tensor, thresholds: Tensor) -> tuple[Tensor, Tensor]:
    r"""``(easy, hard)`` ``[P]`` bool: easy :math:`d \ge \tau_\text{easy}`, hard
    :math:`d \le \tau_\text{hard}`, the rest medium. ``thresholds`` is ``(τ_hard, τ_easy)``; τ_hard ≤
    τ_easy always (both are EMAs of ordered quantiles), and when they are equal (the step's prompts barely
    differ) a prompt on them is neither: it cannot be told easy or hard."""
    d = difficulty.to(torch.float64)
    lo, hi = thresholds[0], thresholds[1]
    return (d >= hi) & (d > lo), (d <= lo) & (d < hi)


def grouped_order(n: int, first: int, second: int) -> Tensor:
    """``[n · (first + second)]`` row order that puts the rows of group p together: rows
    ``p·first .. (p+1)·first - 1`` of a first block of ``n × first`` rows, then rows
    ``n·first + p·second ..`` of a second block of ``n × second`` rows after it."""
    a = torch.arange(n * first).view(n, first)
    b = n * first + torch.arange(n * second).view(n, second)
    return torch.cat([a, b], dim=1).reshape(-1)
