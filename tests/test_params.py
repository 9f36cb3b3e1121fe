"""Scales and zero points, checked against hand-derived values."""

import numpy as np

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


def test_c13_all_zero_channel_quantizes_to_zeros_with_positive_scale():
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
