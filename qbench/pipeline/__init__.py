"""Pipeline: the runs that join the stages. ``qbench run`` is ``engine.run`` over
``prepare.prepare`` (checks, data, model, calibration, the INT8 rewrite: a ``Prepared``),
``tune`` and the builds, evaluation, timing and sign-off; ``sweep`` runs it per model and
target, ``artefacts`` builds without running (``qbench build``). ``options.RunOptions`` is
what they take.

Public entry: ``qbench.pipeline.run(RunOptions(...))`` -> ``measure.results.RunResult``.
"""

from .engine import run
from .options import RunOptions

__all__ = ["RunOptions", "run"]
