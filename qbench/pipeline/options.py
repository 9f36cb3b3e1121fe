"""``RunOptions``: everything a run takes, as ``qbench run``'s options give it."""

import os
from dataclasses import dataclass, field

from ..quantize import QuantConfig
from ..signoff.checks import Limits


@dataclass
class RunOptions:
    """Everything ``qbench run`` takes; see ``qbench run --help`` for each field.

    The sign-off thresholds (``min_top1_agreement``, ``max_accuracy_drop``, ``min_sqnr_db``
    in dB, ``min_cosine`` in [-1, 1], ``min_top5_agreement`` a fraction in [0, 1],
    ``min_int8_speedup`` a factor > 0, ``max_int8_latency_ms`` ms > 0 or None) default
    to ``signoff.Limits``: 17 dB, 0.99 and 0.90 sit below what ``max`` and ``percentile``
    calibration measured on efficientnet_lite0 (19.4 dB, 0.995, 94.8 % on 100 sample
    photos) and above ``kl_divergence`` (14.1 dB, 0.980, 88.4 %); see its docstring.
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
    repeat: int = 20
    min_top1_agreement: float = Limits.min_top1_agreement
    max_accuracy_drop: float = Limits.max_accuracy_drop
    min_sqnr_db: float = Limits.min_sqnr_db
    min_cosine: float = Limits.min_cosine
    min_top5_agreement: float = Limits.min_top5_agreement
    min_int8_speedup: float = Limits.min_int8_speedup
    max_int8_latency_ms: float = Limits.max_int8_latency_ms
    min_decisive_top1_agreement: float = Limits.min_decisive_top1_agreement
    near_tie_margin: float = Limits.near_tie_margin
    cache_dir: str = "calibration"
    reports_dir: str = "reports"
    tuning_db: str = None  # None: ``tuning.default_root()``
    tune_trials: int = 0
    time_budget_min: float = None
    tune_graphs: tuple = ("fp32", "int8")
    holdout_size: int = 0  # images beyond calibration and evaluation (the fallback's)
    accuracy_target: float = None  # top-1 agreement the FP32 fallback must reach, or None
    diagnose: bool = False  # a per-layer diagnosis (run --diagnose, qbench diagnose)
    quant: QuantConfig = field(default_factory=QuantConfig)
    policy: dict = None  # the --policy file applied (``policy.applied``), or None
    rpc: str = None  # HOST:PORT of the RPC server that runs the TVM builds, or None
    rpc_tracker: str = None  # HOST:PORT of an RPC tracker whose ``rpc_key`` servers run them
    rpc_key: str = None
    build_only: bool = False  # qbench build: the target need not run here, nothing runs
