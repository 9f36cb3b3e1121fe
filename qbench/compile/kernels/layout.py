"""Packing to the VNNI layouts of ``conv2d.py``.

Activations are packed at run time by TE computes (injective, so TVM fuses them with the
quantize before); the packed int32 result is unpacked by the conv kernel's own epilogue
(``conv2d.requantized_conv``). Weights are packed once, in numpy, at quantization time, so
the compiled graph holds them prepacked. A dense layer y = x @ W runs as a 1x1 conv over a
1 x M image: x (M, K) -> (1, K/4, 1, M, 4), W (K, N) -> (N/16, K/4, 1, 1, 16, 4).
"""

from dataclasses import dataclass

import numpy as np
from tvm import te, tirx

from . import intrin
from .conv2d import (
    AVX2_REGISTER_COLUMNS,
    IC_BLOCK,
    OC_BLOCK,
    PAIR_BLOCK,
    REGISTER_COLUMNS,
    YMM_PAIR_COLUMNS,
    ZMM_PAIR_COLUMNS,
)


@dataclass(frozen=True)
class Packing:
    """How one of qbench's packed INT8 kernels wants its operands.

    Attributes:
        block: input channels per innermost block (4 bytes for ``vpdpbusd``, 2 int16 for
            ``vpmaddwd``).
        data_dtype: dtype of the packed activations (the uint8 values, widened to int16 for
            ``vpmaddwd``).
        weight_dtype: numpy dtype of the prepacked int8 weights (int8 on every path: the
            ``vpmaddwd`` intrinsics widen them as they load them).
        op_name: the conv block's ``op_name``, which selects its hand schedule.
        intrin: the tensor intrinsic of 16 output channels by one input block.
        instruction: the machine instruction that intrinsic compiles to.
        columns: output columns per register tile (``conv2d.register_block``'s limit).
        pair_columns: where not 0, rows that divide into tiles of this many columns take
            them, by 32 output channels (``conv2d.tile_conv``).
        offset: subtracted from every uint8 activation when packing (128 where the
            instruction multiplies signed bytes only: the values then fit int8).
    """

    block: int
    data_dtype: str
    weight_dtype: type
    op_name: str
    intrin: str
    instruction: str
    columns: int
    offset: int = 0
    pair_columns: int = 0

    @property
    def reads_nchw16c(self):
        """Whether the kernel can read a uint8 kernel's NCHW16c output as it is (4-byte
        blocks of uint8, no offset), so no unpack and repack runs between the two."""
        return self.block == IC_BLOCK and self.data_dtype == "uint8" and not self.offset


PACKINGS = {  # by kernel path (``kernels.select``)
    "vnni": Packing(
        IC_BLOCK,
        "uint8",
        np.int8,
        "qbench.conv2d_nchw4c_vnni",
        intrin.VNNI_INTRIN,
        "vpdpbusd",
        REGISTER_COLUMNS,
        pair_columns=ZMM_PAIR_COLUMNS,
    ),
    "avxvnni": Packing(
        IC_BLOCK,
        "uint8",
        np.int8,
        "qbench.conv2d_nchw4c_avxvnni",
        intrin.AVXVNNI_INTRIN,
        "vpdpbusd",
        AVX2_REGISTER_COLUMNS,
        pair_columns=YMM_PAIR_COLUMNS,
    ),
    "avx512bw": Packing(
        PAIR_BLOCK,
        "int16",
        np.int8,
        "qbench.conv2d_nchw2c_i16_avx512bw",
        intrin.AVX512BW_INTRIN,
        "vpmaddwd",
        REGISTER_COLUMNS,
    ),
    "avx2_u8": Packing(
        IC_BLOCK,
        "uint8",
        np.int8,
        "qbench.conv2d_nchw4c_u8_avx2",
        intrin.AVX2_U8_INTRIN,
        "vpmaddubsw",
        AVX2_REGISTER_COLUMNS,
        pair_columns=YMM_PAIR_COLUMNS,
    ),
    "avx2": Packing(
        PAIR_BLOCK,
        "int16",
        np.int8,
        "qbench.conv2d_nchw2c_i16_avx2",
        intrin.AVX2_INTRIN,
        "vpmaddwd",
        AVX2_REGISTER_COLUMNS,
    ),
    "neon_dot": Packing(
        IC_BLOCK,
        "int8",
        np.int8,
        "qbench.conv2d_nchw4c_i8_sdot",
        intrin.SDOT_INTRIN,
        "sdot",
        AVX2_REGISTER_COLUMNS,  # 32 128-bit registers: 6 columns x 4 accumulators + 4 weights
        offset=128,
    ),
}


