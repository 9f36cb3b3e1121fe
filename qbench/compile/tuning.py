"""MetaSchedule tuning with a kept database, one folder per target.

Untuned Relax builds run unscheduled loops (DESIGN.md: resnet18 820 ms against PyTorch's
17 ms), so speed comes from MetaSchedule. Its JSON database (``database_workload.json``,
``database_tuning_record.json``) is keyed inside by the structural hash of each TIR
workload; qbench keeps one database folder per target, so that records apply only to the
target they were measured on and every model shares what was tuned before. Records are
appended as they are measured, so an interrupted tuning keeps what it found.

Pre-tuned records ship inside the package (``qbench/compile/pretuned``, the way TVM's TopHub
once shipped tuned logs); every build applies the best of them and of the user's database.
They are produced by ``qbench tune ... --tuning-db qbench/compile/pretuned``
(docs/kernels.md gives the commands).

On llvm qbench's hand-scheduled kernels (``qbench.compile.kernels``) are not tuning tasks: they
are scheduled before MetaSchedule sees the module.
"""

import hashlib
import json
import os
from pathlib import Path

from .dbfiles import readable_records as record_count  # damaged lines not counted

PRETUNED_ROOT = Path(__file__).parent / "pretuned"


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


def pretuned_dir(target):
    """The shipped database folder for ``target``, or None when qbench ships none for it."""
    folder = db_dir(PRETUNED_ROOT, target)
    return folder if record_count(folder) else None


def databases(root, target):
    """The database folders a build applies: the user's (``root``) and the shipped one, each
    only when it holds records. Returns (folders, source): source is ``"user database"``,
    ``"pre-tuned"``, ``"pre-tuned + user database"`` or ``"none"``."""
    user = db_dir(root, target)
    pretuned = pretuned_dir(target)
    pretuned = None if pretuned and pretuned.resolve() == user.resolve() else pretuned
    folders = [f for f in (user if record_count(user) else None, pretuned) if f]
    names = {user: "user database"}
    source = " + ".join(sorted(names.get(f, "pre-tuned") for f in folders)) or "none"
    return folders, source


def tune(mod, target, folder, trials_per_task, deadline=None, label="tuning", remote=None):
    """Tune every kernel of ``mod`` for ``target`` that neither ``folder`` nor the shipped
    pre-tuned database knows yet.

    Args:
        mod: a Relax ``tvm.IRModule`` (FP32 or INT8).
        target: TVM target dict.
        folder: database folder (``db_dir``), created if missing.
        trials_per_task: mean MetaSchedule trials per kernel (``tuner.trial_budgets``).
        deadline: ``time.time()`` after which tuning stops (after the batch being measured).
        label: progress bar title.
        remote: a ``remote.Remote`` with a tracker whose key's devices measure, or None.
    Returns:
        the ``tuner.TuneSummary``.
    Raises:
        UserError: ``folder`` holds a damaged database (``dbfiles.check_undamaged``).
    """
    from .dbfiles import check_undamaged
    from .tuner import tune_tasks_of

    check_undamaged(folder)
    Path(folder).mkdir(parents=True, exist_ok=True)
    lowered = _pipeline(target, [], fallback=False)(mod)
    shipped = pretuned_dir(target)
    known = [shipped] if shipped and shipped.resolve() != Path(folder).resolve() else []
    return tune_tasks_of(lowered, target, folder, trials_per_task, deadline, label, known, remote)


def apply(mod, target, folders, hand_kernels=True):
    """``mod`` lowered, with every kernel the databases in ``folders`` know replaced by the
    best schedule among them (``hand_kernels``: see ``lowering.cpu_pipeline``)."""
    return _pipeline(target, folders, hand_kernels=hand_kernels)(mod)


def _pipeline(target, folders, fallback=True, hand_kernels=True):
    from .targets import kind_of

    database = union_database(folders) if folders else None
    return kind_of(target).pipeline(target, database, fallback, hand_kernels)


def union_database(folders):
    """One MetaSchedule database over ``folders``: the records of all, merged in memory, so
    the best record of each workload wins, without the workloads ``recordcheck`` rejected and
    without damaged lines (``dbfiles``). (TVM 0.27's ``UnionDatabase`` cannot serve
    ``MetaScheduleApplyDatabase``: it lacks ``size``.)"""
    from .dbfiles import merged_database

    return merged_database(folders)
