"""The baseline store: accepted reports kept as versioned JSON in a folder.

Layout (one file per saved run, written atomically, never rewritten; ``migrate`` moves files
of an older layout)::

    STORE/<machine>/<model>/<target>/<created>-<digest12>.json
    STORE/qbench-store-layout    the newest layout written here (``layout.MARKER``)

``<machine>`` is the CPU model name, architecture and thread count; ``<model>`` the model as
reports name it (``zoo.model_id``: a model file by its base name); ``<target>`` the target
kind and a short hash of the target dict; ``<digest12>`` the first 12 hex digits of the run's
definition digest. Each file holds ``{"store_version", "layout", "key", "saved", "source",
"accept_fail", "report"}`` (``store_version``: the file format, 1; ``layout``: the layout it
was written with, ``layout.LAYOUT`` by this qbench, absent in older files; ``accept_fail``:
stored with ``--accept-fail``, its verdict not PASS). Only files named so (``NAME``) are
read, and only in the key folders asked for, which include the folders older layouts gave
the same model (``model_runs``; ``layout`` lists the layouts)."""

import datetime as dt
import hashlib
import json
import re
from pathlib import Path

from ..core.atomic import to_json, write_new, write_text
from ..core.errors import UserError
from ..model.zoo import model_id
from ..report.result import RunResult
from . import layout
from .layout import LAYOUT, STORE_VERSION
from .validate import check_report

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
    """Read a stored baseline file of any layout this qbench reads (``layout.READS``);
    returns its dict (``report`` inside, a ``result.RunResult``; ``layout`` absent in a
    file of layout 1).

    Raises:
        UserError: missing, unreadable or damaged, or of a newer layout; the message names
            the file, which is left as it is.
    """
    entry = _read_json(Path(path), "baseline")
    layout.file_layout(entry, path)
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
    file-name-safe string; the model as reports name it now (``zoo.model_id``), also for
    a report of an older qbench that names a model file by its full path."""
    env = report.environment
    target = json.dumps(env["target"], sort_keys=True)
    target_hash = hashlib.sha256(target.encode()).hexdigest()[:8]
    return {
        "machine": slug(f"{env['cpu']}-{env['machine']}-{env['threads']}t"),
        "model": slug(model_id(str(report.definition["model"]))),
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
    report saved before is not written again, also when an older qbench filed it in its
    layout's folder (``model_runs``); a damaged file of that name is named (exit 2), not
    replaced, and so is a file holding another run of that second (``_same_run``), also
    one that another save wrote since this one looked (``atomic.write_new``).

    Returns:
        (the file, a ``Path``; True when written now, False when it was already there).
    Raises:
        UserError: the verdict is not PASS and not ``accept_fail``; ``store`` holds a newer
            layout (``layout.check_store``); the file of its name is damaged or holds
            another run.
        OSError: the file cannot be written (e.g. ``store`` is a file).
    """
    layout.check_store(store)
    verdict = report.signoff.verdict
    if verdict != "PASS" and not accept_fail:
        raise UserError(
            f"baseline save {source}: the report's sign-off verdict is {verdict}; a baseline is an "
            "accepted run (PASS); --accept-fail stores it anyway"
        )
    k = key(report)
    folder = Path(store) / k["machine"] / k["model"] / k["target"]
    path = folder / f"{stamp(report.created)}-{k['digest'][:12]}.json"
    for stored in [path, *model_runs(store, report.definition["model"], k["machine"], k["target"])]:
        if stored.name == path.name and stored.exists():  # an older layout's folder too
            return _same_run(stored, report, source), False
    entry = {
        "store_version": STORE_VERSION,
        "layout": LAYOUT,
        "key": k,
        "saved": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "source": str(source) if source else None,
        "accept_fail": verdict != "PASS",
        "report": report.to_json(),
    }
    try:
        write_new(path, to_json(entry))
    except FileExistsError:  # another save wrote that name since it was looked for
        return _same_run(path, report, source), False
    layout.mark(store)
    return path, True


