"""A run's results as a frozen dataclass, ``RunResult``; ``report.json`` is
``RunResult.to_json()``.

The views (report.md, the console, report.html, sweep's summary, ``qbench compare`` and
``history``) read these objects. Sections that are free-form (environment, definition,
config, policy, calibration, tuning, layers, graph, int8_kernels, diagnosis) stay dicts as
the report holds them; what the views and the comparisons compute with is typed: the
measured parts (``measure.results``), the sign-off (``signoff.verdict``) and the model and
data here. ``report.json``'s schema versions: ``measure.results.SCHEMA_VERSION``.
"""

from dataclasses import dataclass

from ..measure.results import SCHEMA_VERSION, Flat, RunnerResult, Speed, need, plain
from ..signoff.verdict import Verdict


@dataclass(frozen=True)
class ModelInfo(Flat):
    """The model run: ``name`` (registry name or file spec), ``weights`` (their source),
    ``random_weights``, ``input_shape`` (C, H, W) and ``aten_ops`` (the PyTorch ops it
    exported, {op: count})."""

    name: str
    weights: str
    random_weights: bool
    input_shape: list
    aten_ops: dict


@dataclass(frozen=True)
class DataInfo(Flat):
    """The data: ``source`` (its name), ``synthetic``, ``labelled``, ``calib_size`` and
    ``eval_size`` (images) and the split's ``seed``."""

    source: str
    synthetic: bool
    labelled: bool
    calib_size: int
    eval_size: int
    seed: int


# RunResult's dict sections, in report.json's order before "results"
SECTIONS = (
    "environment",
    "definition",
    "model",
    "data",
    "config",
    "policy",
    "precision",
    "calibration",
    "tuning",
    "layers",
    "graph",
    "int8_kernels",
)


@dataclass(frozen=True)
class RunResult:
    """Everything a run found; ``to_json()`` is its ``report.json``.

    Attributes:
        created: UTC time of the report, ISO 8601 (seconds).
        environment: CPU, threads, versions and the target dict (``report.assemble.environment``).
        definition: what defines the run and its sha256 ``digest`` (``provenance.definition``).
        model, data: ``ModelInfo``, ``DataInfo``.
        config: the run's options; policy: the ``--policy`` applied, or None; precision: the
            integer ops and what runs between layers, in words; calibration, tuning: how the
            ranges and the schedules were found; layers: one dict per conv2d/matmul layer;
            graph: op counts of the FP32 and INT8 graphs; int8_kernels: the CPU class and
            INT8 layers by kernel path.
        results: {runner name: ``RunnerResult``}, PyTorch FP32 first.
        diagnosis: the per-layer diagnosis (``--diagnose``, ``--accuracy-target``), or None.
        wall_time_s: the run's wall time, s.
        speed: the latency ratios (``Speed``), or None for a report without them.
        signoff: the ``Verdict``.
    """

    created: str
    environment: dict
    definition: dict
    model: ModelInfo
    data: DataInfo
    config: dict
    policy: dict | None
    precision: dict
    calibration: dict
    tuning: dict
    layers: list
    graph: dict
    int8_kernels: dict
    results: dict
    diagnosis: dict | None
    wall_time_s: float
    speed: Speed | None
    signoff: Verdict

    @property
    def simulated(self):
        """The INT8 graph is fake-quantized FP32 (``--simulate``)."""
        return "SIMULATED" in self.precision.get("integer_ops", "")

    @property
    def int8_speedup(self):
        """INT8 speed-up over TVM FP32: 1 / the paired TVM INT8 / TVM FP32 latency ratio
        (``speed.speed``: samples timed in the same rounds, so load cancels), a factor
        (> 1: INT8 is faster); None for a report without that ratio."""
        ratio = self.speed.ratios.get("tvm_int8/tvm_fp32") if self.speed is not None else None
        return None if ratio is None else 1 / ratio.ratio

    def to_json(self):
        """The ``report.json`` dict (``schema_version`` ``SCHEMA_VERSION``)."""
        d = {"schema_version": SCHEMA_VERSION, "created": self.created}
        for name in SECTIONS:
            value = getattr(self, name)
            d[name] = value.to_json() if hasattr(value, "to_json") else value
        d["results"] = {name: r.to_json() for name, r in self.results.items()}
        d["diagnosis"] = self.diagnosis
        d["wall_time_s"] = self.wall_time_s
        if self.speed is not None:
            d["speed"] = self.speed.to_json()
        d["signoff"] = self.signoff.to_json()
        return d

    @classmethod
    def from_json(cls, d):
        """Read a ``report.json`` dict back (``speed`` may be absent).

        Raises:
            UserError: a field is missing; the message names it (e.g.
                ``results.tvm_int8.latency``).
        """
        kept = {name: need(d, name, "") for name in SECTIONS if name not in ("model", "data")}
        results = need(d, "results", "")
        return cls(
            created=need(d, "created", ""),
            model=plain(ModelInfo, need(d, "model", ""), "model"),
            data=plain(DataInfo, need(d, "data", ""), "data"),
            results={
                name: RunnerResult.from_json(name, r, f"results.{name}")
                for name, r in results.items()
            },
            diagnosis=need(d, "diagnosis", ""),
            wall_time_s=need(d, "wall_time_s", ""),
            speed=Speed.from_json(d["speed"]) if d.get("speed") is not None else None,
            signoff=Verdict.from_json(need(d, "signoff", "")),
            **kept,
        )
