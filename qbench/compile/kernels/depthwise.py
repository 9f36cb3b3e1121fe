"""Depthwise conv2d in NCHW (uint8 x int8 -> int32 with its requantize epilogue, or FP32)
and max pooling, written as explicit taps, and their schedule.

A depthwise conv has no channel reduction for ``vpdpbusd`` to take: each output is a sum of
KH*KW products. Written as a TE reduction, TIR refuses to vectorize the output row under
the reduction loops and LLVM leaves the loop scalar (about 5-10 GMAC/s on efficientnet_lite0's
layers). Here the KH*KW products are an explicit sum, so the conv is a plain elementwise
block: it inlines into its epilogue, and each output row is one vector loop over contiguous
input bytes. 5x5, 240 channels at 28x28, 2 threads: 1.05 -> 0.11 ms.
"""

import functools

from tvm import te, tirx

from .conv2d import out_size

OP_NAME = "qbench.depthwise_conv2d_nchw"
MAX_VECTOR_ROW = 64  # rows up to this many outputs are vectorized whole


def depthwise_conv(data, weight, correction, rescale, strides, dilation, width):
    """TE compute: uint8 ``data`` (as ``depthwise_taps`` takes it) with (C, 1, KH, KW) int8
    ``weight``, then out = float32(acc - correction[c]) * rescale[c] with (C,) int32
    ``correction`` and (C,) float32 ``rescale``. Returns the (N, C, OH, OW) float32 tensor."""
    acc = depthwise_taps(data, weight, strides, dilation, "int32", width)
    return te.compute(
        acc.shape,
        lambda b, c, y, x: (acc[b, c, y, x] - correction[c]).astype("float32") * rescale[c],
        name="requantize",
    )