def _same_run(stored, report, source):
    """``stored``, the file of ``report``'s name, when it holds ``report`` itself.

    Raises:
        UserError: it holds another run of the same definition created in the same second
            (two runs started at once): saving would drop this one without a word.
    """
    if load_entry(stored)["report"] == report:
        return stored
    raise UserError(
        f"baseline save {source}: {stored} holds another run of the same definition created "
        f"in the same second ({report.created}); rerun one of them to store it"
    )


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


def model_runs(store, model, machine="*", target="*"):
    """Paths of the stored runs of ``model`` (as given to ``qbench run`` or as a report's
    ``definition.model`` names it; one model by ``zoo.model_id``) in the machine and target
    folders that the glob patterns ``machine`` and ``target`` match, oldest first, whatever
    the layout (``layout``): the model's folder, and layout-1 folders named by a full path to
    a file of that base name (``*_<model>``), taken when their runs are of this model (the
    definition's model by ``zoo.model_id``; another model's folder whose name merely ends so
    is left out). A run found in both places (a ``migrate`` stopped between its write and
    its delete) is listed once, from the model's folder.

    Raises:
        UserError: the store holds a newer layout (``layout.check_store``).
    """
    layout.check_store(store)
    name = model_id(str(model))
    folder = slug(name)
    found = runs(store, machine, folder, target)
    seen = {_place(p) for p in found}
    legacy = {}  # a full-path model folder: holds runs of this model
    for path in runs(store, machine, f"*_{folder}", target):
        here = path.parent.parent
        if here not in legacy:
            legacy[here] = _holds(here, name)
        if legacy[here] and _place(path) not in seen:
            found.append(path)
            seen.add(_place(path))
    return sorted(found, key=lambda p: (p.name, str(p)))


def _place(path):
    """A stored file's machine folder, target folder and name: one run in any layout."""
    return path.parts[-4], path.parts[-2], path.name


def _holds(folder, name):
    """Whether the model folder ``folder`` holds runs of the model ``name``: the first of
    its files that can be read names it (by ``zoo.model_id``)."""
    for path in sorted(folder.glob("*/*.json")):
        model = _model_of(path)
        if model is not None:
            return model_id(model) == name
    return False


