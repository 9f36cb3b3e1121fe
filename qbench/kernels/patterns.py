"""The op patterns kernel selection matches in a Relax graph, FP32 and integer.

An FP32 layer is one call: conv2d or matmul of a float32 input and a constant weight, or
max_pool2d. An integer layer is the chain ``quantize.rewrite`` emits for one conv2d/matmul,
matched with ``relax.dpl`` through the graph's variable bindings:

    multiply(astype(subtract?(op(pad?(quantize(x, scale, zero_point)), W_q), correction)),
             rescale)

with ``op`` a conv2d or matmul of uint8 x int8 -> int32, every operand but ``x`` constant,
and ``pad`` (conv only) the conv's padding with the zero point.
"""

import functools
from dataclasses import dataclass

import numpy as np

from ..graph import quantizable_call

# op patterns: what a kernel computes, independent of precision
CONV2D, DEPTHWISE, MATMUL, MAX_POOL = "conv2d", "depthwise", "matmul", "max_pool2d"


@dataclass(frozen=True)
class FloatLayer:
    """A float32 ``call`` of ``kind`` conv2d, matmul or max_pool2d whose pattern is ``op``."""

    call: object
    kind: str
    op: str
    precision: str = "float32"


@dataclass(frozen=True)
class IntegerLayer:
    """One integer layer of the plain INT8 graph.

    Attributes:
        call: the chain's last call (the rescale multiply), which a kernel replaces.
        kind: the integer op, ``CONV2D`` or ``MATMUL``.
        op: ``CONV2D``, ``DEPTHWISE`` or ``MATMUL``; None for a shape no kernel takes
            (grouped conv, matmul of a 3-D input), which keeps TVM's integer op.
        x_q: the uint8 Relax var the layer reads, the graph's quantize of its float32 input
            (shared by every layer reading that tensor with the same parameters): (N, C, H,
            W) for a conv, (M, K) for a matmul, unpadded.
        attrs: the integer conv2d's attributes (None for a matmul).
        padding: the conv's padding of the quantized input, (top, left, bottom, right).
        scale: activation scale, float > 0. zero_point: activation zero point, int 0..255.
        weight: int8 numpy weights, (O, C/groups, KH, KW) or (K, N).
        correction: (O,) int64, zero_point * sum(weight) per output channel (0 when the graph
            subtracts none).
        rescale: (O,) float32, scale * weight scale per output channel.
    """

    call: object
    kind: str
    op: str
    x_q: object
    attrs: object
    padding: tuple
    scale: float
    zero_point: int
    weight: np.ndarray
    correction: np.ndarray
    rescale: np.ndarray
    precision: str = "int8"


def float_layer(call):
    """``call`` as a ``FloatLayer`` (conv2d: NCHW ungrouped or depthwise; matmul of a 2-D
    input; max_pool2d: NCHW, floor mode), or None."""
    if _is_max_pool(call):
        return FloatLayer(call, MAX_POOL, MAX_POOL)
    kind = quantizable_call(call)
    if kind is None or call.args[0].ty.dtype != "float32" or call.ty.dtype != "float32":
        return None
    op = _op(call, kind)
    return FloatLayer(call, kind, op) if op else None


def _op(call, kind):
    """The kernel pattern of a conv2d/matmul ``call`` of kind ``kind``, or None."""
    if kind == MATMUL:
        return MATMUL if len(call.args[0].ty.shape) == 2 else None
    groups, weight = int(call.attrs.groups), call.args[1].ty.shape
    if groups == 1:
        return CONV2D
    channels = int(call.args[0].ty.shape[1])
    return DEPTHWISE if groups == int(weight[0]) == channels and int(weight[1]) == 1 else None


def _is_max_pool(call):
    from tvm import relax

    if not isinstance(call, relax.Call) or getattr(call.op, "name", "") != "relax.nn.max_pool2d":
        return False
    a = call.attrs
    plain = a.layout == "NCHW" and a.out_layout == "NCHW" and not a.ceil_mode
    return plain and call.ty.dtype == "float32"


@functools.lru_cache(maxsize=1)
def _integer_pattern():
    """The dpl pattern of one integer layer and its named parts (built once: it is matched
    against every multiply of a graph)."""
    from tvm.relax.dpl import is_const, is_op, wildcard

    parts = {name: is_const() for name in ("scale", "zero_point", "weight", "correction")}
    parts["x"] = wildcard()
    parts["quantize"] = is_op("relax.quantize")(parts["x"], parts["scale"], parts["zero_point"])
    parts["pad"] = is_op("relax.nn.pad")(parts["quantize"])
    data = parts["pad"] | parts["quantize"]
    parts["op"] = is_op("relax.nn.conv2d")(data, parts["weight"]) | is_op("relax.matmul")(
        parts["quantize"], parts["weight"]
    )
    corrected = is_op("relax.subtract")(parts["op"], parts["correction"])
    parts["rescale"] = is_const()
    root = is_op("relax.multiply")(is_op("relax.astype")(corrected | parts["op"]), parts["rescale"])
    return root, parts


