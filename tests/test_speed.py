"""Latency ratios with bootstrap confidence intervals, and the NOISY verdict."""

import numpy as np
import pytest

from qbench.measure.speed import NOISY_CI_WIDTH, ratio_ci, speed


def test_the_ci_covers_the_true_ratio_of_known_distributions():
    """Log-normal latencies with median 6 ms and 10 ms (median of lognormal(0, s) is 1): the
    per-round ratio is 0.6 x lognormal(0, s * sqrt(2)), median 0.6; a 95 % CI should cover it
    in about 95 % of runs."""
    covered = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        num = 6.0 * rng.lognormal(0.0, 0.05, 30)
        den = 10.0 * rng.lognormal(0.0, 0.05, 30)
        r = ratio_ci(num, den)
        assert r.ratio == pytest.approx(np.median(num / den))
        assert r.ci_low <= r.ratio <= r.ci_high and r.confidence == 0.95
        covered += r.ci_low <= 0.6 <= r.ci_high
    assert covered >= 34  # 40 x 0.95 = 38 expected; binomial 1st percentile is 34


def test_stalls_that_split_the_medians_do_not_move_the_ratio():
    """20 rounds of a 0.05 ms model; a 10 ms stall hits INT8 in rounds 0-10 and FP32 in
    rounds 0-8. INT8's median falls among its 11 stalled rounds, FP32's among its 11 quick
    ones, so the ratio of medians is about 200; per round the ratio is 1 in 18 rounds (both
    or neither stalled) and about 200 in two, so the median per-round ratio is 1."""
    int8, fp32 = np.full(20, 0.05), np.full(20, 0.05)
    int8[:11] += 10.0
    fp32[:9] += 10.0
    assert np.median(int8) / np.median(fp32) > 100  # what a ratio of medians would report
    r = ratio_ci(int8, fp32)
    assert r.ratio == 1.0 and r.ci_low == 1.0


def test_hand_built_ci_of_three_rounds():
    """Medians of 3 values resampled from {1, 2, 3}: 1 with probability 7/27 (two or three
    1s), 3 likewise, 2 otherwise; the 2.5th and 97.5th percentiles are 1 and 3."""
    r = ratio_ci([1.0, 2.0, 3.0], [1.0, 1.0, 1.0])
    assert (r.ratio, r.ci_low, r.ci_high) == (2.0, 1.0, 3.0)
    out = speed({"tvm_int8": [1.0, 2.0, 3.0], "tvm_fp32": [1.0, 1.0, 1.0]})
    assert out.noisy and list(out.ratios) == ["tvm_int8/tvm_fp32"]  # width 2 / 2 = 100 %
    assert out.noisy_reason.startswith("tvm_int8/tvm_fp32: 95 % CI 1.000-3.000")


def test_load_that_hits_both_runners_of_a_round_does_not_widen_the_ci():
    """Paired rounds: a third of the rounds 3x slower for both runners leaves every
    resampled ratio of medians at 0.6, however spread the latencies."""
    fp32 = np.array([10.0] * 20 + [30.0] * 10)
    samples = {"pytorch_fp32": 2 * fp32, "tvm_fp32": fp32, "tvm_int8": 0.6 * fp32}
    out = speed(samples)
    assert set(out.ratios) == {
        "tvm_int8/tvm_fp32",
        "tvm_fp32/pytorch_fp32",
        "tvm_int8/pytorch_fp32",
    }
    int8 = out.ratios["tvm_int8/tvm_fp32"]
    assert int8.ratio == pytest.approx(0.6) and int8.ci_high - int8.ci_low < 1e-12
    assert out.ratios["tvm_int8/pytorch_fp32"].ratio == pytest.approx(0.3)
    assert not out.noisy and out.noisy_reason is None


def test_independent_noise_gives_a_wide_ci_and_a_noisy_run_whatever_the_medians():
    rng = np.random.default_rng(1)
    fp32 = 10.0 * rng.lognormal(0.0, 0.5, 20)  # a busy machine, not the same in every round
    int8 = 6.0 * rng.lognormal(0.0, 0.5, 20)
    out = speed({"tvm_fp32": fp32, "tvm_int8": int8})
    r = out.ratios["tvm_int8/tvm_fp32"]
    assert (r.ci_high - r.ci_low) / r.ratio > NOISY_CI_WIDTH
    assert out.noisy and "tvm_int8/tvm_fp32" in out.noisy_reason
