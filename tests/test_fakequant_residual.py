"""Fake quantization models the INT8 graph's residual adds: an add reads, for an input a
quantized conv read before it, that conv's quantized input (the graph's uint8 tensor)."""

import numpy as np
import pytest
import torch
from helpers import LLVM, quantize_tiny, run_tvm
from torch import nn

from qbench import build
from qbench.diagnose.fakequant import fake_layers, quantized


class _AddAfter(nn.Module):
    """x + conv(x), as torchvision's mobilenet_v2 blocks add."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return x + self.conv(x)


class _AddInPlace(nn.Module):
    """out = conv(x); out += x, as torchvision's resnet blocks add."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        out = self.conv(x)
        out += x
        return out


@pytest.mark.parametrize("block", [_AddAfter, _AddInPlace])
def test_a_residual_reads_the_quantized_input_in_graph_and_fake_quantization(block):
    """With a zero conv, the block's output is its residual input as the graph reads it:
    x through the conv input's uint8 grid, (clamp(round(x / s) + z, 0, 255) - z) * s."""
    model = block().eval()
    with torch.no_grad():
        model.conv.weight.zero_()
        model.conv.bias.zero_()
    rng = np.random.default_rng(0)
    calib = [rng.standard_normal((2, 4, 5, 5)).astype(np.float32)]
    q = quantize_tiny(model, calib)
    x = 1.5 * rng.standard_normal((2, 4, 5, 5)).astype(np.float32)  # some past the range
    act = q.plans[0].act
    grid = np.clip(np.round(x / np.float32(act.scale)) + act.zero_point, 0, 255)
    expected = ((grid - act.zero_point) * np.float32(act.scale)).astype(np.float32)
    assert not np.allclose(expected, x, atol=1e-3)  # the grid is visible in the output
    graph = run_tvm(build.compile(q.int8_mod, LLVM), x)
    np.testing.assert_allclose(graph, expected, rtol=0, atol=1e-6)
    fakes = fake_layers(model, q.layers, q.plans)
    with torch.no_grad(), quantized(model, fakes, {0}) as (run, _):
        simulated = run(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(simulated, expected, rtol=0, atol=1e-6)
    with torch.no_grad(), quantized(model, fakes, set()) as (run, _):  # FP32: x itself
        np.testing.assert_allclose(run(torch.from_numpy(x)).numpy(), x, rtol=0, atol=1e-6)


class _PooledBranch(nn.Module):
    """y + conv(max_pool(y)): the conv reads the pool's output, not y (a tester's find)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)

    def forward(self, y):
        return y + self.conv(torch.nn.functional.max_pool2d(y, 3, 1, 1))


def test_a_tensor_only_a_pool_reads_stays_float_in_a_residual_add():
    """No quantized layer reads y itself, so the residual adds y in FP32, in the graph and in
    fake quantization: with a zero conv the output is y. (The graph had added y through the
    pool output's uint8 grid, clipping its negative values: 4.4 dB.)"""
    model = _PooledBranch().eval()
    with torch.no_grad():
        model.conv.weight.zero_()
        model.conv.bias.zero_()
    rng = np.random.default_rng(2)
    q = quantize_tiny(model, [rng.standard_normal((2, 4, 8, 8)).astype(np.float32)])
    x = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    graph = run_tvm(build.compile(q.int8_mod, LLVM), x)
    np.testing.assert_allclose(graph, x, rtol=0, atol=1e-6)
    fakes = fake_layers(model, q.layers, q.plans)
    with torch.no_grad(), quantized(model, fakes, {0}) as (run, _):
        np.testing.assert_allclose(run(torch.from_numpy(x)).numpy(), x, rtol=0, atol=1e-6)
