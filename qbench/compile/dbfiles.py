"""Reading MetaSchedule JSON database folders line by line, so that damage costs only the
damaged lines.

A folder holds ``database_workload.json`` (one workload a line: structural hash, module)
and ``database_tuning_record.json`` (one record a line: workload line index, trace, run
times), both appended as tuning goes, and qbench's ``qbench_rejected.json`` and
``qbench_checked.json`` (``recordcheck``: the records checked, the workloads rejected). TVM 0.27's
``JSONDatabase`` refuses a whole folder on one bad line (an internal "Unexpected end of
string" for a line cut mid-write, case C19). Here every line is parsed on its own; a damaged
line is named in a warning and left out, and the files are never rewritten. A damaged
rejection or check list leaves the whole folder out: its records may include ones known to
compute wrong results. Builds apply only records ``recordcheck`` checked: a folder written
by TVM itself, or by a qbench from before the checks, has records nobody ran against the
default schedule, and TVM 0.27's tuned schedules can compute wrong results.
"""

import functools
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import UserError

log = logging.getLogger(__name__)
WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"
REJECTED = "qbench_rejected.json"
CHECKED = "qbench_checked.json"


@dataclass
class FolderContents:
    """What a database folder holds that could be read.

    Attributes:
        records: (``Workload``, ``TuningRecord``) pairs, in file order.
        rejected: structural-hash keys (strings) of workloads ``recordcheck`` rejected.
        checked: ``record_key`` of each record ``recordcheck`` checked and kept.
        problems: one line per damaged line or file: path, line number, cause.
    """

    records: list = field(default_factory=list)
    rejected: set = field(default_factory=set)
    checked: set = field(default_factory=set)
    problems: list = field(default_factory=list)

    def usable(self):
        """The (``Workload``, ``TuningRecord``) pairs a build may apply: checked, and of a
        workload not rejected."""
        return [
            (w, r)
            for w, r in self.records
            if w.as_json()[0] not in self.rejected and record_key(w, r) in self.checked
        ]

    def unchecked(self):
        """Workloads (not rejected) with records but none checked: kernels whose tuning a
        build leaves out."""
        tuned = {w.as_json()[0] for w, _ in self.records} - self.rejected
        return len(tuned - {w.as_json()[0] for w, _ in self.usable()})


def record_key(workload, record):
    """``qbench_checked.json``'s key of a tuning record (MetaSchedule ``Workload``,
    ``TuningRecord``): the workload's structural hash, ``:``, and 16 hex digits of the
    SHA-256 of the record's trace as JSON."""
    trace = json.dumps(record.trace.as_json(), separators=(",", ":"), default=_plain)
    return f"{workload.as_json()[0]}:{hashlib.sha256(trace.encode()).hexdigest()[:16]}"


def _plain(obj):
    """A TVM immediate (``IntImm``, ``FloatImm``) as its Python value, another object as its
    text, for ``record_key``'s JSON."""
    value = getattr(obj, "value", None)
    return value if isinstance(value, int | float | str) else str(obj)


def read_rejected(folder):
    """The rejection list of ``folder`` (empty when absent).

    Raises:
        ValueError: the file exists but is not a JSON list of strings, or is no file.
    """
    return _read_keys(Path(folder) / REJECTED)


def read_checked(folder):
    """The ``record_key`` strings of the records checked in ``folder`` (empty when absent).

    Raises:
        ValueError: the file exists but is not a JSON list of strings, or is no file.
    """
    return _read_keys(Path(folder) / CHECKED)


def _read_keys(path):
    if _present(path) and not path.is_file():
        raise ValueError("not a file (a folder, or a link to nothing)")
    if not path.is_file():
        return set()
    keys = json.loads(path.read_text())
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ValueError("not a JSON list of keys")
    return set(keys)


def read_folder(folder):
    """Parse a database folder line by line (see the module docstring).

    Returns:
        ``FolderContents``; warnings name each damaged line.
    """
    folder = Path(folder)
    out = FolderContents()
    for attr, name, read in (
        ("rejected", REJECTED, read_rejected),
        ("checked", CHECKED, read_checked),
    ):
        try:
            setattr(out, attr, read(folder))
        except (OSError, ValueError, RecursionError) as e:  # nested too deep for json
            out.problems.append(
                f"{folder / name}: unreadable ({e}); every record of the folder is ignored, "
                "since which records were checked and which compute wrong results is lost"
            )
            return out
    workloads = [w for _, w in _read_lines(folder / WORKLOADS, _workload, out.problems)]
    for line, obj in _read_lines(folder / RECORDS, lambda obj: obj, out.problems):
        if obj is None:
            continue
        try:
            index, record_json = obj
            workload = workloads[index] if 0 <= index < len(workloads) else None
            if workload is None:
                raise ValueError(f"workload line {index + 1} is missing or damaged")
            out.records.append((workload, _record(record_json, workload)))
        except Exception as e:  # noqa: BLE001 - TVM's parsers raise many kinds
            out.problems.append(f"{folder / RECORDS}: line {line}: {_cause(e)}")
    return out


def damage(folder):
    """(records of ``folder`` a build leaves out as damaged, the first problem in words or
    None): readable record lines (``readable_records``) that ``read_folder`` could not use,
    a damaged line, a record whose workload line is missing or does not take its trace, or
    every record when the rejection or check list is damaged. Read once per change of the files
    (shared with ``merged_database``)."""
    folder = Path(folder)
    if not readable_records(folder) and not any(map(_unreadable, _files(folder))):
        return 0, None
    contents = _contents(str(folder), _stamp(folder))
    left_out = readable_records(folder) - len(contents.records)
    return max(left_out, 0), (contents.problems[0] if contents.problems else None)


