"""``qbench diagnose``: per-layer INT8 error and sensitivity on the calibration images;
with ``--accuracy-target``, the layers to keep in FP32."""

from dataclasses import replace

from .exits import EXIT_FAIL, EXIT_PASS
from .options import add_fallback_options, add_run_options
from .runopts import run_options


def add_parser(command):
    """Add ``qbench diagnose`` through ``command(name, help)``, the sub-parser factory."""
    d = command(
        "diagnose",
        "per-layer INT8 error (SQNR, cosine, clipping; accumulated and alone; weights-only and "
        "activations-only) and sensitivity ranking on the calibration images; with "
        "--accuracy-target, the layers to keep in FP32 (a file for --skip-layers @FILE)",
    )
    add_run_options(d, omit=("signoff", "tuning budget"))
    add_fallback_options(d)


def run(args):
    """``qbench diagnose``: the diagnosis, its summary and report folder; with the fallback,
    exit 1 when it misses ``--accuracy-target``."""
    from ..core.progress import stage
    from ..pipeline.diagnose import run_diagnosis
    from ..report.diagnosis import sensitive_table, summary, write_diagnosis

    opts = replace(run_options(args), diagnose=True)
    report, pngs = run_diagnosis(opts)
    with stage("report"):
        out = write_diagnosis(report, opts.reports_dir, pngs)
    print("\n".join(summary(report)))
    print(sensitive_table(report))
    print(f"\nreports: {out / 'diagnose.md'}  {out / 'diagnose.json'}")
    if report.fallback is None:
        return EXIT_PASS
    print(f"FP32 layers: {out / 'skip_layers.txt'} (qbench run --skip-layers @FILE)")
    return EXIT_PASS if report.fallback.reached else EXIT_FAIL
