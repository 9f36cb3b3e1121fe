"""The network input's quantize, channel packing and zero-point padding as one hand kernel.

A model's first conv reads the graph's FP32 input. Relax's quantize, ``layout.pack_nchw4c``
and a pad, fused by FuseOps, make one kernel whose padding test on every element keeps LLVM
from vectorizing it: resnet18 at batch 8 spent 0.68 of 9.2 ms there (Intel Xeon VM with AMX,
2 threads, ``benchmarks/kernel_times.py``). ``quantize_pack_pad`` runs one output row per
task instead: a border row is a fill, any other row a fill, its quantized interior and a
fill. The interior is quantized ``VECTOR`` pixels at a time, one vector per channel, and
the block's vectors are interleaved by one shuffle into the pixels' channels side by side,
stored as one run: densenet121's concat-reading quantizes at batch 8 took 24.6 ms with one
scalar byte store per value (LLVM's interleaved store group) and 18.2 ms so (the kernel of
256 channels at 56x56 alone 1.57 -> 1.20 ms; Intel Xeon VM with AMX, 2 threads,
``benchmarks/kernel_times.py``).
"""

from dataclasses import dataclass

import numpy as np

QUANTIZE_OP = "relax.quantize"
VECTOR = 16  # pixels a row quantizes at once (a vector of each channel), stored interleaved


def quantize_source(bb, x_q):
    """(FP32 var (N, C, H, W), scale (float32), zero point (int)) when uint8 ``x_q`` is bound
    to Relax's quantize of a 4-D FP32 tensor with constant parameters, one scale and one zero
    point for all channels; else None."""
    import tvm
    from tvm import relax

    value = bb.lookup_binding(x_q) if isinstance(x_q, relax.Var) else None
    if not isinstance(value, relax.Call) or getattr(value.op, "name", "") != QUANTIZE_OP:
        return None
    x, scale, zero_point = value.args
    if not all(isinstance(a, tvm.ir.expr.Constant) for a in (scale, zero_point)):
        return None
    if str(value.attrs.out_dtype) != "uint8" or x.ty.dtype != "float32" or x.ty.ndim != 4:
        return None
    scales, zero_points = (np.unique(a.value.numpy()) for a in (scale, zero_point))
    if scales.size != 1 or zero_points.size != 1:
        return None
    return x, np.float32(scales[0]), int(zero_points[0])


