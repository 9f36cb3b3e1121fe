"""``Bounds``: the valid range of a numeric option, its words and its check, shared by every
place a value is checked where it is made (``RunOptions``, ``QuantConfig``, ``Limits``)."""

import math
import numbers
from dataclasses import dataclass


@dataclass(frozen=True)
class Bounds:
    """The range [low, high] (``open_low``: (low, high]); ``high`` None: no upper bound;
    ``integer``: only whole numbers (counts, sizes, seeds)."""

    low: float
    high: float | None = None
    open_low: bool = False
    integer: bool = False

    def valid(self):
        """The range in words: ``in [0, 1]``, ``in (0, 100]``, ``>= 0``, ``> 0``."""
        if self.high is not None:
            return f"in {'(' if self.open_low else '['}{self.low:g}, {self.high:g}]"
        return f"{'>' if self.open_low else '>='} {self.low:g}"

    def problem(self, value):
        """What is wrong with ``value`` (``must be a finite number in [0, 1]``, ``must be an
        integer >= 1``), or None when it is such a number within the range."""
        kind = numbers.Integral if self.integer else numbers.Real
        bad = isinstance(value, bool) or not isinstance(value, kind)
        bad = bad or not math.isfinite(value) or value < self.low
        bad = bad or (self.high is not None and value > self.high)
        if bad or (self.open_low and value == self.low):
            return f"must be {'an integer' if self.integer else 'a finite number'} {self.valid()}"
        return None
