"""The CPU compile pipeline: legalize and fuse, schedule, then ``relax.build``.

Order matters: the hand-scheduled VNNI kernels are scheduled first, so MetaSchedule neither
tunes nor replaces them (it skips kernels marked scheduled); then the tuning database (tuning
first, when asked); then ``CpuFallback`` for whatever no record covers. It follows the steps
of TVM's ``relax.pipeline.static_shape_tuning_pipeline``.
"""


def has_vnni(target):
    """True when the target dict is an llvm CPU with AVX-512 VNNI (``vpdpbusd``)."""
    import tvm
    from tvm.target import codegen

    if target.get("kind") != "llvm":
        return False
    return bool(codegen.target_has_features("avx512vnni", tvm.target.Target(target)))


def cpu_pipeline(target, work_dir=None, trials=0, trials_per_task=None, fallback=True):
    """A module pass lowering a Relax module for the llvm ``target`` (dict).

    Args:
        work_dir: MetaSchedule database folder; None applies no records.
        trials: total MetaSchedule trials to run first (0: apply the database only).
        trials_per_task: cap per kernel (task).
        fallback: give the remaining kernels ``CpuFallback`` schedules (False leaves them
            unscheduled, as MetaSchedule's task extraction needs).
    """
    import tvm
    from tvm import relax
    from tvm.relax import transform
    from tvm.s_tir import dlight

    from .kernels.intrin import ensure_vnni_intrin
    from .kernels.schedules import CpuFallback, VnniConv

    ensure_vnni_intrin()
    steps = [
        transform.DecomposeOpsForInference(),
        transform.CanonicalizeBindings(),
        relax.get_pipeline("zero"),
        dlight.ApplyDefaultSchedule(VnniConv()),
    ]
    if work_dir is not None and trials > 0:
        steps.append(
            transform.MetaScheduleTuneIRMod(
                params={},
                work_dir=str(work_dir),
                max_trials_global=trials,
                max_trials_per_task=trials_per_task,
            )
        )
    if work_dir is not None:
        steps.append(transform.MetaScheduleApplyDatabase(str(work_dir)))
    if fallback:
        steps.append(dlight.ApplyDefaultSchedule(CpuFallback()))

    @tvm.transform.module_pass(opt_level=0)
    def _lower(mod, _ctx):
        with tvm.target.Target(target):
            return tvm.transform.Sequential(steps)(mod)

    return _lower
