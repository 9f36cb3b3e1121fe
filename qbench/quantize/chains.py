"""Finding the FP32 chains that ``requantize.fold`` turns into integer requantizes.

A chain starts at one integer layer's FP32 output, as ``rewrite`` emits it, and ends at a
quantize of the next layers' input:

    quantize(act?(add?(add?(multiply(astype(subtract?(acc, c)), r), b), dequantize(t_q))), s, z)

``acc`` the int32 conv2d, ``act`` a ReLU or a clip with constant bounds, ``b`` a (1, C, 1,
1) constant, ``dequantize(t_q)`` a residual input (``rewrite`` reads a residual add's
inputs from their uint8 tensors where quantized layers read them; either operand order);
every value between ``acc`` and the quantize is read by the chain alone, so nothing else
needs the FP32 values. The helpers here read Relax bindings and constants;
kernel selection (``kernels.patterns``) matches the integer form with them.
"""

from dataclasses import dataclass

import numpy as np

from ..model import graph


@dataclass(frozen=True)
class Chain:
    """One FP32 chain (see the module docstring).

    Attributes:
        call: the chain's quantize call.
        acc: the int32 Relax var of the layer's conv2d.
        correction: (C,) int64 ``c`` (zeros when the graph subtracts none).
        rescale: (C,) float32 ``r``.
        bias: (C,) float32 ``b`` (zeros without a bias add).
        residual: the residual input (uint8 Relax var (N, C, H, W), its scale, its zero
            point), or None.
        activation: (lo, hi) float clamp (ReLU: (0.0, None)), or None.
        scale, zero_point: the quantize's uint8 parameters (float > 0, int 0..255).
    """

    call: object
    acc: object
    correction: np.ndarray
    rescale: np.ndarray
    bias: np.ndarray
    residual: tuple
    activation: tuple
    scale: float
    zero_point: int


def find_chain(call, var2val, uses):
    """``call`` (a quantize) as a ``Chain``, or None (``var2val``: the function's bindings,
    ``relax.analysis.get_var2val``; ``uses``: ``graph.use_counts`` of the function)."""
    if name(call) != "relax.quantize" or int(call.attrs.axis) != 1:
        return None
    scale, zero_point = (scalar(arg) for arg in call.args[1:])
    if scale is None or zero_point is None:
        return None
    value, activation = single_use(call.args[0], var2val, uses), None
    if name(value) in ("relax.clip", "relax.nn.relu"):
        activation = bounds(value)
        value = single_use(value.args[0], var2val, uses) if activation else None
    value, residual = _residual(value, var2val, uses)
    bias = None
    if name(value) == "relax.add":
        bias = channel_constant(value.args[1])
        value = single_use(value.args[0], var2val, uses) if bias is not None else None
    found = _rescaled(value, var2val, uses)
    if found is None:
        return None
    acc, correction, rescale = found
    channels = len(rescale)
    return Chain(
        call=call,
        acc=acc,
        correction=np.broadcast_to(correction, (channels,)).astype(np.int64),
        rescale=rescale,
        bias=np.zeros(channels, np.float32) if bias is None else bias,
        residual=residual,
        activation=activation,
        scale=float(scale),
        zero_point=int(zero_point),
    )


def _residual(value, var2val, uses):
    """(the value under a residual add, (t_q, scale, zero_point)) when ``value`` adds a
    dequantized uint8 tensor (either operand), else (``value``, None)."""
    if name(value) != "relax.add":
        return value, None
    for i in (0, 1):
        deq = single_use(value.args[i], var2val, uses)
        if name(deq) != "relax.dequantize" or int(deq.attrs.axis) != 1:
            continue
        scale, zero_point = (scalar(arg) for arg in deq.args[1:])
        if scale is None or zero_point is None or deq.args[0].ty.dtype != "uint8":
            continue
        rest = single_use(value.args[1 - i], var2val, uses)
        return rest, (deq.args[0], float(scale), int(zero_point))
    return value, None


def _rescaled(value, var2val, uses):
    """(acc var, correction, rescale) of ``multiply(astype(subtract?(acc, c)), r)`` over an
    int32 conv2d, each step read once, else None."""
    if name(value) != "relax.multiply":
        return None
    rescale = channel_constant(value.args[1])
    cast = single_use(value.args[0], var2val, uses)
    if rescale is None or name(cast) != "relax.astype":
        return None
    acc, correction = cast.args[0], np.zeros(1, np.int64)
    inner = single_use(acc, var2val, uses)
    if name(inner) == "relax.subtract":
        correction = channel_constant(inner.args[1], "int32")
        acc = inner.args[0]
        if correction is None or uses.get(acc, 0) != 1:
            return None
    conv = var2val.get(acc)
    if name(conv) != "relax.nn.conv2d" or conv.ty.dtype != "int32":
        return None
    return acc, correction, rescale


def name(expr):
    """The op name of a Relax call (``"relax.add"``), "" for anything else."""
    return getattr(getattr(expr, "op", None), "name", "")


def single_use(var, var2val, uses):
    """The value bound to ``var`` when only one expression reads it, else None."""
    return var2val.get(var) if uses.get(var, 0) == 1 else None


def constant(expr):
    """The numpy value of a Relax constant, else None."""
    import tvm

    return expr.value.numpy() if isinstance(expr, tvm.ir.expr.Constant) else None


def scalar(expr):
    """The value of a scalar constant, else None."""
    value = constant(expr)
    return None if value is None or value.size != 1 else value.reshape(-1)[0].item()


def channel_constant(expr, dtype="float32"):
    """A (1, C, 1, 1) constant of ``dtype`` as (C,), else None."""
    value = constant(expr)
    if value is None or value.dtype != np.dtype(dtype) or value.ndim != 4:
        return None
    if value.shape[0] != 1 or value.shape[2:] != (1, 1):
        return None
    return value.reshape(-1)


def bounds(call):
    """(lo, hi) of a clip with constant bounds, (0.0, None) of a ReLU, else None."""
    from tvm import tirx

    if name(call) == "relax.nn.relu":
        return (0.0, None)
    lo, hi = call.args[1:]
    if not all(isinstance(b, tirx.IntImm | tirx.FloatImm) for b in (lo, hi)):
        return None
    return (float(lo.value), float(hi.value))


def replace_calls(mod, match):
    """``mod`` with calls replaced where ``match(call, var2val, uses)`` (``var2val``: the
    function's bindings; ``uses``: ``graph.use_counts``) gives a builder ``f(emit_fn, visit)`` of
    the replacement expression (``emit_fn``: ``BlockBuilder.emit``; ``visit``: maps an
    expression of the old function into the new one). Values left unread go. Returns a
    new ``tvm.IRModule``."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class _Replacer(PyExprMutator):
        found = {}

        def visit_call_(self, call):
            build = self.found.get(call)
            if build is None:
                return self.visit_expr_post_order(call)
            return build(self.builder_.emit, self.visit_expr)

    replacer = _Replacer(mod)
    for gvar, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        func = relax.analysis.remove_all_unused(func)  # FP32 values the rewrite left unread
        var2val, uses = relax.analysis.get_var2val(func), graph.use_counts(func)
        found = ((call, match(call, var2val, uses)) for call in var2val.values())
        replacer.found = {call: build for call, build in found if build is not None}
        new = relax.analysis.remove_all_unused(replacer.visit_expr(func))
        replacer.builder_.update_func(gvar, new)
    return replacer.builder_.get()
