"""Running error statistics of a tensor against its reference, over batches."""

import math
from dataclasses import dataclass


@dataclass
class Energy:
    """Sums over every element seen so far of a reference ``ref`` and its approximation
    ``out``: signal sum(ref^2), noise sum((out - ref)^2), dot sum(ref * out), sum(out^2),
    and the largest |out - ref|."""

    signal: float = 0.0
    noise: float = 0.0
    dot: float = 0.0
    out_sq: float = 0.0
    max_abs: float = 0.0

    def add(self, ref, out):
        """Accumulate one batch: ``ref`` and ``out``, float tensors of the same shape (sums
        in float64)."""
        r, o = ref.detach().double(), out.detach().double()
        d = o - r
        self.signal += float((r * r).sum())
        self.noise += float((d * d).sum())
        self.dot += float((r * o).sum())
        self.out_sq += float((o * o).sum())
        self.max_abs = max(self.max_abs, float(d.abs().max()) if d.numel() else 0.0)

    @property
    def sqnr_db(self):
        """The SQNR of ``out`` against ``ref`` over every value seen (all batches flattened),
        10 log10(signal / noise), dB: ``inf`` when out equals ref everywhere (no noise),
        ``-inf`` when ref is all zero and out is not. (``measure.metrics.sqnr_db_or_none``,
        the report's logits SQNR, gives None for identical values instead.)"""
        if self.noise == 0:
            return math.inf
        if self.signal == 0:
            return -math.inf
        return 10.0 * math.log10(self.signal / self.noise)

    @property
    def cosine(self):
        """The cosine similarity of ``out`` and ``ref``, each flattened over every value seen
        (all batches, all rows) into one vector, dot / (|ref| |out|), in [-1, 1]; 1.0 when
        either is all zero. (``measure.metrics.mean_row_cosine``, the report's logits
        cosine, is the mean of one cosine per image instead.)"""
        den = math.sqrt(self.signal * self.out_sq)
        return self.dot / den if den > 0 else 1.0
