"""8-bit x 8-bit -> int32 conv2d in channel-packed layouts, and its schedule.

Layouts (the blocking of TVM's x86 ``conv2d_NCHWc_int8``; Intel's oneDNN blocks the same way):

- data   ``NCHW4c``    (N, C/4, H, W, 4) uint8, already padded spatially;
- weight ``OIHW16o4i`` (O/16, C/4, KH, KW, 16, 4) int8, packed once, ahead of time;
- output ``NCHW16c``   (N, O/16, OH, OW, 16) int32.

The innermost 16 output channels by 4 input channels are exactly one ``vpdpbusd``: 4 bytes of
data broadcast against 64 bytes of weights, accumulated into 16 int32 lanes.

Each CPU class has its packing (``layout.PACKINGS``): AVX-VNNI takes the same layouts (two
256-bit ``vpdpbusd``); AVX2 and AVX-512BW take NCHW2c data and OIHW16o2i weights, both
widened to int16 (the innermost 16 output by 2 input channels: an int16 pair of data
broadcast against 16 int16 weights, ``vpmaddwd``, exact in int32); aarch64 takes the VNNI
layouts with int8 data (x - 128) for ``sdot``.
"""

from tvm import te, tirx

OC_BLOCK = 16
IC_BLOCK = 4
REGISTER_COLUMNS = 14  # zmm accumulators per tile, leaving registers for weights and broadcasts
PAIR_BLOCK = 2  # int16 pairs: one vpmaddwd multiplies 2 input channels
AVX2_REGISTER_COLUMNS = 6  # 16 ymm: 6 columns x 2 accumulators + 2 weights + 1 broadcast
# the 256-bit uint8 kernels (vpmaddubsw, AVX-VNNI's vpdpbusd) in tiles of 2 columns by 32
# channels: on the Intel Xeon VM with AMX (2 threads, one process, old and new interleaved),
# resnet18's 3x3 convs at batch 8 ran at 179-194 GMAC/s against 130-156 in tiles of 4-7
# columns by 16 (vpmaddubsw); whole models, logits equal: vpmaddubsw (--fit-pairs) resnet18
# 0.92x / 0.93x (batch 1 / 8), mobilenet_v2 0.94x / 0.94x; AVX-VNNI 0.90x / 0.97x and
# 0.94x / 0.95x. The int16 vpmaddwd kernel ran 4-5 % slower so and keeps its tiles.
YMM_PAIR_COLUMNS = 2
# AVX-512 VNNI's zmm kernel in tiles of 7 columns by 32 channels (the same 14 accumulators as
# 14 by 16, half the broadcasts): Intel Xeon VM with AMX, icelake-server code, whole models
# A/B in one process, logits equal: resnet18 0.927x / 0.939x (batch 1 / 8), mobilenet_v2
# 0.849x / 0.890x; resnet18's 3x3 convs alone at batch 8 616-633 GMAC/s against 572-607.
# On a 2-core AMD EPYC Zen 4 (2026-12-07, the same A/B, 7 by 32 against 14 by 16, batch 1 /
# 8): resnet18 1.001x / 0.999x, mobilenet_v2 1.005x / 1.015x, a tie, so one tiling serves both
ZMM_PAIR_COLUMNS = 7
OUT_ELEMWISE_FUSABLE = 4  # TVM's OpPatternKind::kOutEWiseFusable (conv2d's): FuseOps appends
# the elementwise ops that follow a kernel so marked


def conv2d_nchw4c(data, weight, strides, dilation, op_name, origin=0, groups=1):
    """TE compute of the packed conv (``data``, ``weight``: te tensors in the layouts above,
    or with int16 values and 2-channel blocks; ``strides``, ``dilation``: (h, w) ints;
    ``op_name``: the packing's, which selects the schedule). ``data`` may also be a uint8
    NCHW16c tensor, the output of a uint8 kernel (``requantized_conv_u8``), read as it is:
    each of its 16-channel blocks holds four of the weight's 4-channel blocks (the weight's
    input channels then padded to a multiple of 16), or flat pixel rows (N, 1, H, W * C),
    each pixel's C channels side by side, against a ``layout.pack_flat_weight`` weight
    (``blocked_conv``). ``origin``: the border (pixels) of a bordered ``data`` that the conv
    reads from within (``blocked_conv``); ``groups``: as ``blocked_conv``. Returns the int32
    NCHW16c output tensor."""
    return blocked_conv(
        data,
        weight,
        strides,
        dilation,
        lambda oc, ic_o, kh, kw, ic_i, oc_i: weight[oc, ic_o, kh, kw, oc_i, ic_i],
        "int32",
        op_name,
        block=int(weight.shape[-1]),
        origin=origin,
        groups=groups,
    )