def _model_of(path):
    """A stored file's ``report.definition.model`` (a str), None when unreadable."""
    try:
        model = json.loads(path.read_text(encoding="utf-8"))["report"]["definition"]["model"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None
    return model if isinstance(model, str) else None


def _digest12(path):
    """A stored run's definition digest (12 hex digits) with its model named as now
    (``layout.normal``), read from the file: a run an older qbench stored under a model
    file's full path has that path's digest in its file name (``migrate`` keeps the name);
    the file name's digest when the file cannot be read (``load_entry`` then names it)."""
    if NAME.fullmatch(path.name) is None:
        return None
    try:
        definition = json.loads(path.read_text(encoding="utf-8"))["report"]["definition"]
        if model_id(str(definition["model"])) == definition["model"]:
            return path.stem[-12:]
        return layout.normal(definition)["digest"][:12]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return path.stem[-12:]


def choose(store, report):
    """The stored baseline to compare ``report`` with, among its machine's runs of its
    model created before it (never the report itself nor a later run; ``model_runs``:
    in every layout's folders): those on its target (the same target dict) first, else
    those on another target dict of its target kind (an older qbench recorded the target
    otherwise, e.g. without the host's AMX ``mattr``; the comparison names the fields that
    differ). Among them the newest with the report's definition digest (a run stored with a
    model file's full path counts by its digest under the base name, ``layout.normal``);
    when none has it, the newest of any digest (the comparison then says "not comparable"
    and names the fields that differ).

    Returns:
        (the file, a ``Path``, or None when no run is stored before the report;
        why it was chosen, in words, or None).
    Raises:
        UserError: the store holds a newer layout (``layout.check_store``).
    """
    k = key(report)
    limit = stamp(report.created)
    kind = k["target"].rsplit("-", 1)[0]
    found = model_runs(store, report.definition["model"], k["machine"], f"{kind}-*")
    before = [p for p in found if p.name < limit]
    if not before:
        return None, None
    on_target = [p for p in before if p.parent.name == k["target"]]
    where = ""
    if not on_target:
        where = (
            f" (none on this report's target dict {k['target']}; on target {kind} with "
            f"another target dict)"
        )
    pool = on_target or before
    short = layout.normal(report.definition)["digest"][:12]
    same = [p for p in pool if _digest12(p) == short]
    if not same:
        return pool[-1], (
            f"no run stored before this report has its definition digest {short}; the newest "
            f"stored before it{where}, digest {_digest12(pool[-1])}"
        )
    skipped = pool[pool.index(same[-1]) + 1 :]
    why = f"the newest stored before this report with its definition digest {short}{where}"
    if skipped:
        why += f"; {len(skipped)} newer with another definition skipped"
    return same[-1], why


def migrate(store, dry_run=False):
    """Move every stored file that is not where this qbench files it (layout 1's full-path
    model folders, ``layout``) to its model's folder, as layout ``LAYOUT``: the same file
    name, file format and report, ``key.model`` renamed, ``layout`` set, and ``migrated``
    saying where it came from, its old layout and when. Each move writes the new file
    atomically, then deletes the old one and the folders that leaves empty: a move stopped
    between the two leaves the run in both places, which readers list once
    (``model_runs``) and a rerun finishes. Files in place are not touched, so a second run
    moves nothing.

    Returns:
        a list of (old path, new path, what happened: ``moved``, ``duplicate removed``
        (the same report was already in place), or ``left: WHY`` (a different report of
        that name is in place, or the file is damaged: left unchanged)), in file order;
        with ``dry_run`` what would happen, nothing written.
    Raises:
        UserError: the store or one of its files is of a newer layout (``layout.Newer``),
            checked before anything moves.
    """
    layout.check_store(store)
    plan = []
    for path in runs(store):
        try:
            entry = _read_json(path, "baseline")
            layout.file_layout(entry, path)
            model = _model_of(path)
            if model is None:
                raise UserError(f"{path}: damaged baseline file (no report.definition.model)")
        except layout.Newer:
            raise
        except UserError as e:
            plan.append((path, None, f"left: {e}", None))
            continue
        folder = slug(model_id(model))
        if path.parent.parent.name != folder:
            new = path.parent.parent.parent / folder / path.parent.name / path.name
            plan.append((path, new, None, entry))
    done = []
    for old, new, left, entry in plan:
        what = left or _move(store, old, new, entry, dry_run)
        done.append((old, new, what))
    if not dry_run and any(what == "moved" for _, _, what in done):
        layout.mark(store)
    return done


def _move(store, old, new, entry, dry_run):
    """Move one stored file (see ``migrate``); returns what happened, in words."""
    if new.exists():
        try:
            same = _read_json(new, "baseline").get("report") == entry["report"]
        except (UserError, AttributeError):
            same = False
        if not same:
            return f"left: a different run of that name is stored at {new}"
        if not dry_run:
            _delete(old)
        return "duplicate removed"
    if not dry_run:
        moved = {
            **entry,
            "layout": LAYOUT,
            "key": {**(entry.get("key") or {}), "model": new.parent.parent.name},
            "migrated": {
                "from": old.relative_to(store).as_posix(),
                "layout": entry.get("layout", 1),
                "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            },
        }
        write_text(new, to_json(moved))
        _delete(old)
    return "moved"


def _delete(path):
    """Delete a stored file, then its target and model folders when that leaves them
    empty."""
    path.unlink()
    for folder in (path.parent, path.parent.parent):
        try:
            folder.rmdir()
        except OSError:
            break
