"""The op patterns kernel selection matches in a Relax graph, FP32 and integer.

An FP32 layer is one call: conv2d or matmul of a float32 input and a constant weight, or
max_pool2d. An integer layer is the chain ``quantize.rewrite`` emits for one conv2d/matmul,
matched with ``relax.dpl`` through the graph's variable bindings:

    multiply(astype(subtract?(op(pad?(x_q), W_q), correction)), rescale)

with ``op`` a conv2d or matmul of uint8 x int8 -> int32, ``x_q`` the uint8 input (a
quantize, or the integer requantize of the layer before), every other operand constant, and
``pad`` (conv only) the conv's padding with the input's zero point. A layer whose output
the rewrite requantizes in integer (``quantize.requantize``) ends in

    astype(clip(add(round(add?(add(multiply(...), bias), residual)), zero_point), q_lo, q_hi),
           "uint8")

with ``residual`` = multiply(astype(subtract(astype(t_q, "int32"), z_t)), k) for a residual
input t_q (``RequantizedLayer``), which a kernel computes whole, storing uint8.
"""

import functools
from dataclasses import dataclass

import numpy as np

from ...model.graph import quantizable_call
from ...quantize.chains import name as _name
from ...quantize.chains import scalar as _scalar

# op patterns: what a kernel computes, independent of precision
CONV2D, DEPTHWISE, MATMUL, MAX_POOL = "conv2d", "depthwise", "matmul", "max_pool2d"
GROUPED = "grouped"  # a grouped conv2d that is not depthwise (regnet, resnext)


@dataclass(frozen=True)
class FloatLayer:
    """A float32 ``call`` of ``kind`` conv2d, matmul or max_pool2d whose pattern is ``op``
    (a max_pool2d may be uint8: ``precision``). ``border``: (pixels, value) of the border a
    uint8 max pool writes around its output (``borders``), or None."""

    call: object
    kind: str
    op: str
    precision: str = "float32"
    border: tuple = None


@dataclass(frozen=True)
class IntegerLayer:
    """One integer layer of the plain INT8 graph.

    Attributes:
        call: the chain's last call (the rescale multiply), which a kernel replaces.
        kind: the integer op, ``CONV2D`` or ``MATMUL``.
        op: ``CONV2D``, ``GROUPED``, ``DEPTHWISE`` or ``MATMUL``; None for a shape no
            kernel takes (matmul of a 3-D input), which keeps TVM's integer op.
        x_q: the uint8 Relax var the layer reads, the graph's quantize of its float32 input
            (shared by every layer reading that tensor with the same parameters) or the
            integer requantize of the layer before: (N, C, H, W) for a conv, (M, K) for a
            matmul, unpadded.
        attrs: the integer conv2d's attributes (None for a matmul).
        padding: the conv's padding of the quantized input, (top, left, bottom, right).
        zero_point: the input's zero point, int 0..255: the value of the padding (0 when
            there is none: a kernel's padded channels meet zero weights, any value serves).
        weight: int8 numpy weights, (O, C/groups, KH, KW) or (K, N).
        correction: (O,) int64 subtracted from the accumulator, zero_point * sum(weight) (0
            when the graph subtracts none).
        rescale: (O,) float32 per output channel: input scale * weight scale, or the
            integer requantize's multiplier.
    """

    call: object
    kind: str
    op: str
    x_q: object
    attrs: object
    padding: tuple
    zero_point: int
    weight: np.ndarray
    correction: np.ndarray
    rescale: np.ndarray
    precision: str = "int8"


def float_layer(call):
    """``call`` as a ``FloatLayer`` (conv2d: NCHW ungrouped, grouped or depthwise; matmul of a 2-D
    input; max_pool2d: NCHW, static shapes, float32 or uint8, the precision its dtype), or
    None."""
    if _is_max_pool(call):
        return FloatLayer(call, MAX_POOL, MAX_POOL, str(call.ty.dtype))
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
    return DEPTHWISE if groups == int(weight[0]) == channels and int(weight[1]) == 1 else GROUPED


