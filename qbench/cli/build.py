"""``qbench build``: calibrate here, compile the FP32 and INT8 graphs for a target, run
nothing; deployable libraries and a record of the build."""

from dataclasses import replace

from .exits import EXIT_PASS
from .options import add_run_options
from .runopts import run_options


def add_parser(command):
    """Add ``qbench build`` through ``command(name, help)``, the sub-parser factory."""
    b = command(
        "build",
        "calibrate here, then compile the FP32 and INT8 graphs for a target without running "
        "them (another CPU, a GPU not at hand): deployable libraries and a record of the build",
    )
    add_run_options(b, omit=("timing", "signoff", "tuning budget", "remote"))


def run(args):
    """``qbench build``: the libraries and ``build.md``/``build.json`` in a new folder."""
    from ..core.progress import stage
    from ..pipeline.artefacts import build_artefacts, render_build, write_build
    from ..pipeline.prepare import prepare

    opts = replace(run_options(args), build_only=True)
    files, record = build_artefacts(prepare(opts))
    with stage("write"):
        out = write_build(record, files, opts.reports_dir)
    print(render_build(record))
    print(f"built: {out}")
    return EXIT_PASS
