"""Hand-written CPU kernels and schedules: the VNNI uint8 x int8 conv/dense and its layouts,
the mended ``dot_16x4_vnni`` intrinsic, and default schedules for untuned kernels."""
