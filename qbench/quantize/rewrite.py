"""The Relax rewrite: FP32 conv2d/matmul -> uint8 x int8 -> int32, requantized to uint8 or FP32.

For a layer y = conv2d(x, W) with activation parameters (s_x, z_x) and int8 weights
W_q with per-channel scales s_w, the rewrite emits

    x_q = quantize(x, s_x, z_x) : uint8        (then a conv's padding, explicit, with z_x:
                                                the real 0)
    acc = conv2d(x_q, W_q, out_dtype=int32)    (8-bit operands, int32 accumulation)
    acc = acc - z_x * sum(W_q)                 (zero-point correction, per output channel)
    y   = float32(acc) * (s_x * s_w)           (requantize to real scale)

One uint8 tensor stands for each FP32 tensor that quantized layers read: layers reading the
same tensor with the same parameters share one quantize (resnet's block input feeds the
block's first conv and its downsample conv). A residual add of such a tensor reads its uint8
tensor, dequantized; a residual add of two convs' outputs (resnet's downsample branch,
``graph.ResidualOutput``) reads its second input quantized with that tensor's own calibrated
parameters (``LayerPlan.output``), dequantized. A zero padding, a max pooling or a channel
concat before a quantize runs on the uint8 tensor instead (each commutes with the quantize
exactly). Then ``requantize.fold`` turns every layer whose output reaches the next layers'
quantize only through its bias, a residual add and a ReLU/ReLU6 into an integer requantize
from the int32 accumulator to that uint8 (one float32 multiplier and bias per channel, the
activation as clamp bounds), so uint8 flows from such a layer to the next. A global average
pool that a quantized layer reads (``graph.GlobalPool``: the classifier's input) reads its
input quantized with that tensor's own calibrated parameters (``LayerPlan.pool``),
dequantized, and ``requantize.fold`` turns it into an integer pool (``pooling``). Other ops
(average pools of windows, a concat read in FP32) stay FP32, quantized again at the next
layer. The graph is target-neutral: which kernel computes each integer layer is chosen when
it is lowered (``kernels.select``).
``simulate`` emits the fake-quantized FP32 graph instead: conv2d(dequantize(x_q), s_w * W_q).
"""

from dataclasses import dataclass

import numpy as np

from ..model.graph import (
    bound_value,
    channel_concat,
    global_pools,
    quantizable_call,
    residual_outputs,
    same_shape_add,
)
from . import requantize
from .chains import name
from .params import ActivationParams, QuantizedWeight


@dataclass
class LayerPlan:
    """What the rewrite does to one layer: ``act``/``weight`` are None when it stays FP32;
    ``output``, where the layer's output is a residual output (``graph.ResidualOutput``),
    the uint8 parameters it is quantized to before the add, else None; ``pool``, where the
    layer reads a global average pool (``graph.GlobalPool``), the uint8 parameters of that
    pool's input, else None."""

    act: ActivationParams = None
    weight: QuantizedWeight = None
    reason: str = ""
    bias_shift: np.ndarray = None  # float (C_out,) added to the output (``quantize.bias``)
    output: ActivationParams = None  # of its residual output (``graph.ResidualOutput``)
    pool: ActivationParams = None  # of its global pool's input (``graph.GlobalPool``)

    @property
    def quantized(self):
        return self.act is not None


def rewrite(mod, plans, simulate=False):
    """Apply ``plans`` (one per quantizable layer, in graph order) to ``mod["main"]``.

    Returns:
        A new ``tvm.IRModule``; ``mod`` is unchanged.
    Raises:
        ValueError: the number of plans differs from the number of quantizable layers.
    """
    out = _Rewriter(mod, plans, simulate).rewritten()
    return out if simulate else requantize.fold(out)


