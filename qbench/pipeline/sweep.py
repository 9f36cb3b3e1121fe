"""``qbench sweep``: the grid of ``qbench run``s, one cell per (model, target), and its summary.

Every cell is an ordinary run with the same options (one calibration cache folder and one
tuning database for the whole grid, so a second target of a model reuses its calibration) and
writes its own report. A cell that fails (bad input found only when its model loads, a TVM
error, a bug) is recorded with its error and exit code, and the next cell runs; Ctrl-C stops
the sweep. The summary (``summary.md``, ``summary.json``) goes into its own folder,
``<reports-dir>/<timestamp>-sweep/``, created before the first cell and rewritten as each
cell starts and ends, every file atomically.
"""

import datetime as dt
import json
import logging
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from tabulate import tabulate

from .. import __version__
from ..compile import targets
from ..core.atomic import to_json, write_folder, write_text
from ..core.errors import QBenchError, UserError
from ..core.progress import say
from ..model import zoo

log = logging.getLogger(__name__)
SCHEMA_VERSION = 2  # 2: state, cells_total, running_cell; exit_code null while running
EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


@dataclass
class Cell:
    """The outcome of one (model, target) run of a sweep.

    Attributes:
        model, target: the ``--model`` and ``--target`` texts of the cell.
        verdict: ``"PASS"`` or ``"FAIL"`` (its sign-off), or ``"ERROR"`` (no report).
        exit_code: what ``qbench run`` would have returned: 0 PASS, 1 FAIL, 2 bad input,
            3 internal error.
        report_dir: the cell's report folder, or None.
        error: ``"TypeName: message"`` of the cell's error, or None.
        top1_agreement: INT8 top-1 agreement with PyTorch FP32, a fraction in [0, 1].
        accuracy_drop_points: PyTorch FP32 top-1 accuracy minus INT8's, percentage points
            (None without labels).
        sqnr_db: SQNR of the INT8 logits against PyTorch's, dB (None: identical logits).
        int8_median_ms, fp32_median_ms: median latency of one batch, TVM INT8 and TVM FP32, ms.
        int8_speedup: 1 / the median per-round TVM INT8 / TVM FP32 latency ratio (the
            sign-off's speed-up; > 1: INT8 is faster).
        calibration_cache_hit: the calibration came from the shared cache.
        shown: False when a PASS is not shown (a check's 95 % interval reaches below its
            limit: ``verdict.Verdict.unshown``); None for an ERROR.
        device: the device that ran the cell's TVM builds (``host``, or the remote device
            in words: key, server, triple, CPU).
        started: when the cell started (UTC, ISO 8601) and ``wall_s`` its wall time, s
            (cells on a tracker's devices run at once).
    """

    model: str
    target: str
    verdict: str
    exit_code: int
    report_dir: str = None
    error: str = None
    top1_agreement: float = None
    accuracy_drop_points: float = None
    sqnr_db: float = None
    int8_median_ms: float = None
    fp32_median_ms: float = None
    int8_speedup: float = None
    calibration_cache_hit: bool = None
    shown: bool = None
    device: str = None
    started: str = None
    wall_s: float = None


def split_items(text, flag):
    """Split ``--models``/``--targets`` text at the commas outside braces (a JSON target
    dict holds commas of its own).

    Returns:
        list of str, stripped, in the given order.
    Raises:
        UserError: an empty list or item, one given twice, or unbalanced braces.
    """
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text + ","):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth < 0:
            raise UserError(f"{flag} {text!r}: a '}}' without its '{{' at character {i + 1}")
        if ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    if depth:
        raise UserError(
            f"{flag} {text!r}: a '{{' is never closed; valid: NAME,NAME,... where a JSON "
            'target dict is given whole, e.g. llvm,{"kind": "llvm", "mcpu": "haswell"}'
        )
    if "" in items:
        raise UserError(f"{flag} {text!r}: an empty entry; valid: NAME,NAME,... (comma-separated)")
    twice = sorted({item for item in items if items.count(item) > 1})
    if twice:
        raise UserError(f"{flag}: {', '.join(twice)} given twice; name each once")
    return items


def check_models(models):
    """Reject the models that can be found wrong without loading them: a registry name not
    registered, a ``FILE.py:FUNCTION`` or ``FILE.pt2`` whose file is missing, a FILE.py
    that never names FUNCTION (``_names_function``).

    Raises:
        UserError: naming the model and the valid choices (close registry names), or two
            entries that are one model (one file reached by two paths).
    """
    seen = {}
    for spec in models:
        key = spec
        if spec.endswith(".pt2") or ".py:" in spec:
            file, _, func = spec.rpartition(":") if ".py:" in spec else (spec, "", "")
            if not Path(file).is_file():
                raise UserError(f"--models {spec}: file {file} not found")
            if func and not _names_function(Path(file), func):
                raise UserError(f"--models {spec}: {file} defines no {func!r}")
            key = f"{Path(file).resolve()}:{func}"
        else:
            zoo.get_spec(spec)
        if key in seen:
            raise UserError(f"--models: {seen[key]} and {spec} are the same model; name it once")
        seen[key] = spec


