"""The FP32 work before an input quantize, run inside ``quantize_pack_pad``: a channel concat
and per-channel elementwise ops.

densenet's layers read ``quantize(relu(batch_norm(concat(features))))``: the import leaves
the batch norm after a concat as a subtract, divide, multiply and add of (1, C, 1, 1)
constants. TVM fuses the concat and those ops into one FP32 kernel, whose output
``quantize_pack_pad`` then reads: densenet121 at batch 8 spent 48.7 ms in the first and 28.9
ms in the second (of 158 ms; AMD Zen 4, 2 threads, ``benchmarks/kernel_times.py``), both
bound by memory. Read inside the quantize kernel, the concat's FP32 tensor is never
written: each value is loaded from its part, the ops are applied in the graph's order, in
float32 (as the legalized ops compute them), and quantized.
"""

from dataclasses import dataclass

import numpy as np

ARITHMETIC = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


@dataclass(frozen=True)
class Prologue:
    """What a quantize's FP32 input is computed from.

    Attributes:
        parts: FP32 (N, C_i, H, W) Relax vars concatenated along the channels (one var:
            no concat).
        ops: ((op name, index into ``constants`` or a float bound), ...) in the order the
            graph applies them: ``relax.add`` and the other ``ARITHMETIC`` ops take a
            constant, ``min`` and ``max`` a bound (a ReLU is ``max`` 0, a clip ``min`` hi
            then ``max`` lo, as TOPI computes them).
        constants: float32 (C,) arrays, the ops' per-channel operands.
    """

    parts: tuple
    ops: tuple
    constants: tuple

    @property
    def starts(self):
        """The first channel of each part."""
        widths = [int(p.ty.shape[1]) for p in self.parts]
        return tuple(int(s) for s in np.cumsum([0, *widths[:-1]]))


def find_prologue(bb, x, block):
    """The ``Prologue`` of FP32 (N, C, H, W) var ``x``, read through the bindings of ``bb``
    (a ``relax.BlockBuilder``), or None where ``x`` is neither a concat nor an op of the
    kinds above. A concat is taken where every part but the last holds a multiple of
    ``block`` channels (each packed block then reads one part), or where one block holds
    every channel (flat pixel rows: a block's channels come from each part in turn)."""
    ops, constants = [], []
    channels = int(x.ty.shape[1])
    value = _value(bb, x)
    while value is not None:
        step = _step(value, channels)
        if step is None:
            break
        name, operand = step
        if isinstance(operand, np.ndarray):
            ops.append((name, len(constants)))
            constants.append(operand)
        else:
            ops.extend(operand)
        x = value.args[0]
        value = _value(bb, x)
    parts = _concat_parts(bb, value, block) or (x,)
    if not ops and len(parts) == 1:
        return None
    ops.reverse()
    return Prologue(parts, tuple(ops), tuple(constants))


def _value(bb, var):
    """The value bound to ``var``, through ``(a, b, ...)[i]`` of a tuple built in the graph
    (the import's batch norm returns one), or None."""
    from tvm import relax

    value = bb.lookup_binding(var) if isinstance(var, relax.Var) else None
    while isinstance(value, relax.TupleGetItem):
        fields = bb.lookup_binding(value.tuple_value)
        if not isinstance(fields, relax.Tuple):
            return None
        value = bb.lookup_binding(fields.fields[value.index])
    return value


def _step(value, channels):
    """(op name, (C,) float32 operand) of an ``ARITHMETIC`` op of a float32 4-D tensor and a
    scalar or (1, C, 1, 1) constant, or (op name, its ``Prologue.ops`` steps, last first)
    of a ReLU or a clip with constant bounds; else None."""
    import tvm
    from tvm import relax, tirx

    if not isinstance(value, relax.Call) or value.ty.dtype != "float32" or value.ty.ndim != 4:
        return None
    if not _same_shape(value.args[0], value):  # not an operand broadcast to the output
        return None
    name = getattr(value.op, "name", "")
    if name == "relax.nn.relu":
        return name, [("max", 0.0)]
    if name == "relax.clip":
        lo, hi = value.args[1:]
        if not all(isinstance(b, tirx.IntImm | tirx.FloatImm) for b in (lo, hi)):
            return None
        return name, [("max", float(lo.value)), ("min", float(hi.value))]
    operand = value.args[1] if name in ARITHMETIC else None
    if not isinstance(operand, tvm.ir.expr.Constant) or operand.ty.dtype != "float32":
        return None
    array = operand.value.numpy()
    if array.size == 1:
        return name, np.full(channels, array.reshape(-1)[0], np.float32)
    if array.shape != (1, channels, 1, 1):
        return None
    return name, array.reshape(-1).astype(np.float32)


def _same_shape(expr, value):
    shape = getattr(expr.ty, "shape", None)
    return shape is not None and [int(d) for d in shape] == [int(d) for d in value.ty.shape]


def _concat_parts(bb, value, block):
    """The vars a concat along the channels of (N, C, H, W) float32 joins, each but the last
    a multiple of ``block`` channels or all within one block, else None."""
    from tvm import relax

    if not isinstance(value, relax.Call) or getattr(value.op, "name", "") != "relax.concat":
        return None
    if value.ty.ndim != 4 or int(value.attrs.axis) % 4 != 1 or value.ty.dtype != "float32":
        return None
    fields = value.args[0]
    if isinstance(fields, relax.Var):
        fields = bb.lookup_binding(fields)
    if not isinstance(fields, relax.Tuple) or not all(
        isinstance(f, relax.Var) for f in fields.fields
    ):
        return None
    widths = [int(f.ty.shape[1]) for f in fields.fields]
    if sum(widths) > block and any(w % block for w in widths[:-1]):
        return None
    return tuple(fields.fields)
