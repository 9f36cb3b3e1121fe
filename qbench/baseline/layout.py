"""The baseline store's layouts over time, and what this qbench does with each.

Each file this qbench stores says the layout it was written with (its ``layout``; absent:
layout 1, the older layouts), beside the file format (``store_version``, 1 since 059ab2a and
unchanged, so that an older qbench still reads a file written now); a store written by this
qbench also says the newest layout written into it (``MARKER``, at its top). This qbench
reads every layout up to ``LAYOUT`` in place, and refuses a newer layout or file format
(exit 2) rather than read a store it does not know as if it held no run. The layouts, oldest
first:

1. ``STORE/<machine>/<model>/<target>/<created>-<digest12>.json``, no ``layout`` field
   (059ab2a, 2026-11-30, to this change). ``<model>`` is the slugged ``definition.model``,
   which first named a model file by the path given to ``qbench run`` (a full path
   ``/ci/models/m.py:build`` is the folder ``ci_models_m.py_build``: commits up to 77147ae,
   and c90aedb on the 'bfix' branch), then, from 858c348 (merged in 49c3517, 2026-12-01), by
   its base name (``m.py_build``, ``zoo.model_id``), with nothing in the file to say so.
   Files written before c90aedb lack ``accept_fail`` (a FAIL was stored without consent).
2. The same paths, ``"layout": 2`` in each file, ``<model>`` always the slugged
   ``zoo.model_id`` (a report of an older qbench that names its model by a full path is
   filed by its base name too), and ``MARKER`` written by ``baseline save`` and ``baseline
   migrate``, which moves layout-1 files out of full-path folders into this layout
   (``store.migrate``).

A model file given by two paths is one model (``zoo.model_id``), so a definition that names it
by a full path is compared as if named by its base name (``normal``).
"""

from pathlib import Path

from ..core.atomic import write_text
from ..core.errors import UserError
from ..measure.provenance import digest
from ..model.zoo import model_id

STORE_VERSION = 1  # the stored file's format (``store_version``), read by every qbench
LAYOUT = 2  # the layout this qbench writes (each file's ``layout``; absent: 1)
READS = tuple(range(1, LAYOUT + 1))  # the layouts it reads
MARKER = "qbench-store-layout"  # STORE/MARKER: the newest layout written there, a number


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


class Newer(UserError):
    """A store or stored file of a layout (or file format) newer than this qbench reads
    (exit 2)."""


def newer(what, version, where):
    """The error for a ``what`` (``"store layout"`` or ``"store file format"``) ``version``
    this qbench does not know, ``where`` naming the store or file."""
    return Newer(
        f"{where}: written by a newer qbench ({what} {version}); this qbench reads layouts "
        f"{', '.join(map(str, READS))} (file format {STORE_VERSION}): use a qbench that "
        f"knows {what} {version}; left unchanged"
    )


def file_layout(entry, path):
    """The layout of the stored file ``path`` (its parsed JSON ``entry``): its ``layout``,
    1 when absent.

    Raises:
        UserError: a layout or ``store_version`` newer than this qbench reads (``newer``),
            or one that is not a number it knows (a damaged file); both name the file,
            which is left unchanged.
    """
    version = entry.get("store_version") if isinstance(entry, dict) else None
    if _is_int(version) and version > STORE_VERSION:
        raise newer("store file format", version, path)
    if version != STORE_VERSION or not _is_int(version):
        raise UserError(
            f"{path}: damaged baseline file (store_version {version!r}; valid: "
            f"{STORE_VERSION}); left unchanged"
        )
    found = entry.get("layout", 1)
    if _is_int(found) and found > LAYOUT:
        raise newer("store layout", found, path)
    if found not in READS or not _is_int(found):
        valid = ", ".join(map(str, READS))
        raise UserError(
            f"{path}: damaged baseline file (layout {found!r}; valid: {valid}); left unchanged"
        )
    return found


def check_store(store):
    """The newest layout written into the folder ``store`` (its ``MARKER``), None when it
    has no marker (a store of layout 1 only, or no store yet).

    Raises:
        UserError: the marker names a newer layout (``newer``), is damaged or is not a file
            (named).
    """
    path = Path(store) / MARKER
    if path.exists() and not path.is_file():
        raise UserError(
            f"{path}: the store marker is not a file (a folder?); it must hold the store's "
            f"layout number ({', '.join(map(str, READS))}): move it away; left unchanged"
        )
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read the store marker ({e})") from None
    version = int(text) if text.isdigit() else None
    if version is not None and version > LAYOUT:
        raise newer("store layout", version, f"--store {store} ({MARKER})")
    if version not in READS:
        raise UserError(
            f"{path}: damaged store marker ({text[:40]!r}; expected a layout number, one of "
            f"{', '.join(map(str, READS))}); left unchanged"
        )
    return version


def mark(store):
    """Record in ``store`` that layout ``LAYOUT`` is written there (``MARKER``, atomically;
    never lowered).

    Raises:
        UserError: as ``check_store``.
        OSError: the marker cannot be written.
    """
    if check_store(store) != LAYOUT:
        write_text(Path(store) / MARKER, f"{LAYOUT}\n")


def normal(definition):
    """``definition`` (a report's dict) with its model named as reports name it now
    (``zoo.model_id``: a model file by its base name) and its digest recomputed for that
    name, so that a run stored with a full path compares with today's run of the same file.
    Returned unchanged when the name already is today's, or when its digest is not the
    digest of its own fields (nothing is repaired)."""
    name = model_id(str(definition["model"]))
    fields = {k: v for k, v in definition.items() if k != "digest"}
    if name == definition["model"] or digest(fields) != definition["digest"]:
        return definition
    fields["model"] = name
    return {**fields, "digest": digest(fields)}
