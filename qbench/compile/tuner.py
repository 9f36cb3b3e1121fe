"""The tuning loop: MetaSchedule with trial budgets per kernel, progress, Ctrl-C, time budget.

TVM's ``MetaScheduleTuneIRMod`` tunes every kernel in one C++ call that neither reports
progress nor stops on Ctrl-C, and gives every kernel the same trial cap. qbench drives
``meta_schedule.tune_tasks`` itself:

- kernels whose workload a database already holds are skipped (a re-run tunes nothing
  already tuned);
- trials go where the FLOPs are (``trial_budgets``); a few kernels with the same budget share
  one ``tune_tasks`` call (``_chunks``);
- a measure callback drives a progress bar (trials, kernels, best latency of the kernel just
  measured); Ctrl-C or the end of ``--time-budget`` stops the search at the next measurement
  join or chunk. Records already measured stay: MetaSchedule's JSON database appends each one
  as it is made. A second Ctrl-C aborts at once;
- at the end every tuned kernel's best record is checked against qbench's default schedule
  (``recordcheck``): MetaSchedule measures speed, never results.
"""

import logging
import math
import signal
import time
from dataclasses import dataclass, field

from tqdm import tqdm
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from .dbfiles import merged_database
from .kernels.intrin import skip_tensor_intrin_package
from .recordcheck import check_records

MAX_TRIALS_PER_ITER = 64  # MetaSchedule's default measurement batch
MS_LOGGER = "tvm.s_tir.meta_schedule"
CHUNK = 3  # kernels per tune_tasks call
RPC_SESSION_TIMEOUT_S = 300  # one measurement session on a remote device, s


@dataclass
class TuneSummary:
    """What one ``tune_tasks_of`` call did: kernel counts, seconds, why it stopped early."""

    tasks: int
    tuned: int
    skipped: int
    seconds: float
    stopped: str = ""
    rejected: list = field(default_factory=list)
    failed: int = 0  # kernels measured without one valid record (tuned again next time)


class _Stop(Exception):
    """Raised inside the measure callback to end MetaSchedule's search early."""


def trial_budgets(flops, trials_per_task):
    """Trials per kernel, spent where the work is.

    Every kernel gets at least a quarter of ``trials_per_task`` (at least 1); the rest of the
    total ``trials_per_task * len(flops)`` is shared in proportion to each kernel's FLOPs
    (times its occurrences), capped at 4x ``trials_per_task``, then rounded down to the
    floor times a power of two, so that few distinct budgets (``tune_tasks`` calls) remain.

    Args:
        flops: per kernel, FLOPs times occurrences (floats >= 0).
        trials_per_task: the mean budget (int >= 1).
    Returns:
        list of int trial counts, one per kernel.
    """
    floor = max(1, trials_per_task // 4)
    spare = max(0, trials_per_task * len(flops) - floor * len(flops))
    total = sum(flops) or 1.0
    cap = 4 * trials_per_task
    raw = [min(cap, floor + round(spare * f / total)) for f in flops]
    return [floor * 2 ** int(math.log2(r / floor)) for r in raw]


class StopOnInterrupt:
    """Context manager: the first SIGINT asks to stop, the second raises KeyboardInterrupt."""

    def __init__(self):
        self.requested = False
        self._previous = None

    def __enter__(self):
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self._previous)
        return False

    def _handle(self, *_):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        tqdm.write("Ctrl-C: stopping after the current measurements (Ctrl-C again aborts)")


