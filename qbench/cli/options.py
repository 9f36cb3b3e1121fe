"""The option groups the commands share, for argparse (defaults shown by ``qbench CMD
--help``)."""

import argparse
import os

from ..measure.timing import MIN_REPEAT
from ..signoff.limits import DEFAULTS, SPECS


def add_policy_option(r):
    """``--policy`` (run and sweep: each cell takes its model's and target's tables)."""
    r.add_argument(
        "--policy",
        metavar="FILE",
        help="TOML file of sign-off limits per model and target kind (see docs/signoff.md, 'Policy "
        "file'); a sign-off flag given here overrides it (default: none)",
    )


def add_torch_int8_option(r):
    """``--torch-int8`` (run and sweep): PyTorch's own INT8 runners beside TVM's."""
    r.add_argument(
        "--torch-int8",
        default="",
        metavar="FLOWS",
        help="also build, evaluate and time PyTorch's own INT8, calibrated on the same images: "
        "fx (FX graph mode, x86 backend), pt2e (torchao PT2E, X86InductorQuantizer, "
        "torch.compile) or fx,pt2e; a flow that cannot be built for the model is a 'not "
        "available' row (default: none: they add minutes to a run, see docs/usage.md)",
    )


def add_fallback_options(r):
    """``--accuracy-target`` and ``--holdout-size`` (run and diagnose)."""
    r.add_argument(
        "--accuracy-target",
        type=float,
        help="keep the most sensitive layers in FP32 until the top-1 agreement with FP32 on "
        "the --holdout-size images reaches this fraction in [0, 1] (e.g. 0.99) (default: no "
        "fallback)",
    )
    r.add_argument(
        "--holdout-size",
        type=int,
        help="images the fallback is judged on: the last of the seed's order, never among the "
        "calibration or evaluation images of a run with the same sizes and seed (default: "
        f"{HOLDOUT_SIZE}; only with --accuracy-target)",
    )


def add_model_options(r, grid=False):
    """Options shared by run, tune and layers: the model and which layers stay FP32;
    ``grid``: ``--models`` (sweep) instead of ``--model``."""
    what = "registry name (see `qbench models`), FILE.py:FUNCTION or FILE.pt2"
    if grid:
        r.add_argument("--models", required=True, help=f"comma-separated, each a {what}")
    else:
        r.add_argument("--model", required=True, help=what)
    r.add_argument("--weights", help="state dict file (torch.save) (default: the model's own)")
    r.add_argument(
        "--input-shape",
        type=int,
        nargs=3,
        metavar=("C", "H", "W"),
        help="input shape of one image (default: from the registry or the model file)",
    )
    r.add_argument("--batch-size", type=int, default=8, help="images per batch (N)")
    r.add_argument(
        "--skip-layers",
        default="",
        help="comma-separated layer indices or names kept in FP32 (see `qbench layers`), or "
        "@FILE: names, one per line (as `qbench diagnose --accuracy-target` writes) "
        "(default: none)",
    )
    r.add_argument(
        "--keep-first-fp32", action="store_true", help="keep the first conv in FP32 (as Relay)"
    )
    r.add_argument("-v", "--verbose", action="store_true", help="log details of every stage")


HOLDOUT_SIZE = 64  # the fallback's held-out images where --holdout-size is not given
OMITTABLE = {  # option group: the defaults a command without those options runs with
    "timing": {"warmup": None, "repeat": None},
    "signoff": dict.fromkeys(SPECS),
    "tuning budget": {"trials": None, "time_budget": None, "tune_graphs": None},
    "remote": {"rpc": None, "rpc_tracker": None, "rpc_key": None},
}


def add_run_options(r, grid=False, omit=()):
    """Options of run-like commands: model, target and data, timing, quantization, sign-off,
    tuning; ``grid``: ``--models`` and ``--targets`` (sweep) instead of ``--model`` and
    ``--target``. The groups in ``omit`` (keys of ``OMITTABLE``: a command that does not use
    them) are not offered (argparse refuses them, exit 2) and take their defaults."""
    add_model_options(r, grid)
    add_data_options(r, grid, timing="timing" not in omit, remote="remote" not in omit)
    add_quant_options(r, signoff="signoff" not in omit)
    add_tuning_options(r, budget="tuning budget" not in omit)
    r.set_defaults(**{k: v for group in omit for k, v in OMITTABLE[group].items()})


def add_data_options(r, grid=False, timing=True, remote=True):
    """Target, data, preprocessing, threads, (with ``remote``) remote devices and (with
    ``timing``) timing; ``grid``: ``--targets`` (sweep)."""
    what = 'llvm, cuda, or a JSON target dict such as \'{"kind": "llvm", "mcpu": "haswell"}\''
    if grid:
        r.add_argument("--targets", default="llvm", help=f"comma-separated, each {what}")
    else:
        r.add_argument("--target", default="llvm", help=what)
    r.add_argument(
        "--data",
        default=None,
        help="folder, hf:NAME[:SPLIT], synthetic, or "
        "embedded (default: embedded, 20 ImageNet photos shipped in the foolbox package)",
    )
    r.add_argument(
        "--mean",
        type=float,
        nargs="+",
        help="per-channel mean, 3 values (RGB) or 1 (greyscale model) (default: the model's)",
    )
    r.add_argument(
        "--std",
        type=float,
        nargs="+",
        help="per-channel std, 3 values (RGB) or 1 (greyscale model) (default: the model's)",
    )
    r.add_argument(
        "--calib-size", type=int, help="calibration images (default: min(32, a third of the data))"
    )
    r.add_argument(
        "--eval-size", type=int, help="evaluation images (default: the rest, at most 100)"
    )
    r.add_argument("--seed", type=int, default=0, help="seed of the calibration/evaluation split")
    r.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="CPU threads for TVM and PyTorch alike (default: all cores, %(default)s here)",
    )
    if remote:
        add_remote_options(r)
    if timing:
        r.add_argument("--warmup", type=int, help="untimed runs before timing (default: 3)")
        r.add_argument(
            "--repeat", type=int, help=f"timed runs (>= {MIN_REPEAT}; default: {MIN_REPEAT})"
        )


