"""The Relax rewrite: FP32 conv2d/matmul -> uint8 x int8 -> int32, then back to FP32.

For a layer y = conv2d(x, W) with activation parameters (s_x, z_x) and int8 weights
W_q with per-channel scales s_w, the rewrite emits

    x_q = quantize(x, s_x, z_x) : uint8        (explicit zero padding first when z_x != 0,
                                                so padded cells hold z_x, the real 0)
    acc = conv2d(x_q, W_q, out_dtype=int32)    (8-bit operands, int32 accumulation)
    acc = acc - z_x * sum(W_q)                 (zero-point correction, per output channel)
    y   = float32(acc) * (s_x * s_w)           (requantize to real scale)

Everything between integer layers (bias add, activations, pooling, add, concat) stays in
FP32, so no range is shared between branches. With ``kernels="vnni"`` (CPUs with AVX-512
VNNI), dense layers and ungrouped NCHW convs run as the packed ``vpdpbusd`` kernel of
``qbench.kernels`` instead: x_q is packed to NCHW4c, W_q is prepacked to OIHW16o4i as a
constant, and the kernel applies the same correction and rescale to each int32 tile as it
writes the FP32 NCHW result. ``kernels="avx2"`` packs the same values widened to int16 in
pairs (NCHW2c, OIHW16o2i) for ``vpmaddwd``, whose int32 pair sums are exact. Depthwise
convs run as ``kernels.depthwise`` with either (NCHW, the same
correction and rescale in the kernel).
``simulate`` emits the fake-quantized FP32 graph instead: conv2d(dequantize(x_q), s_w * W_q).
"""

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..graph import quantizable_call
from ..kernels.conv2d import OUT_ELEMWISE_FUSABLE
from ..kernels.layout import PACKINGS
from .params import ActivationParams, QuantizedWeight

INT8_PATHS = "qbench_int8_paths"  # module attr: INT8 layers by op and kernel path


@dataclass
class LayerPlan:
    """What the rewrite does to one layer: ``act``/``weight`` are None when it stays FP32."""

    act: ActivationParams = None
    weight: QuantizedWeight = None
    reason: str = ""

    @property
    def quantized(self):
        return self.act is not None


def rewrite(mod, plans, simulate=False, kernels=None):
    """Apply ``plans`` (one per quantizable layer, in graph order) to ``mod["main"]``.

    ``kernels``: None (the plain integer graph), or ``"vnni"`` / ``"avx2"``
    (``lowering.int8_kernels``): emit qbench's packed kernels where the layer allows (see the
    module docstring).

    Returns:
        A new ``tvm.IRModule``; ``mod`` is unchanged. Its ``INT8_PATHS`` attribute counts
        the INT8 layers by op and ``kernel_path`` (e.g. ``{"conv2d avx2": 20}``).
    Raises:
        ValueError: the number of plans differs from the number of quantizable layers.
    """
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class _Rewriter(PyExprMutator):
        def __init__(self, module):
            super().__init__(module)
            self.index = 0
            self.paths = Counter()

        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            kind = quantizable_call(call)
            if kind is None:
                return call
            plan = plans[self.index]
            self.index += 1
            if not plan.quantized:
                return call
            if simulate:
                self.paths[f"{kind} simulated"] += 1
                return _simulated(self.builder_.emit, call, kind, plan)
            self.paths[f"{kind} {kernel_path(call, kind, kernels)}"] += 1
            return _integer(self.builder_, call, kind, plan, kernels)

    rewriter = _Rewriter(mod)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
    if rewriter.index != len(plans):
        raise ValueError(f"rewrite: {len(plans)} plans for {rewriter.index} quantizable layers")
    return rewriter.builder_.get().with_attr(INT8_PATHS, dict(sorted(rewriter.paths.items())))


