"""Emitters that put one FP32 layer (``patterns.FloatLayer``) on qbench's CPU kernels: the
packed conv of ``conv2d_fp32.py`` (dense layers as a 1x1 conv over the rows), the depthwise
conv and max pooling of ``depthwise.py``. Each returns the Relax expression that replaces
the layer's call."""

import numpy as np

from .conv2d import OUT_ELEMWISE_FUSABLE
from .conv2d_fp32 import conv2d_nchwc, ic_block, pack_nchwc, pack_weight
from .depthwise import depthwise_taps, max_pool_taps
from .emit_common import blocked_behind, padded_columns, padded_nchw16c


def conv(bb, layer):
    """An ungrouped NCHW conv2d on the packed FP32 conv."""
    call = layer.call
    weight = call.args[1].value.numpy()
    block = ic_block(weight.shape[1])
    attrs = call.attrs
    padding = tuple(int(p) for p in attrs.padding)
    data = bb.emit(bb.call_te(pack_nchwc, call.args[0], block, padding))
    strides = tuple(int(s) for s in attrs.strides)
    dilation = tuple(int(d) for d in attrs.dilation)
    return _call_packed(bb, data, pack_weight(weight, block), strides, dilation, weight.shape[0])


def dense(bb, layer):
    """A 2-D matmul on the packed FP32 conv, its rows as one image row."""
    call = layer.call
    from .layout import pack_rows

    weight = call.args[1].value.numpy()  # (K, N)
    block = ic_block(weight.shape[0])
    data = bb.emit(bb.call_te(pack_rows, call.args[0], 0.0, block))
    packed = pack_weight(weight.T[:, :, None, None], block)
    return _call_packed(bb, data, packed, (1, 1), (1, 1), weight.shape[1], rows=True)


def _call_packed(bb, data, weight, strides, dilation, channels, rows=False):
    from tvm import relax

    return bb.call_te(
        conv2d_nchwc,
        data,
        relax.const(np.asarray(weight, np.float32), "float32"),
        strides,
        dilation,
        channels,
        rows,
        primfunc_name_hint="conv2d_nchwc_fp32",
        primfunc_attrs={"op_pattern": OUT_ELEMWISE_FUSABLE},
    )


def depthwise(bb, layer):
    """A depthwise NCHW conv2d as explicit taps."""
    call = layer.call
    attrs = call.attrs
    strides = tuple(int(s) for s in attrs.strides)
    x, width = padded_columns(bb, call.args[0], attrs.padding, strides, 0.0)
    return bb.call_te(
        depthwise_taps,
        x,
        call.args[1],
        strides,
        tuple(int(d) for d in attrs.dilation),
        "float32",
        width,
        primfunc_name_hint="depthwise_conv2d_fp32",
        primfunc_attrs={"op_pattern": OUT_ELEMWISE_FUSABLE},
    )


def max_pool(bb, layer):
    """An NCHW max_pool2d (float32 or uint8) as an explicit max of taps, padded with the
    dtype's lowest value (``patterns.pool_padding``: ceil mode's rows and columns too). A
    uint8 pool with an output ``border`` (``borders``) runs in NCHW16c, its input packed
    when no uint8 kernel wrote it."""
    from . import layout
    from .patterns import pool_padding

    call = layer.call
    attrs, padding = call.attrs, pool_padding(call)
    strides = tuple(int(s) for s in attrs.strides)
    dtype = np.dtype(str(call.ty.dtype))
    lowest = float((np.finfo if dtype.kind == "f" else np.iinfo)(dtype).min)
    if dtype == np.uint8:
        blocked, border = blocked_behind(bb, call.args[0])
        if border and padding != (border,) * 4:
            blocked, border = None, 0  # a border that is not this pool's padding
        if blocked is None and layer.border is not None:
            blocked = bb.emit(bb.call_te(layout.pack_nchw16c, call.args[0], 0))
        if blocked is not None:
            return _max_pool_nchw16c(bb, (blocked, border), layer, lowest)
    x, width = padded_columns(bb, call.args[0], padding, strides, lowest)
    return bb.call_te(
        max_pool_taps,
        x,
        tuple(int(k) for k in attrs.pool_size),
        strides,
        tuple(int(d) for d in attrs.dilation),
        width,
        primfunc_name_hint="max_pool2d_taps",
        primfunc_attrs={"op_pattern": OUT_ELEMWISE_FUSABLE},
    )


def _max_pool_nchw16c(bb, source, layer, lowest):
    """A uint8 max_pool2d over the NCHW16c tensor a uint8 kernel wrote, in that layout
    (``depthwise.max_pool_nchw16c``), unpacked to (N, C, OH, OW) for the layers after it
    (a uint8 kernel after it reads the NCHW16c tensor itself). ``source``: (that tensor, its
    border): a border is the pool's padding (``borders`` grants one only where it is, and
    where no value lies below it), otherwise the tensor is padded with ``lowest``."""
    from . import layout
    from .depthwise import max_pool_nchw16c
    from .patterns import pool_padding

    attrs = layer.call.attrs
    blocked, border = source
    padding = pool_padding(layer.call)
    data = blocked if border else padded_nchw16c(bb, blocked, padding, lowest)
    out_border = layer.border or (0, 0)
    pooled = bb.emit(
        bb.call_te(
            max_pool_nchw16c,
            data,
            tuple(int(k) for k in attrs.pool_size),
            tuple(int(s) for s in attrs.strides),
            tuple(int(d) for d in attrs.dilation),
            out_border,
            primfunc_name_hint="max_pool2d_nchw16c",
            primfunc_attrs={"op_pattern": OUT_ELEMWISE_FUSABLE},
        )
    )
    return bb.call_te(layout.unpack_nchw16c, pooled, int(layer.call.ty.shape[1]), out_border[0])
