"""Scales and zero points: affine uint8 activations, symmetric int8 weights.

Quantization follows Jacob et al., "Quantization and Training of Neural Networks for
Efficient Integer-Arithmetic-Only Inference", CVPR 2018: real = scale * (q - zero_point).
Any zero-range tensor (all-zero weight channel, constant activation) gets scale 1.0, a
usable value that keeps it exact: zero quantizes to zero.
"""

from dataclasses import dataclass

import numpy as np

from . import pairs

UINT8_MAX = 255
INT8_MAX = 127
INT7_MAX = 63  # reduce_range weights: a pair of uint8 x int7 products fits int16


@dataclass(frozen=True)
class ActivationParams:
    """Affine uint8 parameters of one activation: scale > 0 (float), zero_point in [0, 255]."""

    scale: float
    zero_point: int


def activation_params(lo, hi):
    """Affine uint8 parameters covering [lo, hi], widened to include 0 so that 0 is exact."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = (hi - lo) / UINT8_MAX
    if not np.isfinite(scale) or scale <= 0:
        return ActivationParams(1.0, 0)
    zero_point = int(np.clip(np.round(-lo / scale), 0, UINT8_MAX))
    return ActivationParams(scale, zero_point)


@dataclass
class QuantizedWeight:
    """Symmetric int8 weight.

    Attributes:
        q: int8 array, same shape as the float weight, values in [-qmax, qmax].
        scale: float32 per output channel (C_out,) or (1,) when per-tensor; all > 0.
        collapsed: indices of output channels with non-zero float weights that
            quantize to all zeros (information lost).
        sqnr_db: per output channel SQNR of the weight, dB (inf where exact).
        qmax: the largest |q| the grid allows: ``INT8_MAX``, or ``INT7_MAX`` with
            ``QuantConfig.reduce_range``.
        fit_pairs: every pair of ``q`` fits AVX2's int16 sums (``pairs``;
            ``QuantConfig.fit_pairs``), and any rounding of it must keep them so.
    """

    q: np.ndarray
    scale: np.ndarray
    collapsed: list
    sqnr_db: np.ndarray
    qmax: int = INT8_MAX
    fit_pairs: bool = False


def quantize_weight(w, channel_axis, per_channel, qmax=INT8_MAX, fit_pairs=False):
    """Quantize a float weight symmetrically to int8 values in [-qmax, qmax], rounding to
    nearest.

    Args:
        w: float32 weight, conv2d (O, I, kH, kW) or matmul (K, M).
        channel_axis: axis of output channels (0 for conv2d, -1 for matmul).
        per_channel: one scale per output channel (else one per tensor).
        qmax: ``INT8_MAX`` (127), or ``INT7_MAX`` (63) for 7-bit weights.
        fit_pairs: per channel, the finest grid (amax over 127 down to 63 steps) whose
            nearest-rounded pairs fit AVX2's int16 sums (``pairs.fitting_steps``).
    """
    moved = np.moveaxis(np.asarray(w, np.float32), channel_axis, 0)
    flat = moved.reshape(moved.shape[0], -1)
    amax = np.abs(flat).max(axis=1) if per_channel else np.array([np.abs(flat).max()])
    steps = qmax
    if fit_pairs:
        each = np.broadcast_to(amax, (len(moved),))
        steps = pairs.fitting_steps(moved, each, qmax, INT7_MAX, together=not per_channel)
        steps = steps if per_channel else steps[:1]
    scale = np.where(amax > 0, amax / steps, 1.0).astype(np.float32)
    per_row = scale if per_channel else np.repeat(scale, flat.shape[0])
    q = np.clip(np.round(flat / per_row[:, None]), -qmax, qmax).astype(np.int8)
    q_full = np.moveaxis(q.reshape(moved.shape), 0, channel_axis)
    return with_integers(w, q_full, scale, channel_axis, qmax, fit_pairs)


def with_integers(w, q, scale, channel_axis, qmax=INT8_MAX, fit_pairs=False):
    """The ``QuantizedWeight`` of float weight ``w`` given its int8 values ``q`` (same shape,
    in [-qmax, qmax], rounded by any method, its pairs fitting when ``fit_pairs``) and
    ``scale`` (C_out,) or (1,)."""
    flat = np.moveaxis(np.asarray(w, np.float32), channel_axis, 0)
    flat = flat.reshape(flat.shape[0], -1)
    q_flat = np.moveaxis(q, channel_axis, 0).reshape(flat.shape)
    per_row = np.broadcast_to(scale, (flat.shape[0],))
    err = flat - q_flat * per_row[:, None]
    signal, noise = (flat**2).sum(axis=1), (err**2).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        sqnr = np.where(noise > 0, 10 * np.log10(signal / noise), np.inf)
    lost = (np.abs(flat).max(axis=1) > 0) & (np.abs(q_flat).max(axis=1) == 0)
    lost = np.flatnonzero(lost).tolist()
    return QuantizedWeight(q.astype(np.int8), scale, lost, sqnr, qmax, fit_pairs)
