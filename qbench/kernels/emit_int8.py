"""Emitters that put one integer layer (``patterns.IntegerLayer``) on qbench's INT8 kernels.

Each returns the Relax expression that replaces the layer's chain: the layer's uint8 input
(the graph's quantize, shared with every layer reading the same tensor) is padded with its
zero point and packed for the kernel (``layout``), and the kernel applies the same
zero-point correction and rescale to its int32 tile as it writes the FP32 result, so the
output is bit-identical to the plain integer graph's. The ops after the kernel (bias,
activation, residual add, the next layer's quantize) are elementwise: FuseOps appends them
to the kernel, whose epilogue then stores uint8.
"""

import numpy as np

from .conv2d import OUT_ELEMWISE_FUSABLE


def _const(array, dtype):
    from tvm import relax

    return relax.const(np.asarray(array).astype(dtype), dtype)


def _padded(bb, x_q, padding, zero_point):
    """uint8 ``x_q`` (N, C, H, W) padded with ``zero_point``, the real 0;
    ``padding``: (top, left, bottom, right)."""
    from tvm.relax import op

    if not any(padding):
        return x_q
    top, left, bottom, right = padding
    width = [0, 0, 0, 0, top, bottom, left, right]
    return bb.emit(op.nn.pad(x_q, width, pad_value=float(zero_point)))


def _epilogue_constants(layer, packing):
    """(correction int32, rescale float32) constants for a packed kernel: the kernel sums
    (x_q - packing.offset) * w, so its correction is (zero_point - offset) * sum(w)."""
    sums = layer.weight.astype(np.int64).sum(axis=(1, 2, 3) if layer.attrs else 0)
    correction = layer.correction - packing.offset * sums
    return _const(correction, "int32"), _const(layer.rescale, "float32")


def packed(bb, layer, packing):
    """An ungrouped NCHW conv2d or a 2-D matmul on the packed kernel of ``packing``
    (``layout.PACKINGS``)."""
    from . import layout

    correction, rescale = _epilogue_constants(layer, packing)
    zp = int(layer.zero_point)
    if layer.attrs is None:  # matmul: the rows as one image row
        data = bb.emit(bb.call_te(layout.pack_rows, layer.x_q, zp, *_packed_data(packing)))
        weight = layout.pack_dense_weight(layer.weight, packing.block, packing.weight_dtype)
        strides, dilation, rows = (1, 1), (1, 1), True
    else:
        attrs = layer.attrs
        x_q = _padded(bb, layer.x_q, layer.padding, zp)
        data = bb.emit(bb.call_te(layout.pack_nchw4c, x_q, zp, *_packed_data(packing)))
        weight = layout.pack_conv_weight(layer.weight, packing.block, packing.weight_dtype)
        strides = tuple(int(s) for s in attrs.strides)
        dilation, rows = tuple(int(d) for d in attrs.dilation), False
    return _requantized_conv(
        bb,
        [data, _const(weight, weight.dtype.name), correction, rescale],
        strides,
        dilation,
        rows,
        packing,
    )


def _packed_data(packing):
    """The packing functions' (block, dtype, offset) arguments for ``packing``."""
    return packing.block, packing.data_dtype, packing.offset


def _requantized_conv(bb, args, strides, dilation, rows, packing):
    """The packed conv and its requantize as one kernel. ``op_pattern`` out-elementwise-
    fusable lets FuseOps append the elementwise ops that follow (bias, activation, residual
    add); ``kernels.schedules.HandKernels`` schedules the result as one tiled kernel."""
    from .conv2d import requantized_conv

    return bb.call_te(
        requantized_conv,
        *args,
        strides,
        dilation,
        rows,
        packing.op_name,
        primfunc_name_hint="conv2d_packed_" + packing.op_name.rsplit("_", 1)[-1],
        primfunc_attrs={"op_pattern": OUT_ELEMWISE_FUSABLE},
    )


def depthwise(bb, layer):
    """A depthwise NCHW conv2d on ``depthwise.depthwise_conv`` (any CPU)."""
    from .depthwise import depthwise_conv
    from .emit_fp32 import padded_columns

    attrs = layer.attrs
    strides = tuple(int(s) for s in attrs.strides)
    x_q, width = padded_columns(bb, layer.x_q, layer.padding, strides, float(layer.zero_point))
    return bb.call_te(
        depthwise_conv,
        x_q,
        _const(layer.weight, "int8"),
        _const(layer.correction, "int32"),
        _const(layer.rescale, "float32"),
        strides,
        tuple(int(d) for d in attrs.dilation),
        width,
        primfunc_name_hint="depthwise_conv2d",
        primfunc_attrs={"op_pattern": OUT_ELEMWISE_FUSABLE},
    )
