"""The ``baseline save``, ``compare`` and ``history`` commands (parsers and handlers)."""

import math
import re
from pathlib import Path

from ..baseline import store
from ..core.atomic import check_writable, write_json
from ..core.errors import UserError
from ..model.zoo import model_id
from .exits import EXIT_FAIL, EXIT_NO_BASELINE, EXIT_PASS, EXIT_USAGE

DEFAULT_STORE = "baselines"


def add_parser(command):
    """Add ``baseline``, ``compare`` and ``history`` through ``command(name, help)`` (the CLI's
    sub-parser factory)."""
    b = command("baseline", "keep accepted runs as baselines in a store (a folder)")
    action = b.add_subparsers(
        dest="action",
        required=True,
        metavar="ACTION",
        help="save: store a report; migrate: move an older qbench's files to this layout "
        "(required)",
    )
    s = action.add_parser("save", help="store a report as a baseline", allow_abbrev=False)
    s.add_argument("report", help="a report.json or its folder (required)")
    _add_store(s)
    s.add_argument(
        "--accept-fail",
        action="store_true",
        help="store a report whose sign-off verdict is FAIL (recorded in the stored file)",
    )
    m = action.add_parser(
        "migrate",
        help="move the files an older qbench filed elsewhere (a model file under its full "
        "path) to where this qbench files them, saying each move; optional: compare and "
        "history read every older layout in place",
        allow_abbrev=False,
    )
    _add_store(m)
    m.add_argument("--dry-run", action="store_true", help="say what would move, and move nothing")
    c = command(
        "compare",
        "compare a report with the newest baseline of its machine, model, target and "
        "definition: every metric, with significance; exit 1 on a regression, 4 when there is "
        "no comparable baseline",
    )
    c.add_argument("report", help="a report.json or its folder (required)")
    where = c.add_mutually_exclusive_group()
    _add_store(where)
    where.add_argument(
        "--baseline",
        help="compare with this report.json (or its folder), or a stored baseline file "
        "(default: the newest baseline stored before the report with its definition digest)",
    )
    c.add_argument(
        "--factor", type=float, default=1.10, help="latency ratio of medians that may count, > 1"
    )
    c.add_argument("--alpha", type=float, default=0.01, help="significance level, in (0, 1)")
    c.add_argument("--json", help="also write the comparison as JSON to this file (default: none)")
    h = command("history", "stored baselines of a model and target over time: a table and a PNG")
    h.add_argument(
        "--model",
        required=True,
        help="the model as given to qbench run: a registry name, FILE.py:FUNCTION or FILE.pt2 "
        "(any folder: runs are named by the file's base name)",
    )
    h.add_argument("--target", required=True, help="target kind (llvm) or a JSON target dict")
    _add_store(h)
    h.add_argument("--png", help="PNG file (default: STORE/history-<model>-<target>.png)")


def _add_store(parser):
    parser.add_argument("--store", default=DEFAULT_STORE, help="baseline store folder")


def run_baseline(args):
    """``qbench baseline save REPORT`` or ``qbench baseline migrate``. Returns the exit
    code."""
    return run_migrate(args) if args.action == "migrate" else run_save(args)


def run_save(args):
    """``qbench baseline save REPORT``: store it; prints the file. Returns the exit code.

    Raises:
        UserError: a ``--store`` that is not a writable folder (checked first), a missing or
            damaged report, a verdict other than PASS without ``--accept-fail``.
    """
    check_writable(args.store, "--store")
    report = store.load_report(args.report)
    path, written = _written(
        "--store", args.store, lambda: store.save(report, args.store, args.report, args.accept_fail)
    )
    print(f"baseline saved: {path}" if written else f"baseline already stored, unchanged: {path}")
    return EXIT_PASS


def run_migrate(args):
    """``qbench baseline migrate``: move the store's files of an older layout to this
    qbench's (``store.migrate``), a line per file moved or left, then the counts. Exit 0,
    or 2 when a file was left (damaged, or another run of its name in place).

    Raises:
        UserError: ``--store`` is not a folder, or the store or a file in it is of a newer
            layout (nothing moved).
    """
    if not Path(args.store).is_dir():
        raise UserError(f"--store {args.store}: not a baseline store folder")
    if not args.dry_run:
        check_writable(args.store, "--store")
    done = _written("--store", args.store, lambda: store.migrate(args.store, args.dry_run))
    would = {"moved": "would move", "duplicate removed": "would remove the duplicate"}
    counts = {"moved": 0, "duplicate removed": 0, "left": 0}
    for old, new, what in done:
        if what.startswith("left: "):
            counts["left"] += 1
            print(f"left {old}: {what.removeprefix('left: ')}")
            continue
        counts[what] += 1
        if args.dry_run:
            print(f"{would[what]} {old} -> {new}")
        else:
            print(f"moved {old} -> {new}" if what == "moved" else f"{what} {old} ({new})")
    if not done:
        print(
            f"nothing to move: every file in {args.store} is where layout {store.LAYOUT} files it"
        )
    else:
        said = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
        print(f"{args.store}: {said}" + (" (dry run: nothing changed)" if args.dry_run else ""))
    return EXIT_USAGE if counts["left"] else EXIT_PASS


