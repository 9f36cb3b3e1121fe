"""Command line: ``qbench run`` and ``qbench models``. Exit codes: 0 sign-off pass,
1 sign-off failure, 2 usage or input error, 3 internal error (a bug), 130 interrupted."""

import argparse
import logging
import math
import os
import sys
import traceback

from .errors import QBenchError, UserError

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
MIN_REPEAT = 20


def _parser():
    from . import __version__

    p = argparse.ArgumentParser(prog="qbench", description=__doc__)
    p.add_argument("--version", action="version", version=f"qbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    models = sub.add_parser("models", help="list registered models")
    models.add_argument("pattern", nargs="?", default="*", help="shell pattern, e.g. 'resnet*'")
    r = sub.add_parser("run", help="calibrate, quantize, build, compare, report")
    _add_run_options(r)
    r.add_argument("--tune", action="store_true", help="tune what the database lacks, then run")
    t = sub.add_parser(
        "tune",
        help="MetaSchedule-tune the FP32 and INT8 graphs of a model; "
        "records are kept in the tuning database and applied by every run",
    )
    _add_run_options(t)
    return p


def _add_run_options(r):
    r.add_argument("--model", required=True, help="registry name, FILE.py:FUNCTION or FILE.pt2")
    r.add_argument("--target", default="llvm", help="llvm, cuda, or a JSON target dict")
    r.add_argument(
        "--data",
        default=None,
        help="folder, hf:NAME[:SPLIT], synthetic, or "
        "embedded (default: 20 ImageNet photos shipped in the foolbox package)",
    )
    r.add_argument("--weights", help="state dict file (torch.save)")
    r.add_argument("--input-shape", type=int, nargs=3, metavar=("C", "H", "W"))
    r.add_argument("--mean", type=float, nargs=3)
    r.add_argument("--std", type=float, nargs=3)
    r.add_argument("--calib-size", type=int, help="calibration images (default min(32, n/3))")
    r.add_argument("--eval-size", type=int, help="evaluation images (default: the rest, <= 100)")
    r.add_argument("--batch-size", type=int, default=8)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="CPU threads for TVM and PyTorch alike",
    )
    r.add_argument("--warmup", type=int, default=3, help="untimed runs before timing")
    r.add_argument("--repeat", type=int, default=MIN_REPEAT, help=f"timed runs (>= {MIN_REPEAT})")
    from .calibration import MODES

    r.add_argument("--calib-mode", default="kl_divergence", choices=list(MODES))
    r.add_argument("--percentile", type=float, default=99.999)
    r.add_argument("--global-scale", type=float, default=8.0)
    r.add_argument("--per-tensor", action="store_true", help="per-tensor weight scales")
    r.add_argument(
        "--skip-layers",
        default="",
        help="comma-separated layer indices or names kept in FP32",
    )
    r.add_argument(
        "--keep-first-fp32", action="store_true", help="keep the first conv in FP32 (as Relay)"
    )
    r.add_argument("--simulate", action="store_true", help="fake-quantized FP32 graph")
    r.add_argument("--min-top1-agreement", type=float, default=0.97)
    r.add_argument("--max-accuracy-drop", type=float, default=1.0, help="percentage points")
    r.add_argument("--cache-dir", default="calibration")
    r.add_argument("--reports-dir", default="reports")
    r.add_argument(
        "--tuning-db",
        default=None,
        help="tuning database root (default: "
        "$QBENCH_TUNING_DB or ~/.cache/qbench/tuning); one folder per target",
    )
    r.add_argument("--trials", type=int, default=16, help="mean MetaSchedule trials per kernel")
    r.add_argument("--time-budget", type=float, help="minutes of tuning, then stop (records kept)")
    r.add_argument(
        "--tune-graphs",
        default="fp32,int8",
        help="graphs to tune: fp32, int8 or fp32,int8 (INT8 kernels embed calibrated scales, so "
        "their records serve only the same calibration)",
    )
    r.add_argument("-v", "--verbose", action="store_true")


def _skip_list(text):
    return tuple(int(s) if s.strip().isdigit() else s.strip() for s in text.split(",") if s.strip())