def _ceil_to(n, block):
    return -(-int(n) // block) * block


def pack_nchw4c(x, zero_point, block=IC_BLOCK, dtype="uint8", offset=0):
    """(N, C, H, W) uint8 -> (N, ceil(C/block), H, W, block) of ``dtype`` (uint8 for VNNI, int16
    for AVX2's ``vpmaddwd``) holding x - ``offset``; padded channels hold the zero point.
    Spatial padding comes before, on the uint8 tensor with the zero point: the quantize then
    stays in the producing kernel's epilogue (``emit_int8``)."""
    n, c, h, w = x.shape
    chunks = _ceil_to(c, block) // block
    zp = tirx.const(int(zero_point) - offset, dtype)
    return te.compute(
        (n, chunks, h, w, block),
        lambda b, co, y, xx, ci: tirx.if_then_else(
            co * block + ci < c,
            _shifted(x[b, tirx.min(co * block + ci, c - 1), y, xx], offset, dtype),
            zp,
        ),
        name="pack_nchw4c",
    )


def pack_nchw16c(x, zero_point):
    """(N, C, H, W) uint8 -> (N, ceil(C/16), H, W, 16), padded channels holding the zero
    point: the layout of the uint8 kernels' outputs (``conv2d.requantized_conv_u8``)."""
    n, c, h, w = x.shape
    zp = tirx.const(int(zero_point), x.dtype)
    return te.compute(
        (n, _ceil_to(c, OC_BLOCK) // OC_BLOCK, h, w, OC_BLOCK),
        lambda b, co, y, xx, ci: tirx.if_then_else(
            co * OC_BLOCK + ci < c, x[b, tirx.min(co * OC_BLOCK + ci, c - 1), y, xx], zp
        ),
        name="pack_nchw16c",
    )


def unpack_nchw16c(x, channels, border=0):
    """(N, C/L, H + 2 b, W + 2 b, L) -> (N, ``channels``, H, W): the layer's channels in
    NCHW, without the ``border`` b of a bordered tensor (``amx.AmxPlan.border``); L is 16,
    or 64 for an AMX kernel's wide output (``kernels.wide``)."""
    n, _, h, w, lanes = x.shape
    return te.compute(
        (n, channels, h - 2 * border, w - 2 * border),
        lambda b, c, y, xx: x[b, c // lanes, y + border, xx + border, c % lanes],
        name="unpack_nchw16c",
    )


def pack_rows(x, pad_value, block=IC_BLOCK, dtype=None, offset=0):
    """(M, K) -> (1, ceil(K/block), 1, M, block) of ``dtype`` (default: ``x``'s) holding
    x - ``offset``: the rows of a dense layer as one image row; padded input channels hold
    ``pad_value`` - ``offset`` (``pad_value``: the zero point for uint8)."""
    m, k = x.shape
    dtype = dtype or x.dtype
    chunks = _ceil_to(k, block) // block
    pad = tirx.const(pad_value - offset, dtype)
    return te.compute(
        (1, chunks, 1, m, block),
        lambda _, ko, __, r, ki: tirx.if_then_else(
            ko * block + ki < k,
            _shifted(x[r, tirx.min(ko * block + ki, k - 1)], offset, dtype),
            pad,
        ),
        name="pack_rows",
    )


def _shifted(value, offset, dtype):
    """``value`` - ``offset`` as ``dtype`` (exact: uint8 - 128 fits int8)."""
    if not offset:
        return value.astype(dtype)
    return (value.astype("int32") - offset).astype(dtype)


def pack_conv_weight(w, block=IC_BLOCK, dtype=np.int8, channel_multiple=None):
    """int8 (O, C, KH, KW) -> (ceil(O/16), C'/block, KH, KW, 16, block) of ``dtype``,
    zero-padded; C' is C rounded up to ``channel_multiple`` (default ``block``: 16 for a
    kernel reading NCHW16c data)."""
    o, c, kh, kw = w.shape
    c_padded = _ceil_to(c, channel_multiple or block)
    padded = np.zeros((_ceil_to(o, OC_BLOCK), c_padded, kh, kw), dtype)
    padded[:o, :c] = w
    blocks = padded.reshape(-1, OC_BLOCK, padded.shape[1] // block, block, kh, kw)
    return np.ascontiguousarray(blocks.transpose(0, 2, 4, 5, 1, 3))


MAX_MERGED = 16  # groups one kernel group may merge: as many times the multiply-adds


def merged_groups(groups, out_per_group, in_per_group, block):
    """Groups of a grouped conv that one group of the packed kernel computes: the fewest s
    (a divisor of ``groups``) whose s groups' output channels fill 16-channel blocks and
    whose input channels fill blocks of ``block``, so that each output block reads one run
    of input blocks (``conv2d.blocked_conv``'s ``groups``). The kernel computes s groups
    as one block-diagonal conv (``expand_groups``): s times the multiply-adds. ``groups``
    when no smaller s fits (one ungrouped conv, its channels padded)."""
    for s in range(1, groups + 1):
        fits = out_per_group * s % OC_BLOCK == 0 and in_per_group * s % block == 0
        if groups % s == 0 and fits:
            return s
    return groups


def expand_groups(w, groups, merged):
    """int8 (O, C/groups, KH, KW) weights of a grouped conv -> (O, C/groups * merged, KH,
    KW): each output channel's weights at its group's place among the ``merged`` groups it
    is computed with (``merged_groups``), zero at the others' input channels."""
    o, per_group, kh, kw = w.shape
    out_per_group = o // groups
    out = np.zeros((o, per_group * merged, kh, kw), w.dtype)
    for g in range(groups):
        j = g % merged
        rows = slice(g * out_per_group, (g + 1) * out_per_group)
        out[rows, j * per_group : (j + 1) * per_group] = w[rows]
    return out


def flat_groups(kw, channels, block):
    """The groups of ``block`` elements one kernel row of ``kw`` pixels of ``channels``
    takes in flat pixel rows (``pack_flat_weight``): ceil(kw * channels / block)."""
    return -(-kw * channels // block)


def pack_flat_weight(w, block=IC_BLOCK, dtype=np.int8):
    """int8 (O, C, KH, KW) -> (ceil(O/16), 1, KH, G, 16, ``block``) of ``dtype`` for a conv
    over flat pixel rows (``conv2d.blocked_conv``): element k of kernel row kh's G * block
    (``flat_groups``) holds w[o, k % C, kh, k // C], zero from k = KW * C on."""
    o, c, kh, kw = w.shape
    groups = flat_groups(kw, c, block)
    rows = np.zeros((o, kh, groups * block), dtype)
    rows[:, :, : kw * c] = np.asarray(w).transpose(0, 2, 3, 1).reshape(o, kh, kw * c)
    as_conv = rows.reshape(o, kh, groups, block).transpose(0, 3, 1, 2)  # (O, block, KH, G)
    return pack_conv_weight(as_conv, block, dtype)


def pack_dense_weight(w, block=IC_BLOCK, dtype=np.int8):
    """int8 (K, N) -> (ceil(N/16), ceil(K/block), 1, 1, 16, block), zero-padded."""
    return pack_conv_weight(np.asarray(w).T[:, :, None, None], block, dtype)
