r"""Sampling metrics for verifiable tasks: pass@k (unbiased, Chen et al. 2021) and maj@k (majority vote).

pass@k is the probability that at least one of k samples is correct. Drawing k of n generated samples, c
of them correct, without replacement, the unbiased estimator of Chen et al. (2021, "Evaluating Large
Language Models Trained on Code", eq. 1 and its numerically stable form in Figure 3) is

.. math::
    \text{pass@}k = 1 - \binom{n-c}{k} \Big/ \binom{n}{k}
                  = 1 - \prod_{i=n-c+1}^{n} \left(1 - \frac{k}{i}\right),

the product avoiding the huge binomials. maj@k (Wang et al. 2023 "self-consistency"; reported as maj@k by
Lewkowycz et al. 2022) takes the most frequent extracted answer among k samples and scores whether it is
correct. Plain Python on ints and bools: these run once per evaluation, not inside a loss.
"""

from __future__ import annotations

import itertools
import math
import operator
import random
from collections.abc import Iterable, Sequence
from typing import Protocol, SupportsIndex, cast

__all__ = ["maj_at_k", "maj_at_k_expected", "mean_pass_at_k", "pass_at_k"]


def _check_int(name: str, value: SupportsIndex | object) -> int:
    """``value`` as an int; numpy/torch integer scalars are accepted (``__index__``), bools and floats not."""
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(cast(SupportsIndex, value))  # a non-integer raises TypeError, caught below
    except TypeError:
        raise ValueError(f"{name} must be an int, got {value!r}") from None


def pass_at_k(n: int, c: int, k: int) -> float:
    r"""Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al. 2021):
    :math:`1 - \prod_{i=n-c+1}^{n}(1 - k/i)`, which equals :math:`1 - \binom{n-c}{k}/\binom{n}{k}`.
    Needs 0 ≤ c ≤ n and 1 ≤ k ≤ n."""
    n, c, k = _check_int("n", n), _check_int("c", c), _check_int("k", k)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0 <= c <= n:
        raise ValueError(f"c must be in [0, n={n}], got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}], got {k}")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


class ToList(Protocol):
    """A numpy array or a 1-D tensor: anything with ``.tolist()``."""

    def tolist(self) -> list[int] | int: ...


def mean_pass_at_k(
    ns: Sequence[int] | int | ToList,
    cs: Sequence[int] | ToList,
    k: int,
) -> float:
    """Mean pass@k over prompts: ``ns[i]`` samples of prompt i, ``cs[i]`` correct (``ns`` may be one int
    for all). Accepts lists, numpy arrays or 1-D tensors (``.tolist()`` is used)."""
    cs_given = cs.tolist() if not isinstance(cs, Sequence) else cs
    cs_list = [cs_given] if isinstance(cs_given, int) else list(cs_given)
    ns_given = ns.tolist() if not isinstance(ns, Sequence | int) else ns
    ns_list = [ns_given] * len(cs_list) if isinstance(ns_given, int) else list(ns_given)
    if len(ns_list) != len(cs_list):
        raise ValueError(f"ns and cs must have the same length, got {len(ns_list)} and {len(cs_list)}")
    if not cs_list:
        raise ValueError("cs must hold at least one prompt, got none")
    return sum(pass_at_k(n, c, k) for n, c in zip(ns_list, cs_list, strict=True)) / len(cs_list)


def _vote(answers: Sequence[str | None], correct: Sequence[bool]) -> float:
    """1.0 if the most frequent non-None answer is correct. Ties go to the answer seen first; the
    winner's correctness is that of its first sample (a deterministic verifier gives one answer string one
    verdict). No non-None answer → 0.0."""
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, a in enumerate(answers):
        if a is not None:
            counts[a] = counts.get(a, 0) + 1
            first.setdefault(a, i)
    if not counts:
        return 0.0
    # max() returns the first maximal item and dicts keep insertion order: ties go to the earliest answer
    winner = max(counts, key=counts.__getitem__)
    return 1.0 if correct[first[winner]] else 0.0


def _check_votes(answers: Sequence[str | None], correct: Sequence[bool], k: int) -> int:
    if len(answers) != len(correct):
        raise ValueError(
            f"answers and correct must have the same length, got {len(answers)} and {len(correct)}"
        )
    k = _check_int("k", k)
    if not 1 <= k <= len(answers):
        raise ValueError(f"k must be in [1, len(answers)={len(answers)}], got {k}")
    return k


def maj_at_k(answers: Sequence[str | None], correct: Sequence[bool], k: int) -> float:
    """maj@k on the **first** ``k`` samples: 1.0 if their majority answer is correct, else 0.0.

    ``answers[i]`` is sample i's extracted answer (:attr:`Reward.answer`), None when none was extracted
    (None never wins); ``correct[i]`` its verdict. Ties go to the answer that occurs first. This is one
    draw of maj@k; :func:`maj_at_k_expected` averages over all k-subsets."""
    k = _check_votes(answers, correct, k)
    return _vote(answers[:k], correct[:k])


def maj_at_k_expected(
    answers: Sequence[str | None],
    correct: Sequence[bool],
    k: int,
    *,
    max_subsets: int = 20_000,
    seed: int = 0,
) -> float:
    """maj@k averaged over the k-subsets of the n samples (each subset in sample order, so ties go to the
    sample with the lowest index), the lower-variance analogue of the unbiased pass@k.

    Exact when C(n, k) ≤ ``max_subsets``; otherwise the mean over ``max_subsets`` uniformly random
    subsets (seeded, so deterministic), an unbiased Monte-Carlo estimate."""
    k = _check_votes(answers, correct, k)
    n = len(answers)
    if math.comb(n, k) <= max_subsets:
        subsets: Iterable[Sequence[int]] = itertools.combinations(range(n), k)
        total = math.comb(n, k)
    else:
        rng = random.Random(seed)
        subsets = (sorted(rng.sample(range(n), k)) for _ in range(max_subsets))
        total = max_subsets
    score = 0.0
    for idx in subsets:
        score += _vote([answers[i] for i in idx], [correct[i] for i in idx])
    return score / total
