"""``benchmarks/conv_int8.py``'s AMX row computes the conv it times: its uint8 output, in the
layout a model has between AMX layers, against numpy."""

import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import bordered_blocks, exact_conv

from qbench.compile import features, targets

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))

from conv_int8 import tvm_amx_conv  # noqa: E402


@pytest.mark.parametrize("channels", [64, 48])
def test_the_amx_row_computes_the_conv_it_times(channels):
    """NCHW64c where the channels are a multiple of 64, else NCHW16c; the epilogue of
    ``tvm_amx_conv`` (multiplier 0.01, bias 0.5, zero point 3, bounds (3, 200)) as one
    float32 multiply-add (exact in float64, then rounded once to float32), clamped and
    rounded half to even."""
    if not features.amx_ready():
        pytest.skip("this CPU has no AMX tiles (or may not use them)")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (1, channels, 9, 9)).astype(np.uint8)
    w = rng.integers(-127, 128, (channels, channels, 3, 3)).astype(np.int8)
    _, run = tvm_amx_conv(x, w, targets.Llvm.host(2))
    got = run().numpy()
    v = (exact_conv(x, w) * np.float64(np.float32(0.01)) + 0.5).astype(np.float32)
    expected = (np.rint(np.clip(v, 0, 197)) + 3).astype(np.uint8)
    block = 64 if channels % 64 == 0 else 16
    np.testing.assert_array_equal(got, bordered_blocks(expected, 0, 0, block))
