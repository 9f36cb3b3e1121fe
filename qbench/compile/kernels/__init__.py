"""Hand-written CPU kernels and schedules: the VNNI uint8 x int8 conv/dense and its layouts,
the mended ``dot_16x4_vnni`` intrinsic, the FP32 packed conv/dense, depthwise conv and max
pooling as explicit taps, the Relax rewrite that puts FP32 graphs on them, and default
schedules for the remaining kernels."""
