"""Quantize: takes the FP32 Relax graph, its layers and calibrated ranges, and gives the
integer INT8 graph: config (``QuantConfig``), scales and zero points (``params``), per-layer
plans (``plan``), the rewrite (``rewrite``, ``requantize``, ``pooling``, ``chains``), GPTQ
and bias correction (``gptq``, ``bias``, applied by ``refine``) and the fake quantization
they and ``diagnose`` share (``fakequant``).

May import: core, model, data, calibration (the stages before it;
``tests/test_layering.py``)."""

from .config import QuantConfig

__all__ = ["QuantConfig"]