def tune_tasks_of(
    lowered, target, folder, trials_per_task, deadline=None, label="tuning", known=(), remote=None
):
    """Tune the unscheduled kernels of ``lowered`` (a legalized, fused Relax module).

    Args:
        target: TVM target dict.
        folder: MetaSchedule database folder (created by the caller).
        trials_per_task: mean trials per kernel (``trial_budgets``).
        deadline: ``time.time()`` after which the search stops (None: no limit).
        label: progress bar title.
        known: other database folders (the shipped pre-tuned one): kernels they hold are
            not tuned again.
        remote: a ``remote.Remote`` with a tracker: candidates are measured on its key's
            devices (MetaSchedule's RPC runner), and the record check runs there; None:
            here.
    Returns:
        a ``TuneSummary``.
    """
    import tvm
    from tvm.s_tir import meta_schedule as ms

    start = time.time()
    database = ms.database.JSONDatabase(work_dir=str(folder))
    extracted = ms.relax_integration.extract_tasks(lowered, tvm.target.Target(target))
    extracted = [t for t in extracted if not _scheduled(t) and _reduces(t)]
    dbs = [database] + ([merged_database(known)] if known else [])
    pending = [t for t in extracted if not any(_has_valid_record(d, t.dispatched[0]) for d in dbs)]
    budgets = trial_budgets([_flops(t) * t.weight for t in pending], trials_per_task)
    stopped, tuned, failed = "", 0, 0
    with tqdm(total=sum(budgets), desc=label, unit="trial") as bar, StopOnInterrupt() as stop:
        for trials, tasks in _chunks(pending, budgets):
            stopped = _why_stop(stop, deadline)
            if stopped:
                break
            progress = _Progress(bar, stop, deadline, tasks)
            try:
                _tune_group(tasks, trials, folder, database, progress, _measure(target, remote))
            except Exception:
                if not progress.stopped:
                    raise
            tuned += sum(math.isfinite(b) for b in progress.best.values())
            failed += sum(not math.isfinite(b) for b in progress.best.values())
            stopped = progress.stopped
            if stopped:
                break
    bad = check_records(extracted, target, folder, remote)
    skipped = len(extracted) - len(pending)
    seconds = time.time() - start
    return TuneSummary(len(extracted), tuned, skipped, seconds, stopped, bad, failed)


def _chunks(tasks, budgets):
    """(trials, tasks) chunks: same budget, at most ``CHUNK`` kernels, largest budget first.
    MetaSchedule reports measurements only when a call joins them, so small chunks keep the
    progress bar, Ctrl-C and the time budget responsive; a call costs about 4 s to start."""
    groups = {}
    for task, trials in zip(tasks, budgets, strict=True):
        groups.setdefault(trials, []).append(task)
    for trials in sorted(groups, reverse=True):
        for i in range(0, len(groups[trials]), CHUNK):
            yield trials, groups[trials][i : i + CHUNK]


def _why_stop(interrupt, deadline):
    if interrupt.requested:
        return "Ctrl-C"
    return "--time-budget" if deadline and time.time() > deadline else ""


def _measure(target, remote):
    """{builder, runner} keyword arguments of ``ms.tune_tasks``: here, or on ``remote``'s
    tracker key, with each candidate linked to a shared library for the target's triple
    (the device need not have a linker)."""
    import functools

    from tvm.s_tir import meta_schedule as ms

    if remote is None:
        return {"builder": ms.builder.LocalBuilder(initializer=skip_tensor_intrin_package)}
    triple = str(target.get("mtriple", "")) or None
    config = ms.runner.RPCConfig(
        tracker_host=remote.tracker[0],
        tracker_port=remote.tracker[1],
        tracker_key=remote.key,
        session_timeout_sec=RPC_SESSION_TIMEOUT_S,
    )
    return {
        "builder": ms.builder.LocalBuilder(
            initializer=skip_tensor_intrin_package,
            f_export=functools.partial(_export_library, triple=triple),
        ),
        "runner": ms.runner.RPCRunner(rpc_config=config),
    }


def _export_library(mod, triple):
    """A MetaSchedule candidate (runtime module) as a shared library, cross-linked for
    ``triple`` (``remote.export``); returns its path."""
    import os
    import platform
    import tempfile

    from ..core.remote import export

    path = os.path.join(tempfile.mkdtemp(prefix="qbench-ms-"), "candidate.so")
    export(mod, path, triple or f"{platform.machine()}-linux-gnu")
    return path


