"""Depthwise conv2d in NCHW (uint8 x int8 -> int32 with its requantize epilogue, or FP32),
and its schedule.

A depthwise conv has no channel reduction for ``vpdpbusd`` to take: each output is a sum of
KH*KW products. Written as a TE reduction, TIR refuses to vectorize the output row under
the reduction loops and LLVM leaves the loop scalar (about 5-10 GMAC/s on efficientnet_lite0's
layers). Here the KH*KW products are an explicit sum, so the conv is a plain elementwise
block: it inlines into its epilogue, and each output row is one vector loop over contiguous
input bytes. 5x5, 240 channels at 28x28, 2 threads: 1.05 -> 0.11 ms.
"""

from tvm import te

from .conv2d import out_size

OP_NAME = "qbench.depthwise_conv2d_nchw"
MAX_VECTOR_ROW = 64  # rows up to this many outputs are vectorized whole


def depthwise_conv(data, weight, correction, rescale, strides, dilation):
    """TE compute: (N, C, H, W) uint8 ``data`` (already padded) with (C, 1, KH, KW) int8
    ``weight``, then out = float32(acc - correction[c]) * rescale[c] with (C,) int32
    ``correction`` and (C,) float32 ``rescale``. ``strides``, ``dilation``: (h, w) ints.
    Returns the (N, C, OH, OW) float32 tensor."""
    acc = depthwise_taps(data, weight, strides, dilation, "int32")
    return te.compute(
        acc.shape,
        lambda b, c, y, x: (acc[b, c, y, x] - correction[c]).astype("float32") * rescale[c],
        name="requantize",
    )


def depthwise_taps(data, weight, strides, dilation, dtype):
    """TE compute: the (N, C, OH, OW) depthwise conv of padded (N, C, H, W) ``data`` and
    (C, 1, KH, KW) ``weight`` as an explicit sum of KH*KW products in ``dtype`` ("int32" for
    uint8 x int8, "float32")."""
    n, channels, height, width = data.shape
    _, _, kh_size, kw_size = weight.shape
    sh, sw = strides
    dh, dw = dilation
    out_h = out_size(height, kh_size, sh, dh)
    out_w = out_size(width, kw_size, sw, dw)

    def taps(b, c, y, x):
        products = [
            data[b, c, y * sh + i * dh, x * sw + j * dw].astype(dtype)
            * weight[c, 0, i, j].astype(dtype)
            for i in range(int(kh_size))
            for j in range(int(kw_size))
        ]
        return sum(products[1:], products[0])

    return te.compute(
        (n, channels, out_h, out_w), taps, name="depthwise_conv2d", attrs={"op_name": OP_NAME}
    )


def schedule_depthwise(sch, conv, out):
    """Schedule the depthwise ``conv`` block and its epilogue ``out`` (into which every block
    between them has been inlined) of ``sch`` in place: the conv inlined too, (N, C, OH) in
    parallel, each output row one vector loop (rows longer than ``MAX_VECTOR_ROW`` in
    vectors of 16)."""
    sch.compute_inline(conv)
    *outer, row = sch.get_loops(out)
    sch.parallel(sch.fuse(*outer))
    width = int(sch.get(row).extent)
    if width <= MAX_VECTOR_ROW:
        sch.vectorize(row)
    elif width % 16 == 0:
        sch.vectorize(sch.split(row, [None, 16])[1])
