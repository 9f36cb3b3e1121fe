"""A run's results as frozen dataclasses; ``report.json`` is ``RunResult.to_json()``.

The views (report.md, the console, report.html, sweep's summary, ``qbench compare`` and
``history``) read these objects. Sections that are free-form (environment, definition,
config, policy, calibration, tuning, layers, graph, int8_kernels, diagnosis) stay dicts as
the report holds them; what the views and the comparisons compute with is typed.

Schema versions of ``report.json``: 2 added ``definition`` (what defines the run, with its
sha256 ``digest``; see ``provenance.definition``), ``environment.qbench_commit`` and, per
runner, ``results[name]["per_image"]`` (0/1 lists in evaluation order: ``top1_match`` with
PyTorch's top-1 for the TVM runners, ``top1_correct`` against the label when labelled), which
``qbench compare`` needs for its paired tests. 1: the first layout.
"""

from dataclasses import asdict, dataclass, fields

from ..core.errors import UserError

SCHEMA_VERSION = 2


def _need(d, key, where):
    """``d[key]``, or a ``UserError`` naming the missing field by its dotted path."""
    if not isinstance(d, dict) or key not in d:
        path = f"{where}.{key}" if where else key
        raise UserError(
            f"report: missing field {path}; valid: a qbench report.json of schema_version "
            f"{SCHEMA_VERSION}"
        )
    return d[key]


def _plain(cls, d, where):
    """An instance of the flat dataclass ``cls`` from ``d``, every field required."""
    return cls(**{f.name: _need(d, f.name, where) for f in fields(cls)})


class _Flat:
    """A flat dataclass whose JSON is its fields in order."""

    def to_json(self):
        return asdict(self)


@dataclass(frozen=True)
class Latency(_Flat):
    """Latency statistics of one runner's samples (``metrics.latency_stats``), ms."""

    median_ms: float
    p90_ms: float
    mean_ms: float
    std_ms: float
    runs: int


@dataclass(frozen=True)
class RunnerResult:
    """One runner's results.

    Attributes:
        name: ``pytorch_fp32``, ``tvm_fp32`` or ``tvm_int8``.
        latency: statistics of ``samples_ms``.
        samples_ms: latency of one batch per timing round, ms (``timing.interleaved``: sample
            i of every runner comes from round i).
        metrics: {metric name: value} (``metrics.compare_logits``: fractions in [0, 1] with
            their ``_count``/``_total``, ``max_abs_diff`` in logit units, ``cosine``,
            ``sqnr_db`` in dB, ``nonfinite_logits``); keys a run could not compute are absent.
        per_image: {``top1_match`` | ``top1_correct``: list of N 0/1 ints}
            (``metrics.per_image``).
        device: the device that ran it: ``host`` (this machine), or a remote device in
            words (``remote.Device.name``: key, server, triple and CPU).
    """

    name: str
    latency: Latency
    samples_ms: tuple
    metrics: dict
    per_image: dict
    device: str = "host"

    def to_json(self):
        return {
            "device": self.device,
            "latency": self.latency.to_json(),
            "latency_samples_ms": list(self.samples_ms),
            "metrics": self.metrics,
            "per_image": self.per_image,
        }

    @classmethod
    def from_json(cls, name, d, where):
        return cls(
            name=name,
            latency=_plain(Latency, _need(d, "latency", where), f"{where}.latency"),
            samples_ms=tuple(_need(d, "latency_samples_ms", where)),
            metrics=_need(d, "metrics", where),
            per_image=_need(d, "per_image", where),
            device=d.get("device", "host"),  # reports before remote runs ran on the host
        )


@dataclass(frozen=True)
class Ratio(_Flat):
    """A latency ratio ``num / den``, the median over timing rounds of the per-round ratio (< 1:
    the numerator is faster; ``speed.median_ratio``), with its
    bootstrap confidence interval ``[ci_low, ci_high]`` at level ``confidence`` in (0, 1)
    (``speed.ratio_ci``)."""

    ratio: float
    ci_low: float
    ci_high: float
    confidence: float


@dataclass(frozen=True)
class Speed:
    """The run's latency ratios and whether its timing is NOISY (``speed.speed``).

    Attributes:
        ratios: {``"num/den"`` runner names: ``Ratio``}.
        noisy: True when a ratio's confidence interval is wide (``speed.NOISY_CI_WIDTH``).
        noisy_reason: the widest such ratio in words, or None.
    """

    ratios: dict
    noisy: bool
    noisy_reason: str | None

    def to_json(self):
        return {
            "ratios": {key: r.to_json() for key, r in self.ratios.items()},
            "noisy": self.noisy,
            "noisy_reason": self.noisy_reason,
        }

    @classmethod
    def from_json(cls, d, where="speed"):
        ratios = _need(d, "ratios", where)
        return cls(
            ratios={k: _plain(Ratio, r, f"{where}.ratios.{k}") for k, r in ratios.items()},
            noisy=_need(d, "noisy", where),
            noisy_reason=_need(d, "noisy_reason", where),
        )


