"""The sign-off limits, each declared once: its name (the ``Limits`` field and the
``--policy`` key), default, valid range, unit and help. The command line's flags
(``cli.options.add_signoff_options``), the policy file's keys (``policy``) and the range
checks are derived from ``SPECS``; docs/measurements.md says where the defaults come from."""

from dataclasses import dataclass, field, fields

from ..core.bounds import Bounds
from ..core.errors import UserError
from ..measure.metrics import NEAR_TIE_MARGIN

UNIT_WORDS = {  # unit: how a value of it reads in help and errors
    "fraction": "a fraction",
    "points": "percentage points",
    "dB": "dB",
    "cosine": "a cosine",
    "factor": "a factor",
    "ms": "ms",
    "probability": "a probability difference",
}


@dataclass(frozen=True)
class LimitSpec:
    """One sign-off limit.

    Attributes:
        name: the ``Limits`` field, also the ``--policy`` key.
        flag: the command-line flag (``--min-sqnr``).
        unit: a key of ``UNIT_WORDS``.
        bounds: the valid range (``core.bounds.Bounds``).
        text: what the limit bounds, in words (help, docs).
    """

    name: str
    flag: str
    unit: str
    bounds: Bounds
    text: str

    def problem(self, value):
        """What is wrong with ``value`` for this limit, or None when it is valid."""
        return self.bounds.problem(value)

    def help(self, default, otherwise=""):
        """The flag's help: what it bounds, its unit and range, and ``default`` (then
        ``otherwise``, words on what else sets it)."""
        shown = "none" if default is None else f"{default:g}"
        words = f"{UNIT_WORDS[self.unit]} {self.bounds.valid()}"
        return f"{self.text}, {words} (default: {shown}{otherwise})"


def _limit(default, flag, unit, bounds, text):
    """A ``Limits`` field with its ``LimitSpec`` (its name is filled in by ``SPECS``)."""
    return field(default=default, metadata={"spec": LimitSpec("", flag, unit, bounds, text)})


@dataclass(frozen=True)
class Limits:
    """The sign-off limits of a run; each value is checked when made (``UserError`` naming
    the flag, the value and the valid range). A limit of None has no check."""

    # fmt: off
    min_top1_agreement: float = _limit(
        0.97, "--min-top1-agreement", "fraction", Bounds(0, 1),
        "lowest top-1 agreement of TVM FP32 and INT8 with PyTorch",
    )
    max_accuracy_drop: float = _limit(
        1.0, "--max-accuracy-drop", "points", Bounds(0, 100), "largest INT8 top-1 accuracy drop"
    )
    min_sqnr_db: float = _limit(
        17.0, "--min-sqnr", "dB", Bounds(0),
        "lowest SQNR of the INT8 logits against PyTorch's (identical logits: infinite)",
    )
    min_cosine: float = _limit(
        0.99, "--min-cosine", "cosine", Bounds(-1, 1),
        "lowest mean over images of the cosine similarity of the INT8 and PyTorch logits",
    )
    min_top5_agreement: float = _limit(
        0.9, "--min-top5-agreement", "fraction", Bounds(0, 1),
        "lowest top-5 agreement of INT8 with PyTorch (share of PyTorch's 5 top classes in "
        "INT8's 5)",
    )
    min_int8_speedup: float = _limit(
        1.0, "--min-int8-speedup", "factor", Bounds(0),
        "lowest speed-up of TVM INT8 over TVM FP32 (FP32 / INT8 median latency; 0: any); "
        "fails only when its whole 95 % confidence interval is below it",
    )
    min_speedup_vs_torch_int8: float | None = _limit(
        None, "--min-speedup-vs-torch-int8", "factor", Bounds(0, open_low=True),
        "lowest speed-up of TVM INT8 over the fastest PyTorch INT8 runner of the run "
        "(--torch-int8); fails only when its whole 95 % confidence interval is below it",
    )
    max_int8_latency_ms: float | None = _limit(
        None, "--max-int8-latency-ms", "ms", Bounds(0, open_low=True),
        "highest median TVM INT8 latency of one batch",
    )
    min_decisive_top1_agreement: float | None = _limit(
        None, "--min-decisive-top1-agreement", "fraction", Bounds(0, 1),
        "lowest INT8 top-1 agreement counting only decisive flips (PyTorch FP32 margin >= "
        "--near-tie-margin)",
    )
    near_tie_margin: float = _limit(
        NEAR_TIE_MARGIN, "--near-tie-margin", "probability", Bounds(0, 1),
        "PyTorch FP32's softmax top-1 minus top-2 probability under which a flip is a "
        "near-tie",
    )
    # fmt: on

    def __post_init__(self):
        for name, spec in SPECS.items():
            value = getattr(self, name)
            if value is None and DEFAULTS[name] is None:
                continue
            problem = spec.problem(value)
            if problem:
                raise UserError(f"{spec.flag} {value}: {problem}")


SPECS = {f.name: LimitSpec(**{**vars(f.metadata["spec"]), "name": f.name}) for f in fields(Limits)}
DEFAULTS = {f.name: f.default for f in fields(Limits)}
