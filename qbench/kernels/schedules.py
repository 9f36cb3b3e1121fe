"""Default CPU schedules, applied to the kernels that no tuning record covers.

Built on TVM's dlight framework (``ApplyDefaultSchedule`` skips kernels already scheduled,
for example by a MetaSchedule database):

- ``VnniConv``: the packed uint8 x int8 conv of ``conv2d.py`` (also every dense layer), with
  the hand schedule measured in ``schedule_conv2d_vnni``;
- ``CpuFallback``: every other kernel. Like dlight's GPU ``Fallback`` it inlines what it can,
  then runs the spatial loops of each remaining block in parallel and vectorizes injective
  blocks. Untuned Relax builds are single-threaded scalar loops otherwise.
"""

from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base import ScheduleRule
from tvm.s_tir.dlight.base.common_schedules import try_inline

from .conv2d import OP_NAME, schedule_conv2d_vnni

VECTOR_LANES = 16


class VnniConv(ScheduleRule):
    """Schedules a PrimFunc holding the packed VNNI conv block (and nothing else)."""

    def apply(self, func, target, _tunable):
        if not isinstance(func, tirx.PrimFunc):
            return None
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        conv = [b for b in blocks if sch.get(b).annotations.get("op_name") == OP_NAME]
        if len(conv) != 1 or len(blocks) != 1:
            return None
        schedule_conv2d_vnni(sch, conv[0])
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
        for info in try_inline(sch, infos):
            _parallelize(sch, info)
        return sch


def _parallelize(sch, info):
    loops = {"S": [], "R": [], "O": []}
    for loop, kind in zip(sch.get_loops(info.block_rv), info.dom_kind(), strict=False):
        loops[kind].append(loop)
    if not loops["S"] or loops["O"]:
        return
    sch.reorder(*loops["S"], *loops["R"])
    fused = sch.fuse(*loops["S"])
    extent = sch.get(fused).extent
    if info.is_injective() and isinstance(extent, tirx.IntImm) and extent % VECTOR_LANES == 0:
        outer, inner = sch.split(fused, [None, VECTOR_LANES])
        sch.parallel(outer)
        sch.vectorize(inner)
    else:
        sch.parallel(fused)
