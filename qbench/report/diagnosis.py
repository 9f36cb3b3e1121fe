"""The diagnosis report: diagnose.md (tables) and diagnose.json, written atomically, plus
the FP32 fallback's layer list in the file format ``--skip-layers @FILE`` reads."""

import datetime as dt
import re
from pathlib import Path

from tabulate import tabulate

from ..core.atomic import to_json, write_folder
from ..core.words import plural

COLUMNS = [
    ("layer", "layer"),
    ("accumulated_sqnr_db", "SQNR dB (INT8 graph)"),
    ("accumulated_cosine", "cosine"),
    ("accumulated_max_abs_error", "max abs err"),
    ("alone_sqnr_db", "SQNR dB alone"),
    ("weights_only_sqnr_db", "W8A32 dB"),
    ("activations_only_sqnr_db", "W32A8 dB"),
    ("clipped_fraction", "clipped"),
    ("sensitivity_rank", "sensitivity rank"),
    ("logits_sqnr_gain_db", "logits dB regained in FP32"),
]
TOP = 5
LEGEND = (
    "SQNR dB (INT8 graph): the layer's output with every layer quantized, against FP32. "
    "alone: only this layer quantized, on its FP32 input; W8A32: its weight only; W32A8: "
    "its input only. clipped: its FP32 input values outside the calibrated range. "
    "sensitivity rank: 1 = the logits regain most SQNR when this layer alone stays FP32. "
    "Measured on the calibration images with the INT8 graph's scales, zero points and "
    "rounding (PyTorch fake quantization)."
)


def skip_file_text(report):
    """The fallback's layers, one name per line, with a comment header (``--skip-layers
    @FILE`` format: blank lines and text after ``#`` are ignored)."""
    fb = report["fallback"]
    head = (
        f"# qbench diagnose: layers kept in FP32 for top-1 agreement >= {fb['target']} "
        f"({report['model']}; reached: {'yes' if fb['reached'] else 'no'})\n"
    )
    return head + "".join(f"{name}\n" for name in fb["kept_fp32"])


def _cell(key, value):
    if key == "clipped_fraction":
        return f"{100 * value:.3f} %"
    if isinstance(value, float):
        return f"{value:.4f}" if key == "accumulated_cosine" else f"{value:.2f}"
    return value


def layer_table(rows, fmt="github"):
    """Every layer's row, in graph order."""
    keys = [k for k, _ in COLUMNS if k in rows[0]] if rows else []
    heads = [h for k, h in COLUMNS if k in keys]
    cells = [[_cell(k, r[k]) for k in keys] for r in rows]
    return tabulate(cells, heads, tablefmt=fmt, disable_numparse=True)


def sensitive_table(report, fmt="github"):
    """The ``TOP`` most sensitive layers."""
    by_name = {r["layer"]: r for r in report["layers"]}
    return layer_table([by_name[n] for n in report["ranking"][:TOP]], fmt)


def summary(report):
    """Plain-text lines: what was measured, and the fallback's outcome."""
    lines = [
        f"{report['model']}: {report['int8_layers']} INT8 layers, {report['images']} "
        f"calibration images ({report['calibration']['mode']}); all INT8: "
        f"{_agreement(report['top1_agreement'])}logits SQNR {report['logits_sqnr_db']:.2f} dB; "
        f"{report['wall_s']:.0f} s",
    ]
    fb = report.get("fallback")
    if fb:
        last = [s for s in fb["steps"] if s.get("accepted", True)][-1]
        stop = fb.get("stop", "every layer tried")  # reports before the gain rule
        if fb["reached"]:
            state = "reached" if stop == "target reached" else f"reached: {stop}"
        else:
            state = f"NOT reached ({stop})"
        lines.append(
            f"FP32 fallback for top-1 agreement >= {fb['target']} on {fb['held_out_images']} "
            f"held-out images: {state} with "
            f"{plural(len(fb['kept_fp32']), 'layer')} in FP32 "
            f"({', '.join(fb['kept_fp32']) or 'none'}): "
            f"{100 * last['top1_agreement']:.2f} %, logits SQNR {last['logits_sqnr_db']:.2f} dB"
        )
        needed = fb.get("needed_images")
        if needed is None or fb["held_out_images"] < needed:
            need = f"at least {needed} needed" if needed else "no number of images can"
            lines.append(
                f"{fb['held_out_images']} held-out images cannot show {fb['target']}: {need} "
                "(95 % Clopper-Pearson); the search keeps a layer only for "
                f"a logits SQNR gain >= {fb['min_gain_db']:g} dB"
            )
        lines.append(_latency_cost_line(fb["latency_ms"]))
    return lines


