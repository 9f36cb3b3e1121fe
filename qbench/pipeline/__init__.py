"""Pipeline: the runs that join the stages: ``qbench run`` (``engine``: prepare, build,
measure, sign off, report), ``qbench sweep`` (``sweep``) and ``qbench build``
(``artefacts``). Public entry: ``run(RunOptions) -> RunResult``."""

from .engine import RunOptions, prepare, run

__all__ = ["RunOptions", "prepare", "run"]
