"""``qbench history``: the stored baselines of a model and target over time, as a table and
a PNG (matplotlib)."""

import io
import json
import math

from tabulate import tabulate

from ..atomic import write_bytes
from ..errors import UserError
from ..targets import KINDS
from .comparison import speedup
from .store import load_entry, runs, slug

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


def parse_target(text):
    """``--target`` text as the fields a stored run's target dict must have, each with the
    same value: ``{"kind": text}`` for a kind name (``llvm``), else the JSON dict.

    Raises:
        UserError: not a kind of ``targets.KINDS`` nor a JSON dict (with a known kind, when
            it names one); the message lists the valid kinds.
    """
    valid = f'valid: {", ".join(KINDS)}, or a JSON target dict such as \'{{"kind": "llvm"}}\''
    if not text.lstrip().startswith("{"):
        if text not in KINDS:
            raise UserError(f"--target {text!r}: unknown target kind; {valid}")
        return {"kind": text}
    try:
        wanted = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"--target {text}: invalid JSON ({e}); {valid}") from e
    if not isinstance(wanted, dict) or wanted.get("kind", "llvm") not in KINDS:
        raise UserError(f"--target {text}: not a JSON dict with a known kind; {valid}")
    return wanted


def history(store, model, target):
    """The stored runs of ``model`` (its report name) on ``target`` (``--target`` text),
    oldest first, one dict per run (see ``point``). Only the key folders of that model and
    target kind are read (``store.runs``).

    Raises:
        UserError: ``target`` is not valid (``parse_target``); a stored file of the model is
            damaged (named; left unchanged).
    """
    wanted = parse_target(target)
    kind = f"{slug(wanted['kind'])}-*" if "kind" in wanted else "*"
    points = []
    for path in runs(store, model=slug(model), target=kind):
        report = load_entry(path)["report"]
        same_model = report.definition["model"] == model
        target_dict = report.environment["target"]
        if same_model and all(target_dict.get(k) == v for k, v in wanted.items()):
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
            _short(p["commit"]),
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


def labels(points):
    """The x labels: each run's created time to the second, numbered ``#2``, ``#3`` ... when
    runs share a second, so that no two labels are the same."""
    texts = [p["created"][:19].replace("T", " ") for p in points]
    return [
        t if texts[:i].count(t) == 0 else f"{t} #{texts[:i].count(t) + 1}"
        for i, t in enumerate(texts)
    ]


def write_plot(points, path, title):
    """Draw top-1 agreement (%) and the INT8 and FP32 medians (ms) against the run number
    (runs labelled by date) into a PNG at ``path``, written atomically; returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = range(len(points))
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    agreement = [p["top1_agreement"] for p in points]  # None (one logit): a gap, not 0 %
    top.plot(x, [math.nan if a is None else 100 * a for a in agreement], "o-")
    top.set_ylabel("top-1 agreement (%)")
    top.set_title(title)
    for key, label in (("int8_median_ms", "TVM INT8"), ("fp32_median_ms", "TVM FP32")):
        bottom.plot(x, [p[key] for p in points], "o-", label=label)
    bottom.set_ylabel("median latency (ms)")
    bottom.legend()
    bottom.set_xticks(list(x), labels(points), rotation=30, ha="right")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    write_bytes(path, buffer.getvalue())
    return path