def quantize_pack_pad(
    shape,
    scale,
    zero_point,
    padding,
    block,
    dtype="uint8",
    offset=0,
    flat=False,
    fold=1,
    prologue=None,
):
    """The PrimFunc of FP32 (N, C, H, W) -> (N, ceil(C/block), H + top + bottom,
    W + left + right, block) of ``dtype``: each value clip(round(x / scale[c]) +
    zero_point, 0, 255) - ``offset`` (Relax's quantize to uint8, its float operations in its
    order, rounding half to even, then the packing's shift: ``layout.pack_nchw4c``); the
    padded channels and the border hold ``zero_point - offset``.

    Args:
        shape: (N, C, H, W) of the input.
        scale: the quantize's scale (float32).
        zero_point: int in [0, 255].
        padding: (top, left, bottom, right) pixels.
        block: channels per innermost block.
        dtype, offset: as ``layout.Packing``'s ``data_dtype`` and ``offset``.
        flat: write each row's pixels as one run of elements, (N, ceil(C/block),
            H + top + bottom, (W + left + right) * block) (``out_shape``): with ``block`` C,
            the flat pixel rows of ``conv2d.blocked_conv``.
        fold: write the padded tensor folded space-to-depth, (N, ceil(C/block),
            (H + top + bottom) / fold, (W + left + right) / fold, fold * fold * block),
            pixel (y, x) at (y // fold, x // fold), channel ((y % fold) * fold + x % fold)
            * block + c (``amx.fold_plan``).
        prologue: a ``prologue.Prologue``: the kernel reads its parts and constants in
            place of x and computes x's values (``prologue``), else None.

    Raises:
        ValueError: ``fold`` with ``flat``, with more than 8 bytes a folded row of a pixel,
            or with a padded size not a multiple of it.
    """
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    _check_fold(shape, padding, block, flat, fold, dtype)
    n, c, h, w = (int(v) for v in shape)
    plane = fold == 1 and not any(padding)  # a channel's plane is one run of pixels
    blocked = (n, -(-c // block), 1, h * w, block) if plane else out_shape(shape, padding, block)
    with IRBuilder() as builder:
        with T.prim_func():
            T.func_name("quantize_pack_pad")
            inputs = _declare(shape, prologue)
            written = T.arg("out", T.buffer(out_shape(shape, padding, block, flat, fold), dtype))
            T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
            with T.sblock("root"):
                x = _source((n, c, 1, h * w) if plane else (n, c, h, w), block, prologue, inputs)
                params = (scale, zero_point, offset, dtype)
                if fold > 1:
                    _folded_rows(x, written, (blocked, padding), params, fold)
                else:
                    out = T.decl_buffer(blocked, dtype, data=written.data)  # the 5-D view
                    _rows(x, out, padding, params)
    return builder.get()


@dataclass(frozen=True)
class _Source:
    """The kernel's FP32 input: its (N, C, H, W) shape, its number of channel blocks, and
    per run of blocks, the block past the run and ``load(b, channel, y, x)``, its value as
    a PrimExpr (the load clamped to the tensor's channels; with one block, ``channel`` is
    a Python int and a load of a concat picks its part by it)."""

    shape: tuple
    chunks: int
    runs: tuple


def _declare(shape, prologue):
    """Declare the kernel's inputs: (the FP32 tensors it reads: x, or the prologue's parts;
    the prologue's operands, (C,) constants or (N or 1, C, 1, 1) tensors)."""
    from tvm.script.ir_builder import tirx as T

    if prologue is None:
        return [T.arg("x", T.buffer(tuple(int(v) for v in shape), "float32"))], []
    parts = [
        T.arg(f"x{i}", T.buffer(tuple(int(v) for v in p.ty.shape), "float32"))
        for i, p in enumerate(prologue.parts)
    ]
    shapes = [
        k.shape if isinstance(k, np.ndarray) else tuple(int(v) for v in k.ty.shape)
        for k in prologue.constants
    ]
    return parts, [T.arg(f"k{i}", T.buffer(s, "float32")) for i, s in enumerate(shapes)]


def _source(shape, block, prologue, inputs):
    """The ``_Source`` that reads ``inputs`` (``_declare``) as (N, C, H, W) ``shape``: the
    tensors' own, or (N, C, 1, H * W), each channel's plane as one row (views)."""
    from tvm.script.ir_builder import tirx as T

    parts, constants = inputs
    channels, chunks = shape[1], -(-shape[1] // block)
    views = [
        T.decl_buffer((shape[0], int(p.shape[1]), *shape[2:]), "float32", data=p.data)
        for p in parts
    ]
    ops, starts = (prologue.ops, prologue.starts) if prologue else ((), (0,))
    pairs = list(zip(views, starts, strict=True))
    loads = [_part_load(p, start, ops, constants, channels) for p, start in pairs]
    if chunks == 1:  # every part in the one block: picked by the (static) channel

        def load(b, channel, y, col):
            part = sum(start <= min(channel, channels - 1) for start in starts[1:])
            return loads[part](b, channel, y, col)

        return _Source(shape, chunks, ((1, load),))
    ends = [(start + int(p.shape[1])) // block for p, start in pairs[:-1]]
    return _Source(shape, chunks, tuple(zip([*ends, chunks], loads, strict=True)))


def _part_load(part, start, ops, constants, channels):
    """``load`` of the channels of ``part`` (from channel ``start``; x itself: 0): its value
    with the prologue's ``ops`` applied in order, in float32."""
    from tvm.script.ir_builder import tirx as T

    width = int(part.shape[1])

    def load(b, channel, y, col):
        v = part[b, T.min(channel - start, width - 1), y, col]
        c = T.min(channel, channels - 1)
        for name, operand in ops:
            if name == "min":
                v = T.min(v, T.float32(operand))
            elif name == "max":
                v = T.max(v, T.float32(operand))
            else:
                v = _ARITHMETIC[name](v, _operand(constants[operand], b, c))
        return v

    return load


def _operand(k, b, c):
    """An op's operand for image ``b``, channel ``c``: k[c] of a (C,) constant, k[b, c, 0,
    0] of an (N, C, 1, 1) tensor, k[0, c, 0, 0] of a (1, C, 1, 1) one."""
    if len(k.shape) == 1:
        return k[c]
    return k[b if int(k.shape[0]) > 1 else 0, c, 0, 0]


_ARITHMETIC = {
    "relax.add": lambda a, b: a + b,
    "relax.subtract": lambda a, b: a - b,
    "relax.multiply": lambda a, b: a * b,
    "relax.divide": lambda a, b: a / b,
}


def _check_fold(shape, padding, block, flat, fold, dtype):
    top, left, bottom, right = padding
    sizes = (int(shape[2]) + top + bottom, int(shape[3]) + left + right)
    row_bytes = fold * block * np.dtype(dtype).itemsize
    if fold > 1 and (flat or row_bytes > 8 or any(v % fold for v in sizes)):
        raise ValueError(
            f"quantize_pack_pad: fold {fold} needs no flat rows, at most 8 bytes in a pixel's "
            f"folded row (block {block} of {dtype}) and padded sizes that are multiples of it; "
            f"got padding {padding}, padded sizes {sizes}"
        )


def _rows(x, out, padding, params):
    """The body of ``quantize_pack_pad``: one output row of ``out`` (its 5-D view) a task;
    ``params``: (scale, zero_point, offset, dtype)."""
    from tvm.script.ir_builder import tirx as T

    top, h = padding[0], x.shape[2]
    _, chunks, rows, width, block = (int(v) for v in out.shape)
    fill = _fill_value(params)
    with T.parallel(int(out.shape[0]) * chunks * rows) as task:
        row = (task // (chunks * rows), task // rows % chunks, task % rows)
        with T.If(T.And(row[2] >= top, row[2] < top + h)):
            with T.Then():
                _row(x, (out, row, row), padding, params)
            with T.Else():
                _fill(out, row, (0, width), block, fill)


def _row(x, target, padding, params):
    """One padded row inside the input's rows: ``target`` (buffer, its index prefix, the
    row (b, chunk, y) of the padded tensor); the fill, the quantized pixels (``VECTOR`` a
    run, the last run shifted back to end at the row's last pixel), the fill."""
    from tvm.script.ir_builder import tirx as T
    from tvm.tirx import Shuffle

    out, at, (b, chunk, y) = target
    top, left, _, right = padding
    w, block = x.shape[3], int(out.shape[-1])
    fill = _fill_value(params)
    _fill(out, at, (0, left), block, fill)

    lanes = min(VECTOR, w)

    def pixels(load):
        with T.serial(-(-w // lanes)) as j:
            col = T.min(j * lanes, w - lanes)  # the last run shifted back to end at w
            values = []
            for lane in range(block):
                channel = lane if x.chunks == 1 else chunk * block + lane
                columns = T.Ramp(col, 1, lanes) if lanes > 1 else col  # a 1-pixel row: scalars
                index = (b, channel, y - top, columns)
                values.append(_quantized(load, x.shape[1], index, params))
            # pixel-major: the block's channels of each pixel side by side
            order = [lane * lanes + i for i in range(lanes) for lane in range(block)]
            (start,) = out.offset_of([*at, left + col, 0])
            run = Shuffle(values, order) if lanes * block > 1 else values[0]
            at_run = T.Ramp(start, 1, lanes * block) if lanes * block > 1 else start
            T.buffer_store(_flat(out), run, [at_run])

    _by_run(x.runs, chunk, pixels)
    _fill(out, at, (left + w, right), block, fill)


def _by_run(runs, chunk, body):
    """``body(load)`` of the run of channel blocks ``chunk`` lies in (``_Source.runs``): one
    branch a run, a part of a concat."""
    from tvm.script.ir_builder import tirx as T

    (end, load), rest = runs[0], runs[1:]
    if not rest:
        body(load)
        return
    with T.If(chunk < end):
        with T.Then():
            body(load)
        with T.Else():
            _by_run(rest, chunk, body)


def _folded_rows(x, written, layout, params, fold):
    """The body of ``quantize_pack_pad`` with ``fold``: one folded row a task, its
    ``fold`` padded rows written to a local buffer as ``_rows`` writes them, then copied
    as units of a pixel's row in the fold (``fold * block`` elements, one integer): the units
    of the ``fold`` rows interleaved, a store group LLVM vectorizes. ``layout``: (the
    unfolded padded shape (N, chunks, H, W, block), padding)."""
    from tvm.script.ir_builder import tirx as T

    (n, chunks, height, width, block), padding = layout
    top, h = padding[0], x.shape[2]
    unit = f"uint{8 * fold * block * np.dtype(params[3]).itemsize}"
    folded = (n, chunks, height // fold, width // fold, fold)
    out = T.decl_buffer(folded, unit, data=written.data)
    fill = _fill_value(params)
    with T.parallel(n * chunks * (height // fold)) as task:
        b, chunk, i = task // (chunks * folded[2]), task // folded[2] % chunks, task % folded[2]
        rows = T.alloc_buffer((fold, width, block), params[3], scope="local")
        for dy in range(fold):
            y = i * fold + dy
            with T.If(T.And(y >= top, y < top + h)):
                with T.Then():
                    _row(x, (rows, (dy,), (b, chunk, y)), padding, params)
                with T.Else():
                    _fill(rows, (dy,), (0, width), block, fill)
        units = T.decl_buffer((fold, width // fold), unit, data=rows.data, scope="local")
        with T.serial(width // fold) as j:
            for dy in range(fold):
                T.buffer_store(out, units[dy, j], [b, chunk, i, j, dy])


def out_shape(shape, padding, block, flat=False, fold=1):
    """(N, ceil(C/block), H + top + bottom, W + left + right, block), or with ``flat``
    (N, ceil(C/block), H + top + bottom, (W + left + right) * block), or with ``fold``
    (N, ceil(C/block), (H + top + bottom) / fold, (W + left + right) / fold,
    fold * fold * block): the shape ``quantize_pack_pad`` writes for input ``shape``
    (N, C, H, W)."""
    n, c, h, w = (int(v) for v in shape)
    top, left, bottom, right = padding
    rows, width = h + top + bottom, w + left + right
    if flat:
        return (n, -(-c // block), rows, width * block)
    return (n, -(-c // block), rows // fold, width // fold, fold * fold * block)


def _flat(buffer):
    """A 1-D view of ``buffer``."""
    from tvm.script.ir_builder import tirx as T

    size = int(np.prod([int(v) for v in buffer.shape]))
    return T.decl_buffer((size,), buffer.dtype, data=buffer.data, scope=buffer.scope())


def _fill_value(params):
    """``zero_point - offset`` in the packing's dtype (``params``: (scale, zero_point,
    offset, dtype)): the padded pixels' and channels' value."""
    from tvm.script.ir_builder import tirx as T

    _, zero_point, offset, dtype = params
    return T.Cast(dtype, T.int32(zero_point - offset))


def _fill(out, row, columns, block, fill):
    """``fill`` into ``columns`` (first, count) of one output row (``row``: its index
    prefix in ``out``)."""
    from tvm.script.ir_builder import tirx as T

    first, count = columns
    if count:
        with T.serial(count * block) as i:
            T.buffer_store(out, fill, [*row, first + i // block, i % block])


def _quantized(load, channels, index, params):
    """The value of input ``index`` (b, channel, y, x), given by ``load`` (``_Source``),
    quantized with ``params`` (scale, zero_point, offset, dtype), or ``zero_point - offset``
    past the input's ``channels`` (the load clamped to the last channel, so the select
    stays a vector one)."""
    from tvm.script.ir_builder import tirx as T

    (b, channel, y, col), (scale, zero_point, offset, dtype) = index, params
    v = load(b, channel, y, col) / T.float32(scale)
    v = T.round(v) + T.float32(zero_point)
    lanes = v.ty.dtype.lanes

    def cast(to, value):
        return T.Cast(f"{to}x{lanes}" if lanes > 1 else to, value)

    q = cast("int32", cast("uint8", T.max(T.min(v, T.float32(255)), T.float32(0))))
    fill = T.int32(zero_point) if lanes == 1 else T.Broadcast(T.int32(zero_point), lanes)
    if isinstance(channel, int):
        return cast(dtype, (q if channel < channels else fill) - offset)
    return cast(dtype, T.if_then_else(channel < channels, q, fill) - offset)
