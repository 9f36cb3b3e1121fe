"""Entropy (KL divergence) calibration threshold.

The method of Migacz, "8-bit Inference with TensorRT", GTC 2017, as implemented in MXNet's
``_get_optimal_threshold`` and TVM Relay's ``kl_divergence`` calibrate mode: for each
candidate threshold, the clipped reference distribution P (outliers folded into its last
bin) is compared with Q, P quantized to ``num_quantized_bins`` levels and expanded back;
the threshold with the smallest KL(P || Q) wins.
"""

import numpy as np
from scipy.stats import entropy

MAX_CANDIDATES = 1024


def smooth(dist, eps=1e-4):
    """Move ``eps`` mass onto zero bins, taken evenly from non-zero bins (as MXNet does).

    Args:
        dist: a probability distribution, 1-D float64 summing to 1.
    Returns:
        The smoothed counts, or None when every bin is zero.
    """
    is_zero = dist == 0
    n_zero = int(is_zero.sum())
    n_nonzero = dist.size - n_zero
    if n_nonzero == 0:
        return None
    eps_nonzero = eps * n_zero / n_nonzero
    return dist + eps * is_zero - eps_nonzero * (~is_zero)


def _quantized(sliced, nonzero, num_quantized_bins):
    """Q: ``sliced`` merged into ``num_quantized_bins`` groups, spread over ``nonzero`` bins."""
    starts = np.linspace(0, sliced.size, num_quantized_bins + 1).astype(np.int64)[:-1]
    sums = np.add.reduceat(sliced, starts)
    counts = np.add.reduceat(nonzero.astype(np.int64), starts)
    lengths = np.diff(np.append(starts, sliced.size))
    per_bin = np.repeat(np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0), lengths)
    return per_bin * nonzero


def kl_threshold(counts, bin_width, num_quantized_bins=128):
    """The |x| threshold minimising KL(P || Q).

    Args:
        counts: histogram of |x|, int64 (B,) over [0, B * bin_width).
        bin_width: width of one bin, in the units of x.
        num_quantized_bins: quantization levels on one side: 128 for signed int8 data,
            255 for non-negative data quantized to uint8.

    Returns:
        The threshold, float >= 0; the edge just above the last non-zero bin when the data
        occupies no more bins than there are levels (nothing is worth clipping). Candidates
        are strided so that at most ``MAX_CANDIDATES`` are evaluated.
    """
    counts = np.asarray(counts, dtype=np.float64)
    nonzero = np.flatnonzero(counts)
    if nonzero.size == 0:
        return 0.0
    last = int(nonzero[-1]) + 1
    if last <= num_quantized_bins:
        return last * bin_width
    stride = max(1, -(-(last - num_quantized_bins) // MAX_CANDIDATES))
    candidates = list(range(num_quantized_bins, last + 1, stride))
    if candidates[-1] != last:
        candidates.append(last)
    best, best_kl = last, np.inf
    for i in candidates:
        p = counts[:i].copy()
        p[-1] += counts[i:].sum()
        q = _quantized(counts[:i], p != 0, num_quantized_bins)
        if q.sum() == 0:
            continue
        p, q = smooth(p / p.sum()), smooth(q / q.sum())
        if p is None or q is None:
            continue
        kl = entropy(p, q)
        if kl < best_kl:
            best, best_kl = i, kl
    return best * bin_width