class _Rewriter:
    """The rewrite of one module's calls, in graph order.

    Attributes:
        mod: the ``tvm.IRModule`` rewritten (left unchanged).
        plans: the ``LayerPlan``s, one per quantizable layer.
        simulate: emit fake-quantized FP32 layers instead of integer ones.
        residual_layer: {residual add call of ``mod``: index of the layer whose output is
            its second input} (``graph.ResidualOutput``).
        pool_reader: {global pool's mean call of ``mod``: index of the layer that reads it}
            (``graph.GlobalPool``).
        index: the index of the next quantizable layer's plan.
        mutator: the ``PyExprMutator`` walking the module, whose calls come here.
        uint8: the ``_Uint8Tensors`` emitted so far.
    """

    def __init__(self, mod, plans, simulate):
        self.mod, self.plans, self.simulate = mod, plans, simulate
        self.residual_layer = {r.add: r.layer for r in residual_outputs(mod)}
        self.pool_reader = {p.mean: p.layer for p in global_pools(mod) if p.layer is not None}
        self.index = 0
        self.mutator = _call_mutator(mod, self.call)
        self.uint8 = _Uint8Tensors(self.mutator.builder_)

    def rewritten(self):
        """A new ``tvm.IRModule``: ``mod`` with its Relax functions rewritten."""
        from tvm import relax

        builder = self.mutator.builder_
        for gvar, func in self.mod.functions_items():
            if isinstance(func, relax.Function):
                builder.update_func(gvar, self.mutator.visit_expr(func))
        if self.index != len(self.plans):
            n = len(self.plans)
            raise ValueError(f"rewrite: {n} plans for {self.index} quantizable layers")
        return builder.get()

    def call(self, original, call):
        """The rewrite of ``call``, a call of ``mod`` (``original``) with its arguments
        rewritten already."""
        if same_shape_add(call):
            return self.residual(call, self.residual_layer.get(original))
        reader = self.pool_reader.get(original)
        if reader is not None:
            return self.pool(call, self.plans[reader])
        kind = quantizable_call(call)
        return call if kind is None else self.layer(call, kind)

    def layer(self, call, kind):
        """The quantizable layer ``call`` (``kind``: ``"conv2d"`` or ``"matmul"``) as the
        next plan says: FP32 as it is, integer, or fake-quantized with ``simulate``."""
        plan = self.plans[self.index]
        self.index += 1
        if not plan.quantized:
            return call
        emit_layer = _simulated if self.simulate else _integer
        return emit_layer(self.uint8.emit, call, kind, plan, self.uint8.quantize)

    def pool(self, call, plan):
        """A global average pool (``call``, a mean) that the layer of ``plan`` reads: when that
        layer is quantized with the pool's input parameters (``plan.pool``), the mean reads
        its input quantized with them, dequantized (``requantize.fold`` makes it an integer
        pool); else ``call`` as it is."""
        from tvm import relax

        if not plan.quantized or plan.pool is None:
            return call
        pooled = self.uint8.cached(call.args[0], plan.pool, 1)
        pooled = self.uint8.emit(_dequantize(pooled, plan.pool, 1))
        return relax.Call(call.op, [pooled], call.attrs)

    def residual(self, call, layer):
        """A residual add whose inputs quantized layers read already: it reads their
        uint8 tensors, dequantized, so no FP32 copy of them need be kept. Its second
        input, when it is the residual output of ``layer`` (an index, or None) and that
        layer's plan gives the output's parameters, is quantized with them and read
        dequantized (both convs then requantize in integer)."""
        from tvm.relax import op

        twins = [self.uint8.twins.get(arg) for arg in call.args]
        output = None if layer is None else self.plans[layer].output
        if twins[1] is None and output is not None:
            twins[1] = (self.uint8.cached(call.args[1], output, 1), output)
        if not any(twins):
            return call
        args = [
            arg if twin is None else self.uint8.emit(_dequantize(twin[0], twin[1], 1))
            for arg, twin in zip(call.args, twins, strict=True)
        ]
        return op.add(*args)


