"""The integer requantize: one INT8 layer's int32 accumulator to the next layers' uint8.

``rewrite`` ends each integer layer in FP32, ``float32(acc - c) * r`` (``c``: the zero-point
correction, ``r``: input scale times weight scale, per output channel). Where that value
reaches the next layers' quantize only through the layer's bias add and a ReLU or ReLU6
(each value read by that chain alone), ``fold`` replaces the chain

    y = float32(acc - c) * r + b;  y = clip(y, lo, hi);  q = quantize(y, s, z)

by one requantize from the accumulator, as FBGEMM's ``ReQuantizeOutput`` and XNNPACK's x86
qs8 kernels compute it (an FP32 multiplier, rounding half to even):

    q = uint8(clip(round(float32(acc - c) * m + d) + z, q_lo, q_hi))

- ``m = float32(r / s)``: one multiplier per output channel, a multiply instead of the
  quantize's divide (the divide was 13 % of a depthwise kernel's time: Intel Xeon, AVX-512);
- ``d = float32(b / s)``: the bias in output steps, added by the same FMA (LLVM contracts the
  multiply and add). FBGEMM rounds the bias to int32 accumulator steps instead; that moved
  values across rounding boundaries often enough (half a step of r is up to 1 % of s on a
  first conv) that fake quantization (``diagnose``) would have had to model it;
- ``q_lo = max(0, z + round(lo / s))``, ``q_hi = min(255, z + round(hi / s))``: the
  activation as clamp bounds of the quantized value (exact: rounding is monotone);
- ``round`` is TIR's, ties to even, as ``relax.quantize`` rounds.

A residual add in the chain, ``+ dequantize(t_q)`` (``chains``), adds
``float32(t_q - z_t) * k`` with ``k = float32(s_t / s)`` before the rounding: a second FMA,
the integer add of TFLite and XNNPACK with both inputs brought to the output's scale.

So the result is the FP32 chain's up to float rounding. The FP32 multiplier is FBGEMM's
and XNNPACK's x86 choice (one multiply per value, no 64-bit products; its error, a 24-bit
mantissa, is far below one output step); TFLite's fixed-point multiply and shift has not
been built here, so the two are not measured against each other.
"""

from dataclasses import dataclass

import numpy as np

from .params import UINT8_MAX


@dataclass(frozen=True)
class Requantize:
    """The integer requantize of one layer, per output channel C.

    Attributes:
        correction: (C,) int64, subtracted from the int32 accumulator (``c``).
        multiplier: (C,) float32, ``m``.
        bias: (C,) float32, ``d``: the bias in output steps.
        zero_point: the output's zero point, int 0..255.
        bounds: (q_lo, q_hi), ints in [0, 255]: the clamp of the quantized value.
        residual: (k, z_t) of a residual input (its float32 multiplier to output steps,
            its zero point), or None.
    """

    correction: np.ndarray
    multiplier: np.ndarray
    bias: np.ndarray
    zero_point: int
    bounds: tuple
    residual: tuple = None


def integer_requantize(correction, rescale, bias, activation, scale, zero_point, residual=None):
    """The ``Requantize`` of a layer's FP32 chain.

    Args:
        correction: (C,) int zero-point correction ``c``.
        rescale: (C,) float ``r``, > 0.
        bias: (C,) float ``b`` added after the rescale (zeros without one).
        activation: (lo, hi) float clamp (``hi`` None: ReLU), or None.
        scale, zero_point: the output's uint8 parameters (float > 0, int 0..255).
        residual: (scale, zero_point) of a residual input added before the activation,
            or None.
    """
    q_lo, q_hi = 0, UINT8_MAX
    if activation is not None:
        lo, hi = activation
        q_lo = _uint8_bound(lo, scale, zero_point)
        if hi is not None:
            q_hi = _uint8_bound(hi, scale, zero_point)
    return Requantize(
        correction=np.asarray(correction, np.int64),
        multiplier=(np.asarray(rescale, np.float64) / scale).astype(np.float32),
        bias=(np.asarray(bias, np.float64) / scale).astype(np.float32),
        zero_point=int(zero_point),
        bounds=(q_lo, max(q_lo, q_hi)),
        residual=None if residual is None else (np.float32(residual[0] / scale), residual[1]),
    )


