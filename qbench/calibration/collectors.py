"""Range collectors, one class per calibration mode, all with the same streaming interface.

``update(x, batch)`` is called once per calibration batch and keeps only fixed-size state
(memory does not grow with the number of images); ``compute_range()`` is called once.
Non-finite values (NaN, +-inf) are excluded and counted with the batches they came from.
The modes are those of TVM Relay's ``relay.quantize`` calibrate pass plus ``max``.
"""

from dataclasses import asdict, dataclass, field

import numpy as np

from .histogram import AbsHistogram
from .kl import kl_threshold


@dataclass
class Range:
    """A calibrated real-valued range of one tensor.

    Attributes:
        lo: lower end (<= 0 after ``affine``), in the tensor's units.
        hi: upper end.
        observed_min: smallest finite value seen.
        observed_max: largest finite value seen.
        nonfinite: count of NaN/inf values excluded.
        nonfinite_batches: calibration batch indices that held them.
        clipped: finite values outside [lo, hi] (histogram modes: to within the values of
            the one histogram bin that holds the threshold, counted as uniform in it).
        values: finite values seen.
    """

    lo: float
    hi: float
    observed_min: float
    observed_max: float
    nonfinite: int = 0
    nonfinite_batches: list = field(default_factory=list)
    clipped: float = 0.0
    values: int = 0

    @property
    def clipped_fraction(self):
        """Fraction in [0, 1] of the finite calibration values the range clips."""
        return self.clipped / self.values if self.values else 0.0

    def to_dict(self):
        return asdict(self)


class Collector:
    """Base collector: tracks the finite min/max and the non-finite values of a tensor."""

    def __init__(self):
        self.min = np.inf
        self.max = -np.inf
        self.nonfinite = 0
        self.nonfinite_batches = []
        self.values = 0

    def update(self, x, batch=0):
        """Add one batch of a tensor (any shape, float), its calibration batch index ``batch``."""
        x = np.asarray(x)
        finite = np.isfinite(x)
        if not finite.all():
            self.nonfinite += int(x.size - finite.sum())
            self.nonfinite_batches.append(int(batch))
            x = x[finite]
        self.values += int(x.size)
        if x.size:
            self.min = min(self.min, float(x.min()))
            self.max = max(self.max, float(x.max()))
            self._update(x)

    def _update(self, x):
        """Mode-specific state update with finite values only."""

    def _threshold(self):
        """Mode-specific |x| clip threshold; the base class clips nothing."""
        return np.inf

    def _clipped(self, t):
        """Finite values with |x| > t seen so far; the base class keeps no counts (it clips
        nothing)."""
        return 0.0

    def compute_range(self):
        """The calibrated ``Range``: the observed range clipped to [-t, t] by the threshold t."""
        lo, hi = (self.min, self.max) if np.isfinite(self.min) else (0.0, 0.0)
        t = self._threshold()
        r = Range(max(lo, -t), min(hi, t), lo, hi, self.nonfinite, self.nonfinite_batches)
        r.clipped, r.values = self._clipped(t), self.values
        return r


class MaxCollector(Collector):
    """``max``: the full observed range [min, max]."""


class GlobalScaleCollector(Collector):
    """``global_scale``: a fixed clip range [-s, s] (Relay's default s = 8.0), [0, s] if x >= 0."""

    def __init__(self, global_scale=8.0):
        super().__init__()
        if not global_scale > 0:
            raise ValueError(f"global_scale: must be > 0, got {global_scale}")
        self.scale = float(global_scale)
        self.beyond = 0

    def _update(self, x):
        self.beyond += int((np.abs(x) > self.scale).sum())

    def compute_range(self):
        r = super().compute_range()
        r.lo = 0.0 if r.observed_min >= 0 else -self.scale
        r.hi = self.scale
        r.clipped = float(self.beyond)  # [0, s] only when no value is negative: |x| > s
        return r


class HistogramCollector(Collector):
    """Base for modes that choose a threshold from the histogram of |x|."""

    def __init__(self):
        super().__init__()
        self.hist = AbsHistogram()

    def _update(self, x):
        self.hist.update(x)

    def _clipped(self, t):
        return self.hist.count_above(t, max(-self.min, self.max))


class PercentileCollector(HistogramCollector):
    """``percentile``: the ``percentile``-th percentile of |x| (linear within a bin)."""

    def __init__(self, percentile=99.999):
        super().__init__()
        if not 0 < percentile <= 100:
            raise ValueError(f"percentile: must be in (0, 100], got {percentile}")
        self.percentile = float(percentile)

    def _threshold(self):
        h = self.hist
        if h.top == 0.0:
            return 0.0
        counts = h.counts_with_zeros()
        cdf = np.cumsum(counts)
        target = self.percentile / 100.0 * cdf[-1]
        idx = int(np.searchsorted(cdf, target))
        below = cdf[idx - 1] if idx else 0
        frac = (target - below) / counts[idx]
        return (idx + frac) * h.bin_width


class KLCollector(HistogramCollector):
    """``kl_divergence``: the entropy threshold (see ``kl.kl_threshold``), at most max |x|.

    Exact zeros are left out of the KL histogram: affine quantization represents 0 exactly,
    so they carry no quantization error, while their spike in post-ReLU tensors drags the
    threshold far below the data (efficientnet-lite0 ``_blocks.2._project_conv``: 0.37
    with zeros, 6.0 without, on a ReLU6 output).

    Clipping is judged by the probability of the clipped values, not by how far they move:
    on efficientnet_lite0 the threshold of the ReLU6 inputs of the last project convs is
    3.4-4.2 of an observed 6.0, which costs 5.5 dB of logits SQNR against ``max``
    (docs/quantization.md, Modes). NVIDIA pytorch-quantization's entropy calibrator
    (``calib/histogram.py``, ``_compute_amax_entropy``) gives the same thresholds, so the
    default mode is ``percentile`` (``quantize.QuantConfig``).
    """

    def _threshold(self):
        levels = 255 if self.min >= 0 else 128
        t = kl_threshold(self.hist.counts, self.hist.bin_width, levels)
        return min(t, max(abs(self.min), abs(self.max)))


MODES = {
    "global_scale": GlobalScaleCollector,
    "kl_divergence": KLCollector,
    "percentile": PercentileCollector,
    "max": MaxCollector,
}


def make_collector(mode, **params):
    """A new collector for ``mode`` with its parameters (e.g. ``percentile=99.99``).

    Raises:
        ValueError: unknown mode (the message lists the valid ones) or a bad parameter.
    """
    if mode not in MODES:
        raise ValueError(f"calibration mode {mode!r}: unknown; valid: {', '.join(MODES)}")
    return MODES[mode](**params)
