"""Calibration: activation ranges from FP32 runs (collect per batch, compute once)."""

from .collectors import MODES, Range, make_collector

__all__ = ["MODES", "Range", "make_collector"]
