"""``qbench run``: calibrate, quantize, build FP32 and INT8, compare with PyTorch, sign
off and report."""

from .exits import EXIT_FAIL, EXIT_PASS
from .options import (
    add_fallback_options,
    add_policy_option,
    add_run_options,
    add_torch_int8_option,
)
from .runopts import run_options


def add_parser(command):
    """Add ``qbench run`` through ``command(name, help)``, the sub-parser factory."""
    r = command(
        "run", "calibrate, quantize to INT8, build FP32 and INT8, compare with PyTorch, report"
    )
    add_run_options(r)
    add_fallback_options(r)
    r.add_argument(
        "--diagnose",
        action="store_true",
        help="add qbench diagnose's per-layer tables (SQNR, cosine, max abs error, clipped "
        "fraction; W8A32, W32A8; sensitivity ranking) and the input histograms of the most "
        "sensitive layers to the report (costs about a qbench diagnose)",
    )
    r.add_argument("--tune", action="store_true", help="tune what the database lacks, then run")
    add_torch_int8_option(r)
    add_policy_option(r)


def run(args):
    """``qbench run``: the run, its console summary and its report folder; exit 0 on PASS."""
    opts = run_options(args)  # bad options fail here, before TVM and torch are imported
    if not (opts.model.endswith(".pt2") or ".py" in opts.model):
        from ..model.zoo import get_spec

        get_spec(opts.model)  # so does an unknown registry name
    from ..core.progress import stage
    from ..pipeline import engine
    from ..report.markdown import render_console
    from ..report.write import write_reports

    attachments = {}
    report = engine.run(opts, attachments)
    with stage("report"):
        print(render_console(report))
        out = write_reports(report, opts.reports_dir, attachments)
    print(f"\nreports: {out / 'report.md'}  {out / 'report.json'}  {out / 'report.html'}")
    return EXIT_PASS if report.signoff.verdict == "PASS" else EXIT_FAIL