def add_remote_options(r):
    """Where the TVM builds run: this machine, one RPC server, or a tracker's device pool."""
    r.add_argument(
        "--rpc",
        metavar="HOST:PORT",
        help="run the TVM builds on this TVM RPC server (python -m tvm.exec.rpc_server); "
        "compiled here, timed by the device's own timer (default: none, this machine)",
    )
    r.add_argument(
        "--rpc-tracker",
        metavar="HOST:PORT",
        help="run the TVM builds on a free server of --rpc-key registered with this TVM RPC "
        "tracker (python -m tvm.exec.rpc_tracker); waits while all are busy (default: none)",
    )
    r.add_argument(
        "--rpc-key", metavar="KEY", help="the device key asked of --rpc-tracker (default: none)"
    )


def add_quant_options(r, signoff=True):
    """Calibration, quantization, (with ``signoff``) sign-off thresholds, output folders."""
    from ..calibration import MODES
    from ..quantize import QuantConfig
    from ..quantize.config import WEIGHT_ROUNDINGS

    r.add_argument(
        "--calib-mode",
        default=QuantConfig().calib_mode,
        choices=list(MODES),
        help="calibration method",
    )
    r.add_argument(
        "--percentile",
        type=float,
        help=f"percentile mode only: quantile, in (0, 100] (default: {QuantConfig().percentile})",
    )
    r.add_argument(
        "--global-scale",
        type=float,
        help=f"global_scale mode only: range +-S, S > 0 (default: {QuantConfig().global_scale})",
    )
    r.add_argument("--per-tensor", action="store_true", help="per-tensor weight scales")
    r.add_argument("--simulate", action="store_true", help="fake-quantized FP32 graph")
    r.add_argument(
        "--weight-rounding",
        default=QuantConfig().weight_rounding,
        choices=list(WEIGHT_ROUNDINGS),
        help="int8 weight rounding: gptq (least output error on the calibration images, "
        "GPTQ, Frantar et al. 2023) or nearest",
    )
    r.add_argument(
        "--bias-correction",
        action=argparse.BooleanOptionalAction,
        default=QuantConfig().bias_correction,
        help="add to each INT8 layer's output the per-channel mean shift quantization "
        "gives it on the calibration images (empirical bias correction)",
    )
    r.add_argument(
        "--reduce-range",
        action="store_true",
        help="7-bit weights ([-63, 63]): on AVX2 CPUs without VNNI they run on FBGEMM's "
        "vpmaddubsw kernel, exact; they cost weight precision everywhere",
    )
    r.add_argument(
        "--fit-pairs",
        action="store_true",
        help="weights whose pairs of adjacent input channels fit int16 sums (each channel "
        "on the finest grid, 127 down to 63 steps, that fits): on AVX2 CPUs without VNNI "
        "every layer runs on vpmaddubsw, exact; costs a little precision everywhere",
    )
    if signoff:
        add_signoff_options(r)
    r.add_argument("--cache-dir", default="calibration", help="calibration cache folder")
    r.add_argument("--reports-dir", default="reports", help="reports are written under it")


def add_signoff_options(r):
    """The sign-off limits' flags (``signoff.limits.SPECS``). Their argparse default is None
    (not given), so that a ``--policy`` file can set what the command line does not; see
    ``runopts._limits``."""
    for name, spec in SPECS.items():
        r.add_argument(
            spec.flag,
            dest=name,
            metavar=spec.flag[2:].upper().replace("-", "_"),
            type=float,
            help="sign-off: " + spec.help(DEFAULTS[name], ", or --policy's").replace("%", "%%"),
        )


def add_tuning_options(r, budget=True):
    """The tuning database and (with ``budget``) MetaSchedule's budget."""
    r.add_argument(
        "--tuning-db",
        default=None,
        help="tuning database root (default: "
        "$QBENCH_TUNING_DB or ~/.cache/qbench/tuning); one folder per target",
    )
    if not budget:
        return
    r.add_argument(
        "--trials", type=int, help="mean MetaSchedule trials per kernel (default: 16; tuning only)"
    )
    r.add_argument(
        "--time-budget",
        type=float,
        help="minutes of tuning, then stop (default: no limit; tuning only)",
    )
    r.add_argument(
        "--tune-graphs",
        help="graphs to tune: fp32, int8 or fp32,int8 (INT8 kernels embed calibrated scales, so "
        "their records serve only the same calibration) (default: fp32,int8; tuning only)",
    )