def _written(flag, path, write):
    """``write()``'s result; an ``OSError`` becomes a ``UserError`` naming ``flag path``."""
    try:
        return write()
    except OSError as e:
        raise UserError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None


def _check_output(flag, path):
    """Check, before any work and creating nothing, that the file ``path`` (``flag``'s
    value) can be written: not a folder, in a folder that exists or can be created and is
    writable (``atomic.check_writable``).

    Raises:
        UserError: naming ``flag`` and ``path``.
    """
    if path is None:
        return
    if Path(path).is_dir():
        raise UserError(f"{flag} {path}: cannot write there (a folder; give a file name)")
    check_writable(Path(path).absolute().parent, f"{flag} {path}: its folder")


def _check_store(path):
    """A ``--store`` to read must be a folder when it exists (a store not made yet holds no
    baseline).

    Raises:
        UserError: ``path`` exists and is not a folder.
    """
    if Path(path).exists() and not Path(path).is_dir():
        raise UserError(f"--store {path}: not a baseline store folder (a file)")


def run_compare(args):
    """``qbench compare``: prints the table; exit 0 (no regression), 1 (regression) or 4
    (no baseline, or not comparable). ``--json`` gets the result in every one of these cases.

    Raises:
        UserError: bad --factor/--alpha, a ``--json`` path that cannot be written or a
            ``--store`` that is a file (both checked before anything is read), a missing or
            damaged report or baseline file.
    """
    if not (math.isfinite(args.factor) and args.factor > 1):
        raise UserError(f"--factor {args.factor}: must be a finite number > 1")
    if not (math.isfinite(args.alpha) and 0 < args.alpha < 1):
        raise UserError(f"--alpha {args.alpha}: must be a number in (0, 1)")
    _check_output("--json", args.json)
    if not args.baseline:
        _check_store(args.store)
    from ..baseline import comparison  # scipy.stats: imported when a comparison runs

    report = store.load_report(args.report)
    if args.baseline:
        base_path, baseline = args.baseline, store.load_baseline(args.baseline)
        shown = base_path
    else:
        base_path, why = store.choose(args.store, report)
        if base_path is None:
            k = store.key(report)
            missing = "" if Path(args.store).is_dir() else " (the folder does not exist)"
            kind = k["target"].rsplit("-", 1)[0]
            reason = (
                f"no baseline in {args.store}{missing} created before this report for machine "
                f"{k['machine']}, model {k['model']}, target {kind} (any target dict; "
                f"this report's {k['target']}) (qbench baseline save REPORT --store "
                f"{args.store}){_elsewhere(args.store, report, k['machine'])}"
            )
            print(reason)
            result = comparison.not_comparable(reason)
            print(comparison.verdict_line(result))
            _write_json(args.json, None, result)
            return EXIT_NO_BASELINE
        baseline = store.load_entry(base_path)["report"]
        shown = f"{base_path} ({why}, created {baseline.created})"
    result = comparison.compare(report, baseline, args.factor, args.alpha)
    print(comparison.render(result, shown, args.factor, args.alpha))
    print(comparison.verdict_line(result))
    _write_json(args.json, base_path, result)
    if not result["comparable"]:
        return EXIT_NO_BASELINE
    return EXIT_FAIL if result["regression"] else EXIT_PASS


def _elsewhere(folder, report, machine):
    """Words on the report's model's runs stored for other machines (``--baseline`` can
    compare with one), or ""."""
    other = [
        p for p in store.model_runs(folder, report.definition["model"]) if p.parts[-4] != machine
    ]
    if not other:
        return ""
    return (
        f"; {len(other)} run(s) of this model are stored for other machines, the newest "
        f"{other[-1]} (compare --baseline FILE compares accuracy across machines)"
    )


def _write_json(path, base_path, result):
    """Write ``--json`` (when given): the baseline's path (or None) and ``result``."""
    if path:
        baseline = None if base_path is None else str(base_path)
        _written("--json", path, lambda: write_json(path, {"baseline": baseline, **result}))


def run_history(args):
    """``qbench history``: prints the table and the PNG's path. Returns the exit code.

    Raises:
        UserError: a ``--png`` path that cannot be written or a ``--store`` that is a file
            (both checked before anything is read), an unknown target kind, no stored run, a
            damaged stored file of the model.
    """
    from ..baseline import history

    model = model_id(args.model)  # as reports name it
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"history-{model}-{args.target}")
    png = Path(args.png or Path(args.store) / f"{name}.png")
    _check_store(args.store)
    _check_output("--png", png)
    points = history.history(args.store, args.model, args.target)
    if not points:
        raise UserError(
            f"history: no stored run of model {model!r} on target {args.target} in "
            f"{args.store} (qbench baseline save REPORT --store {args.store})"
        )
    print(history.table(points))
    title = f"{model} on {args.target}"
    _written("--png", png, lambda: history.write_plot(points, png, title))
    print(f"\nplot: {png}")
    return EXIT_PASS
