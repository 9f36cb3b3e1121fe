"""The quantization config: frozen, versioned, serialisable (the torchao config idea)."""

from dataclasses import asdict, dataclass, field

from ..calibration import MODES
from ..core.bounds import Bounds
from ..core.errors import UserError

LATER_FIELDS = {"fit_pairs": False}  # (field: its default) of fields added since version 2
CONFIG_VERSION = 2  # 2: weight_rounding, GPTQ and no bias correction by default
WEIGHT_ROUNDINGS = ("gptq", "nearest")


@dataclass(frozen=True)
class QuantConfig:
    """How to quantize a model.

    Attributes:
        calib_mode: how activation ranges are calibrated, one of ``calibration.MODES``.
            ``percentile`` by default: as accurate as ``max`` on the sample photos, and one
            outlier image cannot set its range (measured: docs/measurements.md, "Quantization
            defaults").
        percentile: for ``percentile``, the |x| percentile in (0, 100].
        global_scale: for ``global_scale``, the clip range [-s, s], s > 0.
        per_channel: per-output-channel symmetric int8 weight scales (else per-tensor).
        skip_layers: layer indices (int) or source names (str) kept in FP32.
        fallback_layers: source names kept in FP32 by the ``--accuracy-target`` fallback.
        skip_first: keep the first conv2d in FP32 (Relay's default). Off by default:
            quantizing it costs little accuracy, and in FP32 it is much of an INT8 build's
            latency (measured: docs/measurements.md, "Quantization defaults").
        simulate: build the fake-quantized FP32 graph (quantize then dequantize) instead
            of integer conv2d/matmul.
        weight_rounding: ``gptq`` (the default) rounds each layer's int8 weights for the
            least output error on the calibration images (``quantize.gptq``); ``nearest``
            rounds each weight to its nearest step.
        bias_correction: add to each INT8 layer's output the per-channel mean shift that
            quantization gives it on the calibration images (``quantize.bias``). Off by
            default: after GPTQ it no longer helps (measured: docs/measurements.md,
            "Quantization defaults").
        reduce_range: 7-bit weights, in [-63, 63] (FBGEMM's ``reduce_range`` trades a bit
            of weight precision for its AVX2 kernel): off by default. On an AVX2 CPU
            without VNNI, layers whose weights fit 7 bits run on ``vpmaddubsw``, whose
            int16 pair sums of uint8 x int7 products cannot saturate (2 x 255 x 63 <
            32767), so they stay exact (``kernels.select``); elsewhere it only costs
            precision.
        fit_pairs: weights whose pairs (the weights of input channels 2j and 2j + 1 at one
            output channel and kernel position) fit AVX2's int16 sums: each channel takes
            the finest grid, 127 down to 63 steps over its range, whose nearest-rounded
            pairs fit (``pairs.fitting_steps``), and GPTQ keeps them fitting as it rounds.
            On an AVX2 CPU without VNNI every conv and dense layer then runs on
            ``vpmaddubsw``, exact; most channels keep 8-bit precision (efficientnet_lite0:
            0.3 dB of logits SQNR, against 3.3 dB for 7-bit weights). Off by default, so
            that the INT8 graph is the same on every target; not with ``reduce_range``,
            whose 7-bit weights fit every pair already.
        activation_dtype: ``uint8``, affine with a zero point (VNNI multiplies u8 x s8).
        weight_dtype: ``int8``, symmetric, range [-127, 127] ([-63, 63] with
            ``reduce_range``).
    """

    calib_mode: str = "percentile"
    percentile: float = 99.999
    global_scale: float = 8.0
    per_channel: bool = True
    skip_layers: tuple = field(default_factory=tuple)
    fallback_layers: tuple = field(default_factory=tuple)
    skip_first: bool = False
    simulate: bool = False
    weight_rounding: str = "gptq"
    bias_correction: bool = False
    reduce_range: bool = False
    fit_pairs: bool = False
    activation_dtype: str = "uint8"
    weight_dtype: str = "int8"
    version: int = CONFIG_VERSION

    def __post_init__(self):
        """Raises UserError: a value no run takes, named by its flag, with the valid ones."""
        if self.calib_mode not in MODES:
            raise UserError(f"--calib-mode {self.calib_mode}: unknown; valid: {', '.join(MODES)}")
        if self.weight_rounding not in WEIGHT_ROUNDINGS:
            raise UserError(
                f"--weight-rounding {self.weight_rounding}: unknown; valid: "
                + ", ".join(WEIGHT_ROUNDINGS)
            )
        if self.fit_pairs and self.reduce_range:
            raise UserError(
                "--fit-pairs with --reduce-range: 7-bit weights fit every pair already; give "
                "one of them"
            )
        for flag, value, bounds in (
            ("--percentile", self.percentile, Bounds(0, 100, open_low=True)),
            ("--global-scale", self.global_scale, Bounds(0, open_low=True)),
        ):
            problem = bounds.problem(value)
            if problem:
                raise UserError(f"{flag} {value}: {problem}")

    def collector_params(self):
        """Keyword arguments for ``make_collector`` of this mode."""
        if self.calib_mode == "percentile":
            return {"percentile": self.percentile}
        if self.calib_mode == "global_scale":
            return {"global_scale": self.global_scale}
        return {}

    def to_dict(self):
        """The config as JSON values. A field added since runs were first stored
        (``LATER_FIELDS``) is left out at its default, so those runs' definitions stay
        comparable with today's same runs."""
        d = asdict(self)
        for name, default in LATER_FIELDS.items():
            if d[name] == default:
                del d[name]
        d["skip_layers"] = list(self.skip_layers)
        d["fallback_layers"] = list(self.fallback_layers)
        return d

    @classmethod
    def from_dict(cls, d):
        d = dict(d)
        d["skip_layers"] = tuple(d.get("skip_layers", ()))
        d["fallback_layers"] = tuple(d.get("fallback_layers", ()))
        return cls(**d)
