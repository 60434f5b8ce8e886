"""pass@k against brute-force enumeration of k-subsets; maj@k on hand cases (ties, None answers)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from advantage.math.pass_at_k import maj_at_k, maj_at_k_expected, mean_pass_at_k, pass_at_k


def _brute_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of the k-subsets of n samples (the first c correct) holding a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_equals_enumeration_over_all_subsets():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                expected = _brute_pass_at_k(n, c, k)
                assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12), (n, c, k)
                assert pass_at_k(n, c, k) == pytest.approx(
                    1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12
                )


def test_pass_at_k_edge_cases():
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(10, 10, 3) == 1.0
    assert pass_at_k(10, 1, 10) == 1.0  # k = n: the one correct sample is always drawn
    assert pass_at_k(10, 0, 10) == 0.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 is the fraction correct
    # large n: the product form stays finite where the binomials would be huge
    assert 0.0 < pass_at_k(2000, 1, 5) == pytest.approx(5 / 2000)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, 0, 1), "n must be >= 1"),
        ((5, 6, 1), "c must be in \\[0, n=5\\], got 6"),
        ((5, -1, 1), "c must be in"),
        ((5, 2, 0), "k must be in \\[1, n=5\\], got 0"),
        ((5, 2, 6), "k must be in"),
        ((5.0, 2, 1), "n must be an int"),
        ((5, True, 1), "c must be an int"),
    ],
)
def test_pass_at_k_rejects_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(*args)


def test_pass_at_k_accepts_numpy_and_torch_ints():
    assert pass_at_k(np.int64(4), torch.tensor(2), 2) == pytest.approx(_brute_pass_at_k(4, 2, 2))


def test_mean_pass_at_k_over_prompts():
    cs = [0, 1, 4]
    expected = (pass_at_k(4, 0, 2) + pass_at_k(4, 1, 2) + pass_at_k(4, 4, 2)) / 3
    assert mean_pass_at_k([4, 4, 4], cs, 2) == pytest.approx(expected)
    assert mean_pass_at_k(4, cs, 2) == pytest.approx(expected)
    assert mean_pass_at_k(torch.tensor([4, 4, 4]), torch.tensor(cs), 2) == pytest.approx(expected)
    assert mean_pass_at_k(np.array([4, 4, 4]), np.array(cs), 2) == pytest.approx(expected)
    with pytest.raises(ValueError, match="same length"):
        mean_pass_at_k([4, 4], cs, 2)
    with pytest.raises(ValueError, match="at least one prompt"):
        mean_pass_at_k([], [], 1)


def test_maj_at_k_hand_cases():
    answers = ["7", "5", "5", "7", "7"]
    correct = [True, False, False, True, True]
    assert maj_at_k(answers, correct, 1) == 1.0  # {7}
    assert maj_at_k(answers, correct, 3) == 0.0  # 5 wins 2-1
    assert maj_at_k(answers, correct, 4) == 1.0  # 7 and 5 tie 2-2: 7 occurs first
    assert maj_at_k(answers, correct, 5) == 1.0  # 7 wins 3-2
    assert maj_at_k(["5", "7"], [False, True], 2) == 0.0  # 1-1 tie: the first answer, 5, wins


def test_maj_at_k_none_answers_never_win():
    assert maj_at_k([None, None, "3"], [False, False, True], 3) == 1.0
    assert maj_at_k([None, None, None], [False, False, False], 3) == 0.0
    assert maj_at_k([None, "4", "3"], [False, False, True], 3) == 0.0  # 4 and 3 tie; 4 first


def test_maj_at_k_rejects_bad_arguments():
    with pytest.raises(ValueError, match="same length"):
        maj_at_k(["1"], [True, False], 1)
    with pytest.raises(ValueError, match="k must be in \\[1, len\\(answers\\)=2\\], got 3"):
        maj_at_k(["1", "2"], [True, False], 3)


def test_maj_at_k_expected_is_the_mean_over_subsets():
    answers = ["a", "b", "b", None, "a", "c"]
    correct = [True, False, False, False, True, False]
    for k in range(1, 7):
        subsets = list(itertools.combinations(range(6), k))
        brute = sum(maj_at_k([answers[i] for i in s], [correct[i] for i in s], k) for s in subsets)
        exact = maj_at_k_expected(answers, correct, k)
        assert exact == pytest.approx(brute / len(subsets))
        sampled = maj_at_k_expected(answers, correct, k, max_subsets=1, seed=3)
        assert sampled in (0.0, 1.0)  # one random subset when C(n, k) > max_subsets
    # Monte Carlo estimate close to the exact value
    mc = maj_at_k_expected(answers, correct, 3, max_subsets=19, seed=0)
    assert mc == pytest.approx(maj_at_k_expected(answers, correct, 3), abs=0.3)
