"""Fake quantization models the INT8 graph's integer global average pools: the pool's input
goes through its own uint8 grid before the mean, as the graph quantizes it."""

import numpy as np
import pytest
import torch
from helpers import LLVM, compiled, quantize_tiny, run_tvm
from torch import nn

from qbench.quantize.fakequant import fake_layers, quantized


class _PoolThenLinear(nn.Module):
    """A classifier head alone: global average pool of the input, then a Linear."""

    def __init__(self, by_mean):
        super().__init__()
        self.by_mean = by_mean
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        pooled = x.mean(dim=(-1, -2)) if self.by_mean else nn.functional.adaptive_avg_pool2d(x, 1)
        return self.fc(pooled.reshape(len(x), -1))


def _grid(x, act):
    """``x`` through ``act``'s uint8 grid, written anew in numpy (float32)."""
    s = np.float32(act.scale)
    q = np.clip(np.round(x / s) + act.zero_point, 0, 255)
    return ((q - act.zero_point) * s).astype(np.float32)


@pytest.mark.parametrize("by_mean", [False, True])
def test_the_pool_input_goes_through_its_grid_in_graph_and_fake_quantization(by_mean):
    """The head reads mean(x through the pool input's grid) through its own grid: numpy,
    fake quantization and the INT8 graph agree; without the pool's grid the logits move
    visibly, so the check can fail."""
    model = _PoolThenLinear(by_mean).eval()
    rng = np.random.default_rng(1)
    q = quantize_tiny(model, [rng.standard_normal((4, 6, 5, 5)).astype(np.float32)])
    (plan,) = q.plans
    assert plan.pool is not None and q.layers[0].pool == 0
    x = 1.3 * rng.standard_normal((4, 6, 5, 5)).astype(np.float32)  # some past the range
    fakes = fake_layers(model, q.layers, q.plans)
    w = fakes[0].weight_q.numpy()
    bias = model.fc.bias.detach().numpy()

    def head(pool_input):
        return _grid(pool_input.mean(axis=(2, 3)), plan.act) @ w.T + bias

    expected = head(_grid(x, plan.pool))
    assert np.abs(expected - head(x)).max() > 1e-3  # the pool's grid is visible
    with torch.no_grad(), quantized(model, fakes, {0}) as (run, _):
        simulated = run(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(simulated, expected, rtol=0, atol=1e-5)
    graph = run_tvm(compiled(q.int8_mod, LLVM), x)
    np.testing.assert_allclose(graph, expected, rtol=0, atol=1e-5)
    with torch.no_grad(), quantized(model, fakes, set()) as (run, _):  # FP32: no grid
        fp32 = model(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(run(torch.from_numpy(x)).numpy(), fp32, rtol=0, atol=1e-6)


def test_a_mean_over_every_axis_is_no_pool_and_quantizes():
    """``x.mean()`` over all axes (Relax: ``axis`` None) scaling a conv's output is no
    global average pool: the graph quantizes and its INT8 output stays near PyTorch's (it
    had failed with a TypeError reading the axes)."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 1)

        def forward(self, x):
            return self.conv(x) * x.mean()

    torch.manual_seed(2)
    model = Net().eval()
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, 5, 5)).astype(np.float32) + 0.5
    q = quantize_tiny(model, [x])
    assert q.plans[0].pool is None
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    got = run_tvm(compiled(q.int8_mod, LLVM), x)
    np.testing.assert_allclose(got, expected, rtol=0, atol=0.05 * np.abs(expected).max())
