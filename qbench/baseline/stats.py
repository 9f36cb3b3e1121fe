"""Significance of a change between a baseline and a new run (scipy.stats, no own tests).

Verdicts: ``"regression"``, ``"improvement"`` or ``"~"`` (no significant change, asv's
mark). A change counts only when it is both large (latency: past a ratio factor, as asv's
``--factor``) and significant (p below ``alpha``), so noise alone flags nothing.
"""

import numpy as np
from scipy import stats

REGRESSION, IMPROVEMENT, SAME = "regression", "improvement", "~"
# The control's speed counts as unchanged only when its ratio of medians is shown within
# this band: at most half (in log terms) of the default 1.10 factor, so that load can
# explain at most half of a change that the factor flags.
STEADY_BAND = 1.05


def latency_change(base_ms, new_ms, factor=1.10, alpha=0.01):
    """Compare two sets of latency samples by the ratio of medians and Mann-Whitney U.

    Args:
        base_ms: baseline latency samples, ms (1-D, any length >= 1).
        new_ms: the new run's latency samples, ms.
        factor: ratio of medians (new / baseline) beyond which a change may count, > 1.
        alpha: significance level in (0, 1).
    Returns:
        dict: ``ratio`` (median new / median baseline), ``p_slower`` and ``p_faster``
        (one-sided Mann-Whitney U p-values, ``scipy.stats.mannwhitneyu``: the new samples
        are stochastically greater / less than the baseline's), ``verdict``: regression
        when ratio > factor and p_slower < alpha, improvement when ratio < 1 / factor and
        p_faster < alpha, else "~". With 3 samples each the smallest one-sided p is
        1 / C(6, 3) = 0.05, so so few samples never reach alpha = 0.01.
    """
    base, new = np.asarray(base_ms, np.float64), np.asarray(new_ms, np.float64)
    ratio = float(np.median(new) / np.median(base))
    p_slower = float(stats.mannwhitneyu(new, base, alternative="greater").pvalue)
    p_faster = float(stats.mannwhitneyu(new, base, alternative="less").pvalue)
    verdict = SAME
    if ratio > factor and p_slower < alpha:
        verdict = REGRESSION
    elif ratio < 1 / factor and p_faster < alpha:
        verdict = IMPROVEMENT
    return {"ratio": ratio, "p_slower": p_slower, "p_faster": p_faster, "verdict": verdict}


def steady(base_ms, new_ms, band=STEADY_BAND, alpha=0.01):
    """Whether two sets of latency samples are shown to have the same median: an
    equivalence test (the interval must lie inside the band; Schuirmann's two one-sided
    tests, 1987, in interval form), not the absence of a significant change.

    The interval is the (1 - ``alpha``) bootstrap interval of median(new) / median(base),
    each set resampled on its own (``scipy.stats.bootstrap``, percentile method, fixed
    seed). Few or scattered samples give a wide interval, and so no proof of steadiness.

    Args:
        base_ms, new_ms: latency samples, ms (1-D, lengths >= 2).
        band: the largest ratio of medians that still counts as the same speed, > 1.
        alpha: 1 - the interval's confidence, in (0, 1).
    Returns:
        dict: ``ratio`` (median new / median base), ``ci_low``, ``ci_high``, ``band``,
        ``confidence`` (1 - alpha) and ``steady`` (True when 1 / band <= ci_low and
        ci_high <= band).
    """
    base, new = np.asarray(base_ms, np.float64), np.asarray(new_ms, np.float64)
    ci = stats.bootstrap(
        (new, base),
        _median_ratio,
        paired=False,
        vectorized=True,
        n_resamples=9999,
        confidence_level=1 - alpha,
        method="percentile",
        rng=0,
    ).confidence_interval
    low, high = float(ci.low), float(ci.high)
    return {
        "ratio": float(np.median(new) / np.median(base)),
        "ci_low": low,
        "ci_high": high,
        "band": band,
        "confidence": 1 - alpha,
        "steady": 1 / band <= low and high <= band,
    }


def _median_ratio(new, base, axis=-1):
    return np.median(new, axis=axis) / np.median(base, axis=axis)


def paired_change(base, new, alpha=0.01):
    """McNemar's exact test on paired 0/1 outcomes (per image: agreed / correct or not).

    Only the discordant pairs carry information: ``lost`` (1 in the baseline, 0 now) and
    ``gained`` (0 then, 1 now). Without a change each discordant pair is lost or gained
    with probability 1/2, so the exact test is a binomial test of ``lost`` out of
    ``lost + gained`` at p = 1/2 (McNemar 1947; the exact form as in statsmodels'
    ``mcnemar(exact=True)``), computed with ``scipy.stats.binomtest``.

    Args:
        base: baseline outcomes, 0/1 list of length N.
        new: the new run's outcomes for the same N images in the same order.
        alpha: significance level in (0, 1).
    Returns:
        dict: ``lost``, ``gained`` (counts), ``p_worse`` (one-sided p that the new run is
        worse, 1.0 without discordant pairs), ``p_better``, ``verdict`` (regression when
        lost > gained and p_worse < alpha, improvement symmetrically, else "~").
    Raises:
        ValueError: the lists differ in length.
    """
    if len(base) != len(new):
        raise ValueError(f"paired outcomes differ in length: {len(base)} and {len(new)}")
    b, n = np.asarray(base, bool), np.asarray(new, bool)
    lost, gained = int((b & ~n).sum()), int((~b & n).sum())
    p_worse = p_better = 1.0
    if lost + gained:
        p_worse = float(stats.binomtest(lost, lost + gained, 0.5, "greater").pvalue)
        p_better = float(stats.binomtest(gained, lost + gained, 0.5, "greater").pvalue)
    verdict = SAME
    if lost > gained and p_worse < alpha:
        verdict = REGRESSION
    elif gained > lost and p_better < alpha:
        verdict = IMPROVEMENT
    return {
        "lost": lost,
        "gained": gained,
        "p_worse": p_worse,
        "p_better": p_better,
        "verdict": verdict,
    }
