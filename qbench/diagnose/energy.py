"""Running error statistics of a tensor against its reference, over batches."""

import math
from dataclasses import dataclass


@dataclass
class Energy:
    """Sums over every element seen so far of a reference ``ref`` and its approximation
    ``out``: signal sum(ref^2), noise sum((out - ref)^2), dot sum(ref * out), sum(out^2),
    sum(ref), sum(out), the count of elements and the largest |out - ref|. With
    ``about_mean`` (a single output value per image, ``measure.metrics.judged_pair``), the
    SQNR and cosine take both less ref's mean over every element seen, from these sums: a
    per-batch mean would leave nothing of a batch of one."""

    signal: float = 0.0
    noise: float = 0.0
    dot: float = 0.0
    out_sq: float = 0.0
    max_abs: float = 0.0
    sum_ref: float = 0.0
    sum_out: float = 0.0
    count: int = 0
    about_mean: bool = False

    def add(self, ref, out, about_mean=False):
        """Accumulate one batch: ``ref`` and ``out``, float tensors of the same shape (sums
        in float64); ``about_mean``: judge them about ref's mean (see the class)."""
        r, o = ref.detach().double(), out.detach().double()
        d = o - r
        self.signal += float((r * r).sum())
        self.noise += float((d * d).sum())
        self.dot += float((r * o).sum())
        self.out_sq += float((o * o).sum())
        self.sum_ref += float(r.sum())
        self.sum_out += float(o.sum())
        self.count += r.numel()
        self.about_mean = self.about_mean or about_mean
        self.max_abs = max(self.max_abs, float(d.abs().max()) if d.numel() else 0.0)

    def _sums(self):
        """(signal, dot, sum(out^2)), about ref's mean where ``about_mean``: with m that
        mean, sum((r - m)^2) = signal - n m^2, sum((r - m)(o - m)) = dot - m sum(o) and
        sum((o - m)^2) = sum(o^2) - 2 m sum(o) + n m^2; the noise is the same."""
        if not (self.about_mean and self.count):
            return self.signal, self.dot, self.out_sq
        m, n = self.sum_ref / self.count, self.count
        out_sq = self.out_sq - 2 * m * self.sum_out + n * m * m
        return max(self.signal - n * m * m, 0.0), self.dot - m * self.sum_out, max(out_sq, 0.0)

    @property
    def sqnr_db(self):
        """The SQNR of ``out`` against ``ref`` over every value seen (all batches flattened),
        10 log10(signal / noise), dB: ``inf`` when out equals ref everywhere (no noise),
        ``-inf`` when ref is all zero and out is not. (``measure.metrics.sqnr_db_or_none``,
        the report's logits SQNR, gives None for identical values instead.)"""
        signal = self._sums()[0]
        if self.noise == 0:
            return math.inf
        if signal == 0:
            return -math.inf
        return 10.0 * math.log10(signal / self.noise)

    @property
    def cosine(self):
        """The cosine similarity of ``out`` and ``ref``, each flattened over every value seen
        (all batches, all rows) into one vector, dot / (|ref| |out|), in [-1, 1]; 1.0 when
        both are all zero, 0.0 when only one is. (``measure.metrics.mean_row_cosine``, the
        report's logits cosine, is the mean of one cosine per image instead.)"""
        signal, dot, out_sq = self._sums()
        den = math.sqrt(signal * out_sq)
        if den > 0:
            return dot / den
        return 1.0 if signal == out_sq == 0 else 0.0
