"""Measure: takes built modules and the PyTorch model, and gives what they compute and how
fast: runners (``runners``), latency timing (``timing``) and its statistics (``speed``),
agreement, accuracy and SQNR (``metrics``), binomial intervals (``intervals``), the
measured parts of the run's result (``results``) and its provenance (``provenance``).

May import: core, model, data, calibration, quantize, compile (the stages before it;
``tests/test_layering.py``)."""
