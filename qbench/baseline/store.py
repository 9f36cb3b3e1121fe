"""The baseline store: accepted reports kept as versioned JSON in a folder.

Layout (one file per saved run, written atomically, never rewritten or deleted)::

    STORE/<machine>/<model>/<target>/<created>-<digest12>.json

``<machine>`` is the CPU model name, architecture and thread count; ``<target>`` the target
kind and a short hash of the target dict; ``<digest12>`` the first 12 hex digits of the run's
definition digest. Each file holds ``{"store_version", "key", "saved", "source", "report"}``.
"""

import datetime as dt
import hashlib
import json
import re
from pathlib import Path

from ..atomic import to_json, write_text
from ..errors import UserError
from ..results import RunResult

STORE_VERSION = 1
MIN_SCHEMA = 2  # reports before schema 2 lack the definition and per-image outcomes


def load_report(path):
    """Read a ``report.json`` (or the report folder holding one) and check it can be
    compared.

    Args:
        path: a report.json file, or its folder.
    Returns:
        the report, a ``results.RunResult``.
    Raises:
        UserError: the file is missing, unreadable, not JSON, or a report without a
            ``definition`` (schema_version < 2) or another field; the message names the file.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    report = _read_json(path, "report")
    check_report(report, path, "report")
    return _typed(report, path, "report")


def _typed(report, path, what):
    """The checked report dict of the file ``path`` as a ``RunResult``.

    Raises:
        UserError: a field is missing (named, with the file)."""
    try:
        return RunResult.from_json(report)
    except UserError as e:
        raise UserError(f"{path}: damaged {what} ({e})") from None


REQUIRED = (  # fields every compared report must have, as dotted key paths
    "created",
    "environment.cpu",
    "environment.machine",
    "environment.threads",
    "environment.target.kind",
    "definition.digest",
    "definition.model",
)
RUNNER_KEYS = ("latency", "latency_samples_ms", "metrics")


def check_report(report, path, what):
    """Check that ``report`` (from the file ``path``) has what compare, save and history read.

    Raises:
        UserError: not a schema >= 2 report, or a field is missing; names ``path``.
    """
    if not isinstance(report, dict) or "results" not in report:
        raise UserError(f"{path}: damaged {what} (no results); valid: a qbench report.json")
    if not isinstance(report.get("schema_version"), int) or report["schema_version"] < MIN_SCHEMA:
        raise UserError(
            f"{path}: report schema_version {report.get('schema_version')} has no run "
            f"definition; valid: schema_version >= {MIN_SCHEMA} (rerun with this qbench)"
        )
    missing = [name for name in REQUIRED if _get(report, name.split(".")) is None]
    for runner in ("pytorch_fp32", "tvm_fp32", "tvm_int8"):
        entry = report["results"].get(runner) or {}
        missing += [f"results.{runner}.{k}" for k in RUNNER_KEYS if k not in entry]
    if missing:
        raise UserError(f"{path}: damaged {what} (missing {', '.join(missing)})")


def _get(obj, keys):
    for k in keys:
        obj = obj.get(k) if isinstance(obj, dict) else None
    return obj


def load_entry(path):
    """Read a stored baseline file; returns its dict (``report`` inside, a
    ``results.RunResult``).

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
        raise UserError(f"{path}: damaged {what} file (not JSON: {e}); left unchanged") from None


def key(report):
    """The store key of a report: {``machine``, ``model``, ``target``, ``digest``}, each a
    file-name-safe string."""
    env = report.environment
    target = json.dumps(env["target"], sort_keys=True)
    target_hash = hashlib.sha256(target.encode()).hexdigest()[:8]
    return {
        "machine": _slug(f"{env['cpu']}-{env['machine']}-{env['threads']}t"),
        "model": _slug(report.definition["model"]),
        "target": f"{_slug(env['target']['kind'])}-{target_hash}",
        "digest": report.definition["digest"],
    }


def _slug(text):
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", str(text)).strip("_") or "_"


def save(report, store, source=None):
    """Store ``report`` as a baseline.

    The file name comes from the report's ``created`` time and definition digest, so a
    report saved before is not written again (nor is a damaged file of that name replaced).

    Returns:
        (the file, a ``Path``; True when written now, False when it was already there).
    """
    k = key(report)
    created = dt.datetime.fromisoformat(report.created).strftime("%Y%m%dT%H%M%S")
    folder = Path(store) / k["machine"] / k["model"] / k["target"]
    path = folder / f"{created}-{k['digest'][:12]}.json"
    if path.exists():
        return path, False
    entry = {
        "store_version": STORE_VERSION,
        "key": k,
        "saved": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "source": str(source) if source else None,
        "report": report.to_json(),
    }
    write_text(path, to_json(entry))
    return path, True


def runs(store, machine=None, model=None, target=None):
    """Paths of the stored baseline files matching the given key parts (None: any), oldest
    first (by the report's ``created`` time in the file name)."""
    parts = [p or "*" for p in (machine, model, target)]
    found = Path(store).glob("/".join(parts) + "/*.json")
    return sorted(found, key=lambda p: (p.name, str(p)))


def newest(store, report):
    """The newest stored baseline file for ``report``'s machine, model and target (whatever
    its definition digest), or None."""
    k = key(report)
    found = runs(store, k["machine"], k["model"], k["target"])
    return found[-1] if found else None
