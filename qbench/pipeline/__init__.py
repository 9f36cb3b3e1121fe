"""Pipeline: the runs that join the stages. Takes a ``RunOptions`` (``options``: the run's
definition, checked once where it is made, by the command line and the Python API alike).
``qbench run`` is ``engine.run``: ``prepare.prepare`` (data, model, calibration, the INT8
rewrite: a ``Prepared``, which only this stage reads), ``diagnose`` (with ``--diagnose`` /
``--accuracy-target``; also ``qbench diagnose``'s entry), ``tune``, the builds and timing on
one path (``builds``), evaluation, sign-off and the ``RunResult`` (``record``); ``sweep``
runs it per model and target, ``artefacts`` builds without running (``qbench build``).

Public entries: ``qbench.pipeline.run(RunOptions(...))`` -> ``report.result.RunResult``;
``pipeline.diagnose.run_diagnosis(RunOptions(...))``.

May import: core, model, data, calibration, quantize, compile, measure, signoff, report,
baseline, diagnose (the stages before it; ``tests/test_layering.py``)."""

from .options import RunOptions

__all__ = ["RunOptions", "run"]


def __getattr__(name):
    """``run`` on first use: the engine imports TVM and torch, which a command that only
    checks its options (and fails) should not wait for."""
    if name == "run":
        from .engine import run

        return run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
