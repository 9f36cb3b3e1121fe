"""qbench.baseline.stats on hand-computed examples."""

from math import comb

import numpy as np
import pytest

from qbench.baseline.stats import latency_change, paired_change


def test_two_sample_sets_from_one_distribution_are_never_a_regression():
    """Same distribution, 30 samples each: neither the factor nor significance is reached
    in any of 300 seeds (the factor alone is passed only by chance draws of the median)."""
    for seed in range(300):
        rng = np.random.default_rng(seed)
        base, new = rng.lognormal(np.log(10), 0.1, (2, 30))
        assert latency_change(base, new)["verdict"] == "~", seed


def test_a_20_percent_shift_with_30_samples_each_is_a_regression():
    rng = np.random.default_rng(1)
    base = rng.normal(10.0, 0.3, 30)
    new = 1.2 * rng.normal(10.0, 0.3, 30)
    change = latency_change(base, new)
    assert change["ratio"] == pytest.approx(np.median(new) / np.median(base))
    assert change["p_slower"] < 1e-6 and change["verdict"] == "regression"
    assert latency_change(new, base)["verdict"] == "improvement"  # symmetric


def test_a_20_percent_shift_with_3_samples_each_is_not_significant():
    """With 3 vs 3 samples the most extreme ordering (every new sample above every baseline
    sample) has probability 1 / C(6, 3) = 1/20 under the null hypothesis, so the smallest
    one-sided p is 0.05: never below alpha = 0.01, however large the shift."""
    base, new = [10.0, 10.1, 10.2], [12.0, 12.1, 12.2]
    change = latency_change(base, new)
    assert change["ratio"] == pytest.approx(12.1 / 10.1)
    assert change["p_slower"] == pytest.approx(1 / comb(6, 3))
    assert change["verdict"] == "~"
    assert latency_change(base, new, alpha=0.1)["verdict"] == "regression"


def test_a_significant_change_below_the_factor_is_not_a_regression():
    rng = np.random.default_rng(2)
    base = rng.normal(10.0, 0.05, 50)
    new = rng.normal(10.5, 0.05, 50)  # 5 % slower, p tiny, factor 1.10 not passed
    change = latency_change(base, new)
    assert change["p_slower"] < 1e-9 and change["verdict"] == "~"


def test_mcnemar_on_hand_counted_discordant_pairs():
    """20 images: 10 right in both runs, 7 lost (1 -> 0), 1 gained (0 -> 1), 2 wrong in
    both. Exact McNemar: P(X >= 7), X ~ Binomial(8, 1/2) = (C(8,7) + C(8,8)) / 2^8 = 9/256."""
    base = [1] * 10 + [1] * 7 + [0] + [0, 0]
    new = [1] * 10 + [0] * 7 + [1] + [0, 0]
    test = paired_change(base, new)
    assert (test["lost"], test["gained"]) == (7, 1)
    assert test["p_worse"] == pytest.approx(9 / 256)
    assert test["p_better"] == pytest.approx(255 / 256)  # P(X >= 1) = 1 - 1/256
    assert test["verdict"] == "~"  # 0.035 is not below 0.01
    assert paired_change(base, new, alpha=0.05)["verdict"] == "regression"
    assert paired_change(new, base, alpha=0.05)["verdict"] == "improvement"


def test_mcnemar_twelve_lost_none_gained_is_a_regression_and_no_discordance_is_not():
    base, new = [1] * 20, [0] * 12 + [1] * 8
    test = paired_change(base, new)
    assert test["p_worse"] == pytest.approx(0.5**12) and test["verdict"] == "regression"
    same = paired_change(base, base)
    assert (same["lost"], same["gained"], same["p_worse"], same["verdict"]) == (0, 0, 1.0, "~")


def test_mcnemar_rejects_outcomes_of_different_lengths():
    with pytest.raises(ValueError, match="3 and 2"):
        paired_change([1, 0, 1], [1, 0])