def blocked_conv(
    data, weight, strides, dilation, weight_at, dtype, op_name, block=None, origin=0, groups=1
):
    """TE compute of a channel-blocked conv: ``data`` (N, C/B, H, W, B), padded, against
    ``weight`` (O/16, C/b, KH, KW, ...) read through ``weight_at(oc, ic_o, kh, kw, ic_i,
    oc_i)``, products and sums in ``dtype``; ``block`` b divides B (default B). Returns the
    (N, O/16, OH, OW, 16) tensor, its block annotated with ``op_name``. Loops: N, O/16, OH,
    OW, 16, then C/b, KH, KW, b.

    ``data`` may also be flat pixel rows (N, 1, H, W'): a kernel row's KW pixels of C
    channels are then KW * C consecutive elements, read as the weight's KW' groups of b
    (its taps: ``layout.pack_flat_weight``; the elements past KW * C meet zero weights), so
    ``strides`` are (rows, elements) = (s_h, s_w * C) and ``dilation`` must be (1, 1). With
    C = 3 and b = 4 a 7-pixel row takes 6 groups where NCHW4c takes 7, one of each 4 bytes
    a padded channel.

    A blocked ``data`` may carry a border of ``origin`` pixels that the conv does not read
    (a pre-padded output, ``prepadded``, read by an unpadded conv): its input is then
    ``data[:, :, origin:-origin, origin:-origin]``.

    ``groups`` > 1: a grouped conv (``layout.merged_groups``, ``layout.expand_groups``):
    output block ``oc`` of group g = oc // (O/16 / groups) reads the input blocks g * C_w to
    (g + 1) * C_w, C_w the weight's C/b."""
    flat = len(data.shape) == 4
    (n, ic_chunks, height, width), block, data_at = _reader(data, block, origin)
    oc_chunks, weight_chunks, kh_size, kw_size = weight.shape[:4]
    if groups > 1:
        ic_chunks, per_group = weight_chunks, oc_chunks // groups

        def first(oc):
            return oc // per_group * weight_chunks
    else:

        def first(oc):
            return 0

    (sh, sw), (dh, dw) = strides, dilation
    if flat:  # the taps are groups of ``block`` elements
        dw, out_w = block, (width - kw_size * block) // sw + 1
    else:
        out_w = out_size(width, kw_size, sw, dw)
    ic_o = te.reduce_axis((0, ic_chunks), "ic_o")
    kh = te.reduce_axis((0, kh_size), "kh")
    kw = te.reduce_axis((0, kw_size), "kw")
    ic_i = te.reduce_axis((0, block), "ic_i")
    return te.compute(
        (n, oc_chunks, out_size(height, kh_size, sh, dh), out_w, OC_BLOCK),
        lambda b, oc, y, x, oc_i: te.sum(
            data_at(b, first(oc) + ic_o, y * sh + kh * dh, x * sw + kw * dw, ic_i).astype(dtype)
            * weight_at(oc, ic_o, kh, kw, ic_i, oc_i).astype(dtype),
            axis=[ic_o, kh, kw, ic_i],
        ),
        name="conv2d_" + dtype,
        attrs={"op_name": op_name},
    )


