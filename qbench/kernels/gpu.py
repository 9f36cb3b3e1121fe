"""GPU schedules: dlight's default rules (TVM's own), one guarded against its failures.

dlight's ``Matmul`` rule stops the whole build with an ``AssertionError`` on some fused
INT8 kernels (seen on efficientnet_lite0's INT8 graph for ``sm_90``: "There are some
consumers of the cache-write stage that are not properly inlined", TVM 0.27). Guarded, it
declines such a kernel and the next rule schedules it (``Fallback`` at the end takes every
kernel), so a build never fails for want of one schedule.
"""

import logging

log = logging.getLogger(__name__)


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
            name = func.attrs.get("global_symbol", "?") if func.attrs else "?"
            log.info("dlight %s declined %s: %s", type(rule).__name__, name, e)
            return None

    return ScheduleRule.from_callable(type(rule).__name__)(apply)
