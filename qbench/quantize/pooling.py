"""The integer global average pool: a uint8 (N, C, H, W) tensor to the next layer's uint8.

``rewrite`` has a global average pool that a quantized layer reads (``graph.GlobalPool``)
read its input quantized, ``y_q`` with (s_y, z_y), and dequantized; the layer then
quantizes the pool's (reshaped) output with its own (s_x, z_x). ``requantize.fold`` replaces

    x_q = quantize(reshape?(mean(dequantize(y_q, s_y, z_y), axis=[2, 3])), s_x, z_x)

by the pool in integer: an int32 sum over the H * W values, the zero point's share taken
off, then one float32 multiplier to the output's steps, as ``quantize.requantize`` does for
a conv (TFLite's and XNNPACK's integer mean and average pool sum in int32 the same way and
rescale once; both take the output's own scale):

    x_q = uint8(clip(round(float32(sum(y_q) - H * W * z_y) * m) + z_x, 0, 255)),
    m = float32(s_y / (H * W * s_x))

with ``round`` ties to even, as ``relax.quantize`` rounds. That is the FP32 chain's value up
to float rounding; the sum is exact (at most 255 * H * W, far from the int32 limit for any
image size a model pools).
"""

from dataclasses import dataclass

import numpy as np

from ..model.graph import averages_height_width
from .chains import name, scalar, single_use
from .params import UINT8_MAX


@dataclass(frozen=True)
class IntegerPool:
    """One global average pool in integer (see the module docstring).

    Attributes:
        call: the quantize of the pool's output that it replaces.
        y_q: the uint8 (N, C, H, W) Relax var pooled.
        shape: the reshape of the pool's (N, C, 1, 1) output, a list of ints, or None.
        keepdims: whether the mean keeps the pooled axes (its output (N, C, 1, 1)).
        count: H * W.
        zero_point: z_y, the input's zero point.
        multiplier: m, float32.
        out_zero_point: z_x.
    """

    call: object
    y_q: object
    shape: list
    keepdims: bool
    count: int
    zero_point: int
    multiplier: np.float32
    out_zero_point: int


def find_pool(call, var2val, uses):
    """``call`` (a quantize) as an ``IntegerPool``, or None (``var2val``: the function's
    bindings; ``uses``: ``graph.use_counts`` of the function)."""
    if name(call) != "relax.quantize":
        return None
    out_scale, out_zero_point = (scalar(arg) for arg in call.args[1:])
    value, shape = single_use(call.args[0], var2val, uses), None
    if name(value) == "relax.reshape":
        shape = [int(d) for d in value.ty.shape]
        value = single_use(value.args[0], var2val, uses)
    if name(value) != "relax.mean":
        return None
    deq = single_use(value.args[0], var2val, uses)
    if name(deq) != "relax.dequantize" or deq.args[0].ty.dtype != "uint8":
        return None
    scale, zero_point = (scalar(arg) for arg in deq.args[1:])
    if None in (out_scale, out_zero_point, scale, zero_point) or deq.ty.ndim != 4:
        return None
    if not averages_height_width(value):
        return None
    height, width = (int(deq.ty.shape[i]) for i in (2, 3))
    count = height * width
    return IntegerPool(
        call=call,
        y_q=deq.args[0],
        shape=shape,
        keepdims=bool(value.attrs.keepdims),
        count=count,
        zero_point=int(zero_point),
        multiplier=np.float32(np.float64(scale) / (count * np.float64(out_scale))),
        out_zero_point=int(out_zero_point),
    )


def reference(y_q, pool):
    """numpy reference of the integer pool: uint8 ``y_q`` (N, C, H, W) -> uint8 (N, C, 1, 1),
    as the graph computes it (the float32 product rounded once, then ties to even)."""
    total = y_q.astype(np.int64).sum(axis=(2, 3), keepdims=True) - pool.count * pool.zero_point
    value = (total.astype(np.float32).astype(np.float64) * pool.multiplier).astype(np.float32)
    value = np.round(value) + np.float32(pool.out_zero_point)
    return np.clip(value, 0, UINT8_MAX).astype(np.uint8)


def emit(emit_fn, y_q, pool):
    """Emit the integer pool of uint8 ``y_q`` with ``emit_fn`` (``BlockBuilder.emit``);
    returns the uint8 expression (not yet emitted), reshaped as the pool's output was."""
    from tvm import relax
    from tvm.relax import op

    def const(value, dtype):
        return relax.const(np.asarray(value).astype(dtype), dtype)

    total = emit_fn(op.sum(emit_fn(op.astype(y_q, "int32")), axis=[2, 3], keepdims=True))
    total = emit_fn(op.subtract(total, const(pool.count * pool.zero_point, "int32")))
    value = emit_fn(
        op.multiply(emit_fn(op.astype(total, "float32")), const(pool.multiplier, "float32"))
    )
    value = emit_fn(op.add(emit_fn(op.round(value)), const(float(pool.out_zero_point), "float32")))
    value = op.astype(emit_fn(op.clip(value, 0.0, float(UINT8_MAX))), "uint8")
    if pool.shape is not None:
        return op.reshape(emit_fn(value), pool.shape)
    return value if pool.keepdims else op.squeeze(emit_fn(value), [2, 3])
