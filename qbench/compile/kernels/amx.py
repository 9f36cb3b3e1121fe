"""The INT8 conv2d on Intel AMX tiles (``tdpbusd``), with the integer requantize to uint8
in its epilogue, reading and writing the channel-blocked uint8 layouts of the VNNI path.

One ``tdpbusd`` multiplies an A tile (up to 16 rows of 64 uint8) by a B tile (up to 16 rows
of 16 x 4 int8) into a C tile of 16 x 16 int32; it costs the same whatever the depth K of
the rows (measured on an Intel Xeon with AMX: 5.0 ns for K = 16, 32 and 64 bytes), so a
kernel is as fast as its rows are long. An A row here is one output pixel, and its bytes
are ``taps`` consecutive input columns of ``block`` channels each: in NCHW16c data the 16
channels of 3 neighbouring columns (a 3x3 conv's row of taps, K = 48), in NCHW4c data the
4 channels of 7 (the 7x7 stem, K = 28), so a row of taps is one instruction, read straight
from the data with a row stride of ``stride x block`` bytes (overlapping rows: tile loads
allow any stride). A 1x1 conv on NCHW16c has rows of 16 bytes. A stride-2 conv on at most
4 channels (a network's stem) reads its input folded space-to-depth (``fold_plan``): each
pixel holds 2 x 2 pixels of 4 channels, and it runs as a stride-1 conv over those 16
channels with the taps folded alike (``fold_weight``): the 7x7 stem takes 4 rows of 4 x 16
= 64 bytes where it took 7 of 28 (0.81-0.87x the stem's time on an Intel Xeon with AMX),
from batch 2 (``FOLD_MIN_BATCH``).

The kernel (``conv``) runs (output-channel group, image, run of steps) in parallel; each
task loads its own tile configuration (it is per thread), accumulates 2 x 2 C tiles (2 x 16
output positions by 2 x 16 output channels) over the input channel blocks, kernel rows and
tap groups, stores them to a small int32 buffer and requantizes each pixel's 16 channels as
one vector (``conv2d.requantize_u8``: the arithmetic of the VNNI path, so the uint8 output
is the same bit for bit). Output positions run along one output row, or for stride 1 along
the padded rows (``AmxPlan.flat``); a line that ends inside a tile takes its last tile
shifted back (recomputing a few positions). Where a group's weights outgrow L1
(``CHUNK_MIN``), a task instead runs ``SPAN`` steps across images one chunk of input
blocks at a time, saving and reloading its C tiles between chunks (``chunked``), so each
chunk's weights are read from L2 once per task, not once per step.

A uint8 max pool that alone reads such a conv's output (resnet's stem -> max pool) is
computed by the conv's kernel (``pooled``): each task keeps a ring of the pool window's
conv rows as int32 accumulators and requantizes the max of each window, a quarter of the
pixels for a 3x3 stride-2 pool, and no tensor of the conv's size is stored or read again.
The requantize is monotone (multipliers >= 0), so the uint8 are those of pooling after it.

The tile operations come from ``AmxTiles`` (the LLVM intrinsics; x86 AMX targets only:
compiling them for any other CPU aborts the process) or ``LoopTiles``, the same program
with each tile operation as plain TIR loops of its semantics, so the blocking and indexing
are checked bit for bit on any CPU.
"""

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..features import TILE_PERMISSION
from .prepadded import fill_border

TILE_ROWS = 16  # rows of a tile: output pixels of an A / C tile, K quads of a B tile
TILE_BYTES = 64  # bytes of a tile row
LANES = 16  # output channels of a C tile (int32)
QUAD = 4  # bytes one tdpbusd dot product takes per lane
TILES = 8  # tmm0-7
ROW_RUNS = 4  # parallel tasks per (image, output-channel group): runs of steps
WIDE = 64  # channels per block of a wide output (``AmxPlan.out_block``)
FOLD = 2  # space-to-depth factor of a stride-2 conv on at most QUAD channels
# Folding pays from batch 2: resnet18 whole, A/B in one process on an Intel Xeon with AMX,
# ran 0.980x at batch 2, 0.975x at 4 and 0.97x at 8, but 1.003-1.016x at batch 1 (the
# stem 0.029 ms faster, the input's quantize slower by more than its 0.006 ms alone)
FOLD_MIN_BATCH = 2
# A conv whose output-channel group holds more weights than CHUNK_MIN bytes accumulates a
# chunk of at most CHUNK_BYTES of them at a time over SPAN steps (``chunked``): resnet18's
# 3x3 convs at batch 8 on an Intel Xeon with AMX, each alone, bit-exact: 256->256 at 14x14
# 0.354 -> 0.251 ms, 512->512 at 7x7 0.343 -> 0.292, 256->512 stride 2 0.329 -> 0.211,
# 128->256 stride 2 (36 KB a group) 0.171 -> 0.149, 128->128 at 28x28 (36 KB) 0.289 -> 0.301;
# not chunked: 64->64 at 56x56 (18 KB), 0.297 -> 0.485 chunked (docs/measurements.md)
CHUNK_MIN = 32 * 1024
CHUNK_BYTES = 18 * 1024
SPAN = 4


