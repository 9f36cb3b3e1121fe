"""The CPU compile pipeline: kernel selection (``kernels.select``), legalize and fuse,
schedule, then ``relax.build``.

Order matters: qbench's hand-scheduled kernels (packed INT8 and FP32 conv/dense, depthwise,
max pooling) are scheduled first, so MetaSchedule neither tunes nor replaces them (it skips
kernels marked scheduled); then the tuning databases; then ``CpuFallback`` for whatever no
record covers.
It follows the steps of TVM's ``relax.pipeline.static_shape_tuning_pipeline``.
"""

SCHEDULE_COUNTS = "qbench_schedules"  # module attr: kernels by schedule source


def cpu_pipeline(target, database=None, fallback=True, hand_kernels=True):
    """A module pass lowering a Relax module for the llvm ``target`` (dict).

    Args:
        database: a MetaSchedule database whose best records are applied, or None.
        fallback: give the remaining kernels ``CpuFallback`` schedules (False leaves them
            unscheduled, as MetaSchedule's task extraction needs).
        hand_kernels: put layers on qbench's kernels (``kernels.select``); False lowers
            TVM's own ops only (the reference the kernels are checked against).

    The lowered module's ``SCHEDULE_COUNTS`` attribute counts its kernels by where their
    schedule came from: ``hand`` (qbench's kernels), ``tuned`` (a database record),
    ``default`` (``CpuFallback``, or none when ``fallback`` is False).
    """
    import tvm
    from tvm import relax
    from tvm.relax import transform
    from tvm.s_tir import dlight

    from .kernels.intrin import ensure_vnni_intrin
    from .kernels.schedules import CpuFallback, HandKernels
    from .kernels.select import select_kernels

    ensure_vnni_intrin()

    @tvm.transform.module_pass(opt_level=0)
    def _lower(mod, _ctx):
        if hand_kernels:  # readers of one blocked concat emit it each (emit_common)
            mod = transform.EliminateCommonSubexpr()(select_kernels(mod, target))
        with tvm.target.Target(target):  # no database here: the zero pipeline would apply it
            mod = tvm.transform.Sequential(
                [
                    transform.DecomposeOpsForInference(),
                    transform.CanonicalizeBindings(),
                    relax.get_pipeline("zero"),
                    dlight.ApplyDefaultSchedule(HandKernels()),
                ]
            )(mod)
            hand = scheduled_kernels(mod)
            if database is not None:
                mod = apply_records(mod, database, target)
            tuned = scheduled_kernels(mod) - hand
            if fallback:
                mod = dlight.ApplyDefaultSchedule(CpuFallback())(mod)
        total = len(kernels(mod))
        counts = {"hand": len(hand), "tuned": len(tuned), "default": total - len(hand | tuned)}
        return mod.with_attr(SCHEDULE_COUNTS, counts)

    return _lower


def apply_records(mod, database, target):
    """``mod`` with every unscheduled kernel that ``database`` holds a record for replaced by
    that record's schedule. (TVM 0.27's ``MetaScheduleApplyDatabase`` looks kernels up
    without the ``global_symbol`` that task extraction stored with them, and finds none.)"""
    import tvm

    target = tvm.target.Target(target)
    for name in kernels(mod) - scheduled_kernels(mod):
        func = mod[name]
        query = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
        sch = database.query_schedule(query, target, workload_name="main")
        if sch is not None:
            scheduled = sch.mod["main"].without_attr("global_symbol")
            mod[name] = scheduled.with_attr("tirx.is_scheduled", True)
    return mod


def kernels(mod):
    """The names of the TIR kernels (PrimFuncs) of ``mod``."""
    from tvm import tirx

    return {gv.name_hint for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}


def scheduled_kernels(mod):
    """The names of ``mod``'s kernels already scheduled (``tirx.is_scheduled``)."""
    return {
        name
        for name in kernels(mod)
        if mod[name].attrs is not None and bool(mod[name].attrs.get("tirx.is_scheduled", False))
    }