def kernel_path(call, kind, kernels):
    """The kernel an INT8 ``conv2d``/``matmul`` layer runs on: ``"depthwise"`` (qbench's
    depthwise kernel), the packed kernel's name (``kernels``: ``"vnni"``, ``"avx2"``), or
    ``"default"`` (TVM's integer op on qbench's default schedule)."""
    if kernels and _depthwise(call, kind):
        return "depthwise"
    if kernels and _packable(call, kind):
        return kernels
    return "default"


def _const(array, dtype):
    from tvm import relax

    return relax.const(np.asarray(array).astype(dtype), dtype)


def _quantize(emit, x, act, axis):
    from tvm.relax import op

    return emit(
        op.quantize(
            x,
            _const(act.scale, "float32"),
            _const(act.zero_point, "uint8"),
            axis=axis,
            out_dtype="uint8",
        )
    )


def _channel_shape(kind, n):
    return (1, n, 1, 1) if kind == "conv2d" else (n,)


def _integer(bb, call, kind, plan, kernels):
    from tvm.relax import op

    act, weight = plan.act, plan.weight
    n_out = weight.q.shape[0 if kind == "conv2d" else -1]
    sums = weight.q.astype(np.int64).sum(axis=(1, 2, 3) if kind == "conv2d" else 0)
    correction = act.zero_point * sums
    rescale = np.broadcast_to(act.scale * weight.scale.astype(np.float64), (n_out,))
    constants = _const(correction, "int32"), _const(rescale, "float32")
    path = kernel_path(call, kind, kernels)
    if path == "depthwise":
        return _depthwise_conv(bb, call, plan, *constants)
    if path in PACKINGS:
        emit = _packed_dense if kind == "matmul" else _packed_conv
        return emit(bb, call, plan, *constants, PACKINGS[path])
    acc = (_plain_conv if kind == "conv2d" else _plain_dense)(bb.emit, call, plan)
    shape = _channel_shape(kind, n_out)
    if act.zero_point:
        acc = bb.emit(op.subtract(acc, _const(correction.reshape(shape), "int32")))
    return op.multiply(
        bb.emit(op.astype(acc, "float32")), _const(rescale.reshape(shape), "float32")
    )


def _packable(call, kind):
    """Ungrouped NCHW/OIHW conv2d, or a matmul of a 2-D input."""
    if kind == "conv2d":
        a = call.attrs
        return int(a.groups) == 1 and a.data_layout == "NCHW" and a.kernel_layout == "OIHW"
    return len(call.args[0].ty.shape) == 2


def _depthwise(call, kind):
    """An NCHW/OIHW conv2d with one filter per input channel."""
    if kind != "conv2d":
        return False
    a = call.attrs
    weight_shape = call.args[1].ty.shape
    return (
        a.data_layout == "NCHW"
        and a.kernel_layout == "OIHW"
        and int(a.groups) == int(weight_shape[0]) == int(call.args[0].ty.shape[1])
        and int(weight_shape[1]) == 1
    )


def _pad_input(emit, x, padding, always):
    """Explicit padding with real 0.0, which quantizes to the zero point."""
    from tvm.relax import op

    if not (always and any(padding)):
        return x, padding
    top, left, bottom, right = padding
    return emit(op.nn.pad(x, [0, 0, 0, 0, top, bottom, left, right], pad_value=0.0)), [0] * 4


def _plain_conv(emit, call, plan):
    from tvm.relax import op

    attrs = call.attrs
    padding = [int(p) for p in attrs.padding]
    x, padding = _pad_input(emit, call.args[0], padding, plan.act.zero_point != 0)
    return emit(
        op.nn.conv2d(
            _quantize(emit, x, plan.act, 1),
            _const(plan.weight.q, "int8"),
            attrs.strides,
            padding,
            attrs.dilation,
            int(attrs.groups),
            attrs.data_layout,
            attrs.kernel_layout,
            attrs.out_layout,
            out_dtype="int32",
        )
    )


def _plain_dense(emit, call, plan):
    from tvm.relax import op

    x_q = _quantize(emit, call.args[0], plan.act, -1)
    return emit(op.matmul(x_q, _const(plan.weight.q, "int8"), out_dtype="int32"))


