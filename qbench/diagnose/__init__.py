"""Per-layer diagnosis of an INT8 build: error by layer, sensitivity, FP32 fallback."""
