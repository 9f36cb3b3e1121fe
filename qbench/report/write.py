"""Writing a run's report folder: ``report.json``, ``report.md``, ``report.html`` and
attachments, all at once (atomically) under ``reports/<timestamp>-<model>-<target>/``."""

import datetime as dt
import re
from pathlib import Path

from ..core.atomic import to_json, write_folder
from .markdown import render_markdown


def write_reports(report, root="reports", attachments=None):
    """Write ``report.json`` (``report.to_json()``; ``report`` is a ``result.RunResult``),
    ``report.md``, ``report.html`` (``html.render_html``) and the
    ``attachments`` ({file name: bytes}, e.g. the diagnosis' PNGs, which report.html
    embeds) into a new timestamped folder, all at once; return the folder."""
    from .html import render_html

    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(report.model.name).name)
    out = Path(root) / f"{stamp}-{name}-{report.environment['target']['kind']}"
    files = {"report.json": to_json(report.to_json()), "report.md": render_markdown(report)}
    attachments = attachments or {}
    html = render_html(report, attachments)
    return write_folder(out, files | attachments | {"report.html": html})