def _names_function(file, func):
    """Whether Python ``file`` may define ``func``, read without running it: the name is
    bound or used anywhere in it, or a star import may bring it; a file Python cannot parse
    is left to the cell to report."""
    import ast

    try:
        tree = ast.parse(file.read_text(), str(file))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.alias) and node.name == "*":
            return True
        names = (getattr(node, attr, None) for attr in ("name", "id", "asname", "attr"))
        if func in names:
            return True
    return False


def check_targets(texts, threads, runs_here=True):
    """Parse every ``--targets`` entry as ``qbench run --target`` would (``runs_here``
    False: the cells run on remote devices, whose CPUs this machine's need not match).

    Raises:
        UserError: an entry that does not parse or this machine cannot run (the message
            names the valid forms), or two entries that are the same target.
    """
    seen = {}
    for text in texts:
        key = json.dumps(targets.parse_target(text, threads, runs_here=runs_here), sort_keys=True)
        if key in seen:
            raise UserError(f"--targets: {seen[key]} and {text} are the same target {key}")
        seen[key] = text


def parallel_cells(remote, cells):
    """How many cells run at once: 1 on this machine or one RPC server; on a tracker, as many
    as its key has free devices (at least 1: the cells then queue at the tracker).

    Raises:
        UserError: no tracker answers, or it has no server under the key.
    """
    from ..core.remote import tracker_keys

    if remote is None or remote.tracker is None:
        return 1
    keys = tracker_keys(remote.tracker)
    if remote.key not in keys:
        raise UserError(
            f"--rpc-key {remote.key}: the tracker at {remote.words()} has no server under "
            f"that key; keys with servers: {', '.join(sorted(keys)) or 'none'}"
        )
    return max(1, min(cells, keys[remote.key]["free"]))


def run_grid(cell_options, models, target_texts, root, interrupted, parallel=1, isolated=False):
    """Run the cells, ``parallel`` at a time, rewriting the summary after every cell (a cell
    that kills the process, e.g. SIGILL or SIGSEGV in native code, leaves the summary of the
    cells before it, naming the cell that was running) and at the end (also when Ctrl-C
    stops the sweep). ``isolated``: each cell in a child process
    (cells on remote devices: a cell's end ends its process and so its RPC session, and the
    tracker can lend the device to the next cell; seen: a second cell queued forever behind
    the session of an efficientnet_lite0 cell run in-process).

    Args:
        cell_options: one ``pipeline.RunOptions`` per cell, models outer, targets inner.
        models, target_texts: the grid's ``--models`` and ``--targets`` entries.
        root: ``--reports-dir``: the cells' reports and the summary folder go under it.
        interrupted: ``() -> bool``, True once Ctrl-C or SIGTERM came (TVM may turn the
            ``KeyboardInterrupt`` into an error of its own, which then stops the sweep).
    Returns:
        (list of ``Cell``, summary folder ``Path``).
    Raises:
        KeyboardInterrupt: Ctrl-C, however it surfaced, after the summary is written.
    """
    import time

    cells, started, total = [], time.time(), len(cell_options)

    def record(state, running=None):
        timing = {"parallel": parallel, "wall_time_s": round(time.time() - started, 1)}
        files = summary_files(cells, models, target_texts, state, timing, total, running)
        return rewrite_summary(folder, files)

    first = None if isolated else _words(cell_options[0])
    folder = write_summary([], models, target_texts, root, RUNNING, None, total, first)
    try:
        if isolated:
            _run_isolated(cell_options, parallel, cells, lambda: record(RUNNING))
        for i, opts in enumerate(() if isolated else cell_options, 1):
            say(f"sweep cell {i}/{total}: {_words(opts)}")
            record(RUNNING, _words(opts))
            cells.append(run_cell(opts, interrupted))
            _said(cells[-1], i, total)
    finally:
        complete = len(cells) == total
        stopped = None if isolated or complete else _words(cell_options[len(cells)])
        record(COMPLETE if complete else INTERRUPTED, stopped)
        if not complete:
            say(f"sweep stopped: {len(cells)} of {total} cells finished")
            say(summary_table(cells, "simple"))
        say(f"sweep summary: {folder / 'summary.md'}")
    return cells, folder


