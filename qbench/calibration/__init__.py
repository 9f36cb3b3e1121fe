"""Calibration: takes the FP32 graph's observed activations on the calibration batches and
gives each tensor's range (``Range``) by the chosen mode: max, percentile, KL entropy or
global scale (``collectors``; the modes of TVM's ``relay.quantize``). Ranges are collected
per batch and computed once; ``calibrate`` caches them.

May import: core, model, data (the stages before it; ``tests/test_layering.py``)."""

from .collectors import MODES, Range, make_collector

__all__ = ["MODES", "Range", "make_collector"]