def unchecked(folder):
    """Kernels (workloads) of ``folder`` whose tuning a build leaves out because none of
    their records was checked (``FolderContents.unchecked``); 0 for an empty folder."""
    folder = Path(folder)
    if not readable_records(folder):
        return 0
    return _contents(str(folder), _stamp(folder)).unchecked()


def unchecked_words(count):
    """Why ``count`` kernels' records are left out, and what checks them."""
    return (
        f"the records of {count} tuned kernel(s) of this database (of any model) are left "
        "out: they were never checked against the default schedule (a database written by "
        "TVM itself or by a qbench from before the record checks; TVM 0.27's tuned "
        "schedules can compute wrong results). `qbench tune` of the model, with the same "
        "--target and --tuning-db, checks them"
    )


def readable_records(folder):
    """Number of lines of ``folder``'s records file that parse as a JSON [workload line,
    record] pair (0 when absent), without TVM's parsers (a few milliseconds where
    ``read_folder`` takes seconds): a line cut mid-write (case C19) is not counted."""
    lines = _read_lines(Path(folder) / RECORDS, _pair, [])
    return sum(1 for _, pair in lines if pair is not None)


def _pair(obj):
    """``obj`` when it is a [non-negative int, anything] list; else raises ValueError."""
    if not (isinstance(obj, list) and len(obj) == 2 and isinstance(obj[0], int) and obj[0] >= 0):
        raise ValueError("not a [workload line, record] pair")
    return obj


def check_undamaged(folder):
    """Refuse to tune into a damaged database: MetaSchedule appends to its files and reads
    them whole.

    Raises:
        UserError: names the damaged file and line.
    """
    problems = read_folder(folder).problems
    if problems:
        raise UserError(
            f"--tuning-db: the database is damaged: {problems[0]}; move the folder {folder} "
            "away or remove the damaged lines (qbench never rewrites a database), then tune "
            "again"
        )


def _read_lines(path, parse, problems):
    """(line number, ``parse(json)``) per non-empty line of ``path``; a damaged line gives
    ``None`` (so workloads keep their line index) and a problem, as does a ``path`` that is
    there but no file (a folder)."""
    if not path.is_file():
        if _present(path):
            problems.append(
                f"{path}: not a file (a folder, or a link to nothing), so no record of the "
                "folder is read"
            )
        return []
    parsed = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, text in enumerate(f, start=1):
                if not text.strip():
                    continue
                try:
                    obj = json.loads(text)
                    parsed.append((number, parse(obj)))
                except Exception as e:  # noqa: BLE001 - JSON and TVM's parsers raise many kinds
                    problems.append(f"{path}: line {number}: {_cause(e)}")
                    parsed.append((number, None))
    except OSError as e:
        problems.append(f"{path}: unreadable ({e}), so no record of the folder is read")
        return []
    return parsed


def _present(path):
    """Whether ``path`` names anything, a link to nothing included."""
    return path.exists() or path.is_symlink()


def _unreadable(path):
    """Whether ``path`` is there but not a file this process can read."""
    return _present(path) and not (path.is_file() and os.access(path, os.R_OK))


def _workload(obj):
    from tvm.s_tir import meta_schedule as ms

    return ms.database.Workload.from_json(obj)


def _record(obj, workload):
    from tvm.s_tir import meta_schedule as ms

    return ms.database.TuningRecord.from_json(obj, workload)


def _cause(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[-1] if text else ''}"


def merged_database(folders):
    """One in-memory MetaSchedule database over ``folders`` (the best record of each
    workload wins) of their usable records (``FolderContents.usable``: checked, not rejected,
    not damaged). A damaged folder, or one with unchecked records, is named in one warning,
    once per change of its files."""
    stamps = tuple((str(f), *_stamp(Path(f))) for f in folders)
    return _merged(stamps)


def _files(folder):
    return (folder / WORKLOADS, folder / RECORDS, folder / REJECTED, folder / CHECKED)


def _stamp(folder):
    return tuple(
        (p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else _present(p)
        for p in _files(folder)
    )


@functools.lru_cache(maxsize=8)
def _contents(folder, stamp):
    """``read_folder(folder)`` for the files as ``stamp`` (``_stamp``) found them."""
    return read_folder(folder)


@functools.lru_cache(maxsize=4)
def _merged(stamps):
    from tvm.s_tir import meta_schedule as ms

    merged = ms.database.MemoryDatabase()
    for folder, *stamp in stamps:
        contents = _contents(folder, tuple(stamp))
        if contents.problems:
            log.warning(
                "tuning database %s: %d damaged line(s) or file(s) left out, the files are "
                "not changed; first: %s",
                folder,
                len(contents.problems),
                contents.problems[0],
            )
        unchecked_kernels = contents.unchecked()
        if unchecked_kernels:
            log.warning("tuning database %s: %s", folder, unchecked_words(unchecked_kernels))
        for workload, rec in contents.usable():
            committed = merged.commit_workload(workload.mod)
            merged.commit_tuning_record(
                ms.database.TuningRecord(
                    rec.trace, committed, rec.run_secs, rec.target, rec.args_info
                )
            )
    return merged
