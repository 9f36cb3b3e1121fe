"""Default CPU schedules, applied to the kernels that no tuning record covers.

Built on TVM's dlight framework (``ApplyDefaultSchedule`` skips kernels already scheduled,
for example by a MetaSchedule database):

- ``HandKernels``: the packed uint8 x int8 conv of ``conv2d.py`` (also every dense layer),
  the packed FP32 conv of ``conv2d_fp32.py`` and the depthwise conv of ``depthwise.py``, each
  with its fused epilogue, on their hand schedules;
- ``CpuFallback``: every other kernel. Like dlight's GPU ``Fallback`` it inlines what it can,
  then runs the outer spatial loops of each remaining block in parallel and vectorizes the
  innermost (for conv- and pool-like blocks, inside the reduction loops; a concat of many
  parts one loop nest a part, ``concat.py``). Untuned Relax builds are single-threaded
  scalar loops otherwise.
"""

import functools

from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base import ScheduleRule

from .concat import partition_parts
from .conv2d import schedule_packed
from .conv2d_fp32 import OP_NAME as FP32_CONV_OP
from .conv2d_fp32 import schedule_conv2d_fp32
from .depthwise import OP_NAME as DEPTHWISE_OP
from .depthwise import schedule_depthwise
from .layout import PACKINGS

VECTOR_LANES = 16
CONV_LIKE_SPATIAL = 3  # (N, C, H, W)-like outputs: rows worth vectorizing
MAX_PHASES = 4  # (..., phase, row) outputs of column splits: the phase moved innermost
BLOCKED_SPATIAL = 4  # (C16, H, W, 16) once a unit batch is dropped: channel-blocked


def _inline_into_epilogue(sch, blocks, kernel):
    """Inline ``blocks``, ops FuseOps put before the hand ``kernel`` block (e.g. the bias add
    of a residual branch that the kernel's epilogue adds), into their consumers. False when
    the kernel itself reads one (its operands must stay buffers) or one cannot be inlined."""
    written = [w.source for b in blocks for w in sch.get(b).writes]
    if any(r.source.same_as(w) for r in sch.get(kernel).reads for w in written):
        return False
    try:
        for block in blocks:
            sch.compute_inline(block)
    except s_tir.ScheduleError:
        return False
    return True


def _packed(sch, conv, out, _target, packing):
    schedule_packed(sch, conv, out, packing)


class HandKernels(ScheduleRule):
    """Schedules a PrimFunc built around one of qbench's hand-written kernels (the packed
    convs of ``conv2d.py`` and ``conv2d_fp32.py``, the depthwise conv and max pooling of
    ``depthwise.py``) followed by its epilogue chain (elementwise ops before the kernel that
    only the epilogue reads are inlined into it): the requantize and the elementwise ops
    FuseOps fused after it (bias, activation, residual add) are inlined into the kernel's
    output tile. Ops that change the
    shape after them (FuseOps may append the next layer's pad and quantize) run as a second,
    parallel loop nest over the tile's result."""

    SCHEDULES = {
        **{p.op_name: functools.partial(_packed, packing=p) for p in PACKINGS.values()},
        FP32_CONV_OP: schedule_conv2d_fp32,
        DEPTHWISE_OP: schedule_depthwise,
    }

    def apply(self, func, target, _tunable):
        if not isinstance(func, tirx.PrimFunc):
            return None
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        names = [sch.get(b).annotations.get("op_name") for b in blocks]
        first = next((i for i, name in enumerate(names) if name in self.SCHEDULES), None)
        if first is None or not _inline_into_epilogue(sch, blocks[:first], blocks[first]):
            return None
        schedule, blocks = self.SCHEDULES[names[first]], blocks[first:]
        shapes = [[int(v.dom.extent) for v in sch.get(b).iter_vars] for b in blocks[1:]]
        tile = 1 + next((i for i, s in enumerate(shapes) if s != shapes[0]), len(shapes))
        try:
            for block in blocks[1 : tile - 1] + blocks[tile:-1]:
                sch.compute_inline(block)
        except s_tir.ScheduleError:
            return None  # an epilogue that is not elementwise: CpuFallback takes the kernel
        schedule(sch, blocks[0], blocks[tile - 1], target)
        if tile < len(blocks):
            _spatial(sch, sch.get_loops(blocks[-1]))
        return sch


