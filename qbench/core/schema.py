"""What every typed part of ``report.json`` reads and writes itself with: ``need`` (a field,
or a ``UserError`` naming it), ``plain`` (a flat dataclass from its dict), ``Flat`` (a flat
dataclass's dict), and the report's ``SCHEMA_VERSION``. Here, in core, because the parts
live in the stages that own them, the earliest being ``calibration``
(``calibrate.CalibrationInfo``); ``report.result.RunResult`` joins them.

Schema versions of ``report.json`` (``SCHEMA_VERSION``): 2 added ``definition`` (what
defines the run, with its sha256 ``digest``; see ``measure.provenance.definition``),
``environment.qbench_commit`` and, per runner, ``results[name]["per_image"]`` (0/1 lists in
evaluation order: ``top1_match`` with PyTorch's top-1 for the TVM runners, ``top1_correct``
against the label when labelled), which ``qbench compare`` needs for its paired tests. 1:
the first layout.
"""

from dataclasses import asdict, fields

from .errors import UserError

SCHEMA_VERSION = 2


def need(d, key, where):
    """``d[key]``, or a ``UserError`` naming the missing field by its dotted path (``where``:
    the path of ``d`` in ``report.json``, "" at the top)."""
    if not isinstance(d, dict) or key not in d:
        path = f"{where}.{key}" if where else key
        raise UserError(
            f"report: missing field {path}; valid: a qbench report.json of schema_version "
            f"{SCHEMA_VERSION}"
        )
    return d[key]


def plain(cls, d, where):
    """An instance of the flat dataclass ``cls`` from ``d``, every field required."""
    return cls(**{f.name: need(d, f.name, where) for f in fields(cls)})


class Flat:
    """A flat dataclass whose JSON is its fields in order."""

    def to_json(self):
        return asdict(self)
