"""Diagnose: takes a prepared run and gives each INT8 layer's error and sensitivity
(``analysis``, ``energy``), input histograms (``plots``), and the FP32 fallback's choice of
layers (``run``)."""
