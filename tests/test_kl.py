"""``kl_threshold`` against a straightforward per-candidate loop written here from the method
(MXNet's ``_get_optimal_threshold`` with qbench's candidate stride and level grouping)."""

import numpy as np
import pytest
from scipy.stats import entropy

from qbench.calibration import kl
from qbench.calibration.histogram import NUM_BINS, AbsHistogram

RNG = np.random.default_rng(7)


def _smooth(dist, eps=1e-4):
    is_zero = dist == 0
    n_zero, n_nonzero = is_zero.sum(), (~is_zero).sum()
    return dist + eps * is_zero - eps * n_zero / n_nonzero * ~is_zero


def _expanded(p_bins, counts, levels):
    """Q: bins [0, i) in ``levels`` groups at floor(linspace(0, i, levels + 1)); each group's
    count spread evenly over its bins that are non-zero in P."""
    i = p_bins.size
    edges = np.linspace(0, i, levels + 1).astype(int)
    q = np.zeros(i)
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        nonzero = p_bins[lo:hi] != 0
        if nonzero.any():
            q[lo:hi][nonzero] = counts[lo:hi].sum() / nonzero.sum()
    return q


def reference_threshold(counts, bin_width, levels):
    counts = np.asarray(counts, dtype=np.float64)
    last = int(np.flatnonzero(counts)[-1]) + 1
    if last <= levels:
        return last * bin_width
    stride = max(1, int(np.ceil((last - levels) / kl.MAX_CANDIDATES)))
    candidates = list(range(levels, last + 1, stride))
    if candidates[-1] != last:
        candidates.append(last)
    best, best_kl = last, np.inf
    for i in candidates:
        p = counts[:i].copy()
        p[-1] += counts[i:].sum()
        q = _expanded(p, counts, levels)
        if q.sum() == 0:
            continue
        divergence = entropy(_smooth(p / p.sum()), _smooth(q / q.sum()))
        if divergence < best_kl:
            best, best_kl = i, divergence
    return best * bin_width


def _abs_histogram(x):
    h = AbsHistogram()
    h.update(x)
    return h.counts


def _one_bin(index, size=NUM_BINS):
    counts = np.zeros(size, dtype=np.int64)
    counts[index] = 1000
    return counts


def _no_finite_divergence():
    # A dominant bin 0 and a lone far count: smoothing drives every candidate's P negative.
    counts = np.zeros(NUM_BINS, dtype=np.int64)
    counts[0], counts[3000] = 10**12, 1
    return counts


HISTOGRAMS = {
    "student_t_heavy_tail": lambda: _abs_histogram(RNG.standard_t(2.0, 200_000)),
    "relu_with_outliers": lambda: _abs_histogram(
        np.concatenate([np.maximum(RNG.standard_normal(100_000), 0), [40.0, 55.0]])
    ),
    "pareto_counts_4096_bins": lambda: (RNG.pareto(1.0, NUM_BINS) * 10).astype(np.int64),
    "sparse_2500_bins": lambda: np.bincount(RNG.integers(0, 2500, 300), minlength=2500),
    "all_in_one_bin": lambda: _one_bin(2500),
    "fewer_bins_than_levels": lambda: RNG.integers(0, 50, 100),
    "just_above_levels": lambda: RNG.integers(1, 50, 300),
    "no_finite_divergence": _no_finite_divergence,
}


CASES = [(name, 128) for name in HISTOGRAMS] + [
    (name, 255) for name in ("relu_with_outliers", "sparse_2500_bins", "just_above_levels")
]


@pytest.mark.parametrize("name, levels", CASES)
def test_kl_threshold_equals_the_per_candidate_loop(name, levels):
    counts = HISTOGRAMS[name]()
    assert kl.kl_threshold(counts, 0.01, levels) == reference_threshold(counts, 0.01, levels)


def test_chunking_does_not_change_the_threshold(monkeypatch):
    counts = HISTOGRAMS["student_t_heavy_tail"]()
    whole = kl.kl_threshold(counts, 0.01)
    monkeypatch.setattr(kl, "CHUNK_ELEMENTS", 5000)  # chunks of one to a few candidates
    assert kl.kl_threshold(counts, 0.01) == whole


def test_special_histograms():
    assert kl.kl_threshold(np.zeros(NUM_BINS, dtype=np.int64), 0.5) == 0.0
    assert kl.kl_threshold(_one_bin(2500), 0.5) == 2501 * 0.5  # only the full range has Q
    assert kl.kl_threshold(_no_finite_divergence(), 0.5) == 3001 * 0.5
