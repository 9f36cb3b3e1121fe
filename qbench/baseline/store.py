"""The baseline store: accepted reports kept as versioned JSON in a folder.

Layout (one file per saved run, written atomically, never rewritten or deleted)::

    STORE/<machine>/<model>/<target>/<created>-<digest12>.json

``<machine>`` is the CPU model name, architecture and thread count; ``<target>`` the target
kind and a short hash of the target dict; ``<digest12>`` the first 12 hex digits of the run's
definition digest. Each file holds ``{"store_version", "key", "saved", "source",
"accept_fail", "report"}`` (``accept_fail``: stored with ``--accept-fail``, its verdict not
PASS). Only files named so (``NAME``) are read, and only in the key folders asked for.
"""

import datetime as dt
import hashlib
import json
import re
from pathlib import Path

from ..core.atomic import to_json, write_text
from ..core.errors import UserError
from ..report.result import RunResult
from .validate import check_report

STORE_VERSION = 1
STAMP = "%Y%m%dT%H%M%S"  # the file name's created time, UTC
NAME = re.compile(r"\d{8}T\d{6}-[0-9a-f]{12}\.json")  # the store's file names


def load_report(path):
    """Read a ``report.json`` (or the report folder holding one) and check it can be
    compared.

    Args:
        path: a report.json file, or its folder.
    Returns:
        the report, a ``result.RunResult``.
    Raises:
        UserError: the file is missing, unreadable, not JSON, or not a report that
            ``validate.check_report`` accepts (schema, a field missing, of the wrong type or
            out of range); the message names the file and the field.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    report = _read_json(path, "report")
    check_report(report, path, "report")
    return _typed(report, path, "report")


def load_baseline(path):
    """Read ``--baseline``: a report.json (or its folder) or a stored baseline file (the
    ``{store_version, key, report}`` file that ``save`` writes).

    Returns:
        the baseline report, a ``result.RunResult``.
    Raises:
        UserError: as ``load_report`` and ``load_entry``.
    """
    path = Path(path)
    if path.is_file() and _is_entry(_read_json(path, "baseline")):
        return load_entry(path)["report"]
    return load_report(path)


def _is_entry(data):
    return isinstance(data, dict) and "store_version" in data and "results" not in data


def _typed(report, path, what):
    """The checked report dict of the file ``path`` as a ``RunResult``.

    Raises:
        UserError: a field is missing (named, with the file)."""
    try:
        return RunResult.from_json(report)
    except UserError as e:
        raise UserError(f"{path}: damaged {what} ({e})") from None


def load_entry(path):
    """Read a stored baseline file; returns its dict (``report`` inside, a
    ``result.RunResult``).

    Raises:
        UserError: missing, unreadable or damaged; the message names the file, which is left
            as it is.
    """
    entry = _read_json(Path(path), "baseline")
    if not isinstance(entry, dict) or entry.get("store_version") != STORE_VERSION:
        version = entry.get("store_version") if isinstance(entry, dict) else None
        raise UserError(
            f"{path}: damaged baseline file (store_version {version}; valid: {STORE_VERSION}); "
            "left unchanged"
        )
    check_report(entry.get("report"), path, "baseline file")
    return entry | {"report": _typed(entry["report"], path, "baseline file")}


def _read_json(path, what):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what} file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read the {what} file ({e})") from None
    except json.JSONDecodeError as e:
        if path.suffix.lower() in (".md", ".html", ".htm"):
            raise UserError(
                f"{path}: the {path.suffix} page of a report, for people; pass its "
                f"report.json ({path.with_name('report.json')}) or its folder "
                f"({path.parent})"
            ) from None
        raise UserError(f"{path}: damaged {what} file (not JSON: {e}); left unchanged") from None


def key(report):
    """The store key of a report: {``machine``, ``model``, ``target``, ``digest``}, each a
    file-name-safe string."""
    env = report.environment
    target = json.dumps(env["target"], sort_keys=True)
    target_hash = hashlib.sha256(target.encode()).hexdigest()[:8]
    return {
        "machine": slug(f"{env['cpu']}-{env['machine']}-{env['threads']}t"),
        "model": slug(report.definition["model"]),
        "target": f"{slug(env['target']['kind'])}-{target_hash}",
        "digest": report.definition["digest"],
    }


def slug(text):
    """``text`` as a file-name-safe string (other characters become ``_``)."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", str(text)).strip("_") or "_"


def save(report, store, source=None, accept_fail=False):
    """Store ``report`` as a baseline: an accepted run, so its sign-off must be PASS unless
    ``accept_fail`` (then recorded as ``"accept_fail": true`` in the file).

    The file name comes from the report's ``created`` time and definition digest, so a
    report saved before is not written again (nor is a damaged file of that name replaced).

    Returns:
        (the file, a ``Path``; True when written now, False when it was already there).
    Raises:
        UserError: the verdict is not PASS and not ``accept_fail``.
        OSError: the file cannot be written (e.g. ``store`` is a file).
    """
    verdict = report.signoff.verdict
    if verdict != "PASS" and not accept_fail:
        raise UserError(
            f"baseline save {source}: the report's sign-off verdict is {verdict}; a baseline is an "
            "accepted run (PASS); --accept-fail stores it anyway"
        )
    k = key(report)
    folder = Path(store) / k["machine"] / k["model"] / k["target"]
    path = folder / f"{stamp(report.created)}-{k['digest'][:12]}.json"
    if path.exists():
        return path, False
    entry = {
        "store_version": STORE_VERSION,
        "key": k,
        "saved": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "source": str(source) if source else None,
        "accept_fail": verdict != "PASS",
        "report": report.to_json(),
    }
    write_text(path, to_json(entry))
    return path, True


def stamp(created):
    """A report's ``created`` ISO time as the store's file-name stamp (``STAMP``, in UTC
    when the time has a zone)."""
    time = dt.datetime.fromisoformat(created)
    if time.tzinfo is not None:
        time = time.astimezone(dt.timezone.utc)
    return time.strftime(STAMP)


def runs(store, machine="*", model="*", target="*"):
    """Paths of the stored baseline files in the key folders that the glob patterns
    ``machine``, ``model`` and ``target`` match, oldest first (by the created stamp in the
    file name); only files named as ``save`` names them (``NAME``), so a stray file in a
    key folder is ignored and other keys' folders are never read."""
    found = Path(store).glob(f"{machine}/{model}/{target}/*.json")
    return sorted((p for p in found if NAME.fullmatch(p.name)), key=lambda p: (p.name, str(p)))


def choose(store, report):
    """The stored baseline to compare ``report`` with, among its machine's, model's and
    target's runs created before it (never the report itself nor a later run): the newest
    with the report's definition digest; when none has it, the newest of any digest (the
    comparison then says "not comparable" and names the fields that differ).

    Returns:
        (the file, a ``Path``, or None when no run is stored before the report;
        why it was chosen, in words, or None).
    """
    k = key(report)
    limit = stamp(report.created)
    before = [p for p in runs(store, k["machine"], k["model"], k["target"]) if p.name < limit]
    if not before:
        return None, None
    short = k["digest"][:12]
    same = [p for p in before if p.stem.endswith(f"-{short}")]
    if not same:
        return before[-1], (
            f"no run stored before this report has its definition digest {short}; the newest "
            f"stored before it, digest {before[-1].stem[-12:]}"
        )
    skipped = before[before.index(same[-1]) + 1 :]
    why = f"the newest stored before this report with its definition digest {short}"
    if skipped:
        why += f"; {len(skipped)} newer with another definition skipped"
    return same[-1], why
