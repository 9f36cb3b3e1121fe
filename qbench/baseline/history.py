"""``qbench history``: the stored baselines of a model and target over time, as a table and
a PNG (matplotlib)."""

import io
import json

from tabulate import tabulate

from ..atomic import write_bytes
from ..errors import UserError
from .comparison import speedup
from .store import load_entry, runs

HEADS = [
    "created",
    "qbench commit",
    "machine",
    "top-1 agreement",
    "top-1 accuracy drop (points)",
    "SQNR (dB)",
    "INT8 median (ms)",
    "FP32 median (ms)",
    "INT8 speed-up",
]


def matches_target(target, text):
    """Whether the target dict ``target`` is the one ``--target text`` names: its kind
    (``llvm``), or a JSON dict whose every field ``target`` has with the same value.

    Raises:
        UserError: ``text`` starts with ``{`` but is not JSON.
    """
    if not text.lstrip().startswith("{"):
        return target.get("kind") == text
    try:
        wanted = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"--target {text}: invalid JSON ({e}); valid: a kind or a JSON dict") from e
    return all(target.get(k) == v for k, v in wanted.items())


def history(store, model, target):
    """The stored runs of ``model`` (its report name) on ``target`` (``--target`` text),
    oldest first, one dict per run (see ``point``).

    Raises:
        UserError: a stored file is damaged (named; left unchanged).
    """
    points = []
    for path in runs(store):
        report = load_entry(path)["report"]
        same_model = report.definition["model"] == model
        if same_model and matches_target(report.environment["target"], target):
            points.append(point(report, path.parts[-4]))
    return sorted(points, key=lambda p: p["created"])


def point(report, machine):
    """One run's figures: created (ISO time), commit, machine, top-1 agreement (fraction),
    accuracy drop (percentage points; None without labels), SQNR (dB), INT8 and FP32
    medians (ms), speed-up (TVM FP32 / TVM INT8 medians); ``report`` is a
    ``results.RunResult``."""
    res = report.results
    int8, ref = res["tvm_int8"].metrics, res["pytorch_fp32"].metrics
    drop = None
    if int8.get("top1_accuracy") is not None and ref.get("top1_accuracy") is not None:
        drop = 100 * (ref["top1_accuracy"] - int8["top1_accuracy"])
    return {
        "created": report.created,
        "commit": report.environment.get("qbench_commit"),
        "machine": machine,
        "top1_agreement": int8.get("top1_agreement"),
        "accuracy_drop_points": drop,
        "sqnr_db": int8.get("sqnr_db"),
        "int8_median_ms": res["tvm_int8"].latency.median_ms,
        "fp32_median_ms": res["tvm_fp32"].latency.median_ms,
        "speedup": speedup(report),
    }


def table(points):
    """The runs as a tabulate table (``simple`` format)."""
    rows = [
        [
            p["created"],
            (p["commit"] or "-")[:12]
            + ("-dirty" if (p["commit"] or "").endswith("-dirty") else ""),
            p["machine"],
            "-" if p["top1_agreement"] is None else f"{100 * p['top1_agreement']:.2f} %",
            _num(p["accuracy_drop_points"], ".2f"),
            _num(p["sqnr_db"], ".1f"),
            _num(p["int8_median_ms"], ".4g"),
            _num(p["fp32_median_ms"], ".4g"),
            _num(p["speedup"], ".2f") + "x",
        ]
        for p in points
    ]
    return tabulate(rows, HEADS, tablefmt="simple", disable_numparse=True)


def _short(commit):
    """A commit's first 12 hex digits, keeping ``-dirty``; ``-`` for None."""
    if commit is None:
        return "-"
    return commit[:12] + ("-dirty" if commit.endswith("-dirty") else "")


def _num(value, spec):
    return "-" if value is None else format(value, spec)


def write_plot(points, path, title):
    """Draw top-1 agreement (%) and the INT8 and FP32 medians (ms) against the run number
    (runs labelled by date) into a PNG at ``path``, written atomically; returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = range(len(points))
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    top.plot(x, [100 * (p["top1_agreement"] or 0) for p in points], "o-")
    top.set_ylabel("top-1 agreement (%)")
    top.set_title(title)
    for key, label in (("int8_median_ms", "TVM INT8"), ("fp32_median_ms", "TVM FP32")):
        bottom.plot(x, [p[key] for p in points], "o-", label=label)
    bottom.set_ylabel("median latency (ms)")
    bottom.legend()
    bottom.set_xticks(list(x), [p["created"][:16] for p in points], rotation=30, ha="right")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    write_bytes(path, buffer.getvalue())
    return path
