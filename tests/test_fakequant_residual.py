"""Fake quantization models the INT8 graph's residual adds: an add reads, for an input a
quantized conv read before it, that conv's quantized input (the graph's uint8 tensor)."""

import numpy as np
import pytest
import torch
from helpers import LLVM, compiled, quantize_tiny, run_tvm
from torch import nn

from qbench.quantize.fakequant import fake_layers, quantized


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
    graph = run_tvm(compiled(q.int8_mod, LLVM), x)
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
    graph = run_tvm(compiled(q.int8_mod, LLVM), x)
    np.testing.assert_allclose(graph, x, rtol=0, atol=1e-6)
    fakes = fake_layers(model, q.layers, q.plans)
    with torch.no_grad(), quantized(model, fakes, {0}) as (run, _):
        np.testing.assert_allclose(run(torch.from_numpy(x)).numpy(), x, rtol=0, atol=1e-6)


class _Downsample(nn.Module):
    """out = conv(x); out += down(x), as torchvision's resnet blocks that downsample add:
    the add's second input is a conv's output that no conv reads."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, stride=2, padding=1)
        self.down = nn.Conv2d(4, 8, 1, stride=2)

    def forward(self, x):
        out = self.conv(x)
        out += self.down(x)
        return out


def test_a_downsample_output_is_quantized_in_graph_and_fake_quantization():
    """With both weights zero, the block's output is the down conv's bias through its
    output's calibrated uint8 grid, in the graph (both convs requantize in integer) and in
    fake quantization; in FP32, the bias itself."""
    model = _Downsample().eval()
    with torch.no_grad():
        for conv in (model.conv, model.down):
            conv.weight.zero_()
        model.conv.bias.zero_()
        model.down.bias.copy_(torch.linspace(-1.3, 2.1, 8))
    rng = np.random.default_rng(3)
    q = quantize_tiny(model, [rng.standard_normal((2, 4, 6, 6)).astype(np.float32)])
    assert [layer.name for layer in q.layers] == ["conv", "down"]
    out = q.plans[1].output
    assert q.plans[0].output is None and out is not None
    assert q.int8_mod["main"].script().count("R.round(") == 1  # the down conv, in integer
    bias = model.down.bias.detach().numpy()
    grid = np.clip(np.round(bias / np.float32(out.scale)) + out.zero_point, 0, 255)
    level = ((grid - out.zero_point) * np.float32(out.scale)).astype(np.float32)
    expected = np.broadcast_to(level.reshape(1, 8, 1, 1), (2, 8, 3, 3))
    assert not np.allclose(level, bias, atol=1e-3)  # the grid is visible in the output
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    graph = run_tvm(compiled(q.int8_mod, LLVM), x)
    np.testing.assert_allclose(graph, expected, rtol=0, atol=1e-6)
    fakes = fake_layers(model, q.layers, q.plans)
    with torch.no_grad(), quantized(model, fakes, {0, 1}) as (run, _):
        np.testing.assert_allclose(run(torch.from_numpy(x)).numpy(), expected, atol=1e-6)
    with torch.no_grad(), quantized(model, fakes, set()) as (run, _):
        fp32 = np.broadcast_to(bias.reshape(1, 8, 1, 1), (2, 8, 3, 3))
        np.testing.assert_allclose(run(torch.from_numpy(x)).numpy(), fp32, atol=1e-6)


def test_a_downsample_output_is_calibrated_on_its_own_values():
    """The residual output's range (max mode) is the min and max of the down conv's output
    over the calibration batch, recomputed in PyTorch; the block input's range is the
    input's."""
    model = _Downsample().eval()
    x = np.random.default_rng(4).standard_normal((2, 4, 6, 6)).astype(np.float32)
    q = quantize_tiny(model, [x])
    with torch.no_grad():
        down = model.down(torch.from_numpy(x)).numpy()
    r = q.ranges["down:output"]
    assert r.observed_min == pytest.approx(float(down.min()), rel=1e-5)
    assert r.observed_max == pytest.approx(float(down.max()), rel=1e-5)
    assert q.ranges["down"].observed_max == pytest.approx(float(x.max()), rel=1e-6)
    assert set(q.ranges) == {"conv", "down", "down:output"}


class _Doubled(nn.Module):
    """y + y of one conv's output: no second conv, so no residual output."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return y + y


def test_a_conv_output_added_to_itself_is_no_residual_output():
    x = np.random.default_rng(5).standard_normal((2, 4, 6, 6)).astype(np.float32)
    q = quantize_tiny(_Doubled().eval(), [x])
    assert set(q.ranges) == {"conv"} and q.plans[0].output is None
