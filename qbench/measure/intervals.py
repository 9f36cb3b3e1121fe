"""Confidence intervals of agreement and accuracy: how far a count of images can be trusted.

A top-1 agreement of k images out of n is a binomial proportion; its 95 % interval is the
exact Clopper-Pearson interval (Clopper and Pearson, Biometrika 1934), computed by
``scipy.stats.binomtest``. It never undercovers, which is what a release gate wants: 14
agreeing images out of 14 give 76.8-100 %, so 14 images cannot show a 97 % limit, however
good the build.
"""

import functools
import math

import numpy as np

CONFIDENCE = 0.95


def clopper_pearson(count, total, confidence=CONFIDENCE):
    """The exact two-sided interval of a binomial proportion.

    Args:
        count: successes, an int in [0, total].
        total: trials, an int >= 1.
        confidence: in (0, 1).

    Returns:
        (low, high), fractions in [0, 1].
    """
    from scipy.stats import binomtest

    ci = binomtest(int(count), int(total)).proportion_ci(confidence, method="exact")
    return float(ci.low), float(ci.high)


def images_needed(limit, confidence=CONFIDENCE):
    """The fewest images that can show a proportion is at least ``limit``: the smallest n
    for which n agreeing images out of n have a Clopper-Pearson lower bound at or above it,
    ``((1 - confidence) / 2) ** (1 / n) >= limit``.

    Args:
        limit: a fraction in [0, 1].

    Returns:
        int >= 1, or None when no number of images can (``limit`` 1).
    """
    if limit <= 0:
        return 1
    if limit >= 1:
        return None
    return math.ceil(math.log((1 - confidence) / 2) / math.log(limit) - 1e-9)


TYPICAL_AGREEMENT = 0.99  # top-1 agreement of a good INT8 build (docs/measurements.md)
SEARCH_BLOCK = 1024  # image counts ``images_to_show`` tries at once


@functools.lru_cache(maxsize=64)
def images_to_show(limit, rate=TYPICAL_AGREEMENT, confidence=CONFIDENCE, most=100_000):
    """The fewest images on which a build agreeing at ``rate`` shows a proportion is at
    least ``limit``: the smallest n whose Clopper-Pearson lower bound of floor(rate x n)
    agreeing images, the Beta((1 - confidence) / 2; k, n - k + 1) quantile, reaches it
    (0.97 at 0.99: 290 images). Searched in blocks of n at once; cached (pure).

    Args:
        limit, rate: fractions in [0, 1].
    Returns:
        int >= 1, or None when ``rate`` <= ``limit`` (no number of images can) or more than
        ``most`` images would be needed.
    """
    from scipy.stats import beta

    if rate <= limit:
        return None
    start = images_needed(limit, confidence) or 1
    for first in range(start, most + 1, SEARCH_BLOCK):
        n = np.arange(first, min(first + SEARCH_BLOCK, most + 1))
        k = np.floor(rate * n + 1e-9)
        low = beta.ppf((1 - confidence) / 2, np.maximum(k, 1), n - k + 1)
        hits = np.nonzero((k > 0) & (low >= limit))[0]
        if hits.size:
            return int(n[hits[0]])
    return None
