"""int8 weights whose pairs fit AVX2's int16 sums: ``vpmaddubsw`` exact on 8-bit weights.

``vpmaddubsw`` (Intel SDM, PMADDUBSW) multiplies unsigned bytes by signed bytes and adds each
two adjacent products into int16, saturating. With uint8 activations x in [0, 255] and the
int8 weights (w0, w1) of two adjacent input channels, the pair's sum lies in
[255 (min(w0, 0) + min(w1, 0)), 255 (max(w0, 0) + max(w1, 0))]: it cannot saturate when the
pair's positive parts sum to at most ``PAIR_LIMIT`` (128) and its negative parts to at least
-128 (255 x 128 = 32640 <= 32767). FBGEMM avoids the saturation with 7-bit operands
(``reduce_range``); a pair that fits keeps every other weight at 8 bits.

Pairs are the input channels (2j, 2j + 1) of one output channel and kernel position: conv2d
weights (O, I, kH, kW) pair along axis 1, matmul weights (K, M) along axis 0, as the AVX2
kernels' 4-byte input blocks hold them (``compile.kernels.layout``). A last, odd input
channel pairs with a padded zero weight, which any int8 weight fits.
"""

import numpy as np

PAIR_LIMIT = 128  # largest sum of a pair's positive parts (and of its negative parts' -)


def pair_axis(ndim):
    """The input-channel axis weights pair along: 1 for conv2d (4-D), 0 for matmul (2-D)."""
    return 1 if ndim == 4 else 0


def _split(q, axis=None):
    """(first, second): the pairs' two weights of ``q``, int64, along ``axis`` (None: its
    input axis, ``pair_axis``; a zero column added after an odd last one)."""
    axis = pair_axis(np.ndim(q)) if axis is None else axis
    q = np.moveaxis(np.asarray(q, np.int64), axis, 0)
    if len(q) % 2:
        q = np.concatenate([q, np.zeros_like(q[:1])])
    return q[0::2], q[1::2]


def pairs_fit(q, axis=None):
    """Whether every pair of int8 weights ``q`` (conv2d (O, I, kH, kW) or matmul (K, M))
    fits ``vpmaddubsw``'s int16 sums exactly (see the module's docstring); ``axis``: the one
    pairs lie along where not the input axis (a packed weight's innermost block: -1)."""
    return bool(_fits(*_split(q, axis)).all())


def second_bounds(first):
    """(low, high): the values the second weight of a pair may take beside ``first``
    (integers: a scalar, numpy array or torch tensor): [-128 - min(first, 0),
    128 - max(first, 0)]."""
    return -PAIR_LIMIT - (first - abs(first)) // 2, PAIR_LIMIT - (first + abs(first)) // 2


def fitting_steps(moved, amax, qmax, floor, together=False):
    """Per row of ``moved`` (float (O, I, ...): output channels first, pairs along axis 1),
    the most steps in [``floor``, ``qmax``] over which ``amax`` (O,) may lie for the row's
    nearest-rounded weights to fit every pair: int64 (O,); ``together``: one number of
    steps for every row (a per-tensor scale). A row whose 8-bit weights fit keeps ``qmax``;
    ``floor`` steps (63: 7 bits) always fit (255 x 2 x 63 < 32767). The per-channel scale is
    then amax / steps: the finest grid that needs no pair moved."""
    steps = np.full(len(moved), floor, np.int64)
    settled = np.zeros(len(moved), bool)
    for candidate in range(qmax, floor, -1):
        scale = np.where(amax > 0, amax / candidate, 1.0).reshape(-1, *[1] * (moved.ndim - 1))
        fits = _fits(*_split(np.round(moved / scale), axis=1))  # (I / 2, O, ...)
        fits = fits.reshape(*fits.shape[:2], -1).all(axis=(0, 2))
        fits = np.full_like(fits, fits.all()) if together else fits
        steps[fits & ~settled] = candidate
        settled |= fits
        if settled.all():
            break
    return steps


def _fits(a, b):
    positive = np.maximum(a, 0) + np.maximum(b, 0)
    negative = np.minimum(a, 0) + np.minimum(b, 0)
    return (positive <= PAIR_LIMIT) & (negative >= -PAIR_LIMIT)
