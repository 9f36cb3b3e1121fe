"""What a run's builds applied and chose, as ``report.json`` holds it: the tuning databases
and the kernels' schedules (``TuningInfo``: ``tuning``) and the INT8 layers' kernel paths
(``Int8Kernels``: ``int8_kernels``). Plain data, no TVM: the report stage reads them back."""

from dataclasses import dataclass, fields

from ..core.schema import Flat, need, plain


@dataclass(frozen=True)
class TuningInfo:
    """The tuning databases a run's builds applied, and what each build's kernels took.

    Attributes:
        source: the databases applied, in words (``tuning.databases``: ``"user database"``,
            ``"pre-tuned"``, ``"pre-tuned + user database"``, ``"none"``), with ``"fresh
            tuning + "`` before it when this run tuned (``--tune``).
        database: the user's database folder for the target (``tuning.db_dir``).
        records: tuning records in it (``tuning.record_count``).
        pretuned_database: the database qbench ships for the target, or None.
        pretuned_records: tuning records in it (0 without one).
        fresh: {graph name: ``tuner.TuneSummary`` as a dict (``tasks``, ``tuned``,
            ``skipped`` and ``failed`` kernel counts, ``seconds`` in s, ``stopped``,
            ``rejected``)} of this run's own tuning (``--tune``), else {}.
        left_out: records of ``database`` its builds leave out as damaged
            (``dbfiles.damage``: a damaged line, a record whose workload line is missing or
            does not take its trace, all of them when the rejection list is damaged), 0
            when none (the JSON leaves it out then).
        damage: the first damaged line or file in words, or None (left out of the JSON).
        unchecked: kernels (workloads) of ``database`` whose records its builds leave out
            as never checked (``dbfiles.unchecked``), 0 when none (left out of the JSON).
        kernels: {graph name (``tvm_fp32``, ``tvm_int8``): {schedule source (``hand``: qbench's
            hand-scheduled kernels, ``tuned``: a tuning record, ``default``: default
            schedules): kernel count}, {} where not counted (not llvm)}
            (``build.schedule_counts``); None before the builds (the JSON leaves it out).
    """

    source: str
    database: str
    records: int
    pretuned_database: str | None
    pretuned_records: int
    fresh: dict
    kernels: dict | None = None
    left_out: int = 0
    damage: str | None = None
    unchecked: int = 0

    @property
    def tuned_kernels(self):
        """Kernels of every build that took a tuning record (0 before the builds)."""
        return sum(c.get("tuned", 0) for c in (self.kernels or {}).values())

    def to_json(self):
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v for k, v in d.items() if k not in OPTIONAL or v != OPTIONAL[k]}

    @classmethod
    def from_json(cls, d, where="tuning"):
        """Read the dict back; ``kernels`` (before the builds), ``left_out``, ``damage`` and
        ``unchecked`` (nothing left out, or a report from before they were recorded) may be
        absent.

        Raises:
            UserError: another field is missing; the message names it.
        """
        required = [f.name for f in fields(cls) if f.name not in OPTIONAL]
        given = d if isinstance(d, dict) else {}
        optional = {k: given.get(k, default) for k, default in OPTIONAL.items()}
        return cls(**{k: need(d, k, where) for k in required}, **optional)


OPTIONAL = {
    "kernels": None,
    "left_out": 0,
    "damage": None,
    "unchecked": 0,
}  # TuningInfo's: left out at these


@dataclass(frozen=True)
class Int8Kernels(Flat):
    """The kernels of a run's INT8 layers: ``cpu_class`` (the target's class for qbench's INT8
    kernels, ``kernels.select.cpu_class``, e.g. ``"AVX-512 VNNI"``; ``kernels.select.NO_FAST_PATH``
    without one; the target kind, e.g. ``"cuda"``, off llvm) and ``paths`` ({kernel path,
    e.g. ``"conv2d vnni"``, ``"conv2d simulated"`` for a fake-quantized graph: INT8 layers
    that take it}, sorted by path)."""

    cpu_class: str
    paths: dict

    @classmethod
    def from_json(cls, d, where="int8_kernels"):
        """Read the dict back.

        Raises:
            UserError: a field is missing; the message names it.
        """
        return plain(cls, d, where)