def _uint8_bound(value, scale, zero_point):
    """A clamp bound ``value`` (float, may be -inf or inf: ``clamp(min=0)`` has no upper
    bound) as a uint8 level, clipped to 0..255."""
    return int(np.clip(zero_point + np.round(value / scale), 0, UINT8_MAX))


def reference(acc, requantize, residual=None):
    """numpy reference of the integer requantize: int32 ``acc`` (N, C, ...) -> uint8, as the
    kernels compute it: ``float32(acc - c) * m + d`` with one rounding (an FMA: the float32
    product is exact in float64), then with uint8 ``residual`` (``acc``'s shape) ``+
    float32(residual - z_t) * k`` (a second FMA), round half to even, zero point, clamp."""
    shape = (1, -1) + (1,) * (acc.ndim - 2)
    value = (acc.astype(np.int64) - requantize.correction.reshape(shape)).astype(np.float32)
    value = _fma(value, requantize.multiplier.reshape(shape), requantize.bias.reshape(shape))
    if residual is not None:
        k, z_t = requantize.residual
        value = _fma((residual.astype(np.int32) - z_t).astype(np.float32), k, value)
    value = np.round(value) + np.float32(requantize.zero_point)
    return np.clip(value, *requantize.bounds).astype(np.uint8)


def _fma(a, b, c):
    """float32 a * b + c with one rounding (the float32 product is exact in float64)."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + c).astype(np.float32)


def emit(emit_fn, acc, requantize, residual=None):
    """Emit the integer requantize of int32 ``acc`` (N, C, H, W) with ``emit_fn``
    (``BlockBuilder.emit``), adding the uint8 ``residual`` expression (``acc``'s shape)
    when ``requantize.residual`` is set; returns the uint8 expression (not yet emitted)."""
    from tvm import relax
    from tvm.relax import op

    shape = (1, -1, 1, 1)

    def const(values, dtype):
        return relax.const(np.asarray(values).astype(dtype), dtype)

    value = emit_fn(op.subtract(acc, const(requantize.correction.reshape(shape), "int32")))
    value = emit_fn(op.astype(value, "float32"))
    value = emit_fn(op.multiply(value, const(requantize.multiplier.reshape(shape), "float32")))
    value = emit_fn(op.add(value, const(requantize.bias.reshape(shape), "float32")))
    if requantize.residual is not None:
        k, z_t = requantize.residual
        term = emit_fn(op.subtract(emit_fn(op.astype(residual, "int32")), const(z_t, "int32")))
        term = emit_fn(op.multiply(emit_fn(op.astype(term, "float32")), const(k, "float32")))
        value = emit_fn(op.add(value, term))
    value = emit_fn(op.round(value))
    value = emit_fn(op.add(value, const(float(requantize.zero_point), "float32")))
    q_lo, q_hi = requantize.bounds
    value = emit_fn(op.clip(value, float(q_lo), float(q_hi)))
    return op.astype(value, "uint8")


def fold(mod):
    """``mod`` with every FP32 chain (``chains.find_chain``) replaced by its integer
    requantize and every quantized global average pool (``pooling.find_pool``) by its
    integer pool. Returns a new ``tvm.IRModule``."""
    from . import pooling
    from .chains import find_chain, replace_calls

    def match(call, var2val, uses):
        chain = find_chain(call, var2val, uses)
        if chain is not None:
            requantize = _of_chain(chain)

            def integer(emit_fn, visit):
                residual = visit(chain.residual[0]) if chain.residual else None
                return emit(emit_fn, visit(chain.acc), requantize, residual)

            return integer
        pool = pooling.find_pool(call, var2val, uses)
        if pool is not None:
            return lambda emit_fn, visit: pooling.emit(emit_fn, visit(pool.y_q), pool)
        return None

    return replace_calls(mod, match)


def _of_chain(chain):
    return integer_requantize(
        chain.correction,
        chain.rescale,
        chain.bias,
        chain.activation,
        chain.scale,
        chain.zero_point,
        chain.residual[1:] if chain.residual else None,
    )