def _reader(data, block, origin=0):
    """((N, input blocks, H, W), block, data_at(b, ic_o, y, x, ic_i)) of ``blocked_conv``'s
    ``data``: x counts elements in flat pixel rows, pixels in a blocked layout, whose
    blocks may hold several of ``block`` channels each (flat rows need ``block``), read
    from ``origin`` pixels in."""
    if len(data.shape) == 4:
        return data.shape, int(block), lambda b, ic_o, y, x, ic_i: data[b, ic_o, y, x + ic_i]
    n, chunks, height, width, data_block = data.shape
    block = int(block or data_block)
    per_chunk = int(data_block) // block  # weight blocks in one block of data

    def data_at(b, ic_o, y, x, ic_i):
        y, x = y + origin, x + origin
        if per_chunk == 1:
            return data[b, ic_o, y, x, ic_i]
        return data[b, ic_o // per_chunk, y, x, ic_o % per_chunk * block + ic_i]

    shape = (n, chunks * per_chunk, height - 2 * origin, width - 2 * origin)
    return shape, block, data_at


def out_size(size, kernel, stride, dilation):
    """Output extent of a conv over a padded input extent ``size``."""
    return (size - (kernel - 1) * dilation - 1) // stride + 1


def requantized_conv(
    data, weight, correction, rescale, strides, dilation, rows, op_name, origin=0, groups=1
):
    """The packed conv with its epilogue: int32 NCHW16c -> FP32 in the layer's own layout.

    ``correction`` (C,) int32 and ``rescale`` (C,) float32 te tensors (C <= the padded output
    channels): out = float32(acc - correction[c]) * rescale[c]. The output is (N, C, OH, OW),
    or with ``rows`` (a dense layer packed by ``layout.pack_rows``) (M, C). The conv's int32
    tile never reaches memory: ``schedule_packed`` computes it per output tile. ``origin``,
    ``groups``: as ``conv2d_nchw4c``.
    """
    acc = conv2d_nchw4c(data, weight, strides, dilation, op_name, origin, groups)
    channels = correction.shape[0]

    def epilogue(value, c):
        return (value - correction[c]).astype("float32") * rescale[c]

    if rows:
        return te.compute(
            (acc.shape[3], channels),
            lambda r, c: epilogue(acc[0, c // OC_BLOCK, 0, r, c % OC_BLOCK], c),
            name="requantize",
        )
    n, _, out_h, out_w, _ = acc.shape
    return te.compute(
        (n, channels, out_h, out_w),
        lambda b, c, y, x: epilogue(acc[b, c // OC_BLOCK, y, x, c % OC_BLOCK], c),
        name="requantize",
    )


def requantized_conv_u8(
    data,
    weight,
    constants,
    epilogue,
    strides,
    dilation,
    op_name,
    origin=0,
    residual_border=0,
    groups=1,
):
    """The packed conv with its integer requantize to the next layer's uint8 in its
    epilogue: int32 NCHW16c -> uint8 NCHW16c, 16 output channels per vector.

    ``constants``: (correction int32, multiplier float32, bias float32) te tensors (O16 *
    16,), zero past the layer's channels (no layer reads those outputs), and with a residual
    input its uint8 (N, O16, OH, OW, 16) te tensor. ``epilogue``: (zero_point, (q_lo, q_hi),
    (k, z_t) of the residual or None), as ``patterns.RequantizedLayer``. The arithmetic is
    the graph's (``quantize.requantize``), in its order, so the result is the plain graph's
    bit for bit. ``origin``, ``groups``: as ``conv2d_nchw4c``; ``residual_border``: the
    border of the residual input (read from within it). Returns the (N, O16, OH, OW, 16)
    uint8 tensor.
    """
    acc = conv2d_nchw4c(data, weight, strides, dilation, op_name, origin, groups)
    residual, rb = (constants[3] if len(constants) > 3 else None), residual_border

    def value(b, oc, y, x, oc_i):
        added = residual[b, oc, y + rb, x + rb, oc_i] if residual is not None else None
        channel = oc * OC_BLOCK + oc_i
        return requantize_u8(acc[b, oc, y, x, oc_i], channel, constants, epilogue, added)

    return te.compute(acc.shape, value, name="requantize_u8")


def requantize_u8(acc, c, constants, epilogue, residual=None):
    """The uint8 of int32 accumulator ``acc`` of channel ``c`` by the integer requantize
    (``quantize.requantize``): clip(round(float32(acc - correction[c]) * multiplier[c] +
    bias[c] (+ float32(residual - z_t) * k)) + zero_point, q_lo, q_hi), rounding half to
    even. ``constants``: (correction, multiplier, bias, ...) te tensors; ``epilogue``:
    (zero_point, (q_lo, q_hi), (k, z_t) or None[, ``activation.Activation`` or None]);
    ``residual``: the residual input's uint8 value at this output, or None. With an
    activation, its ops and the quantize's divide by its scale come before the round.

    Computed as lrint(clip(v, q_lo - zero_point, q_hi - zero_point)) + zero_point: the same
    integers (rounding is monotone and leaves the integer bounds where they are), with the
    value in int32 range before it is converted, in one instruction on x86 (``vcvtps2dq``,
    rounding to nearest even) where round, add and convert took three."""
    correction, multiplier, bias = constants[:3]
    zero_point, (q_lo, q_hi), residual_params, *rest = epilogue
    v = (acc - correction[c]).astype("float32") * multiplier[c] + bias[c]
    if residual is not None:
        k, z_t = residual_params
        v = v + (residual.astype("int32") - z_t).astype("float32") * tirx.const(k, "float32")
    activation = rest[0] if rest else None
    if activation is not None:
        expr, scale = activation  # call_te passes an ``Activation`` as a plain tuple
        v = activated(expr, v) / tirx.const(scale, "float32")
    v = tirx.min(v, tirx.const(float(q_hi - zero_point), "float32"))
    v = tirx.max(v, tirx.const(float(q_lo - zero_point), "float32"))
    rounded = tirx.call_llvm_pure_intrin("int32", "llvm.lrint", v)
    return (rounded + zero_point).astype("uint8")


_OPS = {
    "sigmoid": tirx.sigmoid,
    "tanh": tirx.tanh,
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": lambda a, b: a / b,
    "maximum": tirx.max,
    "minimum": tirx.min,
}


def activated(expr, v):
    """The float32 TIR value of an ``activation.Activation`` tree ``expr`` at ``v``."""
    if isinstance(expr, float):
        return tirx.const(expr, "float32")
    if isinstance(expr, str):  # activation.X
        return v
    op, *operands = expr
    return _OPS[op](*(activated(a, v) for a in operands))


MIN_COLUMNS = 4  # fewer columns per tile leave the multipliers waiting on loads
STRETCH = 2  # columns past the register limit allowed to reach MIN_COLUMNS


def register_block(out_w, limit=None):
    """Output columns accumulated in registers per tile: the largest divisor of ``out_w`` up
    to ``limit`` (default ``REGISTER_COLUMNS``), or up to ``limit + STRETCH`` when that one
    is below ``MIN_COLUMNS``: a few spilled registers cost less than a thin tile. On AMD Zen 3
    (limit 6, 2 threads), rows of 7 (resnet18's layer4, 3x3 512->512) ran at 34 GMAC/s with
    1 column and 68 GMAC/s with 7; rows of 28 and 56 keep 4 (70 and 67 GMAC/s, 7 and 8
    columns measured slower)."""
    limit = limit or REGISTER_COLUMNS

    def largest(bound):
        return max(d for d in range(1, min(out_w, bound) + 1) if out_w % d == 0)

    best = largest(limit)
    return best if best >= MIN_COLUMNS else largest(limit + STRETCH)


def schedule_packed(sch, conv, out, packing):
    """Schedule the packed ``conv`` block and its epilogue in place (``sch``: a
    ``tvm.s_tir.Schedule``; ``out``: the last block, (N, C, OH, OW) or (M, C), into which
    every block between them has been inlined; ``packing``: its ``layout.Packing``).

    ``tile_conv``'s tiles of up to ``packing.columns`` output columns (or of
    ``packing.pair_columns`` by 32 channels); the innermost 16 output channels by one input
    block are the tensor intrinsic ``packing.intrin`` (``intrin.ensure_intrin``).
    Measured with VNNI on a 3x3 128->128 conv at 28x28, 2 threads (AMD Zen 5): about
    0.115 ms, against PyTorch's quantized conv 0.164 ms. The epilogue's rows are vector
    loops: the requantize to uint8 costs about as much as a conv of few input channels, and
    on AMD Zen 4 (2 threads) mobilenet_v2's 17 expand convs (16-160 input channels) took
    2.55 ms unrolled and 2.06 ms so (each kernel timed alone); the FP32 conv keeps unrolled
    rows (resnet18 batch 1, 11.8 ms unrolled against 12.9 ms).
    """
    from .intrin import ensure_intrin

    ensure_intrin(packing.intrin)
    kh_size, kw_size = (int(sch.get(loop).extent) for loop in sch.get_loops(conv)[-3:-1])
    wide = kh_size * kw_size >= WIDE_TAPS
    oc, x, oc_i, ic_o, kh, kw, ic_i = tile_conv(
        sch,
        conv,
        out,
        packing.columns,
        vector_rows=True,
        paired=wide,
        pair_columns=packing.pair_columns,
    )
    sch.reorder(ic_o, kh, kw, oc, x, oc_i, ic_i)
    init = sch.decompose_reduction(conv, ic_o)
    sch.tensorize(oc_i, packing.intrin)
    sch.unroll(x)
    sch.vectorize(sch.get_loops(init)[-1])


WIDE_TAPS = 25  # kernels of 5x5 taps or more (stems): half the columns, so tiles pair.
# resnet18's 7x7 stem (3 input channels: a 49-deep reduction), AMD Zen 5, 2 threads, timed
# alternately in one process: 7 columns by 32 channels ran in 0.72x (batch 1) and 0.66x
# (batch 8) the time of 14 columns by 16; 14 by 32 (28 accumulators) in 1.2-1.6x
GUARDED_COLUMNS = (4, 5, 6)  # tile widths for kernels that may end rows on a partial tile


def guarded_block(out_w):
    """Output columns per tile when a row may end on a partial (guarded) tile, for 16-register
    CPUs: of 4, 5 and 6 the one that wastes the fewest columns past the row (the fewest
    tiles on a tie); rows narrower than 4 in one tile. Measured for the FP32 conv on AMD Zen 3
    (2 threads, 3x3 convs of resnet18): rows of 7 ran at 36 GMAC/s as one 7-column tile
    (spilled registers) and 78 GMAC/s in tiles of 4; rows of 14 at 36 and 94 (tiles of 5).
    The INT8 kernels cannot take partial tiles (the predicate blocks tensorize)."""
    if out_w < GUARDED_COLUMNS[0]:
        return out_w
    return min(GUARDED_COLUMNS, key=lambda c: (-(-out_w // c) * c - out_w, c))


def tile_conv(
    sch,
    conv,
    out,
    limit=REGISTER_COLUMNS,
    guarded=False,
    vector_rows=False,
    paired=False,
    pair_columns=0,
):
    """The tiling shared by the packed convs (the conv block's loops: N, O/16, OH, OW, 16,
    then the reductions C/block, KH, KW, block): ``out``'s tiles (N, C/16, OH) in parallel;
    per tile, ``register_block`` output columns by 16 output channels (by 32 when that fills
    the registers better: rows of 7 or fewer columns) of the conv accumulate in a small
    buffer over (C/block, KH, KW), then the epilogue writes the tile (the transpose back to
    rows: channels unrolled, and the columns unrolled too, or with ``vector_rows`` one
    vector loop, which reads the tile with a gather). ``guarded``: tiles of
    ``guarded_block`` columns, the last one of a row partial, where ``limit`` is below
    ``REGISTER_COLUMNS`` (16-register CPUs). ``pair_columns``: where not 0 and a row divides
    into tiles of that many columns, and the channels into pairs of 16, those tiles by 32
    channels (``YMM_PAIR_COLUMNS``, ``ZMM_PAIR_COLUMNS``). Returns the
    conv's loops (output-channel blocks, columns, 16 output channels, C/block, KH, KW,
    block) under the tile, for the caller to order."""
    loops, lanes = sch.get_loops(out), []
    if len(loops) == 2:  # dense: (M, C)
        (cols, c), outer, inner = loops, [], []
    else:  # conv: (N, C, OH, OW), or (N, C/16, OH, OW, 16) for a uint8 NCHW16c output
        outer, c, inner, cols, *lanes = [loops[0]], *loops[1:]
        inner = [inner]
    out_w = int(sch.get(cols).extent)
    small = guarded and limit < REGISTER_COLUMNS
    columns = guarded_block(out_w) if small else register_block(out_w, limit // (1 + paired))
    block = OC_BLOCK if lanes else 1  # channels per step of ``c``
    pairs = int(sch.get(c).extent) * block % (2 * OC_BLOCK) == 0
    pair = 2 * columns <= limit and pairs
    if pair_columns and pairs and out_w % pair_columns == 0:
        columns, pair = pair_columns, True
    c_o, c_i = sch.split(c, [None, OC_BLOCK // block * (2 if pair else 1)])
    x_o, x_i = sch.split(cols, [None, columns])
    sch.reorder(*outer, c_o, *inner, x_o, c_i, x_i, *lanes)
    sch.parallel(sch.fuse(*outer, c_o, *inner))
    sch.compute_at(conv, x_o, preserve_unit_loops=True)
    sch.unroll(c_i)
    if lanes:  # 16 channels of a column: one vector
        sch.unroll(x_i)
        sch.vectorize(lanes[0])
    else:
        (sch.vectorize if vector_rows else sch.unroll)(x_i)
    oc = sch.get_loops(conv)[-8]  # under the tile: N, O/16 (1 or 2), OH, OW, 16, reductions
    sch.unroll(oc)
    return [oc, *sch.get_loops(conv)[-6:]]


def register_columns(target):
    """Output columns the packed convs accumulate in registers per tile: 14 with AVX-512's 32
    zmm registers, 6 with 16 ymm (each column takes 2 ymm of 16 lanes)."""
    from ..features import has_feature

    return REGISTER_COLUMNS if has_feature(target, "avx512f") else AVX2_REGISTER_COLUMNS
