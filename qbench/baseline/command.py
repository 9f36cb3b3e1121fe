"""The ``baseline save``, ``compare`` and ``history`` commands (parsers and handlers)."""

import math
import re
from pathlib import Path

from ..atomic import write_json
from ..errors import UserError
from . import comparison, history, store

EXIT_OK, EXIT_REGRESSION, EXIT_NO_BASELINE = 0, 1, 4
DEFAULT_STORE = "baselines"


def add_commands(command):
    """Add ``baseline``, ``compare`` and ``history`` through ``command(name, help)`` (the CLI's
    sub-parser factory)."""
    b = command("baseline", "keep accepted runs as baselines in a store (a folder)")
    action = b.add_subparsers(
        dest="action", required=True, metavar="ACTION", help="save: store a report (required)"
    )
    s = action.add_parser("save", help="store a report as a baseline", allow_abbrev=False)
    s.add_argument("report", help="a report.json or its folder (required)")
    _add_store(s)
    c = command(
        "compare",
        "compare a report with the newest baseline of its machine, model and target: every "
        "metric, with significance; exit 1 on a regression, 4 when there is no comparable "
        "baseline",
    )
    c.add_argument("report", help="a report.json or its folder (required)")
    where = c.add_mutually_exclusive_group()
    _add_store(where)
    where.add_argument(
        "--baseline",
        help="compare with this report.json (or folder) (default: the newest stored baseline)",
    )
    c.add_argument(
        "--factor", type=float, default=1.10, help="latency ratio of medians that may count, > 1"
    )
    c.add_argument("--alpha", type=float, default=0.01, help="significance level, in (0, 1)")
    c.add_argument("--json", help="also write the comparison as JSON to this file (default: none)")
    h = command("history", "stored baselines of a model and target over time: a table and a PNG")
    h.add_argument("--model", required=True, help="model name as in its reports")
    h.add_argument("--target", required=True, help="target kind (llvm) or a JSON target dict")
    _add_store(h)
    h.add_argument("--png", help="PNG file (default: STORE/history-<model>-<target>.png)")


def _add_store(parser):
    parser.add_argument("--store", default=DEFAULT_STORE, help="baseline store folder")


def run_baseline(args):
    """``qbench baseline save REPORT``: store it; prints the file. Returns the exit code."""
    report = store.load_report(args.report)
    path, written = store.save(report, args.store, source=args.report)
    print(f"baseline saved: {path}" if written else f"baseline already stored, unchanged: {path}")
    return EXIT_OK


def run_compare(args):
    """``qbench compare``: prints the table; exit 0 (no regression), 1 (regression) or 4
    (no baseline, or not comparable).

    Raises:
        UserError: bad --factor/--alpha, a missing or damaged report or baseline file.
    """
    if not (math.isfinite(args.factor) and args.factor > 1):
        raise UserError(f"--factor {args.factor}: must be a finite number > 1")
    if not (math.isfinite(args.alpha) and 0 < args.alpha < 1):
        raise UserError(f"--alpha {args.alpha}: must be a number in (0, 1)")
    report = store.load_report(args.report)
    if args.baseline:
        base_path, baseline = args.baseline, store.load_report(args.baseline)
    else:
        base_path = store.newest(args.store, report)
        if base_path is None:
            k = store.key(report)
            print(
                f"no baseline in {args.store} for machine {k['machine']}, model {k['model']}, "
                f"target {k['target']} (qbench baseline save REPORT --store {args.store})"
            )
            return EXIT_NO_BASELINE
        baseline = store.load_entry(base_path)["report"]
    result = comparison.compare(report, baseline, args.factor, args.alpha)
    print(comparison.render(result, base_path, args.factor, args.alpha))
    if args.json:
        write_json(args.json, {"baseline": str(base_path), **result})
    if not result["comparable"]:
        return EXIT_NO_BASELINE
    return EXIT_REGRESSION if result["regression"] else EXIT_OK


def run_history(args):
    """``qbench history``: prints the table and the PNG's path. Returns the exit code."""
    points = history.history(args.store, args.model, args.target)
    if not points:
        raise UserError(
            f"history: no stored run of model {args.model!r} on target {args.target} in "
            f"{args.store} (qbench baseline save REPORT --store {args.store})"
        )
    print(history.table(points))
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"history-{args.model}-{args.target}")
    png = Path(args.png or Path(args.store) / f"{name}.png")
    history.write_plot(points, png, f"{args.model} on {args.target}")
    print(f"\nplot: {png}")
    return EXIT_OK