def integer_layer(call, var2val):
    """``call`` as an ``IntegerLayer`` when it ends one (``var2val``: the function's
    bindings, ``relax.analysis.get_var2val``), else None."""
    from tvm import relax

    if not isinstance(call, relax.Call) or getattr(call.op, "name", "") != "relax.multiply":
        return None
    root, parts = _integer_pattern()
    found = root.extract_matched_expr(call, var2val)
    if found is None:
        return None
    op_call, value = found[parts["op"]], lambda name: found[parts[name]].value.numpy()
    if op_call.ty.dtype != "int32" or found[parts["weight"]].ty.dtype != "int8":
        return None
    zero_point = int(value("zero_point"))
    pad = found[parts["pad"]] if parts["pad"] in found else None
    padding = _padding(pad, op_call, zero_point)
    if padding is None:
        return None
    kind = CONV2D if op_call.op.name == "relax.nn.conv2d" else MATMUL
    weight = value("weight")
    channels = weight.shape[0] if kind == CONV2D else weight.shape[-1]
    correction = value("correction") if parts["correction"] in found else np.zeros(channels)
    return IntegerLayer(
        call=call,
        kind=kind,
        op=_op(op_call, kind),
        x_q=(op_call if pad is None else pad).args[0],
        attrs=op_call.attrs if kind == CONV2D else None,
        padding=padding,
        scale=float(value("scale")),
        zero_point=zero_point,
        weight=weight,
        correction=np.asarray(correction, np.int64).reshape(-1),
        rescale=np.broadcast_to(value("rescale").reshape(-1), (channels,)).astype(np.float32),
    )


def _padding(pad, op_call, zero_point):
    """(top, left, bottom, right): the explicit ``pad`` call's (spatial only, with the zero
    point) plus the conv's own (zero-padded uint8 is only right when the zero point is 0).
    None for any other pad."""
    if op_call.op.name != "relax.nn.conv2d":
        return (0, 0, 0, 0)
    top, left, bottom, right = (int(p) for p in op_call.attrs.padding)
    if any((top, left, bottom, right)) and zero_point:
        return None
    if pad is None:
        return (top, left, bottom, right)
    width = [int(w) for w in pad.attrs.pad_width]
    if any(width[:4]) or pad.attrs.pad_mode != "constant":
        return None
    if float(pad.attrs.pad_value) != zero_point:
        return None
    return (top + width[4], left + width[6], bottom + width[5], right + width[7])


@dataclass(frozen=True)
class RequantizedLayer:
    """An integer conv layer whose output goes straight to the next layers' quantize:

        quantize(act?(add?(layer, bias)), scale, zero_point)

    with every value between the layer and the quantize read by that chain only, so a
    kernel may compute the chain in its epilogue and store uint8.

    Attributes:
        layer: the ``IntegerLayer`` (an ungrouped or a depthwise conv2d).
        call: the chain's quantize call, which the kernel replaces.
        bias: (O,) float32 added to the layer's output, or None.
        bounds: (lo, hi) float clamp of the activation (ReLU: (0, None)), or None.
        scale, zero_point: the output's uint8 parameters (float > 0, int 0..255).
    """

    layer: IntegerLayer
    call: object
    bias: object
    bounds: tuple
    scale: float
    zero_point: int


def use_counts(func):
    """{var: how many times it is read} over the bindings and output of Relax ``func``."""
    from collections import Counter

    from tvm import relax

    counts = Counter()

    def visit(expr):
        if isinstance(expr, relax.Var):
            counts[expr] += 1

    for block in func.body.blocks:
        for binding in block.bindings:
            relax.analysis.post_order_visit(binding.value, visit)
    relax.analysis.post_order_visit(func.body.body, visit)
    return counts


def requantized_layer(call, var2val, uses):
    """``call`` (a quantize) as a ``RequantizedLayer``, or None (``var2val``: the function's
    bindings; ``uses``: ``use_counts`` of the function)."""
    if _name(call) != "relax.quantize" or int(call.attrs.axis) != 1:
        return None
    scale, zero_point = (_scalar(arg) for arg in call.args[1:])
    if scale is None or zero_point is None:
        return None
    value, bounds, bias = _single_use(call.args[0], var2val, uses), None, None
    if _name(value) in ("relax.clip", "relax.nn.relu"):
        bounds = _bounds(value)
        if bounds is None:
            return None
        value = _single_use(value.args[0], var2val, uses)
    if _name(value) == "relax.add":
        bias = _channel_constant(value.args[1])
        value = _single_use(value.args[0], var2val, uses) if bias is not None else None
    layer = integer_layer(value, var2val) if value is not None else None
    if layer is None or layer.op not in (CONV2D, DEPTHWISE):
        return None
    return RequantizedLayer(layer, call, bias, bounds, scale, int(zero_point))


def _name(expr):
    return getattr(getattr(expr, "op", None), "name", "")


def _single_use(var, var2val, uses):
    """The value bound to ``var`` when only one expression reads it, else None."""
    return var2val.get(var) if uses.get(var, 0) == 1 else None


def _scalar(expr):
    """The value of a scalar constant, else None."""
    import tvm

    if not isinstance(expr, tvm.ir.expr.Constant) or expr.value.numpy().size != 1:
        return None
    return expr.value.numpy().reshape(-1)[0].item()


def _channel_constant(expr):
    """A (1, C, 1, 1) float32 constant as (C,), else None."""
    import tvm

    if not isinstance(expr, tvm.ir.expr.Constant) or expr.ty.dtype != "float32":
        return None
    value = expr.value.numpy()
    if value.ndim != 4 or value.shape[0] != 1 or value.shape[2:] != (1, 1):
        return None
    return value.reshape(-1)


def _bounds(call):
    """(lo, hi) of a clip with constant bounds, (0.0, None) of a ReLU, else None."""
    from tvm import tirx

    if _name(call) == "relax.nn.relu":
        return (0.0, None)
    lo, hi = call.args[1:]
    if not all(isinstance(b, tirx.IntImm | tirx.FloatImm) for b in (lo, hi)):
        return None
    return (float(lo.value), float(hi.value))
