"""The Relax rewrite that runs FP32 convs, dense layers and max pooling on qbench's CPU
kernels: the packed conv of ``conv2d_fp32.py`` (dense layers as a 1x1 conv over the rows),
the depthwise conv and max pooling of ``depthwise.py``."""

import numpy as np

from ..graph import quantizable_call
from .conv2d import OUT_ELEMWISE_FUSABLE
from .conv2d_fp32 import conv2d_nchwc, ic_block, pack_nchwc, pack_weight
from .depthwise import depthwise_taps, max_pool_taps, split_columns


def pack_fp32_convs(mod):
    """``mod`` with every float32 conv2d (NCHW, ungrouped or depthwise) and matmul (2-D input)
    of a constant weight, and every NCHW max_pool2d, replaced by qbench's kernels. Other
    calls are unchanged.

    Returns:
        a new ``tvm.IRModule``.
    """
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class _Packer(PyExprMutator):
        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            kind = _fp32_kind(call)
            return _EMITTERS[kind](self.builder_, call) if kind else call

    packer = _Packer(mod)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            packer.builder_.update_func(gvar, packer.visit_expr(func))
    return packer.builder_.get()


def _fp32_kind(call):
    """The kernel for ``call``: "conv", "depthwise", "dense", "max_pool" or None."""
    if _is_max_pool(call):
        return "max_pool"
    kind = quantizable_call(call)
    if kind is None or call.args[0].ty.dtype != "float32" or call.ty.dtype != "float32":
        return None
    if kind == "matmul":
        return "dense" if len(call.args[0].ty.shape) == 2 else None
    groups, weight = int(call.attrs.groups), call.args[1].ty.shape
    if groups == 1:
        return "conv"
    depthwise = groups == int(weight[0]) == int(call.args[0].ty.shape[1]) and int(weight[1]) == 1
    return "depthwise" if depthwise else None


def _is_max_pool(call):
    from tvm import relax

    if not isinstance(call, relax.Call) or getattr(call.op, "name", "") != "relax.nn.max_pool2d":
        return False
    a = call.attrs
    plain = a.layout == "NCHW" and a.out_layout == "NCHW" and not a.ceil_mode
    return plain and call.ty.dtype == "float32"


def _conv(bb, call):
    weight = call.args[1].value.numpy()
    block = ic_block(weight.shape[1])
    attrs = call.attrs
    padding = tuple(int(p) for p in attrs.padding)
    data = bb.emit(bb.call_te(pack_nchwc, call.args[0], block, padding))
    strides = tuple(int(s) for s in attrs.strides)
    dilation = tuple(int(d) for d in attrs.dilation)
    return _call_packed(bb, data, pack_weight(weight, block), strides, dilation, weight.shape[0])


def _dense(bb, call):
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


def _depthwise(bb, call):
    attrs = call.attrs
    strides = tuple(int(s) for s in attrs.strides)
    x, width = _padded_columns(bb, call.args[0], attrs.padding, strides, 0.0)
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


def _max_pool(bb, call):
    attrs = call.attrs
    strides = tuple(int(s) for s in attrs.strides)
    lowest = float(np.finfo(np.float32).min)
    x, width = _padded_columns(bb, call.args[0], attrs.padding, strides, lowest)
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


def _padded_columns(bb, x, padding, strides, pad_value):
    """``x`` padded by ``padding`` (top, left, bottom, right) with ``pad_value``, then split
    by columns when the column stride is > 1. Returns (tensor, padded width)."""
    from tvm.relax import op

    top, left, bottom, right = (int(p) for p in padding)
    if top or left or bottom or right:
        pad_width = [0, 0, 0, 0, top, bottom, left, right]
        x = bb.emit(op.nn.pad(x, pad_width, pad_value=pad_value))
    width = int(x.ty.shape[3])
    if strides[1] > 1:
        x = bb.emit(bb.call_te(split_columns, x, strides[1]))
    return x, width


_EMITTERS = {"conv": _conv, "dense": _dense, "depthwise": _depthwise, "max_pool": _max_pool}
