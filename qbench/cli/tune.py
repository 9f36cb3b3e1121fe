"""``qbench tune``: MetaSchedule-tune a model's FP32 and INT8 graphs into the tuning
database."""

from .exits import EXIT_INTERRUPTED, EXIT_PASS
from .options import add_run_options
from .runopts import run_options


def add_parser(command):
    """Add ``qbench tune`` through ``command(name, help)``, the sub-parser factory."""
    t = command(
        "tune",
        "MetaSchedule-tune the FP32 and INT8 graphs of a model into the tuning database, "
        "which every run applies",
    )
    add_run_options(t, omit=("timing", "signoff"))


def run(args):
    """``qbench tune``: tune the prepared run's graphs; one line per graph; exit 130 on Ctrl-C."""
    from ..pipeline.prepare import prepare
    from ..pipeline.tune import tune_graphs

    prepared = prepare(run_options(args))  # its checks first: the remote, the database
    print(f"tuning into {prepared.tuning.database} (Ctrl-C stops at the next measurements)")
    opts, stopped = prepared.opts, set()
    for name, s in tune_graphs(
        prepared, opts.trials, opts.time_budget_min, opts.tune_graphs
    ).items():
        print(
            f"{name}: {s.tuned} kernels tuned, {s.skipped} already in a database, of {s.tasks}, "
            f"in {s.seconds:.0f} s"
            + (f"; stopped by {s.stopped}" if s.stopped else "")
            + (f"; rejected: {', '.join(s.rejected)}" if s.rejected else "")
            + (
                f"; {s.failed} kernels got no valid measurement (build or run errors; tuned "
                "again next time)"
                if s.failed
                else ""
            )
        )
        stopped.add(s.stopped)
    return EXIT_INTERRUPTED if "Ctrl-C" in stopped else EXIT_PASS