def _call_mutator(mod, rewrite_call):
    """A ``PyExprMutator`` over ``mod`` that rewrites each call's arguments, then returns
    ``rewrite_call(call, call with its arguments rewritten)`` in its place."""
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class _CallMutator(PyExprMutator):
        def visit_call_(self, call):
            return rewrite_call(call, self.visit_expr_post_order(call))

    return _CallMutator(mod)


class _Uint8Tensors:
    """The uint8 tensors a rewrite emits, each once, with ``builder`` (the mutator's
    ``relax.BlockBuilder``).

    Attributes:
        quantized: {(FP32 Relax expr, scale, zero point, axis): its uint8 var}.
        twins: {FP32 var a layer reads: (its uint8 var, ``ActivationParams``)}, the uint8
            tensor a residual add may read in its place.
    """

    def __init__(self, builder):
        self.builder = builder
        self.quantized = {}
        self.twins = {}

    def emit(self, expr):
        """Bind ``expr`` in the function being built; returns its var."""
        return self.builder.emit(expr)

    def quantize(self, x, act, axis):
        """The one uint8 var of FP32 ``x``, the tensor a layer reads, with ``act``'s
        parameters (a residual add may read it in place of ``x``). ``axis``: the channel
        axis, 1 for a conv's (N, C, H, W) input, -1 for a matmul's."""
        x_q = self.cached(x, act, axis)
        if axis == 1:
            self.twins.setdefault(x, (x_q, act))
        return x_q

    def cached(self, x, act, axis):
        """``x`` quantized with ``act``'s parameters, emitted once. Only the tensor a
        layer reads gets a twin: a max pool's input quantized with its output's
        parameters clips the input's negative values (a tester's find)."""
        key = (x, act.scale, act.zero_point, axis)
        if key not in self.quantized:
            self.quantized[key] = self._emit_quantized(x, act, axis)
        return self.quantized[key]

    def _emit_quantized(self, x, act, axis):
        """Emit ``x`` quantized. Three ops commute with the quantize, exactly, and are
        run on the uint8 tensor, so the layers before them can requantize to uint8 in
        integer: a zero padding (efficientnet's "same" convs pad in forward; 0 is the
        zero point on the grid), a max pooling (resnet's stem; rounding and clamping
        are monotone, and a window never holds padding only) and a concat along the
        channels (each part quantized with the concat's parameters)."""
        from tvm import relax

        value = bound_value(x, self.builder.lookup_binding) if axis == 1 else None
        if _zero_padding(value) is not None:
            inner = self.cached(value.args[0], act, axis)
            width = [int(w) for w in value.attrs.pad_width]
            return self.emit(_pad(inner, width, act.zero_point))
        if _max_pool(value):
            inner = self.cached(value.args[0], act, axis)
            return self.emit(relax.Call(value.op, [inner], value.attrs))
        parts = self._channel_concat(value)
        if parts:
            parts = [self.cached(part, act, axis) for part in parts]
            return self.emit(relax.op.concat(parts, axis=1))
        return _quantize(self.emit, x, act, axis)

    def _channel_concat(self, value):
        """The tensors ``value`` concatenates along the channels of float32 (N, C, H, W),
        else None."""
        if getattr(getattr(value, "ty", None), "dtype", None) != "float32":
            return None
        return channel_concat(value, self.builder.lookup_binding)


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


def _dequantize(x_q, act, axis):
    from tvm.relax import op

    scale, zero_point = _const(act.scale, "float32"), _const(act.zero_point, "uint8")
    return op.dequantize(x_q, scale, zero_point, axis=axis)


def _zero_padding(value):
    """``value`` when it pads an (N, C, H, W) float32 tensor spatially with the constant 0,
    else None."""
    from tvm import relax

    if not isinstance(value, relax.Call) or name(value) != "relax.nn.pad":
        return None
    width = [int(w) for w in value.attrs.pad_width]
    plain = value.attrs.pad_mode == "constant" and float(value.attrs.pad_value) == 0.0
    if not plain or len(width) != 8 or any(width[:4]) or value.ty.dtype != "float32":
        return None
    return value


