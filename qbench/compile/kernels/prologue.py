"""The FP32 work before an input quantize, run inside ``quantize_pack_pad``: a channel concat
and per-channel elementwise ops (constants, or an (N, C, 1, 1) tensor the graph computed:
mobilenet_v3's squeeze-excitation scale).

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

from ...model.graph import bound_value, channel_concat

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
        constants: the ops' per-channel operands: float32 (C,) arrays (constants) or
            float32 (N or 1, C, 1, 1) Relax vars (computed by the graph).
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
    value = bound_value(x, bb.lookup_binding)
    while value is not None:
        step = _step(value, [int(d) for d in x.ty.shape])
        if step is None:
            break
        name, operand, x = step
        if isinstance(operand, list):
            ops.extend(operand)
        else:
            ops.append((name, len(constants)))
            constants.append(operand)
        value = bound_value(x, bb.lookup_binding)
    parts = _concat_parts(bb, value, block) or (x,)
    if not ops and len(parts) == 1:
        return None
    ops.reverse()
    return Prologue(parts, tuple(ops), tuple(constants))


def _step(value, shape):
    """(op name, operand, the data it reads) of an op of the float32 (N, C, H, W) ``shape``:
    an ``ARITHMETIC`` op with a scalar or (1, C, 1, 1) constant (a (C,) float32 array) or a
    float32 (N or 1, C, 1, 1) var (a squeeze-excitation scale; either operand of an add or
    multiply, which commute exactly), or a ReLU or clip with constant bounds (its
    ``Prologue.ops`` steps, last first); else None."""
    from tvm import relax, tirx

    if not isinstance(value, relax.Call) or value.ty.dtype != "float32":
        return None
    if [int(d) for d in value.ty.shape] != shape:
        return None
    name, args = getattr(value.op, "name", ""), list(value.args)
    if name in ("relax.nn.relu", "relax.clip") and _shaped(args[0], shape):
        if name == "relax.nn.relu":
            return name, [("max", 0.0)], args[0]
        lo, hi = args[1:]
        if not all(isinstance(b, tirx.IntImm | tirx.FloatImm) for b in (lo, hi)):
            return None
        return name, [("max", float(lo.value)), ("min", float(hi.value))], args[0]
    if name not in ARITHMETIC:
        return None
    orders = [(0, 1), (1, 0)] if name in ("relax.add", "relax.multiply") else [(0, 1)]
    for data, other in orders:
        operand = _operand(args[other], shape)
        if _shaped(args[data], shape) and operand is not None:
            return name, operand, args[data]
    return None


def _shaped(expr, shape):
    """Whether ``expr`` is a float32 var of ``shape``."""
    from tvm import relax

    ty = getattr(expr, "ty", None)
    if not isinstance(expr, relax.Var) or getattr(ty, "dtype", None) != "float32":
        return False
    return getattr(ty, "shape", None) is not None and [int(d) for d in ty.shape] == shape


def _operand(expr, shape):
    """A per-channel operand for data of (N, C, H, W) ``shape``: a scalar or (1, C, 1, 1)
    float32 constant as a (C,) array, a float32 (N or 1, C, 1, 1) var as itself; else
    None."""
    import tvm
    from tvm import relax

    n, channels = shape[:2]
    if isinstance(expr, tvm.ir.expr.Constant) and expr.ty.dtype == "float32":
        array = expr.value.numpy()
        if array.size == 1:
            return np.full(channels, array.reshape(-1)[0], np.float32)
        return array.reshape(-1).astype(np.float32) if array.shape == (1, channels, 1, 1) else None
    ty = getattr(expr, "ty", None)
    if isinstance(expr, relax.Var) and getattr(ty, "dtype", None) == "float32":
        dims = [int(d) for d in ty.shape] if getattr(ty, "shape", None) is not None else None
        return expr if dims in ([n, channels, 1, 1], [1, channels, 1, 1]) else None
    return None


def _concat_parts(bb, value, block):
    """The vars a concat along the channels of (N, C, H, W) float32 joins, each but the last
    a multiple of ``block`` channels or all within one block, else None."""
    fields = channel_concat(value, bb.lookup_binding)
    if fields is None or value.ty.dtype != "float32" or not all(map(_is_var, fields)):
        return None
    widths = [int(f.ty.shape[1]) for f in fields]
    if sum(widths) > block and any(w % block for w in widths[:-1]):
        return None
    return tuple(fields)


def _is_var(expr):
    from tvm import relax

    return isinstance(expr, relax.Var)