def pool_padding(call):
    """(top, left, bottom, right) padding in pixels of a max_pool2d ``call``
    (``float_layer``), with the rows and columns its ``ceil_mode`` adds at the bottom and
    right: the last window then runs past the padded input (PyTorch's ``ceil_mode``; its
    windows see only real values there, as padding with the lowest value does). The graph's
    output shape (N, C, OH, OW) says how far."""
    a = call.attrs
    top, left, bottom, right = (int(v) for v in a.padding)
    (kh, kw), (sh, sw), (dh, dw) = (
        tuple(int(v) for v in x) for x in (a.pool_size, a.strides, a.dilation)
    )
    _, _, height, width = (int(v) for v in call.args[0].ty.shape)
    _, _, out_h, out_w = (int(v) for v in call.ty.shape)
    bottom += max(0, (out_h - 1) * sh + (kh - 1) * dh + 1 - (height + top + bottom))
    right += max(0, (out_w - 1) * sw + (kw - 1) * dw + 1 - (width + left + right))
    return top, left, bottom, right


def pool_spec(call):
    """((KH, KW), (SH, SW), (PH, PW)) of a max_pool2d ``call`` (``float_layer``) padded alike
    on opposite sides (``pool_padding``), without dilation; None for any other pool."""
    a = call.attrs
    top, left, bottom, right = pool_padding(call)
    if (top, left) != (bottom, right) or tuple(int(d) for d in a.dilation) != (1, 1):
        return None
    size, strides = (tuple(int(v) for v in values) for values in (a.pool_size, a.strides))
    return (size, strides, (top, left))


def _is_max_pool(call):
    from tvm import relax, tirx

    if not isinstance(call, relax.Call) or getattr(call.op, "name", "") != "relax.nn.max_pool2d":
        return False
    a = call.attrs
    plain = a.layout == "NCHW" and a.out_layout == "NCHW"
    static = all(isinstance(v, tirx.IntImm) for v in (*call.ty.shape, *call.args[0].ty.shape))
    return plain and static and call.ty.dtype in ("float32", "uint8")


@functools.lru_cache(maxsize=1)
def _integer_pattern():
    """The dpl pattern of one integer layer and its named parts (built once: it is matched
    against every multiply of a graph)."""
    from tvm.relax.dpl import is_const, is_op, wildcard

    parts = {name: is_const() for name in ("weight", "correction", "rescale")}
    parts["x_q"] = wildcard()
    parts["pad"] = is_op("relax.nn.pad")(parts["x_q"])
    data = parts["pad"] | parts["x_q"]
    parts["op"] = is_op("relax.nn.conv2d")(data, parts["weight"]) | is_op("relax.matmul")(
        parts["x_q"], parts["weight"]
    )
    corrected = is_op("relax.subtract")(parts["op"], parts["correction"])
    root = is_op("relax.multiply")(is_op("relax.astype")(corrected | parts["op"]), parts["rescale"])
    return root, parts


def integer_layer(call, var2val):
    """``call`` as an ``IntegerLayer`` when it ends one (``var2val``: the function's
    bindings, ``relax.analysis.get_var2val``), else None."""
    from tvm import relax

    if not isinstance(call, relax.Call) or _name(call) != "relax.multiply":
        return None
    root, parts = _integer_pattern()
    found = root.extract_matched_expr(call, var2val)
    if found is None:
        return None
    op_call, value = found[parts["op"]], lambda name: found[parts[name]].value.numpy()
    if op_call.ty.dtype != "int32" or found[parts["weight"]].ty.dtype != "int8":
        return None
    pad = found[parts["pad"]] if parts["pad"] in found else None
    x_q = (op_call if pad is None else pad).args[0]
    if x_q.ty.dtype != "uint8":
        return None
    zero_point = int(float(pad.attrs.pad_value)) if pad is not None else 0
    padding = _padding(pad, op_call)
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
        x_q=x_q,
        attrs=op_call.attrs if kind == CONV2D else None,
        padding=padding,
        zero_point=zero_point,
        weight=weight,
        correction=np.asarray(correction, np.int64).reshape(-1),
        rescale=np.broadcast_to(value("rescale").reshape(-1), (channels,)).astype(np.float32),
    )


def _padding(pad, op_call):
    """(top, left, bottom, right): the explicit ``pad`` call's (spatial, constant, integral
    value: the zero point), the conv's own being zero as the rewrite emits it. None for any
    other padding."""
    if op_call.op.name != "relax.nn.conv2d":
        return (0, 0, 0, 0)
    if any(int(p) for p in op_call.attrs.padding):
        return None
    if pad is None:
        return (0, 0, 0, 0)
    width = [int(w) for w in pad.attrs.pad_width]
    value = float(pad.attrs.pad_value)
    if any(width[:4]) or pad.attrs.pad_mode != "constant" or value != int(value):
        return None
    return (width[4], width[6], width[5], width[7])


