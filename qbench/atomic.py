"""Atomic file writes: a reader never sees a half-written report or cache entry."""

import json
import os
import tempfile
from pathlib import Path


def write_text(path, text):
    """Write ``text`` to ``path`` atomically (temporary file in the same folder, then rename).

    Args:
        path: destination file; its parent folders are created.
        text: the full contents, str.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path, obj):
    """Write ``obj`` as indented JSON to ``path`` atomically."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n")
