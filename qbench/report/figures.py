"""Figures of a report as inline SVG text for the HTML view (matplotlib, no pyplot state).

The SVG is reproducible: the same report gives the same bytes (``svg.hashsalt`` fixes the
element ids, ``metadata={"Date": None}`` drops the timestamp, glyphs are drawn as paths).
"""

import io
import math

import numpy as np

from .tables import RUNNER_TITLES

SVG_RC = {"svg.hashsalt": "qbench", "svg.fonttype": "path", "font.size": 9}
SQNR_SERIES = [  # diagnosis row key, legend
    ("accumulated_sqnr_db", "INT8 graph (every layer INT8)"),
    ("alone_sqnr_db", "this layer alone INT8"),
    ("weights_only_sqnr_db", "weights only (W8A32)"),
    ("activations_only_sqnr_db", "input only (W32A8)"),
]


def _svg(fig):
    """The figure as SVG text, from ``<svg`` on (no XML prolog: it is embedded in HTML)."""
    import matplotlib

    with matplotlib.rc_context(SVG_RC):
        out = io.StringIO()
        fig.savefig(out, format="svg", metadata={"Date": None})
    text = out.getvalue()
    return text[text.index("<svg") :]


def _figure(width_in, height_in):
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(SVG_RC):
        fig = Figure(figsize=(width_in, height_in), layout="constrained")
        return fig, fig.subplots()


def latency_svg(results):
    """Box plots of each runner's latency samples on a log ms axis, every sample a dot.

    Args:
        results: ``RunResult.results``: runner name -> ``RunnerResult``; runners without
            samples (``samples_ms``, ms per timed batch) are left out.
    Returns:
        SVG text, or None when no runner has samples.
    """
    samples = {n: r.samples_ms for n, r in results.items() if r.samples_ms}
    if not samples:
        return None
    names = list(samples)[::-1]  # the first runner on top
    fig, ax = _figure(11, 1.2 + 0.6 * len(names))
    data = [np.asarray(samples[n], dtype=np.float64) for n in names]
    ax.boxplot(data, orientation="horizontal", widths=0.5, showfliers=False)
    for y, values in enumerate(data, 1):
        ax.plot(values, np.full(values.size, y), "o", ms=3, alpha=0.45, color="tab:blue")
    ax.set_yticks(range(1, len(names) + 1), [RUNNER_TITLES.get(n, n) for n in names])
    ax.set_xscale("log")
    ax.set_xlabel("latency of one batch (ms, log scale); box: quartiles, line: median")
    ax.grid(axis="x", which="both", alpha=0.3)
    return _svg(fig)


def diagnosis_svg(report):
    """The diagnosis' SQNR of each INT8 layer's output against FP32, in graph order, for the
    four quantization cases of ``report.diagnosis.COLUMNS``; layers the FP32 fallback kept
    are shaded.

    Args:
        report: ``RunResult.diagnosis``, a ``diagnosis.DiagnosisReport`` (``layers``: rows
            with the ``*_sqnr_db`` keys in dB, a missing or null value, e.g. an exact match,
            is not drawn).
    Returns:
        SVG text, or None when the diagnosis has no layers.
    """
    rows = report.layers
    if not rows:
        return None
    fig, ax = _figure(11, 4.5)
    x = np.arange(len(rows))
    for key, label in SQNR_SERIES:
        y = [_finite(r.get(key)) for r in rows]
        ax.plot(x, y, marker="o", ms=3, label=label)
    kept = set(report.fallback.kept_fp32 if report.fallback is not None else ())
    for i, r in enumerate(rows):
        if r["layer"] in kept:
            ax.axvspan(i - 0.5, i + 0.5, color="tab:gray", alpha=0.2, lw=0)
    step = max(1, math.ceil(len(rows) / 40))  # at most 40 names on the axis
    ax.set_xticks(x[::step], [r["layer"] for r in rows][::step], rotation=90)
    ax.set_xlabel("INT8 layer (graph order; shaded: kept in FP32 by the fallback)")
    ax.set_ylabel("output SQNR vs FP32 (dB)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=len(SQNR_SERIES), frameon=False)
    return _svg(fig)


def _finite(value):
    return value if isinstance(value, (int, float)) and math.isfinite(value) else math.nan


def fallback_svg(record):
    """The FP32 fallback's path as accuracy against latency: one point per step that was
    timed (x: TVM INT8 median latency of one batch, ms; y: held-out top-1 agreement, %,
    with its 95 % Clopper-Pearson interval as an error bar), labelled by step number, the
    target as a dashed line.

    Args:
        record: ``RunResult.diagnosis.fallback``, a ``diagnosis.FallbackRecord``.
    Returns:
        SVG text, or None when fewer than two steps were timed.
    """
    steps = [s for s in record.steps if s.latency_ms is not None]
    if len(steps) < 2:
        return None
    fig, ax = _figure(6, 3.6)
    x = np.array([s.latency_ms for s in steps])
    y = np.array([100 * s.top1_agreement for s in steps])
    ci = np.array([[100 * v for v in s.top1_agreement_ci95] for s in steps])
    ax.errorbar(x, y, yerr=[y - ci[:, 0], ci[:, 1] - y], fmt="o-", capsize=3)
    for i, (xi, yi) in enumerate(zip(x, y, strict=True)):
        ax.annotate(str(i), (xi, yi), textcoords="offset points", xytext=(5, 5))
    ax.axhline(100 * record.target, ls="--", color="tab:red", label="target")
    ax.set_xlabel("TVM INT8 latency of one batch (ms)")
    ax.set_ylabel("held-out top-1 agreement (%)")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    return _svg(fig)
