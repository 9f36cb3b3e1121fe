"""report.html: one self-contained page (inline CSS and SVG, no script, no network) that a
release engineer can attach to a release: the verdict first, then report.md's tables, the
latency distributions and, after ``--accuracy-target``, the diagnosis' per-layer plot.

Sections a report lacks (no speed, no diagnosis) are skipped, never an error.
"""

import base64
import re
from html import escape

from . import figures
from .lines import environment_line, summary_lines, unshown_words
from .tables import (
    ACCURACY_NOTE,
    accuracy_table,
    check_value_and_limit,
    decisive_table,
    flip_lines,
    latency_table,
    layer_table,
    signoff_table,
)

CSS = """
body { font: 15px/1.45 system-ui, sans-serif; color: #1b1b1b; margin: 2em auto;
       max-width: 1200px; padding: 0 1.5em; }
h1 { font-size: 1.5em; margin-bottom: 0.3em; }
h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
.verdict { border: 3px solid; border-radius: 8px; padding: 0.8em 1.2em; margin: 1em 0; }
.verdict .word { font-size: 3em; font-weight: 700; letter-spacing: 0.05em; }
.PASS { border-color: #1a7f37; background: #e9f7ec; color: #0f5323; }
.FAIL { border-color: #c62828; background: #fdecea; color: #8e1b1b; }
.NOTSHOWN { border-color: #b26a00; background: #fff4e0; color: #6d4100; }
.verdict ul { margin: 0.3em 0 0; color: #1b1b1b; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #c8c8c8; padding: 0.25em 0.6em; text-align: left; }
th { background: #f0f0f0; }
tr td.failed { background: #fdecea; color: #8e1b1b; font-weight: 700; }
h3 { font-size: 1.05em; margin-top: 1.2em; }
tr:nth-child(even) td { background: #fafafa; }
ul.summary li { margin: 0.15em 0; }
.note, .env { color: #555; font-size: 0.88em; }
svg, img { max-width: 100%; height: auto; }
@media print {
  body { margin: 0; max-width: none; font-size: 11px; }
  .verdict, table, svg { break-inside: avoid; }
  .scroll { overflow: visible; }
}
"""


def render_html(report, attachments=None):
    """The whole page, str (UTF-8 text; every report value is HTML-escaped).

    Args:
        report: a ``result.RunResult``.
        attachments: {file name: bytes} written beside it; the diagnosis' PNGs among them
            are embedded (base64 ``data:`` images), so the page stays self-contained.
    """
    title = f"qbench report: {report.model.name} on {report.environment['target']['kind']}"
    body = [f"<h1>{escape(title)}</h1>", verdict_block(report.signoff)]
    body += _section("Summary", _list(summary_lines(report), "summary"))
    body += _section(
        "Latency (one batch)",
        _table(latency_table(report.results, "html", report.simulated, report.unavailable)),
    )
    body += _section("Latency distributions", figures.latency_svg(report.results))
    body += _section(
        "Agreement with PyTorch FP32 and accuracy",
        _table(accuracy_table(report, "html", note=False)),
        f'<p class="note">{escape(ACCURACY_NOTE)}</p>',
    )
    if flip_lines(report):
        table = decisive_table(report, "html")
        body += _section(
            "Flips", _list(flip_lines(report), "summary"), *([_table(table)] if table else [])
        )
    signoff = re.sub(
        r"<td>FAIL\s*</td>", '<td class="failed">FAIL</td>', signoff_table(report.signoff, "html")
    )
    body += _section("Sign-off", _table(signoff))
    body += _section("Layers", _table(layer_table(report, "html")))
    body += diagnosis_parts(report.diagnosis, attachments or {})
    body.append(f'<p class="env">{_text(environment_line(report.environment))}</p>')
    body.append(f'<p class="env">Wall time: {report.wall_time_s} s</p>')
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def verdict_block(signoff):
    """The verdict (a ``verdict.Verdict``), large, in green (PASS), amber (PASS, NOT SHOWN:
    a check whose interval does not show its limit) or red (FAIL), with each
    failed check's value and limit (``tables.check_value_and_limit``)."""
    verdict, failed = signoff.verdict, signoff.failed
    items = []
    for c in failed:
        value, limit = check_value_and_limit(c)
        items.append(f"{c.name}: {value}, limit {limit}")
    words = f"{len(failed)} of {len(signoff.checks)} sign-off checks failed"
    detail = _list(items, "failed") if failed else ""
    if not failed:
        words = "every sign-off check passed"
        if signoff.unshown:
            words += f", but NOT SHOWN: {unshown_words(signoff)}"
    style, word = verdict, verdict
    if verdict == "PASS" and signoff.unshown:  # never the plain green PASS of a shown one
        style, word = "NOTSHOWN", "PASS, NOT SHOWN"
    return (
        f'<div class="verdict {style}"><span class="word">{escape(word)}</span>'
        f"<div>{escape(words)}</div>{detail}</div>"
    )


def diagnosis_parts(diagnosis, attachments):
    """The summary of ``diagnosis`` (a ``diagnosis.DiagnosisReport``, or None), its most
    sensitive layers, their input histograms (the PNGs of ``attachments`` the diagnosis
    names) and the per-layer SQNR plot; nothing without a diagnosis."""
    from .diagnosis import TOP, diagnosis_title, path_table, sensitive_table, summary

    if diagnosis is None:
        return []
    svg = figures.diagnosis_svg(diagnosis)
    fb = diagnosis.fallback
    path = []
    if fb is not None:
        plot = figures.fallback_svg(fb)
        path = ["<h3>FP32 fallback path</h3>", _table(path_table(fb, "html"))]
        path += [plot] if plot else []
    pngs = [attachments[n] for n in diagnosis.plots if n in attachments]
    return _section(
        diagnosis_title(diagnosis),
        _list(summary(diagnosis), "summary"),
        *path,
        f"<h3>The {TOP} most sensitive layers</h3>",
        _table(sensitive_table(diagnosis, "html")),
        *(_png(png, "input histogram") for png in pngs),
        svg and f"<h3>Output SQNR of every INT8 layer</h3>\n{svg}",
    )


def _png(data, alt):
    """An ``<img>`` holding ``data`` (PNG bytes) as a base64 ``data:`` URI."""
    encoded = base64.b64encode(data).decode("ascii")
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{encoded}">'


def _section(heading, *parts):
    """An ``<h2>`` and its parts; nothing when every part is empty (a key the report lacks)."""
    kept = [p for p in parts if p]
    return [f"<h2>{escape(heading)}</h2>", *kept] if kept else []


def _table(html_table):
    """A tabulate ``html`` table (cells already escaped by tabulate), scrollable when wide."""
    return f'<div class="scroll">{html_table}</div>'


def _list(lines, css_class):
    items = "".join(f"<li>{_text(line)}</li>" for line in lines)
    return f'<ul class="{css_class}">{items}</ul>'


def _text(line):
    """Escaped text, with Markdown's `code` spans as ``<code>``."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", escape(line))
