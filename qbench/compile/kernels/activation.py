"""A layer whose FP32 output goes through an elementwise activation into Relax's quantize
to uint8, as a ``patterns.RequantizedLayer`` a uint8 kernel computes whole:

    quantize(f(add(layer, bias)), scale, zero_point)

with ``f`` a small tree of FP32 elementwise ops of the biased value and scalar constants:
add, subtract, multiply, divide, maximum, minimum, clip, ReLU, sigmoid and tanh. Where the
rewrite cannot fold the output's scale into the layer's multiplier (a hardswish, x * clip(x
+ 3, 0, 6) / 6, is not positively homogeneous: mobilenet_v3's 1x1 expand convs; nor is a
SiLU, x * sigmoid(x): efficientnet_b0's), TVM fused the activation and quantize into the
conv's FP32 kernel, which wrote (N, C, H, W) uint8 a value at a time. The kernel's vector
epilogue (``conv2d.requantize_u8``) computes the same float32 ops in the graph's order, as
TOPI computes them (a clip is ``min`` then ``max``; sigmoid and tanh TIR's own intrinsics),
so the uint8 values are the graph's bit for bit.
"""

from collections import Counter
from typing import NamedTuple

import numpy as np

from ...quantize.chains import channel_constant, constant
from ...quantize.chains import name as _name
from .patterns import CONV2D, DEPTHWISE, GROUPED, RequantizedLayer, integer_layer

BINARY = {
    "relax.add": "add",
    "relax.subtract": "subtract",
    "relax.multiply": "multiply",
    "relax.divide": "divide",
    "relax.maximum": "maximum",
    "relax.minimum": "minimum",
}
UNARY = {"relax.sigmoid": "sigmoid", "relax.tanh": "tanh"}
MAX_OPS = 12  # ops an activation may hold (hardswish: 5)
QUANTIZE_OP = "relax.quantize"
X = "x"  # the biased value in an ``Activation`` tree


class Activation(NamedTuple):
    """The FP32 ops between a layer's bias add and the quantize of their result (a tuple,
    so ``relax.BlockBuilder.call_te`` passes it to a TE compute as it is).

    Attributes:
        expr: a tree: ``X`` (the biased value), a float (a scalar float32 constant), or
            (op, a, b) with op a value of ``BINARY``, or (op, a) with op a value of
            ``UNARY``, and a, b trees.
        scale: float32, the quantize's scale (one for every channel).
    """

    expr: object
    scale: float


def activated_layer(call, var2val, uses):
    """A Relax quantize ``call`` to uint8 of an ``Activation`` of a conv layer's biased
    output, with one scale and one zero point, as a ``patterns.RequantizedLayer`` (its
    bounds (0, 255), its ``activation`` set); else None. Every value between the layer and
    the quantize must be read only inside the chain (``uses``: ``model.graph.use_counts``)."""
    params = _quantize_params(call)
    if params is None:
        return None
    reads, leaves = Counter(), set()
    expr = _tree(call.args[0], var2val, reads, leaves)
    if expr is None or len(leaves) != 1:
        return None
    if any(uses.get(var, 0) != count for var, count in reads.items()):
        return None
    value = var2val[next(iter(leaves))]
    if uses.get(value.args[0], 0) != 1:
        return None
    layer = integer_layer(var2val.get(value.args[0]), var2val)
    if layer is None or layer.op not in (CONV2D, GROUPED, DEPTHWISE):
        return None
    scale, zero_point = params
    bias = channel_constant(value.args[1])
    return RequantizedLayer(
        layer, call, bias, zero_point, (0, 255), activation=Activation(expr, scale)
    )


def _quantize_params(call):
    """(scale, zero_point) of a quantize to uint8 of a float32 tensor with one float32
    scale and one integral zero point, else None."""
    from tvm import relax

    if not isinstance(call, relax.Call) or _name(call) != QUANTIZE_OP:
        return None
    if str(call.attrs.out_dtype) != "uint8" or call.args[0].ty.dtype != "float32":
        return None
    values = [constant(a) for a in call.args[1:]]
    if any(v is None for v in values) or values[0].dtype != np.float32:
        return None  # a float64 scale would divide in float64
    scales, zero_points = (np.unique(v) for v in values)
    if scales.size != 1 or zero_points.size != 1 or zero_points[0] != int(zero_points[0]):
        return None
    return float(np.float32(scales[0])), int(zero_points[0])


def _tree(expr, var2val, reads, leaves):
    """``expr`` (a float32 Relax expression) as an ``Activation`` tree, or None where it
    reads anything but scalar constants, ops of the tree and one layer's biased output
    (added to ``leaves``); the vars it reads are counted in ``reads``."""
    from tvm import relax

    from ...quantize.chains import bounds

    scalar = _scalar_float(expr)
    if scalar is not None:
        return scalar
    if not isinstance(expr, relax.Var) or sum(reads.values()) > MAX_OPS:
        return None
    reads[expr] += 1
    value = var2val.get(expr)
    name = _name(value)
    if getattr(expr.ty, "dtype", None) != "float32":
        return None
    if _is_biased(value, var2val):
        leaves.add(expr)
        return X
    if name in BINARY or name in UNARY:
        trees = [_tree(arg, var2val, reads, leaves) for arg in value.args]
        op = BINARY.get(name) or UNARY[name]
        return None if None in trees else (op, *trees)
    found = bounds(value) if name in ("relax.clip", "relax.nn.relu") else None
    inner = _tree(value.args[0], var2val, reads, leaves) if found is not None else None
    if inner is None:
        return None
    lo, hi = found  # TOPI's clip: min with hi, then max with lo; a ReLU: max with 0
    return ("maximum", inner if hi is None else ("minimum", inner, hi), lo)


def _scalar_float(expr):
    """The value of a scalar float32 constant, else None."""
    value = constant(expr)
    if value is None or value.size != 1 or value.dtype != np.float32:
        return None
    return float(value.reshape(-1)[0])


def _is_biased(value, var2val):
    """Whether ``value`` adds a (1, C, 1, 1) float32 constant to an integer layer."""
    if _name(value) != "relax.add" or channel_constant(value.args[1]) is None:
        return False
    return integer_layer(var2val.get(value.args[0]), var2val) is not None
