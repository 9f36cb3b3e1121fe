"""The measured parts of a run's results as frozen dataclasses: each runner's latency and
metrics (``RunnerResult``) and the latency ratios (``Speed``), the sections of
``report.json`` that ``report.result.RunResult`` holds under ``results`` and ``speed``.

They read and write themselves with ``core.schema``'s ``need``, ``plain`` and ``Flat``, which
every typed part of ``report.json`` shares; ``core.schema`` also holds ``SCHEMA_VERSION`` and
the report's schema history. Both are importable from here as before.
"""

from dataclasses import dataclass

from ..core.schema import SCHEMA_VERSION, Flat, need, plain

__all__ = ["SCHEMA_VERSION", "Flat", "Latency", "Ratio", "RunnerResult", "Speed", "need", "plain"]


@dataclass(frozen=True)
class Latency(Flat):
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
            their ``_count``/``_total``, ``max_abs_diff`` in logit units, ``cosine``
            (``metrics.mean_row_cosine``), ``sqnr_db`` in dB (``metrics.sqnr_db_or_none``),
            ``nonfinite_logits``; the last three on the space named by ``judged_space``,
            ``metrics.judged``); PyTorch FP32's also ``output_kind`` (``metrics.output_kind``;
            absent in older reports: logits judged as is, ``metrics.output_of``); keys a
            run could not compute are absent.
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
            latency=plain(Latency, need(d, "latency", where), f"{where}.latency"),
            samples_ms=tuple(need(d, "latency_samples_ms", where)),
            metrics=need(d, "metrics", where),
            per_image=need(d, "per_image", where),
            device=d.get("device", "host"),  # reports before remote runs ran on the host
        )


@dataclass(frozen=True)
class Ratio(Flat):
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
        ratios = need(d, "ratios", where)
        return cls(
            ratios={k: plain(Ratio, r, f"{where}.ratios.{k}") for k, r in ratios.items()},
            noisy=need(d, "noisy", where),
            noisy_reason=need(d, "noisy_reason", where),
        )
