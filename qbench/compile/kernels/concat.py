"""The default schedule of a concat of many tensors: one loop nest per part.

TVM's concatenate computes each output element through a chain of ``if_then_else``, one per
part, so a concat of K parts costs K tests an element, and densenet's grow by one part a
layer (up to 60 parts; its concats with the BatchNorm and ReLU after them took 19.0 of its
34.4 ms at batch 1, AMD EPYC Zen 4, 2 threads, ``benchmarks/kernel_times.py``). Here the
loop over the concat axis is cut where the parts meet (``Schedule.loop_partition``); in each
piece every test is decided by the loop's range, and TVM's simplifier removes the chain.
Measured on a concat of 14x14 parts followed by a ReLU-like epilogue (same CPU, 2 threads):
40 parts 3.31 -> 0.35 ms, 24 parts 1.27 -> 0.20 ms, 8 parts 0.135 -> 0.054 ms, and 5 parts
0.047 -> 0.068 ms, slower (a parallel loop a part), so fewer than ``MIN_PARTS`` stay whole.
"""

import itertools

from tvm import tirx

MIN_PARTS = 8
MIN_LOOPS = 3  # the concat axis, then at least one parallel loop and a row


def partition_parts(sch, info):
    """Schedule the injective block of ``info`` (a dlight ``BlockInfo`` in ``sch``, a
    ``tvm.s_tir.Schedule``) as one loop nest per part when it reads ``MIN_PARTS`` or more
    tensors at distinct constant offsets along one of its axes (a concat): that axis
    outermost and cut at the offsets; in each piece the loops but the row in parallel, the
    piece's own loop inside them, the row innermost. Returns False (``sch`` untouched)
    for any other block."""
    block = sch.get(info.block_rv)
    if len(block.reads) < MIN_PARTS or len(info.iters) < MIN_LOOPS:
        return False
    for it in info.iters:
        extent = sch.get(it.loop_rv).extent
        if not isinstance(extent, tirx.IntImm):
            continue
        starts = sorted(s for s in _read_offsets(block, it.var) if 0 < s < int(extent))
        if len(starts) + 1 >= MIN_PARTS:
            _cut(sch, info.block_rv, it.loop_rv, [0, *starts, int(extent)])
            return True
    return False


def _read_offsets(block, var):
    """The constants d of the reads of ``block`` at ``var - d`` along any axis."""
    from tvm.sym.analyzer import Analyzer

    analyzer, found = Analyzer(), set()
    for region in block.reads:
        for axis in region.region:
            offset = analyzer.simplify(var - axis.min)
            if isinstance(offset, tirx.IntImm):
                found.add(int(offset.value))
    return found


def _cut(sch, block, loop, edges):
    """Move ``loop`` outermost, cut it at ``edges`` (its range's ends included) and schedule
    each piece. ``loop_partition`` gives pieces that start past 0, which ``fuse`` refuses:
    each piece's loop goes inside the fused parallel loops instead."""
    others = [other for other in sch.get_loops(block) if not sch.get(other).same_as(sch.get(loop))]
    sch.reorder(loop, *others)
    sizes = [end - start for start, end in itertools.pairwise(edges)]
    for piece in sch.loop_partition(loop, [*sizes[:-1], None]):
        (part,) = sch.get_child_blocks(piece)
        own, *outer, row = sch.get_loops(part)
        sch.reorder(*outer, own, row)
        sch.parallel(sch.fuse(*outer))
