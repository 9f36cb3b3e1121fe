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
    s.add_argument(
        "--accept-fail",
        action="store_true",
        help="store a report whose sign-off verdict is FAIL (recorded in the stored file)",
    )
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
        help="compare with this report.json (or its folder), or a stored baseline file "
        "(default: the newest baseline stored before the report)",
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
    """``qbench baseline save REPORT``: store it; prints the file. Returns the exit code.

    Raises:
        UserError: a missing or damaged report, a verdict other than PASS without
            ``--accept-fail``, a ``--store`` that cannot be written.
    """
    report = store.load_report(args.report)
    path, written = _written(
        "--store", args.store, lambda: store.save(report, args.store, args.report, args.accept_fail)
    )
    print(f"baseline saved: {path}" if written else f"baseline already stored, unchanged: {path}")
    return EXIT_OK


def _written(flag, path, write):
    """``write()``'s result; an ``OSError`` becomes a ``UserError`` naming ``flag path``."""
    try:
        return write()
    except OSError as e:
        raise UserError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None


def run_compare(args):
    """``qbench compare``: prints the table; exit 0 (no regression), 1 (regression) or 4
    (no baseline, or not comparable). ``--json`` gets the result in every one of these cases.

    Raises:
        UserError: bad --factor/--alpha, a missing or damaged report or baseline file, a
            ``--json`` path that cannot be written.
    """
    if not (math.isfinite(args.factor) and args.factor > 1):
        raise UserError(f"--factor {args.factor}: must be a finite number > 1")
    if not (math.isfinite(args.alpha) and 0 < args.alpha < 1):
        raise UserError(f"--alpha {args.alpha}: must be a number in (0, 1)")
    report = store.load_report(args.report)
    if args.baseline:
        base_path, baseline = args.baseline, store.load_baseline(args.baseline)
        shown = base_path
    else:
        base_path = store.newest_before(args.store, report)
        if base_path is None:
            k = store.key(report)
            reason = (
                f"no baseline in {args.store} created before this report for machine "
                f"{k['machine']}, model {k['model']}, target {k['target']} (qbench baseline "
                f"save REPORT --store {args.store})"
            )
            print(reason)
            _write_json(args.json, None, comparison.not_comparable(reason))
            return EXIT_NO_BASELINE
        baseline = store.load_entry(base_path)["report"]
        shown = f"{base_path} (the newest stored before this report, created {baseline.created})"
    result = comparison.compare(report, baseline, args.factor, args.alpha)
    print(comparison.render(result, shown, args.factor, args.alpha))
    _write_json(args.json, base_path, result)
    if not result["comparable"]:
        return EXIT_NO_BASELINE
    return EXIT_REGRESSION if result["regression"] else EXIT_OK


def _write_json(path, base_path, result):
    """Write ``--json`` (when given): the baseline's path (or None) and ``result``."""
    if path:
        baseline = None if base_path is None else str(base_path)
        _written("--json", path, lambda: write_json(path, {"baseline": baseline, **result}))


def run_history(args):
    """``qbench history``: prints the table and the PNG's path. Returns the exit code.

    Raises:
        UserError: an unknown target kind, no stored run, a damaged stored file of the
            model, a ``--png`` path that cannot be written.
    """
    points = history.history(args.store, args.model, args.target)
    if not points:
        raise UserError(
            f"history: no stored run of model {args.model!r} on target {args.target} in "
            f"{args.store} (qbench baseline save REPORT --store {args.store})"
        )
    print(history.table(points))
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"history-{args.model}-{args.target}")
    png = Path(args.png or Path(args.store) / f"{name}.png")
    title = f"{args.model} on {args.target}"
    _written("--png", png, lambda: history.write_plot(points, png, title))
    print(f"\nplot: {png}")
    return EXIT_OK
