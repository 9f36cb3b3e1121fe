"""GPU schedules: INT8 convolutions on ``dp4a``, the rest on dlight's default rules.

INT8 conv2d kernels (uint8 activations x int8 weights -> int32) are laid out NHWC / OHWI
(TVM's ``ConvertLayout``), so that four input channels are contiguous in both operands, and
scheduled from MetaSchedule's design space with the ``dp4a`` tensor intrinsic (TVM's
``dp4a_u8s8s32``; the tiling of TVM's own dp4a tuning scripts): the first sample, over
fixed seeds, that passes MetaSchedule's post-processors, GPU code verification included.
Such a schedule is valid for the target but UNTUNED: without a GPU nothing is measured, and
``qbench tune`` on a machine with the GPU replaces it with a measured one.

Every other kernel gets dlight's default rules. dlight's ``Matmul`` stops the whole build
with an ``AssertionError`` on some fused INT8 kernels (efficientnet_lite0's, ``sm_90``:
"There are some consumers of the cache-write stage that are not properly inlined", TVM
0.27); guarded, it declines such a kernel and the next rule (``Fallback`` at the end takes
every kernel) schedules it, so a build never fails for want of one schedule.
"""

import logging

log = logging.getLogger(__name__)

DP4A_SINCE = 61  # the first compute capability with dp4a (Pascal, sm_61)
SEEDS = range(1, 64)  # design-space samples tried per kernel, in order
LAYOUT = {"relax.nn.conv2d": ["NHWC", "OHWI"]}  # for ConvertLayout: channels innermost
# what MetaSchedule's rules need of a cuda target that names only its arch (every NVIDIA
# GPU since sm_30 has these limits)
TARGET_DEFAULTS = {
    "max_threads_per_block": 1024,
    "max_num_threads": 1024,
    "max_shared_memory_per_block": 49152,
    "thread_warp_size": 32,
}


def default_schedule():
    """The pass scheduling every unscheduled kernel with dlight's GPU rules, in the order
    TVM's cuda pipeline uses (``relax.backend.cuda.pipeline``), ``Matmul`` guarded."""
    from tvm.s_tir import dlight as dl

    return dl.ApplyDefaultSchedule(
        _guarded(dl.gpu.Matmul()),
        dl.gpu.GEMV(),
        dl.gpu.Reduction(),
        dl.gpu.GeneralReduction(),
        dl.gpu.Fallback(),
    )


def _guarded(rule):
    """``rule`` whose failure on a kernel means "does not apply" (None)."""
    from tvm.s_tir.dlight import ScheduleRule

    def apply(func, target, tunable):
        try:
            return rule.apply(func, target, tunable)
        except (AssertionError, RuntimeError) as e:  # TVM's ScheduleError is a RuntimeError
            log.info("dlight %s declined %s: %s", type(rule).__name__, _name(func), e)
            return None

    return ScheduleRule.from_callable(type(rule).__name__)(apply)


def dp4a_schedule(target):
    """The module pass giving each uint8 x int8 conv2d kernel of a fused Relax module a
    ``dp4a`` schedule (module docstring), marked scheduled; other kernels are left as they
    are. ``target``: a ``tvm.target.Target`` of kind cuda."""
    import tvm
    from tvm import tirx

    @tvm.transform.module_pass(opt_level=0, name="QbenchDp4a")
    def _pass(mod, _ctx):
        if int(str(target.arch).removeprefix("sm_")[:2]) < DP4A_SINCE:
            return mod  # no dp4a before sm_61: dlight schedules every kernel
        for gvar, func in list(mod.functions_items()):
            if isinstance(func, tirx.PrimFunc) and _int8_conv(gvar.name_hint, func):
                scheduled = _dp4a(func, target, gvar.name_hint)
                if scheduled is not None:
                    mod[gvar] = scheduled
        return mod

    return _pass


def _int8_conv(name, func):
    """A conv2d kernel that reads uint8 activations (qbench's INT8 layers)."""
    return "conv2d" in name and '"uint8"' in func.script()


def _dp4a(func, target, name):
    """``func`` scheduled on dp4a, or None when no sample of the space is valid."""
    from tvm import IRModule
    from tvm.s_tir import meta_schedule as ms

    prim = IRModule({"main": func.with_attr("global_symbol", "main")})
    rules, postprocs = _rules(), _postprocs()
    for seed in SEEDS:
        space = ms.space_generator.PostOrderApply(
            sch_rules=rules, postprocs=postprocs, mutator_probs={}
        )
        context = ms.TuneContext(
            mod=prim, target=target, space_generator=space, task_name=name, rand_state=seed
        )
        for sch in context.space_generator.generate_design_space(prim):
            if "dp4a" not in sch.mod.script():
                return None  # the intrinsic does not fit this kernel (e.g. depthwise)
            sch.enter_postproc()
            if all(p.apply(sch) for p in postprocs):
                log.info("%s: dp4a schedule from design-space seed %d", name, seed)
                main = sch.mod["main"].with_attr("global_symbol", name)
                return main.with_attr("tirx.is_scheduled", True)
    log.info("%s: no valid dp4a sample in %d seeds; dlight schedules it", name, len(SEEDS))
    return None


def _rules():
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.tensor_intrin.dot_product_common import DP4A_U8S8S32_INTRIN

    reuse = ms.schedule_rule.ReuseType
    return [
        ms.schedule_rule.MultiLevelTilingWithIntrin(
            DP4A_U8S8S32_INTRIN,
            structure="SSSRRSRS",
            tile_binds=["blockIdx.x", "vthread.x", "threadIdx.x"],
            max_innermost_factor=64,
            vector_load_lens=[1, 2, 3, 4],
            reuse_read=reuse(req="must", levels=[4], scope="shared"),
            reuse_write=reuse(req="must", levels=[3], scope="local"),
        ),
        ms.schedule_rule.AutoInline(
            into_producer=True,
            into_consumer=True,
            inline_const_tensor=True,
            disallow_if_then_else=False,
            require_injective=False,
            require_ordered=False,
            disallow_op=None,
        ),
        ms.schedule_rule.ParallelizeVectorizeUnroll(
            max_jobs_per_core=-1,
            max_vectorize_extent=-1,
            unroll_max_steps=[0, 16, 64, 512, 1024],
            unroll_explicit=True,
        ),
        ms.schedule_rule.AutoBind(
            max_threadblocks=256, thread_extents=[32, 64, 128, 256, 512, 1024]
        ),
    ]


def _postprocs():
    from tvm.s_tir import meta_schedule as ms

    return [
        ms.postproc.DisallowDynamicLoop(),
        ms.postproc.RewriteCooperativeFetch(),
        ms.postproc.RewriteUnboundBlock(),
        ms.postproc.RewriteParallelVectorizeUnroll(),
        ms.postproc.RewriteReductionBlock(),
        ms.postproc.RewriteTensorize(),
        ms.postproc.VerifyGPUCode(),
    ]


def _name(func):
    return func.attrs.get("global_symbol", "?") if func.attrs else "?"