def split_columns(x, stride):
    """(N, C, H, W) -> (N, C, H, stride, ceil(W / stride)): column stride*k + p moves to
    [..., p, k] (a past-the-end cell repeats the last column and is never read). A conv with
    column stride s then reads each tap's inputs as one contiguous run instead of every s-th
    byte, which LLVM does not vectorize."""
    n, c, h, w = x.shape

    def column(k, p):
        return k * stride + p if w % stride == 0 else tirx.min(k * stride + p, w - 1)

    return te.compute(
        (n, c, h, stride, (w + stride - 1) // stride),
        lambda b, ch, y, p, k: x[b, ch, y, column(k, p)],
        name="split_columns",
    )


def depthwise_taps(data, weight, strides, dilation, dtype, width):
    """TE compute: the (N, C, OH, OW) depthwise conv of padded ``data`` and (C, 1, KH, KW)
    ``weight`` as an explicit sum of KH*KW products in ``dtype`` ("int32" for uint8 x int8,
    "float32"). ``data``: (N, C, H, ``width``) for column stride 1, else ``split_columns``'
    layout of that input. ``strides``, ``dilation``: (h, w) ints."""
    kh_size, kw_size = (int(k) for k in weight.shape[2:])

    def taps(tap, b, c, y, x):
        products = [
            tap(i, j).astype(dtype) * weight[c, 0, i, j].astype(dtype)
            for i in range(kh_size)
            for j in range(kw_size)
        ]
        return sum(products[1:], products[0])

    return _windowed(data, (kh_size, kw_size), strides, dilation, width, taps, "depthwise_conv2d")


def max_pool_taps(data, pool_size, strides, dilation, width):
    """TE compute: the (N, C, OH, OW) max pooling of padded ``data`` (laid out as for
    ``depthwise_taps``) over ``pool_size`` (h, w) windows, as an explicit max of the taps."""

    def taps(tap, *_):
        values = [tap(i, j) for i in range(pool_size[0]) for j in range(pool_size[1])]
        return functools.reduce(tirx.max, values)

    return _windowed(data, pool_size, strides, dilation, width, taps, "max_pool2d")


def max_pool_nchw16c(data, pool_size, strides, dilation, border=(0, 0)):
    """TE compute: max pooling of padded (N, C16, H, W, 16) ``data`` over ``pool_size``
    (h, w) windows, as an explicit max of taps, each tap 16 channels of one pixel (one
    vector). Returns the (N, C16, OH + 2 b, OW + 2 b, 16) tensor with a ``border`` (b,
    value) around the pooled pixels (b = 0: none); scheduled as the NCHW16c depthwise conv
    (``schedule_depthwise``)."""
    n, blocks, height, width, lanes = data.shape
    sh, sw = strides
    dh, dw = dilation
    kh, kw = pool_size
    (b_out, fill), oh, ow = border, out_size(height, kh, sh, dh), out_size(width, kw, sw, dw)

    def value(b, c, y, x, ci):
        row = tirx.min(tirx.max(y - b_out, 0), oh - 1)  # clamped: the border's reads stay in
        col = tirx.min(tirx.max(x - b_out, 0), ow - 1)
        taps = [
            data[b, c, row * sh + i * dh, col * sw + j * dw, ci]
            for i in range(kh)
            for j in range(kw)
        ]
        pooled = functools.reduce(tirx.max, taps)
        if not b_out:
            return pooled
        inside = tirx.all(y >= b_out, y < oh + b_out, x >= b_out, x < ow + b_out)
        return tirx.if_then_else(inside, pooled, tirx.const(fill, data.dtype))

    shape = (n, blocks, oh + 2 * b_out, ow + 2 * b_out, lanes)
    return te.compute(shape, value, name="max_pool2d", attrs={"op_name": OP_NAME})


def _windowed(data, window, strides, dilation, width, combine, name):
    """The (N, C, OH, OW) compute whose value at (b, c, y, x) is ``combine(tap, b, c, y, x)``,
    where ``tap(i, j)`` reads the input under window position (i, j)."""
    n, channels, height = data.shape[:3]
    sh, sw = strides
    dh, dw = dilation
    out_h = out_size(height, window[0], sh, dh)
    out_w = out_size(width, window[1], sw, dw)

    def value(b, c, y, x):
        def tap(i, j):
            row = y * sh + i * dh
            if sw == 1:
                return data[b, c, row, x + j * dw]
            return data[b, c, row, (j * dw) % sw, x + (j * dw) // sw]

        return combine(tap, b, c, y, x)

    return te.compute((n, channels, out_h, out_w), value, name=name, attrs={"op_name": OP_NAME})


def schedule_depthwise(sch, conv, out, _target=None):
    """Schedule the depthwise ``conv`` block and its epilogue ``out`` (into which every block
    between them has been inlined) of ``sch`` in place: the conv inlined too, (N, C, OH) in
    parallel, each output row one vector loop (rows longer than ``MAX_VECTOR_ROW`` in
    vectors of 16). In NCHW16c (N, C16, OH, OW, 16) the row is a serial loop over the
    columns, each column's 16 channels one vector: the weights' vectors then stay in
    registers along the row, and the index arithmetic runs once a row (fusing the columns
    into the parallel loop cost 9 weight loads and a division chain per column: a 3x3
    depthwise of 32 channels at 112x112 took 0.171 ms instead of 0.113, Intel Xeon, 2
    threads)."""
    blocked = len(sch.get(conv).iter_vars) == 5
    if not sch.get(conv).same_as(sch.get(out)):
        sch.compute_inline(conv)
    loops = sch.get_loops(out)
    if blocked and len(loops) == 4:  # NCHW16c taps, NCHW out (``depthwise_conv_blocked``)
        b, c, y, x = loops
        outer, lanes = sch.split(c, [None, 16])
        sch.reorder(b, outer, y, x, lanes)
        sch.parallel(sch.fuse(b, outer, y))
        sch.vectorize(lanes)
        return
    if len(loops) == 5:  # NCHW16c
        *outer, _, lanes = loops
        sch.parallel(sch.fuse(*outer))
        sch.vectorize(lanes)
        return
    *outer, row = loops
    sch.parallel(sch.fuse(*outer))
    width = int(sch.get(row).extent)
    if width <= MAX_VECTOR_ROW:
        sch.vectorize(row)
    elif width % 16 == 0:
        sch.vectorize(sch.split(row, [None, 16])[1])


def depthwise_conv_u8(data, weight, constants, epilogue, strides, dilation):
    """TE compute: the depthwise conv in uint8 NCHW16c with its integer requantize to the
    next layers' uint8 (``conv2d.requantize_u8``): ``data`` (N, C16, H, W, 16) uint8,
    padded; ``weight`` (C16, KH, KW, 16) int8; ``constants``: (correction int32, multiplier
    and bias float32), each (C16 * 16,); ``epilogue``: (zero_point, (q_lo, q_hi), None).
    Each tap reads 16 channels of one pixel, one vector. Returns the (N, C16, OH, OW, 16)
    uint8 tensor."""
    from .conv2d import requantize_u8

    acc = _blocked_taps(data, weight, strides, dilation)
    lanes = acc.shape[-1]
    return te.compute(
        acc.shape,
        lambda b, c, y, x, ci: requantize_u8(
            acc[b, c, y, x, ci], c * lanes + ci, constants, epilogue
        ),
        name="requantize_u8",
    )


def depthwise_conv_blocked(data, weight, correction, rescale, strides, dilation):
    """TE compute: the depthwise conv of uint8 NCHW16c ``data`` and ``weight`` (as
    ``depthwise_conv_u8`` takes them), dequantized as ``depthwise_conv`` does to its FP32
    (N, C, OH, OW) output, C = C16 * 16, with (C,) int32 ``correction`` and float32
    ``rescale``. Scheduled (``schedule_depthwise``) with a pixel's 16 channels one vector
    through the taps and whatever FuseOps appends, stored to NCHW 16 channels apart: rows
    of 7 and 14 pixels (mobilenet_v3's squeeze-excitation blocks) fill no vector of NCHW."""
    acc = _blocked_taps(data, weight, strides, dilation)
    n, blocks, oh, ow, lanes = acc.shape
    return te.compute(
        (n, blocks * lanes, oh, ow),
        lambda b, c, y, x: (
            (acc[b, c // lanes, y, x, c % lanes] - correction[c]).astype("float32") * rescale[c]
        ),
        name="requantize",
    )


def _blocked_taps(data, weight, strides, dilation):
    """The (N, C16, OH, OW, 16) int32 depthwise sums of ``data`` (N, C16, H, W, 16) uint8,
    padded, and ``weight`` (C16, KH, KW, 16) int8, as an explicit sum of the taps."""
    n, blocks, height, width, lanes = data.shape
    kh_size, kw_size = (int(k) for k in weight.shape[1:3])
    sh, sw = strides
    dh, dw = dilation
    shape = (n, blocks, out_size(height, kh_size, sh, dh), out_size(width, kw_size, sw, dw), lanes)

    def taps(b, c, y, x, ci):
        products = [
            data[b, c, y * sh + i * dh, x * sw + j * dw, ci].astype("int32")
            * weight[c, i, j, ci].astype("int32")
            for i in range(kh_size)
            for j in range(kw_size)
        ]
        return sum(products[1:], products[0])

    return te.compute(shape, taps, name="depthwise_conv2d", attrs={"op_name": OP_NAME})