PATH_HEADS = [
    "step",
    "layer kept in FP32",
    "held-out top-1 agreement",
    "logits SQNR (dB)",
    "gain (dB)",
    "TVM INT8 latency (ms)",
    "kept",
]


def path_table(fallback, fmt="github"):
    """The fallback's path, one row per step (``diagnose.run.fallback_record``): the
    layer added, held-out agreement with counts and interval, SQNR, its gain, latency."""
    rows, before = [], None
    for i, s in enumerate(fallback["steps"]):
        ci = s.get("top1_agreement_ci95")
        agree = f"{100 * s['top1_agreement']:.1f} %"
        if ci:
            agree += (
                f" ({s['top1_agreement_count']}/{s['top1_agreement_total']}; "
                f"CI {100 * ci[0]:.1f}-{100 * ci[1]:.1f})"
            )
        gain = "-" if before is None else f"{s['logits_sqnr_db'] - before:+.2f}"
        ms = s.get("latency_ms")
        accepted = s.get("accepted", True)
        rows.append(
            [i, s.get("layer") or "(all INT8)", agree, f"{s['logits_sqnr_db']:.2f}", gain]
            + ["-" if ms is None else f"{ms:.2f}", "yes" if accepted else "no: gain too small"]
        )
        before = s["logits_sqnr_db"] if accepted else before
    return tabulate(rows, PATH_HEADS, tablefmt=fmt, disable_numparse=True)


def _agreement(fraction):
    """``top-1 agreement 99.00 %, `` or nothing for a single-logit model (None)."""
    return "" if fraction is None else f"top-1 agreement {100 * fraction:.2f} %, "


def _latency_cost_line(ms):
    """The fallback's latency cost in words; ``ms`` None: no layer was kept in FP32, so
    nothing was timed (two identical builds would only show timing noise as a cost)."""
    if ms is None:
        return "TVM INT8 latency: unchanged (no layer kept in FP32, the INT8 graph is the same)"
    cost = 100 * (ms["with_fallback"] / ms["all_int8"] - 1)
    return (
        f"TVM INT8 latency per batch: {ms['all_int8']:.2f} ms all INT8, "
        f"{ms['with_fallback']:.2f} ms with the fallback ({cost:+.1f} %)"
    )


def render_markdown(report):
    parts = [f"# qbench diagnose: {report['model']}", "", *summary(report), ""]
    if "fallback" in report:
        parts += ["## FP32 fallback path", "", path_table(report["fallback"]), ""]
    parts += [f"## The {TOP} most sensitive layers", "", sensitive_table(report), ""]
    parts += [f"![input histogram]({png})" for png in report.get("plots", [])] + [""]
    parts += ["## Every INT8 layer", "", layer_table(report["layers"]), "", LEGEND, ""]
    return "\n".join(parts)


def write_diagnosis(report, root, pngs=None):
    """Write diagnose.json, diagnose.md, the ``pngs`` ({file name: PNG bytes}) and, after a
    fallback, skip_layers.txt into a new timestamped folder under ``root``; return it."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(report["model"]).name)
    files = {"diagnose.json": to_json(report), "diagnose.md": render_markdown(report)}
    files.update(pngs or {})
    if "fallback" in report:
        files["skip_layers.txt"] = skip_file_text(report)
    return write_folder(Path(root) / f"{stamp}-{name}-diagnose", files)


def diagnosis_title(diagnosis):
    """``Diagnosis``, plus ``and FP32 fallback`` when it chose one."""
    return "Diagnosis" + (" and FP32 fallback" if diagnosis.get("fallback") else "")
