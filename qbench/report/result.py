"""A run's results as a frozen dataclass, ``RunResult``; ``report.json`` is
``RunResult.to_json()``.

The views (report.md, the console, report.html, sweep's summary, ``qbench compare`` and
``history``) read these objects. What the views and the comparisons compute with is typed,
each part in the stage that owns it: the measured parts (``measure.results``), the sign-off
(``signoff.verdict``), the calibration (``calibration.calibrate.CalibrationInfo``), the
tuning and the INT8 kernels (``compile.info``: ``TuningInfo``, ``Int8Kernels``), the
diagnosis (``report.diagnosis.DiagnosisReport``, with its fallback; its per-layer rows stay
dicts) and the model and data here. The sections that only record the run (environment,
definition, config, policy, precision, layers, graph) stay dicts as the report holds them.
``report.json``'s schema versions: ``core.schema.SCHEMA_VERSION``.
"""

from dataclasses import dataclass, field

from ..calibration.calibrate import CalibrationInfo
from ..compile.info import Int8Kernels, TuningInfo
from ..core.schema import SCHEMA_VERSION, Flat, need, plain
from ..measure.results import RunnerResult, Speed
from ..signoff.verdict import Verdict
from .diagnosis import DiagnosisReport


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


# RunResult's sections, in report.json's order before "results"
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
LATER = {"policy": None}  # sections added since reports were first stored: {name: if absent}
READERS = {  # the typed sections' readers, {section: reader of its dict}
    "model": lambda d: plain(ModelInfo, d, "model"),
    "data": lambda d: plain(DataInfo, d, "data"),
    "calibration": CalibrationInfo.from_json,
    "tuning": TuningInfo.from_json,
    "int8_kernels": Int8Kernels.from_json,
}


@dataclass(frozen=True)
class RunResult:
    """Everything a run found; ``to_json()`` is its ``report.json``.

    Attributes:
        created: UTC time of the report, ISO 8601 (seconds).
        environment: CPU, threads, versions and the target dict (``report.assemble.environment``).
        definition: what defines the run and its sha256 ``digest`` (``provenance.definition``).
        model, data: ``ModelInfo``, ``DataInfo``.
        config: the run's options; policy: the ``--policy`` applied, or None; precision: the
            integer ops and what runs between layers, in words.
        calibration: how the ranges were found (``CalibrationInfo``).
        tuning: the tuning databases applied and each build's kernels by schedule
            (``TuningInfo``).
        layers: one dict per conv2d/matmul layer; graph: op counts of the FP32 and INT8
            graphs.
        int8_kernels: the CPU class and the INT8 layers by kernel path (``Int8Kernels``).
        results: {runner name: ``RunnerResult``}, PyTorch FP32 first.
        diagnosis: the per-layer diagnosis and its FP32 fallback (``--diagnose``,
            ``--accuracy-target``; a ``DiagnosisReport``), or None.
        wall_time_s: the run's wall time, s.
        speed: the latency ratios (``Speed``), or None for a report without them.
        signoff: the ``Verdict``.
        unavailable: {runner name: why it could not be built} (a PyTorch INT8 flow that
            fails for the model: ``measure.torch_int8``), report.json's
            ``unavailable_runners``; {} (absent from report.json) when every runner ran.
    """

    created: str
    environment: dict
    definition: dict
    model: ModelInfo
    data: DataInfo
    config: dict
    policy: dict | None
    precision: dict
    calibration: CalibrationInfo
    tuning: TuningInfo
    layers: list
    graph: dict
    int8_kernels: Int8Kernels
    results: dict
    diagnosis: DiagnosisReport | None
    wall_time_s: float
    speed: Speed | None
    signoff: Verdict
    unavailable: dict = field(default_factory=dict)

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
        d["diagnosis"] = None if self.diagnosis is None else self.diagnosis.to_json()
        d["wall_time_s"] = self.wall_time_s
        if self.speed is not None:
            d["speed"] = self.speed.to_json()
        d["signoff"] = self.signoff.to_json()
        if self.unavailable:
            d["unavailable_runners"] = dict(self.unavailable)
        return d

    @classmethod
    def from_json(cls, d):
        """Read a ``report.json`` dict back (``speed`` may be absent, and ``policy`` in a
        report of a qbench from before ``--policy``: None, no policy applied, ``LATER``).

        Raises:
            UserError: a field is missing; the message names it (e.g.
                ``results.tvm_int8.latency``).
        """
        given = {k: v for k, v in LATER.items() if k not in d} | d  # an older report's
        sections = {
            name: READERS[name](need(given, name, "")) if name in READERS else need(given, name, "")
            for name in SECTIONS
        }
        results = need(d, "results", "")
        diagnosis = need(d, "diagnosis", "")
        return cls(
            created=need(d, "created", ""),
            results={
                name: RunnerResult.from_json(name, r, f"results.{name}")
                for name, r in results.items()
            },
            diagnosis=None if diagnosis is None else DiagnosisReport.from_json(diagnosis),
            wall_time_s=need(d, "wall_time_s", ""),
            speed=Speed.from_json(d["speed"]) if d.get("speed") is not None else None,
            signoff=Verdict.from_json(need(d, "signoff", "")),
            unavailable=dict(d.get("unavailable_runners") or {}),
            **sections,
        )
