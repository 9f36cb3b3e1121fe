"""A depthwise conv whose FP32 output a squeeze-excitation reads (mobilenet_v3, efficientnet)
computes its taps in uint8 NCHW16c where its rows are short and its channels whole blocks
(``depthwise.depthwise_conv_blocked``), and gives TVM's own ops' logits bit for bit."""

import functools

import numpy as np
import pytest
import torch
from helpers import AVX2, CPU, LLVM, SqueezeExcite, compiled, quantize_tiny, run_tvm

from qbench.compile import features
from qbench.compile.kernels.select import select_kernels

VNNI = {**CPU, "mcpu": "icelake-server"}


@functools.cache
def _net(channels, kernel, stride, size):
    torch.manual_seed(channels)
    rng = np.random.default_rng(channels)
    shape = (2, 16, size, size)
    calib = [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]
    q = quantize_tiny(SqueezeExcite(16, channels, kernel, stride).eval(), calib)
    return q, 2 * rng.standard_normal(shape).astype(np.float32)


CASES = {  # (channels, kernel, stride, input size): blocked
    (32, 5, 1, 7): True,
    (48, 3, 2, 14): True,  # 7 output columns
    (64, 5, 2, 11): True,
    (40, 3, 1, 9): False,  # 40 channels: 2.5 blocks
    (32, 3, 1, 16): False,  # rows of 16 fill NCHW vectors
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_short_row_depthwise_of_whole_blocks_reads_nchw16c(case):
    """The depthwise kernel's data is (N, C16, H, W, 16) where ``CASES`` says blocked, the
    padded NCHW tensor otherwise."""
    q, _ = _net(*case)
    selected = select_kernels(q.int8_mod, LLVM)
    (func,) = [f for gv, f in selected.functions_items() if gv.name_hint == "depthwise_conv2d"]
    assert (len(func.params[0].ty.shape) == 5) == CASES[case]


@pytest.mark.parametrize("case", [(32, 5, 1, 7), (48, 3, 2, 14), (40, 3, 1, 9)])
def test_the_depthwise_layouts_give_the_plain_logits_on_each_cpu_class(case):
    """This CPU's kernels, the AVX2 path's and (where this CPU runs it) the VNNI path's,
    against TVM's own ops on the same INT8 graph, bit for bit."""
    q, x = _net(*case)
    plain = run_tvm(compiled(q.int8_mod, LLVM, hand_kernels=False), x)
    np.testing.assert_array_equal(run_tvm(compiled(q.int8_mod, LLVM), x), plain)
    for target, feature in ((AVX2, "avx2"), (VNNI, "avx512vnni")):
        if features.has_feature(LLVM, feature):
            np.testing.assert_array_equal(run_tvm(compiled(q.int8_mod, target), x), plain)