@dataclass(frozen=True)
class RequantizedLayer:
    """An integer conv layer whose output the graph requantizes in integer to the next
    layers' uint8 (``quantize.requantize``):

        astype(clip(add(round(add(layer, bias)), zero_point), q_lo, q_hi), "uint8")

    with ``layer`` the multiply by the requantize's multiplier, so a kernel may compute the
    chain in its epilogue and store uint8.

    Attributes:
        layer: the ``IntegerLayer`` (a conv2d: ungrouped, grouped or depthwise); its ``rescale`` is
            the requantize's multiplier.
        call: the chain's last call (the cast to uint8), which the kernel replaces.
        bias: (C,) float32, the bias in output steps.
        zero_point: the output's zero point, int 0..255.
        bounds: (q_lo, q_hi), ints in [0, 255]: the clamp of the quantized value.
        residual: (t_q, k, z_t): a residual input's uint8 Relax var (the output's shape),
            its multiplier to output steps (float) and its zero point; or None.
        border: pixels of ``zero_point`` the kernel writes around its output, read by the
            next kernels as their padding (``kernels.borders``); 0 for none.
        block: channels per block of the uint8 output the kernel stores: 16 (NCHW16c), or 64
            where every reader is an AMX kernel (``kernels.wide``).
        activation: the ``activation.Activation`` between the bias add and the graph's
            quantize (``call``, then), with ``layer``'s rescale and ``bias`` in the FP32
            output's units; None for the integer requantize above.
    """

    layer: IntegerLayer
    call: object
    bias: np.ndarray
    zero_point: int
    bounds: tuple
    residual: tuple = None
    border: int = 0
    block: int = 16
    activation: object = None


def requantized_layer(call, var2val, uses):
    """``call`` (a cast to uint8) as a ``RequantizedLayer``, or None (``var2val``: the
    function's bindings; ``uses``: ``model.graph.use_counts`` of the function)."""
    from ...quantize.chains import channel_constant, single_use

    if _name(call) != "relax.astype" or call.ty.dtype != "uint8":
        return None
    steps, value = [], call
    for op in ("relax.clip", "relax.add", "relax.round", "relax.add"):
        value = single_use(value.args[0], var2val, uses)
        if _name(value) != op:
            return None
        steps.append(value)
    clip, shift, _, value = steps
    residual = None
    if channel_constant(value.args[1]) is None:  # the residual add, then the bias add
        residual = _residual_term(single_use(value.args[1], var2val, uses), var2val, uses)
        value = single_use(value.args[0], var2val, uses)
        if residual is None or _name(value) != "relax.add":
            return None
    bias = channel_constant(value.args[1])
    zero_point, (q_lo, q_hi) = _scalar(shift.args[1]), (_prim(b) for b in clip.args[1:])
    layer = integer_layer(single_use(value.args[0], var2val, uses), var2val)
    if layer is None or bias is None or None in (zero_point, q_lo, q_hi):
        return None
    if layer.op not in (CONV2D, GROUPED) and not (layer.op == DEPTHWISE and residual is None):
        return None
    bounds = (int(q_lo), int(q_hi))
    return RequantizedLayer(layer, call, bias, int(zero_point), bounds, residual)


def _residual_term(value, var2val, uses):
    """(t_q, k, z_t) of multiply(astype(subtract(astype(t_q, "int32"), z_t)), k), else
    None."""
    from ...quantize.chains import single_use

    k = _scalar(value.args[1]) if _name(value) == "relax.multiply" else None
    cast = single_use(value.args[0], var2val, uses) if k is not None else None
    shifted = single_use(cast.args[0], var2val, uses) if _name(cast) == "relax.astype" else None
    if _name(shifted) != "relax.subtract":
        return None
    widened, z_t = single_use(shifted.args[0], var2val, uses), _scalar(shifted.args[1])
    if _name(widened) != "relax.astype" or z_t is None:
        return None
    t_q = widened.args[0]
    return (t_q, float(k), int(z_t)) if t_q.ty.dtype == "uint8" else None


def _prim(expr):
    """The value of a constant clip bound (a PrimValue or an immediate), else None."""
    for _ in range(2):
        expr = getattr(expr, "value", None)
        if isinstance(expr, int | float):
            return expr
    return None