@dataclass(frozen=True)
class AmxPlan:
    """The blocking of one AMX conv (all extents in elements).

    Attributes:
        data: (N, CB, HP, WP, block) shape of the padded uint8 input, ``block`` 4 or 16.
        out: (N, OCB, OH, OW, 16) shape of the uint8 output.
        kernel: (KH, KW).
        strides, dilation: (h, w).
        taps: input columns per A row (1 with a column dilation).
        groups: A rows per kernel row: ceil(KW / taps); the taps past KW have zero weights.
        rows: output positions per tile, at most 16.
        m_tiles, n_tiles: C tiles per step along output positions and output channels.
        flat: the output positions of a tile run along the padded rows of the image, not
            one output row (stride 1: input position = output position + a tap's offset,
            the same step across row ends); the positions past OW of each row are computed
            and not stored. 7x7 outputs take 4 tiles (49 of 64 rows used) instead of 7 of
            7 rows (49 of 112).
        origin: (rows, columns) of ``data`` before the conv's first input pixel: the border
            of a tensor written with one (``border``) that this conv reads unpadded.
        border: pixels of the output's zero point the kernel writes around its output on
            every side, so that the next 3x3 convs read it as their padding; the stored
            tensor is ``stored``.
        residual_border: the border of the residual input (its shape: (N, OCB, OH + 2 b,
            OW + 2 b, 16)).
        fold: the space-to-depth factor f of ``data`` (``fold_plan``): 1, or each pixel
            holds f x f pixels of ``QUAD`` channels, and ``kernel`` and ``strides`` are those
            of the folded conv.
        shift: (rows, columns) of padding added before the input so that its padding is a
            multiple of ``fold`` (``fold_weight``).
        pool: ((KH, KW), (SH, SW), (PH, PW)) of a max pool the kernel applies to the conv's
            int32 accumulators before the requantize (``pooled``), or None.
        out_block: channels per block of the stored output: 16 (NCHW16c), or ``WIDE``
            (NCHW64c, ``kernels.wide``: a 3x3 conv reading it takes one 64-byte tile row per
            tap, where NCHW16c gives 48-byte rows at 16-byte steps).
        residual_block: channels per block of the residual input, 16 or ``WIDE``.
        chunk: input blocks per chunk of the accumulation (``chunked``), or 0: all of them
            at once.
        span: steps of one task of a chunked plan, across images.
        float_channels: the channels C of a float32 (N, C, OH, OW) output, the conv's
            dequantized result (``dequantized``), or 0 for a uint8 channel-blocked output.
    """

    data: tuple
    out: tuple
    kernel: tuple
    strides: tuple
    dilation: tuple
    taps: int
    groups: int
    rows: int
    m_tiles: int
    n_tiles: int
    flat: bool
    origin: tuple = (0, 0)
    border: int = 0
    residual_border: int = 0
    fold: int = 1
    shift: tuple = (0, 0)
    pool: tuple = None
    out_block: int = LANES
    residual_block: int = LANES
    chunk: int = 0
    span: int = 1
    float_channels: int = 0

    @property
    def block(self):
        return self.data[-1]

    @property
    def k_bytes(self):
        """Bytes of an A row (the depth of one ``tdpbusd``)."""
        return self.taps * self.block

    @property
    def weight_shape(self):
        """(OCB, CB, KH, groups, K quads, 16, 4) of ``pack_weight``."""
        kh = self.kernel[0]
        return (self.out[1], self.data[1], kh, self.groups, self.k_bytes // QUAD, LANES, QUAD)

    @property
    def result(self):
        """(N, OCB, H, W, 16) of the kernel's result: ``out``, or the max pool's output."""
        if self.pool is None:
            return self.out
        n, ocb, oh, ow, lanes = self.out
        (kh, kw), (sh, sw), (ph, pw) = self.pool
        return (n, ocb, (oh + 2 * ph - kh) // sh + 1, (ow + 2 * pw - kw) // sw + 1, lanes)

    @property
    def stored(self):
        """(N, C / out_block, H + 2 b, W + 2 b, out_block) of the output tensor (``result``)
        with its ``border`` b; (N, C, OH, OW) of a float32 output (``float_channels``)."""
        if self.float_channels:
            n, _, oh, ow, _ = self.out
            return (n, self.float_channels, oh, ow)
        return _bordered(self.result, self.border, self.out_block)

    @property
    def residual_shape(self):
        return _bordered(self.out, self.residual_border, self.residual_block)

    @property
    def positions(self):
        """Output positions of a line of tiles: (OH - 1) * WP + OW when ``flat``, else OW
        (one line per output row)."""
        oh, ow = self.out[2:4]
        return (oh - 1) * self.data[3] + ow if self.flat else ow

    @property
    def lines(self):
        return 1 if self.flat else self.out[2]

    @property
    def line_tiles(self):
        """M tiles of a line (the last one shifted back to end at the line's last
        position)."""
        return -(-self.positions // self.rows)

    @property
    def steps(self):
        """Steps of ``m_tiles`` M tiles over an image's lines one after the other, a step's
        tiles from one line or two (a line of one tile, a strided conv's 7 output columns,
        shares its step with the next line's): ceil(lines x line_tiles / m_tiles)."""
        return -(-self.lines * self.line_tiles // self.m_tiles)

    def step_tiles(self, step):
        """[(line, first position)] of the M tiles of ``step`` (an int or a TIR expression);
        past the image's last tile the last is repeated."""
        from tvm.script.ir_builder import tirx as T

        last = self.lines * self.line_tiles - 1
        tiles = [T.min(step * self.m_tiles + mi, last) for mi in range(self.m_tiles)]
        return [self._tile_start(t) for t in tiles]

    def _tile_start(self, tile):
        from tvm.script.ir_builder import tirx as T

        line, index = tile // self.line_tiles, tile % self.line_tiles
        return line, T.min(index * self.rows, self.positions - self.rows)


def _bordered(shape, border, block):
    """(N, OCB, H, W, 16) ``shape`` with a ``border`` on every side, in blocks of ``block``
    channels."""
    n, c, h, w, lanes = shape
    return (n, c * lanes // block, h + 2 * border, w + 2 * border, block)


def _in_block(index, block):
    """Index (N, OCB, H, W, 16) of 16-channel block OCB as an index of the same tensor in
    blocks of ``block`` channels."""
    b, o, y, x, lane = index
    per = block // LANES
    return (b, o // per, y, x, o % per * LANES + lane)


def plan(data_shape, channels_out, kernel, strides, dilation, origin=0):
    """The ``AmxPlan`` of a conv of ``channels_out`` outputs over padded (N, C/block, H, W,
    block) ``data_shape``, reading it from ``origin`` rows and columns in on every side (the
    border of a bordered tensor read by an unpadded conv).

    The taps of a row are grouped so that a row holds at most 64 bytes and the groups of a
    kernel row are as even as can be (KW 5 on 16 channels: 2 groups of 3 taps, 1 past KW).
    """
    n, cb, hp, wp, block = (int(v) for v in data_shape)
    hp, wp = hp - 2 * origin, wp - 2 * origin
    kh, kw = kernel
    taps = min(kw, TILE_BYTES // block) if dilation[1] == 1 else 1
    groups = -(-kw // taps)
    taps = -(-kw // groups)
    oh = (hp - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    ow = (wp - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    ocb = -(-int(channels_out) // LANES)
    flat = tuple(strides) == (1, 1)
    hp, wp = hp + 2 * origin, wp + 2 * origin
    positions = (oh - 1) * wp + ow if flat else ow
    n_tiles = 2 if ocb % 2 == 0 else 1
    p = AmxPlan(
        (n, cb, hp, wp, block),
        (n, ocb, oh, ow, LANES),
        (kh, kw),
        tuple(strides),
        tuple(dilation),
        taps,
        groups,
        min(TILE_ROWS, positions),
        1,
        n_tiles,
        flat,
        (origin, origin),
    )
    return _chunking(_paired(p))


def _paired(p):
    """``p`` with 2 M tiles a step where its lines hold more than one tile, else 1."""
    return dataclasses.replace(p, m_tiles=2 if p.lines * p.line_tiles > 1 else 1)


def _along_rows(p):
    """``p`` with its tiles along single output rows (not ``flat``), at most 16 positions
    a tile."""
    return dataclasses.replace(p, flat=False, rows=min(TILE_ROWS, p.out[3]))


def _chunking(p):
    """``p`` ``chunked`` where a group's weights pass ``CHUNK_MIN`` bytes: the chunk the most
    input blocks that divide them within ``CHUNK_BYTES`` (at least one), over ``SPAN``
    steps."""
    per_block = int(np.prod(p.weight_shape[2:])) * p.n_tiles
    cb = p.data[1]
    if per_block * cb <= CHUNK_MIN:
        return p
    fits = [d for d in range(1, cb + 1) if cb % d == 0 and d * per_block <= CHUNK_BYTES]
    return chunked(p, max(fits, default=1), SPAN)


def pool_fits(pool):
    """Whether ``pooled`` takes a max pool ((KH, KW), (SH, SW), (PH, PW)): its padding
    within a window (PH < KH: every window holds an output row) and its stride skipping
    no row (SH <= KH: the rows live in a ring of KH), and the same for columns."""
    (kh, kw), (sh, sw), (ph, pw) = pool
    return ph < kh and pw < kw and sh <= kh and sw <= kw


def chunked(p, chunk, span):
    """``p`` accumulated ``chunk`` input blocks at a time over tasks of ``span`` steps
    (``_chunked_tasks``).

    Raises:
        ValueError: ``chunk`` does not divide the input blocks, ``span`` < 1, or ``p``
            pools.
    """
    if p.pool is not None or chunk < 1 or span < 1 or p.data[1] % chunk:
        message = f"{chunk} of {p.data[1]} input blocks over {span} steps, pool {p.pool}"
        raise ValueError("amx.chunked: " + message)
    return dataclasses.replace(p, chunk=chunk, span=span)


def dequantized(p, channels):
    """``p`` storing the conv's first ``channels`` outputs dequantized to float32 (N, C, OH,
    OW), float32(acc - correction[c]) * multiplier[c] (the FP32 result of the VNNI path's
    ``conv2d.requantized_conv``, bit for bit), where no integer requantize follows: a conv
    whose output only concats and pools read (densenet's). Its tiles run along single
    output rows, so a tile's positions of one channel are one run of its output row
    (``_dequantize``).

    Raises:
        ValueError: ``channels`` outside 1..the plan's output channels, or ``p`` pools or
            writes a border.
    """
    if not 0 < channels <= p.out[1] * LANES or p.pool is not None or p.border:
        message = f"{channels} of {p.out[1] * LANES} channels, pool {p.pool}, border {p.border}"
        raise ValueError("amx.dequantized: " + message)
    return _paired(_along_rows(dataclasses.replace(p, float_channels=channels)))


def pooled(p, pool):
    """``p`` with a max pool ((KH, KW), (SH, SW), (PH, PW)) of its output fused (``pool``),
    its tiles along single output rows (a pooled row reads whole conv rows).

    Raises:
        ValueError: a pool ``pool_fits`` refuses.
    """
    if not pool_fits(pool):
        raise ValueError(f"amx.pooled: max pool {pool} pads or strides past its window")
    rows = _along_rows(dataclasses.replace(p, chunk=0, span=1, pool=tuple(pool)))
    return dataclasses.replace(rows, m_tiles=2 if rows.line_tiles > 1 else 1)


def fold_of(inputs, strides, dilation, batch):
    """``FOLD`` for a conv of stride ``FOLD`` without dilation on at most ``QUAD`` input
    channels (it folds into ``LANES`` channels) and a batch of at least ``FOLD_MIN_BATCH``
    images, else 1."""
    folds = inputs <= QUAD and tuple(strides) == (FOLD, FOLD) and tuple(dilation) == (1, 1)
    return FOLD if folds and batch >= FOLD_MIN_BATCH else 1


def fold_plan(input_shape, padding, channels_out, kernel, fold=FOLD):
    """(the ``AmxPlan`` of a stride-``fold`` conv of ``channels_out`` outputs over an (N, C,
    H, W) input with C <= ``QUAD`` padded by ``padding`` (top, left, bottom, right), run as a
    stride-1 conv over its space-to-depth fold, (N, 1, H', W', fold * fold * QUAD); the
    padding of the unfolded input that folds into that shape).

    The fold holds the whole input, and may hold more than the conv reads (an even kernel
    on an odd size): the plan's outputs are the conv's, planned over the rows and columns
    the folded kernel reads. It also holds the columns a row group reads past the folded
    kernel (``extra_columns``: 5 folded taps in 2 groups of 3)."""
    n, _, h, w = (int(v) for v in input_shape)
    top, left, bottom, right = padding
    rows = _folded_extent(h, (top, bottom), kernel[0], fold)
    cols = _folded_extent(w, (left, right), kernel[1], fold)
    block = fold * fold * QUAD
    p = plan(
        (n, 1, rows.read, cols.read, block),
        channels_out,
        (rows.kernel, cols.kernel),
        (1, 1),
        (1, 1),
    )
    extra = extra_columns(dataclasses.replace(p, data=(n, 1, rows.size, cols.size, block)))
    data = (n, 1, rows.size, cols.size + extra, block)
    padding = (rows.before, cols.before, rows.after, cols.after + fold * extra)
    return dataclasses.replace(p, data=data, fold=fold, shift=(rows.shift, cols.shift)), padding


class _Extent(NamedTuple):
    """One axis of ``fold_plan``: ``shift`` makes the padding ``before`` a multiple of the
    fold; ``kernel`` is the folded kernel; ``read`` the folded size the conv reads (the
    folded kernel's reach past the last output: zero weights read it); ``size`` the folded
    size, which also holds the whole input; ``after`` the unfolded padding after."""

    shift: int
    kernel: int
    read: int
    size: int
    before: int
    after: int


def _folded_extent(size, padding, kernel, fold):
    """The ``_Extent`` of an axis of ``size`` padded by (before, after) ``padding``, for a
    ``kernel`` at stride ``fold``."""
    before, after = padding
    shift = (-before) % fold
    folded_kernel = -(-(kernel + shift) // fold)
    read = (size + before + after - kernel) // fold + folded_kernel
    folded = max(read, -(-(before + shift + size) // fold))
    return _Extent(
        shift, folded_kernel, read, folded, before + shift, fold * folded - before - shift - size
    )


def fold_weight(w, fold, shift):
    """int8 (O, C, KH, KW), C <= ``QUAD`` -> (O, fold * fold * QUAD, KH', KW') of the conv
    over the space-to-depth fold (``fold_plan``): channel (dy * fold + dx) * QUAD + c, tap
    (ky, kx) holds w[o, c, fold * ky + dy - shift[0], fold * kx + dx - shift[1]], and zero
    where that is past the kernel or C."""
    o, c, kh, kw = w.shape
    fkh, fkw = -(-(kh + shift[0]) // fold), -(-(kw + shift[1]) // fold)
    spread = np.zeros((o, QUAD, fkh * fold, fkw * fold), np.int8)
    spread[:, :c, shift[0] : shift[0] + kh, shift[1] : shift[1] + kw] = w
    # (O, C, KH', dy, KW', dx) -> (O, dy, dx, C, KH', KW')
    blocks = spread.reshape(o, QUAD, fkh, fold, fkw, fold).transpose(0, 3, 5, 1, 2, 4)
    return blocks.reshape(o, fold * fold * QUAD, fkh, fkw)


def extra_columns(p):
    """Input columns an A row may read past the padded width (taps past KW, which meet zero
    weights): the caller pads them with the zero point so every read stays in the tensor."""
    last = p.origin[1] + (p.out[3] - 1) * p.strides[1] + (p.groups * p.taps - 1) * p.dilation[1]
    return max(0, last - (p.data[3] - 1))


def pack_weight(w, p):
    """int8 (O, C, KH, KW) -> ``p.weight_shape``: for each output-channel block, input block,
    kernel row and tap group, one B tile of K quads by 16 output channels by 4 bytes, where
    quad q holds tap ``q // (block / 4)`` and channels ``4 * (q % (block / 4)) + i``;
    output channels, input channels and taps past the layer's are zero. A folded plan
    (``p.fold`` > 1) takes the unfolded weights and folds them first (``fold_weight``)."""
    if p.fold > 1:
        w = fold_weight(w, p.fold, p.shift)
    o, c, kh, kw = w.shape
    ocb, cb, _, groups, quads, _, _ = p.weight_shape
    padded = np.zeros((ocb * LANES, cb * p.block, kh, groups * p.taps), np.int8)
    padded[:o, :c, :, :kw] = w
    # (OCB, 16o, CB, C4, 4i, KH, G, T) -> (OCB, CB, KH, G, T, C4, 16o, 4i)
    blocks = padded.reshape(ocb, LANES, cb, p.block // QUAD, QUAD, kh, groups, p.taps)
    packed = blocks.transpose(0, 2, 5, 6, 7, 3, 1, 4)
    return np.ascontiguousarray(packed).reshape(p.weight_shape)


class AmxTiles:
    """Tile operations as the x86 AMX intrinsics of LLVM (``tdpbusd`` and its loads and
    stores). Tile numbers are immediates; strides are in bytes."""

    emulated = False

    def __init__(self):
        self.shapes = {}

    @staticmethod
    def _call(name, *args):
        from tvm.script.ir_builder import tirx as T

        T.evaluate(T.call_llvm_intrin("void", "llvm.x86." + name, *args))

    @staticmethod
    def _tile(t):
        from tvm.script.ir_builder import tirx as T

        return T.uint8(t)

    def request(self):
        """Ask Linux for the tile state (arch_prctl; per process, idempotent): the library
        then runs in any process that loads it, a deploying program or an RPC server,
        without a call of its own."""
        from tvm.script.ir_builder import tirx as T

        T.evaluate(T.call_extern("int64", "syscall", *(T.int64(a) for a in TILE_PERMISSION)))

    def configure(self, shapes):
        """Load the tile configuration {tile: (rows, bytes per row)} (palette 1) for this
        thread."""
        from tvm.script.ir_builder import tirx as T

        self.shapes = dict(shapes)
        cfg = T.alloc_buffer((64,), "uint8", scope="local")
        for i in range(64):
            T.buffer_store(cfg, T.uint8(0), [i])
        T.buffer_store(cfg, T.uint8(1), [0])
        for t, (rows, colsb) in shapes.items():
            T.buffer_store(cfg, T.uint8(colsb & 0xFF), [16 + 2 * t])
            T.buffer_store(cfg, T.uint8(colsb >> 8), [17 + 2 * t])
            T.buffer_store(cfg, T.uint8(rows), [48 + t])
        self._call("ldtilecfg", T.address_of(cfg[0]))

    def zero(self, t):
        self._call("tilezero", self._tile(t))

    def load(self, t, buf, offset, stride):
        from tvm.script.ir_builder import tirx as T

        self._call("tileloadd64", self._tile(t), T.address_of(buf[offset]), T.int64(stride))

    def dot(self, c, a, b):
        self._call("tdpbusd", self._tile(c), self._tile(a), self._tile(b))

    def store(self, t, buf, offset, stride):
        from tvm.script.ir_builder import tirx as T

        self._call("tilestored64", self._tile(t), T.address_of(buf[offset]), T.int64(stride))

    def release(self):
        self._call("tilerelease")


class LoopTiles:
    """The same tile operations as plain TIR loops over local buffers, with the semantics of
    the instructions (Intel SDM, TDPBUSD: C[m][n] += sum over k of the 4 products of
    uint8 A[m][4k..4k+3] and int8 B[k][4n..4n+3]), for checking a tile program on any CPU."""

    emulated = True

    def __init__(self):
        self.shapes, self.tiles = {}, None

    def request(self):
        pass

    def configure(self, shapes):
        from tvm.script.ir_builder import tirx as T

        self.shapes = dict(shapes)
        self.tiles = {
            "uint8": T.alloc_buffer((TILES, TILE_ROWS, TILE_BYTES), "uint8", scope="local"),
            "int8": T.alloc_buffer((TILES, TILE_ROWS, TILE_BYTES), "int8", scope="local"),
            "int32": T.alloc_buffer((TILES, TILE_ROWS, LANES), "int32", scope="local"),
        }

    def zero(self, t):
        from tvm.script.ir_builder import tirx as T

        rows, colsb = self.shapes[t]
        with T.serial(rows) as m, T.serial(colsb // QUAD) as n:
            T.buffer_store(self.tiles["int32"], T.int32(0), [t, m, n])

    def load(self, t, buf, offset, stride):
        from tvm.script.ir_builder import tirx as T

        rows, colsb = self.shapes[t]
        width = np.dtype(str(buf.dtype)).itemsize  # bytes of an element: 4 for C tiles
        with T.serial(rows) as m, T.serial(colsb // width) as k:
            value = buf[offset + m * stride // width + k]
            T.buffer_store(self.tiles[str(buf.dtype)], value, [t, m, k])

    def dot(self, c, a, b):
        from tvm.script.ir_builder import tirx as T

        rows, colsb = self.shapes[c]
        quads = self.shapes[a][1] // QUAD
        acc, ta, tb = self.tiles["int32"], self.tiles["uint8"], self.tiles["int8"]
        with T.serial(rows) as m, T.serial(colsb // QUAD) as n, T.serial(quads) as k:
            total = acc[c, m, n]
            for i in range(QUAD):
                total = total + ta[a, m, k * QUAD + i].astype("int32") * tb[
                    b, k, n * QUAD + i
                ].astype("int32")
            T.buffer_store(acc, total, [c, m, n])

    def store(self, t, buf, offset, stride):
        from tvm.script.ir_builder import tirx as T

        rows, colsb = self.shapes[t]
        with T.serial(rows) as m, T.serial(colsb // QUAD) as n:
            T.buffer_store(buf, self.tiles["int32"][t, m, n], [offset + m * stride // 4 + n])

    def release(self):
        pass


def conv(p, epilogue, residual, tiles):
    """The TIR PrimFunc of an AMX conv (``tirx.is_scheduled``).

    Args:
        p: the ``AmxPlan``.
        epilogue: (zero_point, (q_lo, q_hi), (k, z_t) of the residual or None), as
            ``patterns.RequantizedLayer`` (``conv2d.requantize_u8``); or None for the int32
            accumulators themselves (what the tests check the tile program by), or for the
            float32 output of a ``dequantized`` plan.
        residual: whether the function takes a residual input.
        tiles: ``AmxTiles()`` or ``LoopTiles()``.

    Returns:
        A PrimFunc of (data uint8 ``p.data``, weight int8 ``p.weight_shape``[, correction
        int32 (OCB*16,), multiplier float32 (OCB*16,)[, bias float32 (OCB*16,)[, residual
        uint8 ``p.residual_shape``]]], out ``p.stored``, uint8, float32 for a
        ``dequantized`` plan (correction and multiplier, no bias), or int32 without either).

    Raises:
        ValueError: a border or a residual without the uint8 epilogue (a ``dequantized``
            plan has none), or a ``dequantized`` plan with one.
    """
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    if (epilogue is None or p.float_channels) and (p.border or residual):
        raise ValueError("amx.conv: a border or a residual needs the uint8 epilogue")
    if p.float_channels and epilogue is not None:
        raise ValueError("amx.conv: a dequantized plan takes no uint8 epilogue")
    ocb = p.out[1]
    scaled = epilogue is not None or p.float_channels > 0
    with IRBuilder() as builder:
        with T.prim_func():
            T.func_name("amx_conv2d")
            args = [T.arg("data", T.buffer(p.data, "uint8"))]
            args.append(T.arg("weight", T.buffer(p.weight_shape, "int8")))
            if scaled:
                for name, dtype in (("correction", "int32"), ("multiplier", "float32")):
                    args.append(T.arg(name, T.buffer((ocb * LANES,), dtype)))
            if epilogue is not None:
                args.append(T.arg("bias", T.buffer((ocb * LANES,), "float32")))
            if residual:
                args.append(T.arg("residual", T.buffer(p.residual_shape, "uint8")))
            dtype = "float32" if p.float_channels else "int32" if epilogue is None else "uint8"
            out = T.arg("out", T.buffer(p.stored, dtype))
            T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
            tiles.request()
            flat = T.decl_buffer((int(np.prod(p.data)),), "uint8", data=args[0].data)
            w = T.decl_buffer((int(np.prod(p.weight_shape)),), "int8", data=args[1].data)
            run = _pooled_tasks if p.pool is not None else _chunked_tasks if p.chunk else _tasks
            run(p, (flat, w, *args[2:], out), epilogue, tiles)
    return builder.get()


def _tasks(p, buffers, epilogue, tiles):
    """The parallel loop of ``conv``: one task per (output-channel group, image, run of
    steps), each loading its tile configuration once for its steps; a step is ``m_tiles``
    M tiles of one line by ``n_tiles`` output-channel tiles; a task's first run writes the
    output's border around its channel blocks. The larger of a group's
    weights and an image's data is the outer loop, so a thread's consecutive tasks share it
    in cache (resnet18 at batch 8: its 3x3 512->512 convs hold 147 KB of weights a group
    against 41 KB of data an image, its 64->64 convs 74 KB against 215 KB)."""
    from tvm.script.ir_builder import tirx as T

    n, ocb = p.out[:2]
    groups, steps = ocb // p.n_tiles, p.steps
    runs = min(steps, ROW_RUNS)
    with T.parallel(n * groups * runs) as task:
        b, group, run = _task_index(p, task, (n, groups, runs))
        tiles.configure(_shapes(p))
        acc = T.alloc_buffer((p.m_tiles * p.n_tiles * TILE_ROWS * LANES,), "int32", scope="local")
        first, last = run * steps // runs, (run + 1) * steps // runs
        with T.serial(last - first) as i:
            starts = p.step_tiles(first + i)
            _zero(p, tiles)
            _accumulate(p, buffers[:2], (b, group), starts, tiles)
            _store_tiles(p, tiles, acc, lambda mi, ni, t: (t * TILE_ROWS * LANES, LANES * 4))
            _requantize(p, buffers[2:], (b, group), starts, epilogue, acc)
        tiles.release()
        _fill_borders(p, buffers[-1], (b, group, run), epilogue)


def _chunked_tasks(p, buffers, epilogue, tiles):
    """The parallel loop of ``conv`` for a ``chunked`` plan: one task per (output-channel
    group, run of ``p.span`` steps across the images), in the order of ``_chunked_task``.
    For each chunk of ``p.chunk`` input blocks in turn, every step of the task accumulates
    its C tiles over the chunk, from zero or from the sums it saved for the chunks before,
    and saves them: the chunk's weights are read from memory once per task and from L1 for
    its other steps. The saved sums of each step are then requantized as in ``_tasks``; the
    task holding an image's first step writes its border."""
    from tvm.script.ir_builder import tirx as T

    n, ocb = p.out[:2]
    groups, total = ocb // p.n_tiles, n * p.steps
    runs, per_step = -(-total // p.span), p.m_tiles * p.n_tiles * TILE_ROWS * LANES
    with T.parallel(groups * runs) as task:
        group, run = _chunked_task(p, task, groups, runs)
        tiles.configure(_shapes(p))
        sums = T.alloc_buffer((p.span * per_step,), "int32", scope="local")
        with T.serial(p.data[1] // p.chunk) as k, T.serial(p.span) as i:
            step = run * p.span + i
            with T.If(step < total), T.Then():
                starts, offset = p.step_tiles(step % p.steps), i * per_step

                def at(mi, ni, t, offset=offset):
                    return offset + t * TILE_ROWS * LANES, LANES * 4

                with T.If(k == 0):
                    with T.Then():
                        _zero(p, tiles)
                    with T.Else():
                        _load_tiles(p, tiles, sums, at)
                task_of = (step // p.steps, group)
                _accumulate(p, buffers[:2], task_of, starts, tiles, (k * p.chunk, p.chunk))
                _store_tiles(p, tiles, sums, at)
        tiles.release()
        with T.serial(p.span) as i:
            step = run * p.span + i
            with T.If(step < total), T.Then():
                b, starts = step // p.steps, p.step_tiles(step % p.steps)
                _requantize(p, buffers[2:], (b, group), starts, epilogue, sums, i * per_step)
                _fill_borders(p, buffers[-1], (b, group, step % p.steps), epilogue)


def _pooled_tasks(p, buffers, epilogue, tiles):
    """The parallel loop of ``conv`` with a fused max pool (``p.pool``): one task per
    (output-channel group, image, band of pooled rows). A task computes the conv rows of
    each pooled row's window that the row before did not (all of them for its first) into a
    ring of KH rows of int32 accumulators, then takes each pooled pixel's max over its
    window and requantizes that: the requantize is monotone (multipliers >= 0: the caller
    checks), so this is the max of the requantized values, on a quarter of the pixels. A
    window past the output reads its nearest row and column inside it instead (the max is
    the same)."""
    from tvm.script.ir_builder import tirx as T

    n, ocb, oh, ow = p.out[:4]
    (kh, _), (sh, _), (ph, _) = p.pool
    height = p.result[2]
    groups, runs = ocb // p.n_tiles, min(p.result[2], ROW_RUNS)
    width = p.n_tiles * LANES  # int32 accumulators of a conv pixel in the ring
    with T.parallel(n * groups * runs) as task:
        b, group, run = _task_index(p, task, (n, groups, runs))
        tiles.configure(_shapes(p))
        ring = T.alloc_buffer((kh * ow * width,), "int32", scope="local")
        first, last = run * height // runs, (run + 1) * height // runs
        with T.serial(last - first) as i:
            top = (first + i) * sh - ph
            with T.serial(kh) as k:
                fresh = T.Or(i == 0, k >= kh - sh)  # rows the pooled row before lacked
                with T.If(T.And(fresh, T.And(top + k >= 0, top + k < oh))), T.Then():
                    _ring_row(p, buffers[:2], (b, group, top + k), tiles, ring)
            _pool_row(p, (ring, *buffers[2:]), (b, group, first + i), epilogue)
        tiles.release()
        _fill_borders(p, buffers[-1], (b, group, run), epilogue)


def _ring_row(p, buffers, task, tiles, ring):
    """Conv output row y (``task``: (b, group, y)) of the group's channels into the ring's
    slot y % KH: (OW, n_tiles x 16) int32, the last tile of the row shifted back; an odd
    tile count ends with a step of one M tile (resnet18's stem: 7 tiles a row, not 8)."""
    b, group, y = task
    ow, width, count = p.out[3], p.n_tiles * LANES, p.line_tiles
    slot = y % p.pool[0][0]
    for first in range(0, count, p.m_tiles):
        starts = [min(t * p.rows, ow - p.rows) for t in range(first, min(first + p.m_tiles, count))]
        _zero(p, tiles)
        _accumulate(p, buffers, (b, group), [(y, x) for x in starts], tiles)

        def at(mi, ni, t, starts=starts):
            return (slot * ow + starts[mi]) * width + ni * LANES, width * 4

        _store_tiles(p, tiles, ring, at, len(starts))


def _pool_row(p, buffers, task, epilogue):
    """Pooled row ``task`` (b, group, row): each pixel's 16 channels a vector, the max of
    its window's accumulators in the ring, requantized (or as they are without an
    ``epilogue``) and stored (``_store``)."""
    from tvm.script.ir_builder import tirx as T

    ring, *constants, out = buffers
    b, group, row = task
    oh, ow = p.out[2:4]
    (kh, kw), (sh, sw), (ph, pw) = p.pool
    width = p.n_tiles * LANES

    def inside(v, size):
        return T.max(T.min(v, size - 1), 0)

    with T.serial(p.result[3]) as x:
        for ni in range(p.n_tiles):
            with T.vectorized(LANES) as lane:
                values = []
                for dy in range(kh):
                    slot = inside(row * sh - ph + dy, oh) % kh
                    for dx in range(kw):
                        column = inside(x * sw - pw + dx, ow)
                        values.append(ring[(slot * ow + column) * width + ni * LANES + lane])
                value = values[0]
                for other in values[1:]:
                    value = T.max(value, other)
                index = (b, group * p.n_tiles + ni, row, x, lane)
                _store(p, out, index, value, constants, epilogue)


def _task_index(p, task, counts):
    """(image, output-channel group, run) of parallel ``task`` among ``counts`` (images,
    groups, runs): the larger of a group's weights and an image's data outermost
    (``_weights_outer``)."""
    n, groups, runs = counts
    if _weights_outer(p):
        return task // runs % n, task // (n * runs), task % runs
    return task // (groups * runs), task // runs % groups, task % runs


def _chunked_task(p, task, groups, runs):
    """(output-channel group, run) of parallel ``task`` of a chunked plan. Where the batch's
    data outweighs the layer's weights (bytes), runs are outermost: each thread then
    computes the same images as in the layer before and reads the data it wrote from its
    own cache (resnet18's 128-channel convs at batch 8: the model 0.95x, Intel Xeon VM with
    AMX). Else groups are: each thread reads half the weights."""
    if np.prod(p.weight_shape) < np.prod(p.data):
        return task % groups, task // groups
    return task // runs, task % runs


def _fill_borders(p, out, task, epilogue):
    """The border of ``out`` around the task's channel blocks, by its first run
    (``task``: (image, group, run))."""
    from tvm.script.ir_builder import tirx as T

    b, group, run = task
    per = p.out_block // LANES  # 16-channel blocks per stored block
    if p.border:
        with T.If(run == 0), T.Then():
            for ni in range(p.n_tiles):
                o = group * p.n_tiles + ni
                with T.If(o % per == 0), T.Then():  # the task holding the block's first
                    fill_border(out, (b, o // per), p.border, epilogue[0])


def _weights_outer(p):
    """Whether a group's weights outweigh an image's data (bytes)."""
    return np.prod(p.weight_shape[1:]) * p.n_tiles > np.prod(p.data[1:])


def _tile_numbers(p):
    """(C tiles [mi][ni], A tiles [mi], B tiles [ni]): tmm numbers."""
    c = [[mi * p.n_tiles + ni for ni in range(p.n_tiles)] for mi in range(p.m_tiles)]
    a = [p.m_tiles * p.n_tiles + mi for mi in range(p.m_tiles)]
    b = [p.m_tiles * p.n_tiles + p.m_tiles + ni for ni in range(p.n_tiles)]
    return c, a, b


def _shapes(p):
    """{tile: (rows, bytes per row)}: C tiles of ``rows`` x 16 int32, A tiles of ``rows`` x
    K bytes, B tiles of K/4 quads x 64 bytes."""
    c, a, b = _tile_numbers(p)
    shapes = {t: (p.rows, TILE_BYTES) for row in c for t in row}
    shapes.update({t: (p.rows, p.k_bytes) for t in a})
    shapes.update({t: (p.k_bytes // QUAD, TILE_BYTES) for t in b})
    return shapes


def _zero(p, tiles):
    for t in (t for row in _tile_numbers(p)[0] for t in row):
        tiles.zero(t)


def _accumulate(p, buffers, task, starts, tiles, blocks=None):
    """Accumulate the C tiles over (input block, kernel row, tap group); ``task``: (image,
    output-channel group), ``starts``: [(line, first position)] of the M tiles, ``blocks``:
    (first, count) of the input blocks, all by default."""
    from tvm.script.ir_builder import tirx as T

    data, weight = buffers
    b, group = task
    _, cb, hp, wp, block = p.data
    (kh_size, _), (sh, sw), (dh, dw) = p.kernel, p.strides, p.dilation
    c_tiles, a_tiles, b_tiles = _tile_numbers(p)
    quads = p.k_bytes // QUAD
    first, count = blocks or (0, cb)
    with T.serial(count) as i, T.serial(kh_size) as kh, T.serial(p.groups) as g:
        c = first + i
        for mi, (y, x) in enumerate(starts):
            row = ((b * cb + c) * hp + y * sh + kh * dh + p.origin[0]) * wp
            column = x * sw + g * p.taps * dw + p.origin[1]
            tiles.load(a_tiles[mi], data, (row + column) * block, sw * block)
        for ni in range(p.n_tiles):
            o = group * p.n_tiles + ni
            offset = (((o * cb + c) * kh_size + kh) * p.groups + g) * quads * TILE_BYTES
            tiles.load(b_tiles[ni], weight, offset, TILE_BYTES)
        for mi in range(len(starts)):
            for ni in range(p.n_tiles):
                tiles.dot(c_tiles[mi][ni], a_tiles[mi], b_tiles[ni])


def _load_tiles(p, tiles, buf, at):
    """Load each C tile from int32 ``buf`` at ``at(mi, ni, tile)`` (as ``_store_tiles``)."""
    c_tiles, _, _ = _tile_numbers(p)
    for mi in range(p.m_tiles):
        for ni in range(p.n_tiles):
            offset, stride = at(mi, ni, c_tiles[mi][ni])
            tiles.load(c_tiles[mi][ni], buf, offset, stride)


def _store_tiles(p, tiles, buf, at, m_tiles=None):
    """Store each C tile (of the first ``m_tiles`` M tiles, all by default) to int32 ``buf``
    at ``at(mi, ni, tile)``: (offset in elements, row stride in bytes)."""
    c_tiles, _, _ = _tile_numbers(p)
    for mi in range(m_tiles or p.m_tiles):
        for ni in range(p.n_tiles):
            offset, stride = at(mi, ni, c_tiles[mi][ni])
            tiles.store(c_tiles[mi][ni], buf, offset, stride)


def _requantize(p, buffers, task, starts, epilogue, acc, offset=0):
    """Each pixel's 16 channels of ``acc`` requantized to uint8 as one vector
    (``conv2d.requantize_u8``), or as they are without an ``epilogue``, stored to the
    output (in blocks of ``p.out_block``). A pixel's position is found once for its
    ``n_tiles`` channel blocks."""
    from tvm.script.ir_builder import tirx as T

    if p.float_channels:
        _dequantize(p, buffers, task, starts, acc, offset)
        return
    *constants, out = buffers
    b, group = task
    c_tiles, _, _ = _tile_numbers(p)
    for mi, (line, start) in enumerate(starts):

        def pixel(r, y, x, mi=mi):
            for ni in range(p.n_tiles):
                o, t = group * p.n_tiles + ni, c_tiles[mi][ni]
                with T.vectorized(LANES) as lane:
                    value = acc[offset + (t * TILE_ROWS + r) * LANES + lane]
                    _store(p, out, (b, o, y, x, lane), value, constants, epilogue)

        _tile_pixels(p, line, start, pixel)


def _tile_pixels(p, line, start, body):
    """Call ``body(r, y, x)`` for each row r of an M tile (``line``, ``start``) that is an
    output pixel (y, x). A flat tile's positions cross a few padded rows: one loop per row
    it can cross runs over the row's positions before OW, with no division or test per
    position (they took a third of a 64-channel conv's epilogue). A tile along one output
    row ends inside it (``AmxPlan.step_tiles``): every row is a pixel."""
    from tvm.script.ir_builder import tirx as T

    if not p.flat:
        with T.serial(p.rows) as r:
            body(r, line, start + r)
        return
    wp, ow = p.data[3], p.out[3]
    top = start // wp
    for dy in range((wp + p.rows - 2) // wp + 1):  # rows that positions x0 .. x0 + rows - 1 cross
        y = top + dy
        first = T.max(y * wp - start, 0)
        end = T.min(y * wp + ow - start, p.rows)
        with T.serial(T.max(end - first, 0)) as j:
            body(first + j, y, start + first + j - y * wp)


def _store(p, out, index, value, constants, epilogue):
    """Store one int32 accumulator ``value`` of output pixel ``index`` (N, OCB, OH, OW, 16)
    to ``out`` (past its border, in blocks of ``p.out_block``), requantized to uint8 when
    there is an ``epilogue`` (the residual input, ``constants[3]``, read at the same pixel,
    past its own border, in blocks of ``p.residual_block``)."""
    from tvm.script.ir_builder import tirx as T

    from .conv2d import requantize_u8

    b, o, y, x, lane = index
    if epilogue is not None:
        rb, residual = p.residual_border, None
        if len(constants) > 3:
            residual = constants[3][_in_block((b, o, y + rb, x + rb, lane), p.residual_block)]
        value = requantize_u8(value, o * LANES + lane, constants, epilogue, residual)
    T.buffer_store(out, value, _in_block((b, o, y + p.border, x + p.border, lane), p.out_block))


def _dequantize(p, buffers, task, starts, acc, offset):
    """The C tiles of a ``dequantized`` plan's step, in ``acc`` from ``offset``, stored to
    the float32 (N, C, OH, OW) output: each tile's rows (one position's 16 channels a
    vector) dequantized as float32(acc - correction[c]) * multiplier[c] (the order of
    ``conv2d.requantized_conv``, so the VNNI path's values bit for bit), transposed
    (``_transposed``), and each channel's positions stored as one run of its output row."""
    from tvm.script.ir_builder import tirx as T
    from tvm.tirx import Shuffle

    correction, multiplier, out = buffers
    b, group = task
    c_tiles, _, _ = _tile_numbers(p)
    zero = T.Broadcast(T.float32(0), LANES)
    for mi, (line, start) in enumerate(starts):
        for ni in range(p.n_tiles):
            o, t = group * p.n_tiles + ni, c_tiles[mi][ni]
            lanes = T.Ramp(o * LANES, 1, LANES)
            rows = [
                T.Cast(
                    f"float32x{LANES}",
                    acc[T.Ramp(offset + (t * TILE_ROWS + r) * LANES, 1, LANES)] - correction[lanes],
                )
                * multiplier[lanes]
                if r < p.rows
                else zero
                for r in range(TILE_ROWS)
            ]
            for lane, column in enumerate(_transposed(rows)):
                c = o * LANES + lane
                run = column if p.rows == LANES else Shuffle([column], list(range(p.rows)))
                index = [b, c, line, T.Ramp(start, 1, p.rows) if p.rows > 1 else start]
                if p.float_channels % LANES:
                    with T.If(c < p.float_channels), T.Then():
                        T.buffer_store(out, run, index)
                else:
                    T.buffer_store(out, run, index)


def _transposed(rows):
    """The 16 x 16 matrix of 16 row vectors ``rows`` as its 16 column vectors: four stages
    of two-vector shuffles, each swapping the off-diagonal blocks of half its size (64
    shuffles, where one scalar store a value took 256 stores)."""
    from tvm.tirx import Shuffle

    rows = list(rows)
    half = LANES // 2
    while half:
        for i in (i for i in range(LANES) if not i & half):
            k = i | half
            top = [j if not j & half else LANES + j - half for j in range(LANES)]
            bottom = [j + half if not j & half else LANES + j for j in range(LANES)]
            rows[i], rows[k] = (Shuffle([rows[i], rows[k]], order) for order in (top, bottom))
        half //= 2
    return rows
