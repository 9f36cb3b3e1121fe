"""Grouped convs (regnet, resnext: groups > 1, not depthwise) on the packed INT8 kernels:
the groups each kernel group computes, the block-diagonal weights, and a network of every
grouping kind bit-exact against TVM's own grouped conv."""

import functools

import numpy as np
import pytest
import torch
from helpers import AVX2, LLVM, compiled, quantize_tiny, run_tvm
from torch import nn

from qbench.compile.kernels import layout
from qbench.compile.kernels.select import NO_FAST_PATH, cpu_class, kernel_paths


@pytest.mark.parametrize(
    "groups, out_per_group, in_per_group, block, merged",
    [
        (25, 16, 16, 4, 1),  # regnet_x_400mf's widest stage: 16 channels a group
        (32, 4, 4, 4, 4),  # resnext50_32x4d: 4 groups fill a 16-channel block
        (8, 8, 8, 2, 2),  # 8 a group, int16 pairs (AVX2)
        (8, 15, 8, 4, 8),  # 15 a group never fills 16: one conv of all 8
        (6, 8, 2, 4, 2),  # 2 groups: 16 outputs, 4 inputs
    ],
)
def test_groups_merged_per_kernel_group(groups, out_per_group, in_per_group, block, merged):
    """The fewest groups (a divisor of the count) whose outputs fill 16 channels and inputs
    whole blocks, by hand."""
    assert layout.merged_groups(groups, out_per_group, in_per_group, block) == merged


def test_expanded_weights_are_block_diagonal_by_hand():
    """4 groups of 1 input and 2 output channels, merged 2 by 2: output channel o of group
    g = o // 2 holds its weight at input g % 2, zero at the other."""
    w = np.arange(1, 9, dtype=np.int8).reshape(8, 1, 1, 1)
    got = layout.expand_groups(w, 4, 2)[:, :, 0, 0]
    want = [[1, 0], [2, 0], [0, 3], [0, 4], [5, 0], [6, 0], [0, 7], [0, 8]]
    np.testing.assert_array_equal(got, np.array(want, np.int8))


class _Grouped(nn.Module):
    """A stem, then regnet's grouped 3x3 (16 channels a group, stride 2), resnext's (4 a
    group, dilated) with a residual add, a grouped 1x1 that widens 8 -> 15 a group, and a
    1x1 head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 64, 3, padding=1)
        self.regnet = nn.Conv2d(64, 64, 3, stride=2, padding=1, groups=4)
        self.resnext = nn.Conv2d(64, 64, 3, padding=2, dilation=2, groups=16)
        self.wider = nn.Conv2d(64, 120, 1, groups=8)
        self.head = nn.Conv2d(120, 5, 1)

    def forward(self, x):
        x = torch.relu(self.regnet(torch.relu(self.stem(x))))
        x = torch.relu(self.resnext(x)) + x
        return self.head(torch.relu(self.wider(x))).mean((2, 3))


@functools.cache
def _grouped_graph():
    """``_Grouped`` quantized once per session, and an input (read them, never change)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(4)
    calib = [rng.standard_normal((2, 3, 14, 14)).astype(np.float32) for _ in range(2)]
    return quantize_tiny(_Grouped().eval(), calib), rng.standard_normal((2, 3, 14, 14))


@pytest.mark.parametrize("target", [LLVM, AVX2], ids=["host", "avx2"])
def test_grouped_convs_on_the_packed_kernels_equal_tvm_grouped_conv(target):
    """Every conv takes the target's packed INT8 kernel (none left to TVM's default
    schedule, as grouped convs had been: regnet_x_400mf's took 11.8 of its 14 ms), and the
    logits equal TVM's own integer grouped conv2d bit for bit."""
    if cpu_class(target) == NO_FAST_PATH:
        pytest.skip("no INT8 fast path on this CPU")
    q, x = _grouped_graph()
    x = x.astype(np.float32)
    paths = kernel_paths(q.int8_mod, target)
    convs = {k: v for k, v in paths.items() if k.startswith("int8 conv2d")}
    assert sum(convs.values()) == 5 and not any(k.endswith("default") for k in convs), paths
    plain = compiled(q.int8_mod, LLVM, hand_kernels=False)
    np.testing.assert_array_equal(run_tvm(compiled(q.int8_mod, target), x), run_tvm(plain, x))
