"""FP32 conv2d in channel-blocked layouts with a hand schedule, for CPUs.

TVM's Relax conv2d on CPU is a plain NCHW loop nest: MetaSchedule needs an hour of tuning on
resnet18 to approach PyTorch, and untuned it is 10-50x slower. This kernel uses the
layouts of TVM's x86 ``conv2d_NCHWc`` (and oneDNN's): data NCHW[b]c, weights
OIHW[b]i16o (prepacked in numpy as constants), 16 output channels per vector FMA, 14 output
columns accumulated in registers (``conv2d.tile_conv``), the output written back to NCHW by
the kernel's epilogue, so bias, activation and residual add fuse into it.
"""

import numpy as np
from tvm import te, tirx

from .conv2d import OC_BLOCK, blocked_conv, register_columns, tile_conv

OP_NAME = "qbench.conv2d_nchwc_fp32"
MAX_IC_BLOCK = 16


def ic_block(channels):
    """Input channels per block: all of them up to 16, else the largest of 16, 8, 4, 2, 1
    dividing ``channels``."""
    if channels <= MAX_IC_BLOCK:
        return int(channels)
    return next(b for b in (16, 8, 4, 2, 1) if channels % b == 0)


def pack_nchwc(x, block, padding):
    """(N, C, H, W) float32 -> (N, C/block, H + top + bottom, W + left + right, block), zero
    padded; ``padding``: (top, left, bottom, right)."""
    n, c, h, w = x.shape
    top, left, bottom, right = padding
    zero = tirx.const(0.0, x.dtype)

    def value(b, co, y, xx, ci):
        inside = tirx.all(y >= top, y < h + top, xx >= left, xx < w + left)
        return tirx.if_then_else(inside, x[b, co * block + ci, y - top, xx - left], zero)

    return te.compute(
        (n, c // block, h + top + bottom, w + left + right, block), value, name="pack_nchwc"
    )


def pack_weight(w, block):
    """float32 (O, C, KH, KW) -> (ceil(O/16), C/block, KH, KW, block, 16), output channels
    zero-padded to a multiple of 16."""
    o, c, kh, kw = w.shape
    padded = np.zeros((-(-o // OC_BLOCK) * OC_BLOCK, c, kh, kw), np.float32)
    padded[:o] = w
    blocks = padded.reshape(-1, OC_BLOCK, c // block, block, kh, kw)
    return np.ascontiguousarray(blocks.transpose(0, 2, 4, 5, 3, 1))


def conv2d_nchwc(data, weight, strides, dilation, channels, rows=False):
    """TE compute: packed ``data`` (N, C/b, H, W, b) and ``weight`` (O/16, C/b, KH, KW, b, 16)
    -> float32 (N, ``channels``, OH, OW); ``strides``, ``dilation``: (h, w) ints. With
    ``rows`` (a dense layer packed by ``layout.pack_rows``) the output is (M, ``channels``)."""
    acc = blocked_conv(
        data,
        weight,
        strides,
        dilation,
        lambda oc, ic_o, kh, kw, ic_i, oc_i: weight[oc, ic_o, kh, kw, ic_i, oc_i],
        "float32",
        OP_NAME,
    )
    n, _, out_h, out_w, _ = acc.shape
    if rows:
        return te.compute(
            (out_w, channels), lambda r, c: acc[0, c // OC_BLOCK, 0, r, c % OC_BLOCK], name="unpack"
        )
    return te.compute(
        (n, channels, out_h, out_w),
        lambda b, c, y, x: acc[b, c // OC_BLOCK, y, x, c % OC_BLOCK],
        name="unpack",
    )


def schedule_conv2d_fp32(sch, conv, out, target):
    """Schedule the packed FP32 ``conv`` and its epilogue ``out`` in place: ``tile_conv``'s
    tiles, each step one broadcast input value times 16 output channels' weights (a vector
    FMA) for each of the tile's columns; as many columns as ``target``'s vector registers
    hold (``conv2d.register_columns``: 14 with AVX-512, 6 with AVX2, where 14 spilled and
    ran a 3x3 128->128 conv at 28x28 2.5x slower on AMD Zen 3); with AVX2, rows end on a
    partial tile rather than in one wide tile (``conv2d.guarded_block``)."""

    oc, x, oc_i, ic_o, kh, kw, ic_i = tile_conv(
        sch, conv, out, register_columns(target), guarded=True
    )
    sch.reorder(ic_o, kh, kw, ic_i, oc, x, oc_i)
    sch.vectorize(oc_i)  # before decompose: TIR vectorizes a reduction block, not its update
    sch.unroll(x)
    sch.decompose_reduction(conv, ic_o)