@dataclass(frozen=True)
class Check:
    """One sign-off check (``signoff.signoff``).

    Attributes:
        name: what is checked, e.g. ``INT8 top-1 agreement``.
        value: the measured value in ``unit``, rounded to 6 decimals, or None when the check
            does not apply or could not be computed (``detail`` says why).
        op: ``">="`` or ``"<="``: how ``value`` must compare with ``limit``.
        limit: the threshold, in ``unit``.
        passed: True, False, or None (not applicable).
        unit: ``"fraction"`` (in [0, 1]), ``"points"`` (percentage points), ``"dB"``,
            ``"cosine"`` (in [-1, 1]), ``"count"``, ``"speed-up"`` (a factor), ``"ms"``, or
            ``"flag"`` (1 yes, 0 no).
        ci_low, ci_high, confidence: the confidence interval of a speed-up check (bootstrap)
            or of an agreement check (Clopper-Pearson, ``intervals``), else None.
        detail: why a check has no value, or a note on its verdict, else None.
        sample: the images an agreement check counted, else None.
        needed: the fewest images that could show an agreement check's limit
            (``intervals.images_needed``; None with ``sample`` set: no number can), else None.
    """

    name: str
    value: float | None
    op: str
    limit: float
    passed: bool | None
    unit: str
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float | None = None
    detail: str | None = None
    sample: int | None = None
    needed: int | None = None

    @property
    def unshown(self):
        """Whether the check passed on its value although its interval does not show the
        limit: the lower end of its 95 % interval lies below it (images too few, ``needed``
        more than ``sample``, or misses too many for the images given)."""
        if not self.passed or self.sample is None:
            return False
        return self.ci_low is None or self.ci_low < self.limit

    def to_json(self):
        """The check's dict; the optional fields only when set."""
        optional = ("ci_low", "ci_high", "confidence", "detail", "sample", "needed")
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v for k, v in d.items() if k not in optional or v is not None}

    @classmethod
    def from_json(cls, d, where):
        required = {f.name: _need(d, f.name, where) for f in fields(cls)[:6]}
        optional = {f.name: d.get(f.name) for f in fields(cls)[6:]}
        return cls(**required, **optional)


@dataclass(frozen=True)
class Verdict:
    """The sign-off: ``verdict`` ``"PASS"`` (no check failed) or ``"FAIL"``, and ``checks``
    (a tuple of ``Check``)."""

    verdict: str
    checks: tuple

    @property
    def failed(self):
        """The checks that failed (``passed`` False), in order."""
        return [c for c in self.checks if c.passed is False]

    @property
    def unshown(self):
        """The checks that passed but whose images are too few to show their limit."""
        return [c for c in self.checks if c.unshown]

    def to_json(self):
        checks = [c.to_json() for c in self.checks]
        return {"verdict": self.verdict, "shown": not self.unshown, "checks": checks}

    @classmethod
    def from_json(cls, d, where="signoff"):
        checks = _need(d, "checks", where)
        return cls(
            verdict=_need(d, "verdict", where),
            checks=tuple(Check.from_json(c, f"{where}.checks[{i}]") for i, c in enumerate(checks)),
        )


@dataclass(frozen=True)
class ModelInfo(_Flat):
    """The model run: ``name`` (registry name or file spec), ``weights`` (their source),
    ``random_weights``, ``input_shape`` (C, H, W) and ``aten_ops`` (the PyTorch ops it
    exported, {op: count})."""

    name: str
    weights: str
    random_weights: bool
    input_shape: list
    aten_ops: dict


@dataclass(frozen=True)
class DataInfo(_Flat):
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
        kept = {name: _need(d, name, "") for name in SECTIONS if name not in ("model", "data")}
        results = _need(d, "results", "")
        return cls(
            created=_need(d, "created", ""),
            model=_plain(ModelInfo, _need(d, "model", ""), "model"),
            data=_plain(DataInfo, _need(d, "data", ""), "data"),
            results={
                name: RunnerResult.from_json(name, r, f"results.{name}")
                for name, r in results.items()
            },
            diagnosis=_need(d, "diagnosis", ""),
            wall_time_s=_need(d, "wall_time_s", ""),
            speed=Speed.from_json(d["speed"]) if d.get("speed") is not None else None,
            signoff=Verdict.from_json(_need(d, "signoff", "")),
            **kept,
        )