def _check_args(args):
    """Reject bad option values before anything slow runs.

    Raises:
        UserError: names the flag, the value and the valid range.
    """
    limits = [
        ("batch_size", 1, None),
        ("threads", 1, None),
        ("repeat", MIN_REPEAT, None),
        ("warmup", 0, None),
        ("seed", 0, None),
        ("calib_size", 1, None),
        ("eval_size", 1, None),
        ("percentile", 0, 100),
        ("global_scale", 0, None),
        ("min_top1_agreement", 0, 1),
        ("max_accuracy_drop", 0, 100),
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
            flag = "--" + name.replace("_", "-")
            raise UserError(f"{flag} {value}: must be a finite number {valid}")
    if args.std and min(abs(v) for v in args.std) == 0:
        raise UserError(f"--std {args.std}: every value must be non-zero")
    if args.input_shape and min(args.input_shape) < 1:
        raise UserError(f"--input-shape {args.input_shape}: C, H and W must be >= 1")
    graphs = set(args.tune_graphs.split(","))
    if not graphs or not graphs <= {"fp32", "int8"}:
        raise UserError(f"--tune-graphs {args.tune_graphs}: valid: fp32, int8 or fp32,int8")
    if args.data == "":
        raise UserError("--data '': empty; valid: a folder, hf:NAME[:SPLIT], synthetic, embedded")


def _options(args):
    from .pipeline import RunOptions
    from .quantize import QuantConfig

    _check_args(args)
    quant = QuantConfig(
        calib_mode=args.calib_mode,
        percentile=args.percentile,
        global_scale=args.global_scale,
        per_channel=not args.per_tensor,
        skip_layers=_skip_list(args.skip_layers),
        skip_first=args.keep_first_fp32,
        simulate=args.simulate,
    )
    from .tuning import default_root

    fields = (
        "model target data weights input_shape mean std calib_size eval_size batch_size seed "
        "threads warmup repeat min_top1_agreement max_accuracy_drop cache_dir reports_dir"
    ).split()
    args.tuning_db = args.tuning_db or str(default_root())
    fields.append("tuning_db")
    tune = {"tune_trials": args.trials if getattr(args, "tune", False) else 0}
    tune["time_budget_min"] = args.time_budget
    tune["tune_graphs"] = tuple(g for g in ("fp32", "int8") if g in args.tune_graphs.split(","))
    return RunOptions(quant=quant, **tune, **{f: getattr(args, f) for f in fields})


def _run(args):
    from .pipeline import run
    from .report import render_console, write_reports

    opts = _options(args)
    report = run(opts)
    print(render_console(report))
    out = write_reports(report, opts.reports_dir)
    print(f"\nreports: {out / 'report.md'}  {out / 'report.json'}")
    return EXIT_PASS if report["signoff"]["verdict"] == "PASS" else EXIT_FAIL


def _tune(args):
    from .pipeline import prepare, tune_graphs

    ctx = prepare(_options(args))
    print(f"tuning into {ctx['tuning']['database']} (Ctrl-C stops at the next measurements)")
    opts, stopped = ctx["opts"], set()
    for name, s in tune_graphs(ctx, args.trials, args.time_budget, opts.tune_graphs).items():
        print(
            f"{name}: {s.tuned} kernels tuned, {s.skipped} already in a database, of {s.tasks}, "
            f"in {s.seconds:.0f} s"
            + (f"; stopped by {s.stopped}" if s.stopped else "")
            + (f"; rejected: {', '.join(s.rejected)}" if s.rejected else "")
        )
        stopped.add(s.stopped)
    return EXIT_INTERRUPTED if "Ctrl-C" in stopped else EXIT_PASS


def _models(pattern):
    from .zoo import list_models

    names = list_models(pattern)
    if not names:
        raise UserError(f"models {pattern!r}: no registered model matches (try 'resnet*')")
    print("\n".join(names))
    return EXIT_PASS


def main(argv=None):
    args = _parser().parse_args(argv)
    level = logging.INFO if getattr(args, "verbose", False) else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        commands = {
            "models": lambda: _models(args.pattern),
            "run": lambda: _run(args),
            "tune": lambda: _tune(args),
        }
        return commands[args.command]()
    except QBenchError as e:
        print(f"qbench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("qbench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception:  # noqa: BLE001 - a bug, not a verdict: keep it apart from exit code 1
        traceback.print_exc()
        print(
            "qbench: internal error (a bug in qbench or TVM; see the traceback above)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