class CpuFallback(ScheduleRule):
    """Parallel (and, for injective blocks, vectorized) loops for any CPU kernel."""

    def apply(self, func, target, _tunable):
        if not isinstance(func, tirx.PrimFunc):
            return None
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if infos is None:
            return None
        for info in _inline(sch, infos):
            _parallelize(sch, info)
        return sch


def _inline(sch, infos):
    """Inline every block that can be, as dlight's ``try_inline`` does, and return the rest;
    but never reverse-inline a consumer into a reduction block. TVM 0.27 allows that when the
    reduction has length one (a Linear(1, N), a 1x1 conv of one input channel) and then
    reads the consumer's buffer as the accumulator: a float ``T.Add`` of an int32 value,
    which fails to build (case C21)."""
    remaining = list(infos)
    while True:
        for i, info in enumerate(remaining):
            if _try(sch.compute_inline, info.block_rv) or (
                not _feeds_on_reduction(sch, info.block_rv)
                and _try(sch.reverse_compute_inline, info.block_rv)
            ):
                remaining.pop(i)
                break
        else:
            return remaining


def _try(primitive, block):
    try:
        primitive(block)
    except s_tir.ScheduleError:
        return False
    return True


def _feeds_on_reduction(sch, block):
    """True when a producer of ``block`` is a reduction block (one with an init)."""
    return any(sch.get(p).init is not None for p in sch.get_producers(block))


def _parallelize(sch, info):
    loops = {"S": [], "R": [], "O": []}
    for loop, kind in zip(sch.get_loops(info.block_rv), info.dom_kind(), strict=False):
        loops[kind].append(loop)
    spatial, reduce = loops["S"], loops["R"]
    if not spatial or loops["O"]:
        return
    if reduce and len(spatial) >= CONV_LIKE_SPATIAL:
        _row_reduction(sch, info.block_rv, spatial, reduce)
        return
    if reduce and _integer(sch, info.block_rv) and _lanes_fit(sch, info.block_rv, spatial, reduce):
        _lane_reduction(sch, info.block_rv, spatial, reduce)
        return
    sch.reorder(*spatial, *reduce)
    if reduce:
        sch.parallel(sch.fuse(*spatial))
    elif not partition_parts(sch, info):
        _spatial(sch, spatial)


def _spatial(sch, spatial):
    """Parallel outer loops and a vectorized row for an injective block's ``spatial`` loops."""
    if len(spatial) == 1:
        sch.parallel(spatial[0])
    elif len(spatial) >= BLOCKED_SPATIAL and _extent(sch, spatial[-1]) == VECTOR_LANES:
        _blocked_rows(sch, spatial)
    elif _extent(sch, spatial[-1]) < VECTOR_LANES and len(spatial) > 2:
        _short_rows(sch, spatial)
    elif 1 < _extent(sch, spatial[-2]) <= MAX_PHASES and len(spatial) > 2:
        sch.reorder(spatial[-1], spatial[-2])  # (phase, row) -> (row, phase)
        _short_rows(sch, [*spatial[:-2], spatial[-1], spatial[-2]])
    else:
        sch.parallel(sch.fuse(*spatial[:-1]))
        _vectorize(sch, spatial[-1])


def _blocked_rows(sch, spatial):
    """Injective blocks over NCHW16c tensors (N, C16, H, W, 16), such as the zero-point
    padding of a uint8 kernel's output: (N, C16, H) in parallel, each row a serial loop of
    16-channel vectors, so the index arithmetic runs once a row. Fusing the columns into the
    parallel loop too cost a division chain per vector: mobilenet_v2's largest pad (96
    channels, 112x112) took 0.116 ms (Intel Xeon, 2 threads)."""
    *outer, _, lanes = spatial
    sch.parallel(sch.fuse(*outer))
    sch.vectorize(lanes)


def _short_rows(sch, spatial):
    """Injective blocks whose innermost loop is a short block (such as the 4 channels of
    NCHW4c, or the phases of ``depthwise.split_columns`` once moved inside): that loop
    unrolled inside a plain row loop, which LLVM vectorizes as an interleaved access group.
    On resnet18's 64-channel pad+quantize+pack, 0.26 -> 0.01 ms."""
    *outer, row, block = spatial
    sch.parallel(sch.fuse(*outer))
    sch.unroll(block)


