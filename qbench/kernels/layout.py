"""Packing to the VNNI layouts of ``conv2d.py``.

Activations are packed at run time by TE computes (injective, so TVM fuses them with the
quantize before); the packed int32 result is unpacked by the conv kernel's own epilogue
(``conv2d.requantized_conv``). Weights are packed once, in numpy, at quantization time, so
the compiled graph holds them prepacked. A dense layer y = x @ W runs as a 1x1 conv over a
1 x M image: x (M, K) -> (1, K/4, 1, M, 4), W (K, N) -> (N/16, K/4, 1, 1, 16, 4).
"""

import numpy as np
from tvm import te, tirx

from .conv2d import IC_BLOCK, OC_BLOCK


def _ceil_to(n, block):
    return -(-int(n) // block) * block


def pack_nchw4c(x, zero_point):
    """(N, C, H, W) uint8 -> (N, ceil(C/4), H, W, 4); padded channels hold ``zero_point``.
    (Spatial padding comes before, in FP32: padding after the quantize lets FuseOps pull the
    quantize into the previous conv's epilogue, measured 0.1-0.15 ms slower on resnet18.)"""
    n, c, h, w = x.shape
    chunks = _ceil_to(c, IC_BLOCK) // IC_BLOCK
    zp = tirx.const(int(zero_point), "uint8")
    return te.compute(
        (n, chunks, h, w, IC_BLOCK),
        lambda b, co, y, xx, ci: tirx.if_then_else(
            co * IC_BLOCK + ci < c,
            x[b, tirx.min(co * IC_BLOCK + ci, c - 1), y, xx],
            zp,
        ),
        name="pack_nchw4c",
    )


def pack_rows(x, pad_value, block=IC_BLOCK):
    """(M, K) -> (1, ceil(K/block), 1, M, block): the rows of a dense layer as one image row;
    padded input channels hold ``pad_value`` (the zero point for uint8)."""
    m, k = x.shape
    chunks = _ceil_to(k, block) // block
    pad = tirx.const(pad_value, x.dtype)
    return te.compute(
        (1, chunks, 1, m, block),
        lambda _, ko, __, r, ki: tirx.if_then_else(
            ko * block + ki < k, x[r, tirx.min(ko * block + ki, k - 1)], pad
        ),
        name="pack_rows",
    )


def pack_conv_weight(w):
    """int8 (O, C, KH, KW) -> (ceil(O/16), ceil(C/4), KH, KW, 16, 4), zero-padded."""
    o, c, kh, kw = w.shape
    padded = np.zeros((_ceil_to(o, OC_BLOCK), _ceil_to(c, IC_BLOCK), kh, kw), np.int8)
    padded[:o, :c] = w
    blocks = padded.reshape(-1, OC_BLOCK, padded.shape[1] // IC_BLOCK, IC_BLOCK, kh, kw)
    return np.ascontiguousarray(blocks.transpose(0, 2, 4, 5, 1, 3))


def pack_dense_weight(w):
    """int8 (K, N) -> (ceil(N/16), ceil(K/4), 1, 1, 16, 4), zero-padded."""
    return pack_conv_weight(np.asarray(w).T[:, :, None, None])
