"""The fraction of calibration values each range clips, recounted here with numpy."""

import numpy as np
import pytest

from qbench.calibration import make_collector

RNG = np.random.default_rng(77)
GAUSS = RNG.standard_normal(50_000)
RELU_PEAKS = np.concatenate([np.maximum(RNG.standard_normal(50_000), 0), [20.0, 18.0, 15.0]])


def calibrated(mode, x, **params):
    c = make_collector(mode, **params)
    for i, part in enumerate(np.array_split(x, 4)):  # streamed over batches
        c.update(part, batch=i)
    return c, c.compute_range()


def outside(x, r):
    return int(((x < r.lo) | (x > r.hi)).sum())


@pytest.mark.parametrize("x", [GAUSS, RELU_PEAKS], ids=["gauss", "relu_peaks"])
@pytest.mark.parametrize(
    "mode, params", [("percentile", {"percentile": 99.0}), ("kl_divergence", {})]
)
def test_histogram_modes_count_clipped_values_to_within_the_threshold_bin(x, mode, params):
    c, r = calibrated(mode, x, **params)
    t = max(r.hi, -r.lo)
    w = c.hist.bin_width
    in_bin = int(
        ((np.abs(x) >= np.floor(t / w) * w) & (np.abs(x) < (np.floor(t / w) + 1) * w)).sum()
    )
    assert abs(r.clipped - outside(x, r)) <= in_bin
    assert r.values == x.size
    assert r.clipped_fraction == pytest.approx(r.clipped / x.size)


def test_percentile_99_clips_one_percent():
    _, r = calibrated("percentile", GAUSS, percentile=99.0)
    assert r.clipped_fraction == pytest.approx(0.01, abs=2e-4)


def test_global_scale_counts_exactly():
    x = np.concatenate([GAUSS * 4, [9.0, -8.5, 8.0]])  # 8.0 sits on the bound: not clipped
    _, r = calibrated("global_scale", x, global_scale=8.0)
    assert r.clipped == outside(x, r) == int((np.abs(x) > 8.0).sum())


def test_max_clips_nothing_and_nonfinite_values_are_not_counted():
    x = np.concatenate([GAUSS, [np.nan, np.inf]])
    _, r = calibrated("max", x)
    assert (r.clipped, r.values, r.clipped_fraction) == (0.0, GAUSS.size, 0.0)


def test_sparse_peaks_under_kl_show_a_clip_count():
    """KL's threshold on sparse post-ReLU peaks cuts them off: the count says so."""
    _, r = calibrated("kl_divergence", RELU_PEAKS)
    assert r.hi < 15.0
    assert r.clipped >= 3


RELU6 = np.clip(RNG.normal(2.0, 3.0, 200_000), 0.0, 6.0)  # 27 % of the values are 6.0


@pytest.mark.parametrize(
    "mode, params", [("kl_divergence", {}), ("percentile", {"percentile": 99.999})]
)
def test_a_range_that_reaches_the_largest_value_clips_nothing(mode, params):
    """Saturated ReLU6 inputs fill the top bin; a range whose bound is their 6.0 clips none
    of them (the top bin's values lie at or below the largest value)."""
    _, r = calibrated(mode, RELU6, **params)
    assert r.hi == 6.0 and outside(RELU6, r) == 0
    assert r.clipped == 0.0  # before: kl 9.1 %, the top bin counted as clipped
