"""Diagnose: takes the PyTorch model, its fake-quantized INT8 layers (``quantize.fakequant``)
and image batches, and gives each INT8 layer's error and sensitivity (``analysis``,
``energy``), input histograms (``plots``), the FP32 fallback's choice of layers and the
report records of both (``run``). ``pipeline.diagnose`` runs it on a prepared run.

May import: core, model, data, calibration, quantize, compile, measure, signoff, report,
baseline (the stages before it; ``tests/test_layering.py``)."""
