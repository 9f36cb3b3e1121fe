"""Atomic file writes: a reader never sees a half-written report or cache entry."""

import errno
import json
import math
import os
import tempfile
from pathlib import Path


def write_text(path, text):
    """Write ``text`` to ``path`` atomically (temporary file in the same folder, then rename).

    Args:
        path: destination file; its parent folders are created.
        text: the full contents, str.
    """
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path, data):
    """Write ``data`` (bytes, e.g. a PNG) to ``path`` atomically, as ``write_text``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, _umask_mode(0o666))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_new(path, text):
    """Create ``path`` holding ``text`` atomically, never replacing a file already there
    (temporary file in the same folder, then a hard link to ``path``): of two writers racing
    for one name, one wins and the other learns it.

    On a file system without hard links the look for ``path`` and the rename are two steps.

    Raises:
        FileExistsError: ``path`` exists (left as it is).
        OSError: it cannot be written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
        os.chmod(tmp, _umask_mode(0o666))
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise
        except OSError:  # no hard links here: the look and the rename are not one step
            if path.exists():
                raise FileExistsError(errno.EEXIST, "File exists", str(path)) from None
            os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def to_json(obj):
    """Indented JSON text of ``obj``; NaN and infinity, which JSON lacks, become ``null``."""
    return json.dumps(_finite(obj), indent=2, allow_nan=False) + "\n"


def _finite(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def write_json(path, obj):
    """Write ``obj`` as indented JSON to ``path`` atomically."""
    write_text(path, to_json(obj))


def check_writable(folder, flag):
    """Prove a file can be written in ``folder``, or in its nearest existing ancestor when
    it does not exist yet (the writers create it later), creating nothing: a run that stops
    on bad input leaves no empty folder behind.

    Raises:
        UserError: naming ``flag`` (the command-line option) and the reason.
    """
    from .errors import UserError

    existing = Path(folder).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"{flag} {folder}: not a writable folder ({existing} is a file)")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise UserError(f"{flag} {folder}: not a writable folder ({e.strerror})") from e


def _umask_mode(mode):
    current = os.umask(0)
    os.umask(current)
    return mode & ~current


def write_folder(path, files):
    """Create the folder ``path`` holding ``files`` (name -> text, or bytes for a binary
    file such as a PNG) all at once.

    The files are written into a temporary sibling folder that is then renamed, so the
    folder appears complete or not at all. When ``path`` exists, ``-2``, ``-3``, ... is
    appended.

    Returns:
        The folder created, a ``Path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        for name, content in files.items():
            if isinstance(content, bytes):
                (tmp / name).write_bytes(content)
            else:
                (tmp / name).write_text(content, encoding="utf-8")
            (tmp / name).chmod(_umask_mode(0o666))
        tmp.chmod(_umask_mode(0o777))
        final, n = path, 1
        while True:
            try:
                os.rename(tmp, final)
                return final
            except OSError:
                if not final.exists():
                    raise
                n += 1
                final = path.with_name(f"{path.name}-{n}")
    except BaseException:
        for f in tmp.glob("*"):
            f.unlink()
        tmp.rmdir()
        raise
