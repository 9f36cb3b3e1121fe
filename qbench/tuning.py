"""MetaSchedule tuning with a kept database, one folder per target.

Untuned Relax builds run unscheduled loops (DESIGN.md: resnet18 820 ms against PyTorch's
17 ms), so speed comes from MetaSchedule. Its JSON database (``database_workload.json``,
``database_tuning_record.json``) is keyed inside by the structural hash of each TIR
workload; qbench keeps one database folder per target, so that records apply only to the
target they were measured on and every model shares what was tuned before. Records are
appended as they are measured, so an interrupted tuning keeps what it found.

On llvm the hand-scheduled VNNI kernels (``qbench.kernels``) are not tuning tasks: they are
scheduled before MetaSchedule sees the module.
"""

import hashlib
import json
import os
from pathlib import Path

RECORDS = "database_tuning_record.json"


def default_root():
    """``$QBENCH_TUNING_DB``, else ``~/.cache/qbench/tuning`` (``$XDG_CACHE_HOME`` honoured)."""
    if os.environ.get("QBENCH_TUNING_DB"):
        return Path(os.environ["QBENCH_TUNING_DB"])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "qbench" / "tuning"


def db_dir(root, target):
    """The database folder of ``target`` (a dict) under ``root``: ``<kind>-<mcpu>-<hash>``."""
    canonical = json.dumps(target, sort_keys=True)
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:12]
    name = "-".join(str(target.get(k)) for k in ("kind", "mcpu") if target.get(k))
    return Path(root) / f"{name}-{digest}"


def record_count(folder):
    """Number of tuning records in a database folder (0 when absent)."""
    path = Path(folder) / RECORDS
    if not path.is_file():
        return 0
    with open(path) as f:
        return sum(1 for line in f if line.strip())


def tune(mod, target, folder, trials_per_task, max_trials=None):
    """Tune every kernel of ``mod`` for ``target``, adding records to ``folder``.

    Args:
        mod: a Relax ``tvm.IRModule`` (FP32 or INT8).
        target: TVM target dict.
        folder: database folder (``db_dir``).
        trials_per_task: MetaSchedule trials per kernel (task).
        max_trials: total trial budget; default ``trials_per_task`` times the task count
            (so that no task is starved).

    Returns:
        The tuned ``tvm.IRModule`` (schedules from the database applied).
    """
    tasks = _task_count(mod, target)
    total = max_trials or trials_per_task * max(tasks, 1)
    Path(folder).mkdir(parents=True, exist_ok=True)
    return _pipeline(target, folder, total, trials_per_task)(mod)


def apply(mod, target, folder):
    """``mod`` lowered with every kernel the database of ``folder`` knows replaced by its
    best schedule (``folder`` None: no database)."""
    return _pipeline(target, folder, 0, None)(mod)


def _pipeline(target, folder, trials, trials_per_task, fallback=True):
    import tvm
    from tvm import relax

    if target["kind"] == "llvm":
        from .lowering import cpu_pipeline

        return cpu_pipeline(target, folder, trials, trials_per_task, fallback)
    if folder is None:
        return tvm.transform.Sequential([])
    return relax.pipeline.static_shape_tuning_pipeline(
        total_trials=trials,
        target=tvm.target.Target(target),
        work_dir=str(folder),
        max_trials_per_task=trials_per_task,
    )


def _task_count(mod, target):
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    if target["kind"] == "llvm":
        lowered = _pipeline(target, None, 0, None, fallback=False)(mod)
    else:
        with tvm.target.Target(target):
            lowered = relax.get_pipeline("zero")(mod)
    return len(ms.relax_integration.extract_tasks(lowered, tvm.target.Target(target)))
