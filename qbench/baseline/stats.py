"""Significance of a change between a baseline and a new run (scipy.stats, no own tests).

Verdicts: ``"regression"``, ``"improvement"`` or ``"~"`` (no significant change, asv's
mark). A change counts only when it is both large (latency: past a ratio factor, as asv's
``--factor``) and significant (p below ``alpha``), so noise alone flags nothing.
"""

import numpy as np
from scipy import stats

REGRESSION, IMPROVEMENT, SAME = "regression", "improvement", "~"


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