def _max_pool(value):
    """Whether ``value`` max-pools an (N, C, H, W) float32 tensor."""
    from tvm import relax

    if not isinstance(value, relax.Call) or name(value) != "relax.nn.max_pool2d":
        return False
    attrs = value.attrs
    return attrs.layout == "NCHW" and attrs.out_layout == "NCHW" and value.ty.dtype == "float32"


def _pad(x_q, width, zero_point):
    from tvm.relax import op

    return op.nn.pad(x_q, width, pad_value=float(zero_point))


def _channel_shape(kind, n):
    return (1, n, 1, 1) if kind == "conv2d" else (n,)


def _integer(emit, call, kind, plan, quantize):
    from tvm.relax import op

    act, weight = plan.act, plan.weight
    n_out = weight.q.shape[0 if kind == "conv2d" else -1]
    sums = weight.q.astype(np.int64).sum(axis=(1, 2, 3) if kind == "conv2d" else 0)
    rescale = np.broadcast_to(act.scale * weight.scale.astype(np.float64), (n_out,))
    correction = act.zero_point * sums
    if plan.bias_shift is not None:  # + shift = - round(shift / rescale) in int32 steps
        correction = correction - np.round(plan.bias_shift / rescale).astype(np.int64)
    acc = (_plain_conv if kind == "conv2d" else _plain_dense)(emit, call, plan, quantize)
    shape = _channel_shape(kind, n_out)
    if correction.any():
        acc = emit(op.subtract(acc, _const(correction.reshape(shape), "int32")))
    return op.multiply(emit(op.astype(acc, "float32")), _const(rescale.reshape(shape), "float32"))


def _plain_conv(emit, call, plan, quantize):
    from tvm.relax import op

    attrs = call.attrs
    x_q = quantize(call.args[0], plan.act, 1)
    top, left, bottom, right = (int(p) for p in attrs.padding)
    if top or left or bottom or right:  # padded cells hold the zero point, the real 0
        pad_width = [0, 0, 0, 0, top, bottom, left, right]
        x_q = emit(op.nn.pad(x_q, pad_width, pad_value=float(plan.act.zero_point)))
    return emit(
        op.nn.conv2d(
            x_q,
            _const(plan.weight.q, "int8"),
            attrs.strides,
            [0, 0, 0, 0],
            attrs.dilation,
            int(attrs.groups),
            attrs.data_layout,
            attrs.kernel_layout,
            attrs.out_layout,
            out_dtype="int32",
        )
    )


def _plain_dense(emit, call, plan, quantize):
    from tvm.relax import op

    x_q = quantize(call.args[0], plan.act, -1)
    return emit(op.matmul(x_q, _const(plan.weight.q, "int8"), out_dtype="int32"))


def _simulated(emit, call, kind, plan, quantize):
    from tvm import relax
    from tvm.relax import op

    act, weight = plan.act, plan.weight
    in_axis = 1 if kind == "conv2d" else -1
    x_dq = emit(_dequantize(quantize(call.args[0], act, in_axis), act, in_axis))
    axis = 0 if kind == "conv2d" else -1
    n = weight.q.shape[axis]
    scale = np.broadcast_to(weight.scale, (n,))
    shape = [1] * weight.q.ndim
    shape[axis] = n
    w_dq = weight.q.astype(np.float32) * scale.reshape(shape)
    out = relax.Call(call.op, [x_dq, _const(w_dq, "float32")], call.attrs)
    if plan.bias_shift is None:
        return out
    shift = plan.bias_shift.reshape(_channel_shape(kind, n))
    return op.add(emit(out), _const(shift, "float32"))
