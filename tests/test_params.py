"""Scales and zero points, checked against hand-derived values, and per-channel weight
scales on tiny models whose channels differ by decades or are all zero (C05, C10, C13)."""

import numpy as np
import torch
from helpers import quantize_tiny, randn, torch_out
from torch import nn

from qbench.quantize.params import activation_params, quantize_weight


def test_activation_params_hand_derived():
    p = activation_params(-1.0, 1.55)
    assert np.isclose(p.scale, 2.55 / 255) and p.zero_point == 100
    p = activation_params(0.0, 6.0)
    assert np.isclose(p.scale, 6.0 / 255) and p.zero_point == 0
    p = activation_params(0.5, 6.0)  # widened to include 0
    assert np.isclose(p.scale, 6.0 / 255) and p.zero_point == 0


def test_zero_range_gets_usable_scale():
    p = activation_params(0.0, 0.0)
    assert p.scale > 0 and np.isfinite(p.scale)


def test_an_all_zero_channel_quantizes_to_zeros_with_a_positive_scale():
    """C13: an all-zero weight channel gets a finite positive scale and quantizes to zeros;
    the other channels keep max|w| / 127."""
    w = np.random.default_rng(0).standard_normal((8, 1, 3, 3)).astype(np.float32)
    w[3] = 0
    qw = quantize_weight(w, 0, per_channel=True)
    assert np.all(qw.scale > 0) and np.all(np.isfinite(qw.scale))
    assert np.all(qw.q[3] == 0) and qw.collapsed == []
    expected = np.abs(w).reshape(8, -1).max(1) / 127
    assert np.allclose(qw.scale[[0, 1, 2, 4, 5, 6, 7]], expected[[0, 1, 2, 4, 5, 6, 7]])


def test_per_tensor_flags_collapsed_channels():
    w = np.ones((4, 2, 1, 1), np.float32)
    w[2] *= 1e-4  # far below half a step of 1/127
    qw = quantize_weight(w, 0, per_channel=False)
    assert qw.collapsed == [2]
    assert quantize_weight(w, 0, per_channel=True).collapsed == []


def test_matmul_weight_channels_on_last_axis():
    w = np.array([[1.0, -0.5], [0.25, 2.0]], np.float32)  # (K, M)
    qw = quantize_weight(w, -1, per_channel=True)
    assert np.allclose(qw.scale, [1.0 / 127, 2.0 / 127])
    assert qw.q.tolist() == [[127, -32], [32, 127]]


def c05_model():
    torch.manual_seed(5)
    bn = nn.BatchNorm2d(16)
    with torch.no_grad():
        bn.weight.copy_(torch.tensor(10 ** np.linspace(-2, 1, 16), dtype=torch.float32))
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), bn, nn.ReLU()).eval()


def per_channel_sqnr(ref, out):
    noise = ((ref - out) ** 2).sum(axis=(0, 2, 3))
    return 10 * np.log10((ref**2).sum(axis=(0, 2, 3)) / np.maximum(noise, 1e-30))


def test_per_channel_scales_keep_every_channel_and_per_tensor_flags_collapsed_ones():
    """C05: channels of very different magnitude (BatchNorm gamma 10**-2 .. 10): per-channel
    weight scales keep every channel at 25 dB SQNR or more; per-tensor scales flag the
    channels whose weights round to zero."""
    model = c05_model()
    calib = [randn(8, 3, 16, 16, seed=s) for s in range(32)]
    x = randn(8, 3, 16, 16, seed=100)
    q = quantize_tiny(model, calib)
    sqnr = per_channel_sqnr(torch_out(model, x), q.run("int8", x))
    assert sqnr.min() >= 25.0
    per_tensor = quantize_tiny(model, calib, per_channel=False)
    collapsed = per_tensor.plans[0].weight.collapsed
    folded = per_tensor.layers[0].weight  # BatchNorm folded into the conv weights
    amax = np.abs(folded).reshape(16, -1).max(1)
    expected = np.flatnonzero(amax < 0.5 * amax.max() / 127)  # rounds to 0 at every weight
    assert collapsed == expected.tolist() and len(collapsed) > 0


def c10_model():
    torch.manual_seed(10)
    dw = nn.Conv2d(32, 32, 3, padding=1, groups=32)
    with torch.no_grad():
        dw.weight.mul_(
            torch.tensor(10 ** (-3 * np.arange(32) / 31), dtype=torch.float32).view(32, 1, 1, 1)
        )
    return nn.Sequential(
        dw, nn.BatchNorm2d(32), nn.ReLU(), nn.Conv2d(32, 10, 1), nn.AdaptiveAvgPool2d(1)
    ).eval()


def test_depthwise_weights_spanning_decades_keep_every_channel():
    """C10: depthwise weights scaled by 10**(-3c/31): per-channel scales give 30 dB or more on
    every channel; per-tensor scales flag the channels that round to zero."""
    model = c10_model()
    calib = [randn(1, 32, 16, 16, seed=s) for s in range(16)]
    dw_only = model[:1]  # per-channel SQNR is measured at the depthwise output
    x = randn(1, 32, 16, 16, seed=200)
    q = quantize_tiny(dw_only, calib)
    assert per_channel_sqnr(torch_out(dw_only, x), q.run("int8", x)).min() >= 30.0
    per_tensor = quantize_tiny(model, calib, per_channel=False).plans[0].weight.collapsed
    w = (
        model[0].weight.detach().numpy()
        * (model[1].weight / torch.sqrt(model[1].running_var + model[1].eps))
        .detach()
        .numpy()[:, None, None, None]
    )
    amax = np.abs(w).reshape(32, -1).max(1)
    assert per_tensor == np.flatnonzero(amax < 0.5 * amax.max() / 127).tolist() and per_tensor


def test_an_all_zero_depthwise_channel_stays_exact():
    """C13: a depthwise conv whose channel 3 weights are all zero: channel 3 of the INT8 output
    is its bias alone, and no output is NaN."""
    torch.manual_seed(13)
    model = nn.Conv2d(8, 8, 3, groups=8).eval()
    with torch.no_grad():
        model.weight[3].zero_()
    x = randn(2, 8, 10, 10, seed=3)
    out = quantize_tiny(model, [randn(2, 8, 10, 10, seed=s) for s in range(4)]).run("int8", x)
    assert not np.isnan(out).any()
    assert np.all(out[:, 3] == model.bias[3].item())
    ref = torch_out(model, x)
    assert np.abs(out - ref).max() <= 0.05 * np.abs(ref).max()


def test_efficientnet_lite0s_all_zero_channels_get_usable_scales():
    """C13: the shipped efficientnet_lite0 weights hold all-zero depthwise channels; they get
    finite positive scales and quantize to zeros."""
    from qbench.model import zoo
    from qbench.quantize.params import quantize_weight

    model = zoo.load_model("efficientnet_lite0").module
    w = model._blocks[0]._depthwise_conv.weight.detach().numpy()
    zero = np.flatnonzero(np.abs(w).reshape(len(w), -1).max(1) == 0)
    assert zero.size >= 1  # the fault is really in the shipped weights
    qw = quantize_weight(w, 0, per_channel=True)
    assert np.all(np.isfinite(qw.scale)) and np.all(qw.scale > 0)
    assert (
        np.all(qw.q[zero] == 0)
        and np.isfinite(qw.q.astype(np.float32) * qw.scale[:, None, None, None]).all()
    )
