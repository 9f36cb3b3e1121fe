"""Tuning a prepared run's FP32 and INT8 graphs into the user's database (``qbench tune``,
``qbench run --tune``)."""

import time

from ..compile import tuning
from .prepare import graphs, tuning_remote


def tune_graphs(p, trials_per_task, time_budget_min=None, which=("fp32", "int8")):
    """Tune the FP32 and INT8 graphs of a ``Prepared`` run into the user's database, measured
    on its tracker's devices when it has one (its own device's session is ended first, so
    that the tracker can lend that device to the tuner). Returns {graph name:
    ``tuner.TuneSummary``} (``prepare.tuning_databases`` points builds at them)."""
    if p.device is not None:
        p.device.close()
    folder = tuning.db_dir(p.opts.tuning_db, p.target)
    deadline = time.time() + 60 * time_budget_min if time_budget_min else None
    summaries = {}
    for name, mod in graphs(p):
        if name.removeprefix("tvm_") not in which:
            continue
        summaries[name] = tuning.tune(
            mod, p.target, folder, trials_per_task, deadline, name, tuning_remote(p.opts)
        )
        if summaries[name].stopped:
            break
    return summaries