def _tune_group(tasks, trials, folder, database, progress, measure):
    from tvm.s_tir import meta_schedule as ms

    # MetaSchedule sets its console level from its logger's level on every call (then resets
    # that logger to DEBUG for its log files): keep the console at qbench's level.
    ms_logger = logging.getLogger(MS_LOGGER)
    ms_logger.setLevel(logging.getLogger().getEffectiveLevel())
    # Its dictConfig names every handler already on that logger; an unnamed one (left by a
    # log-capturing host such as pytest) breaks it with "'NoneType' has no attribute 'format'".
    for handler in [h for h in ms_logger.handlers if h.get_name() is None]:
        ms_logger.removeHandler(handler)
    contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(tasks, str(folder))
    ms.tune_tasks(
        **measure,
        tasks=contexts,
        task_weights=weights,
        work_dir=str(folder),
        max_trials_global=trials * len(tasks),
        max_trials_per_task=trials,
        num_trials_per_iter=min(MAX_TRIALS_PER_ITER, trials),
        database=database,
        measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), progress],
    )


@derived_object
class _Progress(PyMeasureCallback):
    """Updates the bar after each measured batch; raises ``_Stop`` when asked to stop."""

    def __init__(self, bar, interrupt, deadline, tasks):
        super().__init__()
        self.bar, self.interrupt, self.deadline = bar, interrupt, deadline
        self.names = [t.task_name for t in tasks]
        self.best = {}
        self.stopped = ""

    def apply(self, task_scheduler, task_id, candidates, builder_results, runner_results):
        secs = [_mean(r.run_secs) for r in runner_results if r.error_msg is None]
        best = min([s for s in secs if s is not None] or [math.inf])
        self.best[task_id] = min(self.best.get(task_id, math.inf), best)
        self.bar.update(len(candidates))
        shown = self.best[task_id]
        self.bar.set_postfix(
            kernel=self.names[task_id][:32],
            best_ms=f"{1e3 * shown:.4f}" if math.isfinite(shown) else "none valid",
            kernels=f"{len(self.best)}/{len(self.names)}",
        )
        self.stopped = _why_stop(self.interrupt, self.deadline)
        if self.stopped:
            raise _Stop(self.stopped)


FAILED_RUN_SECS = 1e9  # MetaSchedule stores 1e10 s for a candidate that failed to build or run


def _has_valid_record(database, mod):
    """True when ``database`` holds a measured record of ``mod`` (not only failed ones)."""
    if not database.has_workload(mod):
        return False
    top = database.get_top_k(database.commit_workload(mod), 1)
    secs = _mean(top[0].run_secs) if top else None
    return secs is not None and secs < FAILED_RUN_SECS


def _mean(run_secs):
    values = [float(s) for s in run_secs or []]
    return sum(values) / len(values) if values else None


def _scheduled(task):
    """Kernels scheduled by hand (``qbench.compile.kernels``) are not tasks."""
    return any(
        f.attrs.get("tirx.is_scheduled", False) for f in task.dispatched[0].functions.values()
    )


def _reduces(task):
    """Only kernels with a reduction are worth a search: for the injective ones (packing,
    padding, quantize, elementwise), qbench's default schedule is a parallel vector loop that
    runs near memory speed (resnet18 INT8: all 16 of them, 0.3 ms together), while each
    MetaSchedule trial costs seconds."""
    from tvm import s_tir, tirx

    sch = s_tir.Schedule(task.dispatched[0])
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    return any(v.iter_type == tirx.IterVar.CommReduce for b in blocks for v in sch.get(b).iter_vars)


def _flops(task):
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(task.dispatched[0]))
    except Exception:  # noqa: BLE001  (opaque kernels: no estimate, weigh them as 1 FLOP)
        return 1.0
