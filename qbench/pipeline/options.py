"""``RunOptions``: the definition of a run, checked once, where it is made.

The command line (``cli.runopts.run_options``) and the Python API make the same value, so a
bad value gets the same ``UserError`` (exit 2 on the command line) from either, naming the
flag that sets it, the value and the valid range.
"""

import math
import os
from dataclasses import dataclass, field

from ..core.bounds import Bounds
from ..core.errors import UserError
from ..measure.timing import MIN_REPEAT
from ..quantize import QuantConfig
from ..signoff.limits import Limits

NUMBERS = {  # field: (flag, valid range); None values pass (not set)
    "batch_size": ("--batch-size", Bounds(1, integer=True)),
    "threads": ("--threads", Bounds(1, integer=True)),
    "repeat": ("--repeat", Bounds(MIN_REPEAT, integer=True)),
    "warmup": ("--warmup", Bounds(0, integer=True)),
    "seed": ("--seed", Bounds(0, integer=True)),
    "calib_size": ("--calib-size", Bounds(1, integer=True)),
    "eval_size": ("--eval-size", Bounds(1, integer=True)),
    "trials": ("--trials", Bounds(1, integer=True)),
    "time_budget_min": ("--time-budget", Bounds(0, open_low=True)),
    "holdout_size": ("--holdout-size", Bounds(0, integer=True)),
    "accuracy_target": ("--accuracy-target", Bounds(0, 1)),
}
TUNE_GRAPHS = ("fp32", "int8")
TORCH_INT8 = ("fx", "pt2e")  # PyTorch INT8 flows a run may add (``measure.torch_int8``)


@dataclass(frozen=True)
class RunOptions:
    """Everything a run takes; ``qbench run --help`` describes each field by its flag.

    Attributes:
        model: a registry name, ``FILE.py:FUNCTION`` or ``FILE.pt2``.
        target: ``llvm``, ``cuda`` or a JSON target dict (``compile.targets``).
        data: a folder, ``hf:NAME[:SPLIT]``, ``synthetic``, ``embedded``, or None: embedded.
        weights, input_shape ((C, H, W) ints >= 1), mean, std (per channel, finite; std
            non-zero): the model's, or None: its own.
        calib_size, eval_size: images (>= 1), or None: the data's defaults.
        batch_size: images per batch (N), >= 1.
        seed: of the calibration/evaluation split, >= 0.
        threads: CPU threads for TVM and PyTorch, >= 1.
        warmup, repeat: untimed and timed rounds (``repeat`` >= ``timing.MIN_REPEAT``).
        limits: the sign-off limits (``signoff.limits.Limits``).
        policy: the report's record of the ``--policy`` file applied (``policy.applied``),
            or None.
        cache_dir, reports_dir: the calibration cache and reports folders.
        tuning_db: the tuning database root; None: ``tuning.default_root()`` (set here).
        tune: tune the graphs with MetaSchedule before the builds.
        trials: mean MetaSchedule trials per kernel when tuning, >= 1.
        time_budget_min: minutes of tuning (> 0), or None: no limit.
        tune_graphs: the graphs to tune, a non-empty subset of ``TUNE_GRAPHS``.
        holdout_size: images beyond calibration and evaluation (the fallback's), >= 0;
            >= 1 with ``accuracy_target``.
        accuracy_target: top-1 agreement in [0, 1] the FP32 fallback must reach, or None.
        diagnose: add a per-layer diagnosis.
        torch_int8: PyTorch's own INT8 flows to run beside TVM's, among ``TORCH_INT8``.
        quant: the ``QuantConfig`` asked for (what was built: ``Prepared.quant``).
        rpc, rpc_tracker, rpc_key: the remote device that runs the TVM builds, or None.
        build_only: ``qbench build``: the target need not run here, nothing runs.
    Raises:
        UserError: a bad value, named by its flag, with the valid range.
    """

    model: str
    target: str = "llvm"
    data: str = None
    weights: str = None
    input_shape: tuple = None
    mean: tuple = None
    std: tuple = None
    calib_size: int = None
    eval_size: int = None
    batch_size: int = 8
    seed: int = 0
    threads: int = os.cpu_count() or 1  # as qbench run's --threads
    warmup: int = 3
    repeat: int = MIN_REPEAT
    limits: Limits = field(default_factory=Limits)
    policy: dict = None
    cache_dir: str = "calibration"
    reports_dir: str = "reports"
    tuning_db: str = None
    tune: bool = False
    trials: int = 16
    time_budget_min: float = None
    tune_graphs: tuple = TUNE_GRAPHS
    holdout_size: int = 0
    accuracy_target: float = None
    diagnose: bool = False
    torch_int8: tuple = ()
    quant: QuantConfig = field(default_factory=QuantConfig)
    rpc: str = None
    rpc_tracker: str = None
    rpc_key: str = None
    build_only: bool = False

    def __post_init__(self):
        for name, (flag, bounds) in NUMBERS.items():
            value = getattr(self, name)
            problem = None if value is None else bounds.problem(value)
            if problem:
                raise UserError(f"{flag} {value}: {problem}")
        _check_preprocessing(self.input_shape, self.mean, self.std)
        for name in ("tune_graphs", "torch_int8"):  # "fx,pt2e" as the flag takes it; once each
            object.__setattr__(self, name, _names(getattr(self, name)))
        _check_choices(self)
        if self.tuning_db is None:  # the command line's default too
            from ..compile.tuning import default_root

            object.__setattr__(self, "tuning_db", str(default_root()))


