"""``qbench sweep``: every model on every target, one ``qbench run`` per cell, then one
summary report."""

import argparse

from ..core.errors import UserError
from .interrupts import INTERRUPTS
from .options import (
    add_fallback_options,
    add_policy_option,
    add_run_options,
    add_torch_int8_option,
)
from .runopts import run_options

EXIT_RULE = """\
exit code: the largest of the cells' exit codes, each as `qbench run` would give it:
  0 every cell PASSes its sign-off; 1 some cell FAILs it and none has an error;
  2 some cell had bad input (e.g. its model function raised) and none crashed;
  3 some cell hit an internal error (a bug in qbench or TVM).
  Bad grid or option input exits 2 before any cell runs; Ctrl-C exits 130 (the summary of
  the finished cells is still written, marked incomplete)."""


def add_parser(command):
    """Add ``qbench sweep`` through ``command(name, help)``, the sub-parser factory."""
    s = command(
        "sweep",
        "run every model on every target (one `qbench run` per cell, one report each, a "
        "shared calibration cache and tuning database), then write one summary report "
        "(summary.md, summary.json) in its own folder under --reports-dir; a failing cell is "
        "recorded and the others still run",
    )
    add_run_options(s, grid=True)
    add_fallback_options(s)
    add_torch_int8_option(s)
    add_policy_option(s)
    s.epilog = EXIT_RULE


def run(args):
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
        run_options(argparse.Namespace(**{**vars(args), "model": m, "target": t}))
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
        lambda: INTERRUPTS.count > 0,
        parallel,
        isolated=remote is not None,
    )
    print(sweep.summary_table(done, "simple"))
    print(f"\nsummary: {folder / 'summary.md'}  {folder / 'summary.json'}")
    return sweep.exit_code(done)