def _words(opts):
    return f"{opts.model} on {opts.target}"


def _said(cell, i, n):
    where = cell.error or f"reports: {cell.report_dir}"
    device = f" on {cell.device}" if cell.device else ""
    say(f"sweep cell {i}/{n}: {_verdict_words(cell)}{device} ({where})")


def _run_isolated(cell_options, parallel, cells, on_cell):
    """Every cell in a child process, ``parallel`` at once; each ``Cell`` is appended to
    ``cells`` in grid order as soon as it and those before it are done, then ``on_cell()``
    is called."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    say(f"sweep: {len(cell_options)} cells, {parallel} at once on the remote devices")
    spawn = multiprocessing.get_context("spawn")  # no forked TVM or PyTorch thread pools
    # a fresh process per cell (max_tasks_per_child): a worker that ran a cell may still
    # hold that cell's RPC session, and the tracker would never lend its device again
    pool = ProcessPoolExecutor(max_workers=parallel, mp_context=spawn, max_tasks_per_child=1)
    futures = []
    try:
        futures += [pool.submit(_run_cell_alone, opts) for opts in cell_options]
        for i, future in enumerate(futures, 1):
            cells.append(future.result())
            _said(cells[-1], i, len(futures))
            on_cell()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        cells += finished_after(futures, len(cells))


def finished_after(futures, start):
    """The ``Cell``s of the futures from index ``start`` on that finished without error, in
    grid order: on Ctrl-C, cells that ended after a still-running one keep their rows."""
    return [
        f.result()
        for f in futures[start:]
        if f.done() and not f.cancelled() and f.exception() is None
    ]


def _run_cell_alone(opts):
    """``run_cell`` in a child process of ``_run_isolated`` (Ctrl-C reaches the parent)."""
    return run_cell(opts, lambda: False)


def run_cell(opts, interrupted):
    """Run one cell and write its report; any error but Ctrl-C is recorded in the returned
    ``Cell`` (see ``run_grid``).

    Raises:
        KeyboardInterrupt: Ctrl-C, however it surfaced.
    """
    import time

    from ..report.write import write_reports
    from .engine import run

    started = time.time()
    try:
        report = run(opts)
        folder = write_reports(report, opts.reports_dir)
    except QBenchError as e:
        return _failed(opts, e, EXIT_USAGE)
    except Exception as e:  # noqa: BLE001 - one cell's bug must not stop the other cells
        if interrupted():
            raise KeyboardInterrupt from e
        log.error("%s", traceback.format_exc())
        return _failed(opts, e, EXIT_INTERNAL)
    verdict = report.signoff.verdict
    cell = Cell(opts.model, opts.target, verdict, EXIT_PASS if verdict == "PASS" else EXIT_FAIL)
    cell.report_dir = str(folder)
    cell.wall_s = round(time.time() - started, 1)
    cell.started = dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat()
    return _with_metrics(cell, report)


def _failed(opts, error, code):
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return Cell(opts.model, opts.target, "ERROR", code, error=f"{type(error).__name__}: {first}")


def _with_metrics(cell, report):
    """``cell`` with the summary's figures read from its run's ``report.result.RunResult``."""
    res = report.results
    ref, int8 = res["pytorch_fp32"].metrics, res["tvm_int8"].metrics
    cell.top1_agreement = int8.get("top1_agreement")
    cell.sqnr_db = int8.get("sqnr_db")
    if ref.get("top1_accuracy") is not None and int8.get("top1_accuracy") is not None:
        cell.accuracy_drop_points = 100.0 * (ref["top1_accuracy"] - int8["top1_accuracy"])
    cell.int8_median_ms = res["tvm_int8"].latency.median_ms
    cell.fp32_median_ms = res["tvm_fp32"].latency.median_ms
    cell.int8_speedup = report.int8_speedup
    cell.calibration_cache_hit = report.calibration.cache_hit
    cell.device = res["tvm_int8"].device
    cell.shown = not report.signoff.unshown
    return cell


def exit_code(cells):
    """The sweep's exit code: the largest of the cells' exit codes (``qbench sweep --help``
    says it: ``cli.sweep.EXIT_RULE``)."""
    return max((c.exit_code for c in cells), default=EXIT_PASS)


def summary_table(cells, fmt):
    """One row per cell: model, target, verdict, top-1 agreement %, accuracy drop (points),
    SQNR (dB), INT8 and FP32 median latency (ms), INT8 speed-up, report folder or error."""
    heads = [
        "model",
        "target",
        "verdict",
        "top-1 agreement",
        "accuracy drop (points)",
        "SQNR (dB)",
        "INT8 median (ms)",
        "FP32 median (ms)",
        "INT8 speed-up",
        "device",
        "wall (s)",
        "report folder or error",
    ]
    rows = [
        [
            c.model,
            c.target,
            _verdict_words(c),
            _num(None if c.top1_agreement is None else 100 * c.top1_agreement, ".1f", " %"),
            _num(c.accuracy_drop_points, ".2f"),
            _num(c.sqnr_db, ".1f"),
            _num(c.int8_median_ms, ".3f"),
            _num(c.fp32_median_ms, ".3f"),
            _num(c.int8_speedup, ".2f", "x"),
            c.device or "-",
            _num(c.wall_s, ".1f"),
            c.report_dir or c.error,
        ]
        for c in cells
    ]
    return tabulate(rows, heads, tablefmt=fmt, disable_numparse=True)


def _verdict_words(cell):
    """``PASS``, ``FAIL``, ``ERROR``, or ``PASS, NOT SHOWN`` (never a plain PASS then)."""
    return "PASS, NOT SHOWN" if cell.verdict == "PASS" and cell.shown is False else cell.verdict


def _num(value, spec, suffix=""):
    return "-" if value is None else f"{value:{spec}}{suffix}"


RUNNING, COMPLETE, INTERRUPTED = "running", "complete", "interrupted"


def write_summary(
    cells, models, target_texts, root, state=COMPLETE, timing=None, total=None, running=None
):
    """Write ``summary.md`` and ``summary.json`` (``summary_files``) into a new
    ``<root>/<timestamp>-sweep/`` folder at once; return the folder (a ``Path``)."""
    files = summary_files(cells, models, target_texts, state, timing, total, running)
    out = Path(root) / f"{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-sweep"
    return write_folder(out, files)


def rewrite_summary(folder, files):
    """Replace the summary files in ``folder``, each atomically; return ``folder``."""
    for name, text in files.items():
        write_text(folder / name, text)
    return folder


def summary_files(cells, models, target_texts, state, timing=None, total=None, running=None):
    """{``summary.json``: text, ``summary.md``: text} of the finished ``cells``.

    ``summary.json``: ``schema_version``, ``created`` (UTC, ISO 8601), ``qbench``,
    ``models`` and ``targets`` (the grid), ``state`` (``complete``; ``interrupted``: stopped
    by Ctrl-C or SIGTERM in ``running_cell``, null where cells ran in child processes;
    ``running``: written when a cell started, so a sweep that is no longer running died in
    ``running_cell``), ``complete`` (``state`` is ``complete``),
    ``cells_total``, ``running_cell`` ("MODEL on TARGET" or null), ``exit_code`` (null while
    running; 130 when interrupted), ``parallel`` (cells run at once) and ``wall_time_s``
    (the sweep's so far, s), and ``cells`` (the ``Cell`` fields, one dict per finished cell).
    """
    timing = timing or {"parallel": 1, "wall_time_s": None}
    total = len(models) * len(target_texts) if total is None else total
    code = {COMPLETE: exit_code(cells), INTERRUPTED: EXIT_INTERRUPTED}.get(state)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "qbench": __version__,
        "models": list(models),
        "targets": list(target_texts),
        "state": state,
        "complete": state == COMPLETE,
        "cells_total": total,
        "running_cell": running,
        "exit_code": code,
        **timing,
        "cells": [asdict(c) for c in cells],
    }
    markdown = (
        f"# qbench sweep: {len(models)} models x {len(target_texts)} targets"
        f"{_state_words(state, len(cells), total, running)}\n\n"
        + summary_table(cells, "github")
        + f"\n\nExit code {'- (still running)' if code is None else code}. "
        + f"{timing['parallel']} cell(s) at once; sweep wall time {timing['wall_time_s']} s. "
        + "Top-1 agreement: INT8 with PyTorch FP32; accuracy drop: PyTorch FP32 top-1 "
        "accuracy minus INT8's; speed-up: TVM FP32 median latency over TVM INT8's.\n"
    )
    return {"summary.json": to_json(doc), "summary.md": markdown}


def _state_words(state, done, total, running):
    if state == COMPLETE:
        return ""
    if state == INTERRUPTED:
        where = f" in cell {running}" if running else ""
        return (
            f" (INCOMPLETE: stopped by Ctrl-C or SIGTERM{where}, {done} of {total} cells finished)"
        )
    now = f"; cell {running} had started" if running else ""
    return (
        f" (INCOMPLETE: {done} of {total} cells finished{now}. This summary is rewritten as "
        "each cell starts and ends: if the sweep is no longer running, its process died there, "
        "e.g. of SIGILL or SIGSEGV in native code)"
    )
