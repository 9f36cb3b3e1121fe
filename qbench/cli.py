"""Command line: ``qbench run`` and ``qbench models``. Exit codes: 0 pass, 1 sign-off
failure, 2 usage or input error."""

import argparse
import logging
import os
import sys

from .errors import QBenchError, UserError

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _parser():
    p = argparse.ArgumentParser(prog="qbench", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    models = sub.add_parser("models", help="list registered models")
    models.add_argument("pattern", nargs="?", default="*", help="shell pattern, e.g. 'resnet*'")
    r = sub.add_parser("run", help="calibrate, quantize, build, compare, report")
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
    r.add_argument("--repeat", type=int, default=20, help="timed runs (>= 20 for sign-off)")
    from .calibration import MODES

    r.add_argument("--calib-mode", default="kl_divergence", choices=list(MODES))
    r.add_argument("--percentile", type=float, default=99.999)
    r.add_argument("--global-scale", type=float, default=8.0)
    r.add_argument("--per-tensor", action="store_true", help="per-tensor weight scales")
    r.add_argument(
        "--skip-layers",
        default="",
        help="comma-separated layer indices or names "
        "kept in FP32 (the first conv is always kept unless --quantize-first)",
    )
    r.add_argument("--quantize-first", action="store_true", help="quantize the first conv too")
    r.add_argument("--simulate", action="store_true", help="fake-quantized FP32 graph")
    r.add_argument("--min-top1-agreement", type=float, default=0.97)
    r.add_argument("--max-accuracy-drop", type=float, default=1.0, help="percentage points")
    r.add_argument("--cache-dir", default="calibration")
    r.add_argument("--reports-dir", default="reports")
    r.add_argument("-v", "--verbose", action="store_true")
    return p


def _skip_list(text):
    return tuple(int(s) if s.strip().isdigit() else s.strip() for s in text.split(",") if s.strip())


def _options(args):
    from .pipeline import RunOptions
    from .quantize import QuantConfig

    for name in ("batch_size", "threads", "repeat"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= 1")
    quant = QuantConfig(
        calib_mode=args.calib_mode,
        percentile=args.percentile,
        global_scale=args.global_scale,
        per_channel=not args.per_tensor,
        skip_layers=_skip_list(args.skip_layers),
        skip_first=not args.quantize_first,
        simulate=args.simulate,
    )
    return RunOptions(
        model=args.model,
        target=args.target,
        data=args.data,
        weights=args.weights,
        input_shape=args.input_shape,
        mean=args.mean,
        std=args.std,
        calib_size=args.calib_size,
        eval_size=args.eval_size,
        batch_size=args.batch_size,
        seed=args.seed,
        threads=args.threads,
        warmup=args.warmup,
        repeat=args.repeat,
        min_top1_agreement=args.min_top1_agreement,
        max_accuracy_drop=args.max_accuracy_drop,
        cache_dir=args.cache_dir,
        quant=quant,
    )


def _run(args):
    from .pipeline import run
    from .report import render_console, write_reports

    report = run(_options(args))
    out = write_reports(report, args.reports_dir)
    print(render_console(report))
    print(f"\nreports: {out / 'report.md'}  {out / 'report.json'}")
    return EXIT_PASS if report["signoff"]["verdict"] == "PASS" else EXIT_FAIL


def main(argv=None):
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.command == "models":
            from .zoo import list_models

            print("\n".join(list_models(args.pattern)))
            return EXIT_PASS
        return _run(args)
    except (UserError, ValueError) as e:
        print(f"qbench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except QBenchError as e:
        print(f"qbench: error: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