def _check_preprocessing(input_shape, mean, std):
    """Raises UserError: a bad ``--input-shape``, ``--mean`` or ``--std``."""
    if input_shape is not None and (len(input_shape) != 3 or min(input_shape) < 1):
        raise UserError(f"--input-shape {input_shape}: C, H and W must be >= 1")
    for flag, values in (("--mean", mean), ("--std", std)):
        if values and not all(math.isfinite(v) for v in values):
            raise UserError(f"{flag} {values}: every value must be a finite number")
    if std and min(abs(v) for v in std) == 0:
        raise UserError(f"--std {std}: every value must be non-zero")


def _names(value):
    """A comma-separated string or a sequence of names as a tuple, each name once, in order."""
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(dict.fromkeys(str(i).strip() for i in items if str(i).strip()))


def _check_choices(opts):
    """Raises UserError: bad ``--tune-graphs``, ``--data ''`` or a fallback without
    held-out images."""
    graphs = tuple(opts.tune_graphs)
    if not graphs or not set(graphs) <= set(TUNE_GRAPHS):
        raise UserError(
            f"--tune-graphs {','.join(map(str, graphs))}: valid: fp32, int8 or fp32,int8"
        )
    unknown = [f for f in opts.torch_int8 if f not in TORCH_INT8]
    if unknown:
        raise UserError(f"--torch-int8 {unknown[0]}: unknown flow; valid: {', '.join(TORCH_INT8)}")
    if opts.limits.min_speedup_vs_torch_int8 is not None and not opts.torch_int8:
        raise UserError(
            f"--min-speedup-vs-torch-int8 {opts.limits.min_speedup_vs_torch_int8}: needs "
            "PyTorch INT8 runners to compare with: add --torch-int8 fx,pt2e"
        )
    if opts.data == "":
        raise UserError("--data '': empty; valid: a folder, hf:NAME[:SPLIT], synthetic, embedded")
    if opts.accuracy_target is not None and opts.holdout_size < 1:
        raise UserError(  # the command line's default is 64; RunOptions' is 0 (no fallback)
            f"--holdout-size {opts.holdout_size}: must be >= 1 with --accuracy-target (the "
            "fallback is judged on held-out images; qbench run's default: 64)"
        )
