"""Latency ratios of paired samples with bootstrap confidence intervals; NOISY runs.

The ratio of two runners is the median over timing rounds of their per-round latency ratio
(sample i of both runners comes from round i of ``timing.interleaved``). Load and stalls hit
the runners of a round alike, so the per-round ratio cancels them; the ratio of the two
medians does not: when stalls hit a third of the rounds, each runner's median can fall in a
different mode (a tiny model's ratio of medians swung from 0.9x to 148x on a busy machine
while the per-round median stayed at 1.0). Its confidence interval comes from
``scipy.stats.bootstrap`` (paired: rounds are resampled whole; percentile method, Efron &
Tibshirani, "An Introduction to the Bootstrap", 1993, ch. 13), with a fixed seed so that a
report is reproducible from its samples. ``baseline.comparison`` judges the same per-round
ratios.
"""

import numpy as np
from scipy.stats import bootstrap

from .results import Ratio, Speed

CONFIDENCE = 0.95
RESAMPLES = 9999
SEED = 0
NOISY_CI_WIDTH = 0.10  # a ratio's (CI high - CI low) / ratio above this: the run is NOISY
PAIRS = (  # (numerator, denominator): latency ratios the report carries, where both ran
    ("tvm_int8", "tvm_fp32"),
    ("tvm_fp32", "pytorch_fp32"),
    ("tvm_int8", "pytorch_fp32"),
    ("tvm_int8", "torch_int8_fx"),
    ("tvm_int8", "torch_int8_pt2e"),
)


def ratio_ci(num_ms, den_ms, confidence=CONFIDENCE):
    """Median per-round ratio ``median(num / den)`` with its bootstrap confidence interval.

    Args:
        num_ms, den_ms: paired latency samples, ms, same length >= 2 (sample i of both from
            the same round).
        confidence: confidence level of the interval, in (0, 1).
    Returns:
        ``results.Ratio``: ``ratio`` (< 1: the numerator is faster), ``ci_low``, ``ci_high``
        and ``confidence``.
    Raises:
        ValueError: samples of different lengths (from ``scipy.stats.bootstrap``).
    """
    num, den = np.asarray(num_ms, np.float64), np.asarray(den_ms, np.float64)
    ci = bootstrap(
        (num, den),
        median_ratio,
        paired=True,
        vectorized=True,
        n_resamples=RESAMPLES,
        confidence_level=confidence,
        method="percentile",
        rng=SEED,
    ).confidence_interval
    return Ratio(float(median_ratio(num, den)), float(ci.low), float(ci.high), confidence)


def median_ratio(num, den, axis=-1):
    """The median over rounds of ``num / den`` (paired latency samples, ms, float64 arrays
    of one length): the run's latency ratio (< 1: the numerator is faster)."""
    return np.median(np.asarray(num) / np.asarray(den), axis=axis)


def speed(samples_ms):
    """The run's ``results.Speed``: every ratio of ``PAIRS`` with its CI, and whether it is NOISY.

    Args:
        samples_ms: {runner name: paired latency samples, ms} (``timing.interleaved``).
    Returns:
        ``results.Speed``: ``ratios`` {"num/den": ``ratio_ci``'s ``Ratio``}, ``noisy``
        (True when any ratio's relative CI width (high - low) / ratio exceeds
        ``NOISY_CI_WIDTH``, whatever the medians) and ``noisy_reason`` (the widest such
        ratio in words, or None).
    """
    ratios = {
        f"{num}/{den}": ratio_ci(samples_ms[num], samples_ms[den])
        for num, den in PAIRS
        if num in samples_ms and den in samples_ms
    }
    widths = {key: (r.ci_high - r.ci_low) / r.ratio for key, r in ratios.items()}
    wide = {key: w for key, w in widths.items() if w > NOISY_CI_WIDTH}
    reason = None
    if wide:
        key = max(wide, key=wide.get)
        r = ratios[key]
        reason = (
            f"{key}: {100 * r.confidence:g} % CI {r.ci_low:.3f}-{r.ci_high:.3f} "
            f"spans {100 * wide[key]:.0f} % of the ratio {r.ratio:.3f} "
            f"(limit {100 * NOISY_CI_WIDTH:g} %)"
        )
    return Speed(ratios, bool(wide), reason)