def _row_reduction(sch, block, spatial, reduce):
    """Conv- and pool-like blocks: parallel over the outer spatial loops, the reduction
    loops next, and the innermost spatial loop (an output row) inside them, so each step is a
    multiply-add over a row that stays in L1. TIR refuses ``vectorize`` on a reduction's
    update; LLVM's loop vectorizer takes that plain innermost loop instead."""
    *outer, row = spatial
    sch.parallel(sch.fuse(*outer))
    sch.reorder(*reduce, row)
    init = sch.decompose_reduction(block, reduce[0])
    _vectorize(sch, sch.get_loops(init)[-1])


def _integer(sch, block):
    """Whether ``block`` writes an integer buffer (a reduction in any order gives the same
    values)."""
    return all("int" in str(w.source.dtype) for w in sch.get(block).writes)


def _lanes_fit(sch, block, spatial, reduce):
    """Whether ``_lane_reduction`` applies: tried on a copy of ``sch`` (``rfactor`` takes
    only reductions whose combiner TIR recognizes)."""
    try:
        _lane_reduction(sch.copy(), block, spatial, reduce)
    except s_tir.ScheduleError:
        return False
    return True


def _lane_reduction(sch, block, spatial, reduce):
    """An integer reduction with fewer than ``CONV_LIKE_SPATIAL`` output loops, such as the
    integer global average pool's int32 sum of each (N, C)'s H x W quantized values (the
    squeeze-excitations of mobilenet_v3 and efficientnet, where FuseOps puts the quantize in
    the same kernel): the reduction loops
    fused and split into ``_lanes``, which ``rfactor`` gives partial sums of their own,
    innermost, so LLVM vectorizes the quantize and the adds across them; the lanes are
    summed after. The (N, C) pairs run in parallel. mobilenet_v3_large's 120-channel 28x28
    one at batch 8: 0.58 -> 0.10-0.13 ms (Intel Xeon with AMX, 2 threads; a scalar loop
    before). Raises ``ScheduleError`` where ``rfactor`` does not take the block or the
    extent has no divisor past 1."""
    fused = sch.fuse(*reduce)
    extent = _extent(sch, fused)
    lanes = _lanes(extent) if extent else 1
    if lanes in (1, extent):
        raise s_tir.ScheduleError("no lanes to split the reduction into")
    inner = sch.split(fused, [None, lanes])[1]
    ndim = len(sch.get(block).writes[0].region)
    partial = sch.rfactor(inner, factor_axis=ndim)  # each output's lanes contiguous
    outer = sch.fuse(*sch.get_loops(block)[: len(spatial)])
    sch.parallel(outer)
    sch.compute_at(partial, outer)
    lane, steps = sch.get_loops(partial)[-2:]  # compute_at puts the lanes outside
    sch.reorder(steps, lane)
    sch.decompose_reduction(partial, steps)


def _lanes(extent):
    """Lanes for a reduction of ``extent`` values: the largest multiple of ``VECTOR_LANES``
    up to 4 of them that divides it, else its largest divisor up to 2 ``VECTOR_LANES``.
    At batch 8 (Intel Xeon with AMX, 2 threads): 14x14 sums of 672 channels took 0.35 ms in
    14 lanes, 0.25 in 28, 0.22 in 49; 28x28 of 120 0.10-0.13 in 16, 0.16 in 28, 0.20 in 56;
    7x7 of 960 0.11 in 7, 0.15 in 49."""
    whole = [d for d in range(VECTOR_LANES, 4 * VECTOR_LANES + 1, VECTOR_LANES) if extent % d == 0]
    return whole[-1] if whole else max(d for d in range(1, 2 * VECTOR_LANES + 1) if extent % d == 0)


def _extent(sch, loop):
    """The constant extent of ``loop``, 0 when it is symbolic."""
    extent = sch.get(loop).extent
    return int(extent) if isinstance(extent, tirx.IntImm) else 0


def _vectorize(sch, loop):
    """Vectorize ``loop`` by ``VECTOR_LANES`` when its extent allows; otherwise leave it to
    LLVM's own loop vectorizer."""
    extent = _extent(sch, loop)
    if extent and extent % VECTOR_LANES == 0:
        sch.vectorize(sch.split(loop, [None, VECTOR_LANES])[1])
