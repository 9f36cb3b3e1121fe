"""Entropy (KL divergence) calibration threshold.

The method of Migacz, "8-bit Inference with TensorRT", GTC 2017, as implemented in MXNet's
``_get_optimal_threshold`` and TVM Relay's ``kl_divergence`` calibrate mode: for each
candidate threshold, the clipped reference distribution P (outliers folded into its last
bin) is compared with Q, P quantized to ``num_quantized_bins`` levels and expanded back;
the threshold with the smallest KL(P || Q) wins.

Candidates are evaluated together, each as one row of a (K, W) float64 array that holds its
first i bins, zero-padded to the widest candidate W of a chunk of K rows. Padding bins are
zero in P and Q, are smoothed alike (to ``eps`` in both) without counting as zero bins, and
add exactly 0 to the divergence.
"""

import numpy as np
from scipy.special import rel_entr

MAX_CANDIDATES = 1024
CHUNK_ELEMENTS = 1 << 20  # cells of one (K, W) float64 array: 8 MiB, a few such at once


def smooth(dist, lengths, eps=1e-4):
    """Move ``eps`` mass onto zero bins, taken evenly from non-zero bins (as MXNet does).

    Args:
        dist: probability distributions, float64 (K, W), one per row: row k has
            ``lengths[k]`` bins summing to 1, at least one of them non-zero, then zeros.
        lengths: int64 (K,).
    Returns:
        The smoothed rows, float64 (K, W); padding bins hold ``eps``.
    """
    is_zero = dist == 0
    n_zero = is_zero.sum(axis=1, keepdims=True) - (dist.shape[1] - lengths[:, None])
    eps_nonzero = eps * n_zero / (lengths[:, None] - n_zero)
    return dist + np.where(is_zero, eps, -eps_nonzero)


def _quantized(sliced, nonzero, lengths, num_quantized_bins):
    """Q per row: row k's first ``lengths[k]`` bins of ``sliced`` merged into
    ``num_quantized_bins`` groups split at ``linspace(0, length, levels + 1)`` rounded down,
    each group's sum spread evenly over its bins that are non-zero in P (``nonzero``).

    Args:
        sliced: float64 (K, W) integer counts, zero past each row's length.
        nonzero: bool (K, W), False past each row's length.
        lengths: int64 (K,), each >= ``num_quantized_bins``.
    Returns:
        float64 (K, W), zero where ``nonzero`` is False.
    """
    rows, width = sliced.shape
    edges = np.linspace(0, lengths, num_quantized_bins + 1).astype(np.int64)[:-1].T
    starts = (edges + width * np.arange(rows)[:, None]).ravel()  # the last group runs on
    sums = np.add.reduceat(sliced.ravel(), starts)  # through the padding, all zero
    counts = np.add.reduceat(nonzero.ravel(), starts, dtype=np.int64)
    per_bin = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    spans = np.diff(starts, append=rows * width)
    return np.repeat(per_bin, spans).reshape(rows, width) * nonzero


def _divergences(counts, lengths, num_quantized_bins):
    """KL(P || Q) of each candidate: float64 (K,), ``inf`` where Q is empty (the candidate
    is skipped) or smoothing left a negative bin.

    Args:
        counts: float64 (B,) histogram.
        lengths: int64 (K,) candidate bin counts, each in [``num_quantized_bins``, B].
    """
    width = int(lengths.max())
    sliced = np.where(np.arange(width) < lengths[:, None], counts[:width], 0.0)
    p = sliced.copy()
    tails = np.append(np.cumsum(counts[::-1])[::-1], 0.0)  # counts[i:].sum(), exact
    p[np.arange(lengths.size), lengths - 1] += tails[lengths]
    q = _quantized(sliced, p != 0, lengths, num_quantized_bins)
    q_sum = q.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):  # 0 / 0 on an empty Q, set to inf below
        q = smooth(q / q_sum, lengths)
    kl = rel_entr(smooth(p / tails[0], lengths), q).sum(axis=1)
    return np.where(q_sum[:, 0] > 0, kl, np.inf)


def _candidates(last, num_quantized_bins):
    """Candidate bin counts: ``num_quantized_bins`` to ``last`` with the stride that keeps
    at most ``MAX_CANDIDATES`` (+1 for ``last`` itself), int64 ascending."""
    stride = max(1, -(-(last - num_quantized_bins) // MAX_CANDIDATES))
    candidates = np.arange(num_quantized_bins, last + 1, stride)
    return candidates if candidates[-1] == last else np.append(candidates, last)


def kl_threshold(counts, bin_width, num_quantized_bins=128):
    """The |x| threshold minimising KL(P || Q).

    Args:
        counts: histogram of |x|, int64 (B,) over [0, B * bin_width).
        bin_width: width of one bin, in the units of x.
        num_quantized_bins: quantization levels on one side: 128 for signed int8 data,
            255 for non-negative data quantized to uint8.

    Returns:
        The threshold, float >= 0; the edge just above the last non-zero bin when the data
        occupies no more bins than there are levels (nothing is worth clipping), or when
        no candidate has a finite divergence. Candidates are strided so that at most
        ``MAX_CANDIDATES`` are evaluated, in chunks of at most ``CHUNK_ELEMENTS`` cells;
        of equal divergences the smallest candidate wins.
    """
    counts = np.asarray(counts, dtype=np.float64)
    nonzero = np.flatnonzero(counts)
    if nonzero.size == 0:
        return 0.0
    last = int(nonzero[-1]) + 1
    if last <= num_quantized_bins:
        return last * bin_width
    candidates = _candidates(last, num_quantized_bins)
    rows = max(1, CHUNK_ELEMENTS // last)
    kl = np.concatenate(
        [
            _divergences(counts, candidates[start : start + rows], num_quantized_bins)
            for start in range(0, candidates.size, rows)
        ]
    )
    best = int(np.argmin(kl))
    return int(candidates[best] if kl[best] < np.inf else last) * bin_width
