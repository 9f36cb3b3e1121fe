"""A streaming histogram of |x| whose merge across batches is exact.

The histogram covers [0, R) with R a power of two strictly above the largest |x| seen, in
``NUM_BINS`` equal bins. When a batch exceeds R, R doubles (as often as needed) and
neighbouring bins merge pairwise. Because every edge is a power-of-two fraction of R,
a value's bin after merging equals its bin in a histogram built over the final R directly,
so streaming over batches gives exactly the histogram of all batches at once (ONNX Runtime
re-bins by interpolation instead, which is not exact). Exact zeros are counted apart from
the bins (``zeros``): post-ReLU tensors hold 20-50 % of them.
"""

import math

import numpy as np

NUM_BINS = 4096  # the occupied part [0, max|x|] always spans at least 2048 bins


class AbsHistogram:
    """Histogram of non-zero |x| over [0, ``top``), ``NUM_BINS`` bins, plus a count of exact
    zeros; memory is constant."""

    def __init__(self):
        self.counts = np.zeros(NUM_BINS, dtype=np.int64)
        self.top = 0.0  # 0 until a non-zero value arrives
        self.zeros = 0

    @property
    def bin_width(self):
        return self.top / NUM_BINS

    def update(self, values):
        """Add finite values (any shape); callers drop NaN and infinity first."""
        a = np.abs(np.asarray(values, dtype=np.float64)).ravel()
        if a.size == 0:
            return
        nonzero = a[a != 0]
        self.zeros += a.size - nonzero.size
        if nonzero.size == 0:
            return
        amax = float(nonzero.max())
        if amax >= self.top:
            self._grow(2.0 ** (math.floor(math.log2(amax)) + 1))
        self.counts += np.histogram(nonzero, bins=NUM_BINS, range=(0.0, self.top))[0]

    def _grow(self, new_top):
        if self.top > 0.0:
            factor = int(round(new_top / self.top))
            if factor >= NUM_BINS:
                merged = np.array([self.counts.sum()])
            else:
                merged = self.counts.reshape(-1, factor).sum(axis=1)
            self.counts = np.zeros(NUM_BINS, dtype=np.int64)
            self.counts[: merged.size] = merged
        self.top = new_top

    def count_above(self, t, amax):
        """Values with |x| > ``t`` (t >= 0), ``amax`` the largest |x| seen: none when t >=
        amax; else the bins wholly above t, plus the part of the bin holding t above it, its
        values taken as uniform within the bin (within [bin start, amax] for the top bin:
        a ReLU6 input's saturated 6.0s are no clipping of a range that reaches 6.0)."""
        if self.top == 0.0 or t >= min(self.top, amax):
            return 0.0
        edge = t / self.bin_width
        i = int(edge)
        end = min(float(i + 1), amax / self.bin_width)  # where the bin's values end
        inside = (end - edge) / (end - i) if end > i else 1.0
        return float(self.counts[i + 1 :].sum() + self.counts[i] * inside)

    def counts_with_zeros(self):
        """The bins with the exact zeros added to bin 0: the histogram of all |x|."""
        counts = self.counts.copy()
        counts[0] += self.zeros
        return counts