def _packed_conv(bb, call, plan, correction, rescale, packing):
    from ..kernels import layout

    attrs = call.attrs
    padding = [int(p) for p in attrs.padding]
    x, _ = _pad_input(bb.emit, call.args[0], padding, True)
    x_q = _quantize(bb.emit, x, plan.act, 1)
    zp, block, dtype = int(plan.act.zero_point), packing.block, packing.data_dtype
    packed = bb.emit(bb.call_te(layout.pack_nchw4c, x_q, zp, block, dtype))
    weight = layout.pack_conv_weight(plan.weight.q, block, packing.weight_dtype)
    strides = tuple(int(s) for s in attrs.strides)
    dilation = tuple(int(d) for d in attrs.dilation)
    args = [packed, _const(weight, weight.dtype.name), correction, rescale]
    return _call_packed(bb, args, strides, dilation, False, packing)


def _packed_dense(bb, call, plan, correction, rescale, packing):
    from ..kernels import layout

    x_q = _quantize(bb.emit, call.args[0], plan.act, -1)
    zp, block, dtype = int(plan.act.zero_point), packing.block, packing.data_dtype
    packed = bb.emit(bb.call_te(layout.pack_rows, x_q, zp, block, dtype))
    weight = layout.pack_dense_weight(plan.weight.q, block, packing.weight_dtype)
    args = [packed, _const(weight, weight.dtype.name), correction, rescale]
    return _call_packed(bb, args, (1, 1), (1, 1), True, packing)


def _depthwise_conv(bb, call, plan, correction, rescale):
    from tvm.relax import op

    from ..kernels.depthwise import depthwise_conv, split_columns

    attrs = call.attrs
    padding = [int(p) for p in attrs.padding]
    x_q = _quantize(bb.emit, call.args[0], plan.act, 1)
    if any(padding):  # the zero point is the quantized real 0
        top, left, bottom, right = padding
        pad_width = [0, 0, 0, 0, top, bottom, left, right]
        x_q = bb.emit(op.nn.pad(x_q, pad_width, pad_value=float(plan.act.zero_point)))
    strides = tuple(int(s) for s in attrs.strides)
    width = int(x_q.ty.shape[3])
    if strides[1] > 1:
        x_q = bb.emit(bb.call_te(split_columns, x_q, strides[1]))
    return bb.call_te(
        depthwise_conv,
        x_q,
        _const(plan.weight.q, "int8"),
        correction,
        rescale,
        strides,
        tuple(int(d) for d in attrs.dilation),
        width,
        primfunc_name_hint="depthwise_conv2d",
        primfunc_attrs={"op_pattern": OUT_ELEMWISE_FUSABLE},
    )


def _call_packed(bb, args, strides, dilation, rows, packing):
    """The packed conv and its requantize as one kernel. ``op_pattern`` out-elementwise-
    fusable lets FuseOps append the elementwise ops that follow (bias, activation, residual
    add); ``kernels.schedules.HandKernels`` schedules the result as one tiled kernel."""
    from ..kernels.conv2d import requantized_conv

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


def _simulated(emit, call, kind, plan):
    from tvm import relax
    from tvm.relax import op

    act, weight = plan.act, plan.weight
    x_q = _quantize(emit, call.args[0], act, 1 if kind == "conv2d" else -1)
    x_dq = emit(
        op.dequantize(
            x_q,
            _const(act.scale, "float32"),
            _const(act.zero_point, "uint8"),
            axis=1 if kind == "conv2d" else -1,
        )
    )
    axis = 0 if kind == "conv2d" else -1
    n = weight.q.shape[axis]
    scale = np.broadcast_to(weight.scale, (n,))
    shape = [1] * weight.q.ndim
    shape[axis] = n
    w_dq = weight.q.astype(np.float32) * scale.reshape(shape)
    return relax.Call(call.op, [x_dq, _const(w_dq, "float32")], call.attrs)
