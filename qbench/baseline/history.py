"""``qbench history``: the stored baselines of a model and target over time, as a table and
a PNG (matplotlib)."""

import io
import json
import math

from tabulate import tabulate

from ..compile.targets import KINDS
from ..core.atomic import write_bytes
from ..core.errors import UserError
from ..model.zoo import model_id
from .layout import normal
from .store import load_entry, model_runs, slug

HEADS = [
    "created",
    "machine",
    "definition",
    "qbench commit",
    "verdict",
    "timing",
    "top-1 agreement",
    "top-1 accuracy drop (points)",
    "SQNR (dB)",
    "INT8 median (ms)",
    "FP32 median (ms)",
    "INT8 speed-up",
]
NOT_RECORDED = "not recorded (a report from before qbench recorded it)"  # a judged space


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
    """The stored runs of ``model`` (``--model`` as given to ``qbench run``: a registry
    name, ``FILE.py:FUNCTION`` or ``FILE.pt2``, named as reports name it, ``zoo.model_id``)
    on ``target`` (``--target`` text), oldest first, one dict per run (see ``point``). Only
    the key folders of that model and target kind are read, in every layout that filed the
    model (``store.model_runs``: a model file stored by its full path too).

    Raises:
        UserError: ``target`` is not valid (``parse_target``); a stored file of the model is
            damaged (named; left unchanged); the store or a file is of a newer layout.
    """
    model = model_id(model)
    wanted = parse_target(target)
    kind = f"{slug(wanted['kind'])}-*" if "kind" in wanted else "*"
    points = []
    for path in model_runs(store, model, target=kind):
        entry = load_entry(path)
        report = entry["report"]
        same_model = model_id(str(report.definition["model"])) == model
        target_dict = report.environment["target"]
        if same_model and all(target_dict.get(k) == v for k, v in wanted.items()):
            points.append(point(report, path.parts[-4], entry.get("accept_fail", False)))
    return sorted(points, key=lambda p: p["created"])


def point(report, machine, accept_fail=False):
    """One run's figures: created (ISO time), machine (the store's machine key), digest
    (the definition digest's first 12 hex digits, the model named as now:
    ``layout.normal``), commit, verdict (PASS, ``PASS, NOT SHOWN`` or FAIL), accept_fail
    (stored with ``--accept-fail``), noisy (the report's NOISY flag, None without
    ``speed``), top-1 agreement (fraction), accuracy drop (percentage points; None without
    labels), SQNR (dB), INT8 and FP32 medians (ms), speed-up (``RunResult.int8_speedup``,
    a factor, or None); ``report`` is a ``result.RunResult``."""
    res = report.results
    int8, ref = res["tvm_int8"].metrics, res["pytorch_fp32"].metrics
    drop = None
    if int8.get("top1_accuracy") is not None and ref.get("top1_accuracy") is not None:
        drop = 100 * (ref["top1_accuracy"] - int8["top1_accuracy"])
    return {
        "created": report.created,
        "machine": machine,
        "digest": normal(report.definition)["digest"][:12],
        "commit": report.environment.get("qbench_commit"),
        "verdict": report.signoff.verdict + (", NOT SHOWN" if report.signoff.unshown else ""),
        "accept_fail": bool(accept_fail),
        "noisy": None if report.speed is None else report.speed.noisy,
        "top1_agreement": int8.get("top1_agreement"),
        "accuracy_drop_points": drop,
        "sqnr_db": int8.get("sqnr_db"),
        "sqnr_space": int8.get("judged_space"),
        "int8_median_ms": res["tvm_int8"].latency.median_ms,
        "fp32_median_ms": res["tvm_fp32"].latency.median_ms,
        "speedup": report.int8_speedup,
    }


def group(p):
    """The comparable runs' group of a point: its machine and definition digest, in words
    (runs of different groups are not comparable)."""
    return f"definition {p['digest']} on {p['machine']}"


def table(points):
    """The runs as a tabulate table (``simple`` format): runs with the same machine and
    definition columns are comparable; ``timing`` is NOISY, ok, or ``-`` (not recorded).
    SQNR values judged in different spaces (``sqnr_spaces``) are marked and the marks
    explained below the table."""
    marks = sqnr_spaces(points)
    rows = [
        [
            p["created"],
            p["machine"],
            p["digest"],
            _short(p["commit"]),
            p["verdict"] + (" (accept-fail)" if p["accept_fail"] else ""),
            {None: "-", True: "NOISY", False: "ok"}[p["noisy"]],
            "-" if p["top1_agreement"] is None else f"{100 * p['top1_agreement']:.2f} %",
            _num(p["accuracy_drop_points"], ".2f"),
            _num(p["sqnr_db"], ".1f") + marks.get(p["sqnr_space"], ""),
            _num(p["int8_median_ms"], ".4g"),
            _num(p["fp32_median_ms"], ".4g"),
            "-" if p["speedup"] is None else f"{p['speedup']:.2f}x",
        ]
        for p in points
    ]
    text = tabulate(rows, HEADS, tablefmt="simple", disable_numparse=True)
    if not marks:
        return text
    said = "; ".join(f"{mark.strip()} {space or NOT_RECORDED}" for space, mark in marks.items())
    return (
        f"{text}\n\nSQNR judged on: {said}. SQNRs of different marks measure different "
        "things (qbench changed how it judges this model's output between the runs): not "
        "comparable"
    )


def sqnr_spaces(points):
    """{judged space (``point``'s ``sqnr_space``, None: not recorded): its mark, `` [1]``,
    `` [2]`` ... in order of first use}, when the runs with an SQNR were judged in more than
    one space (a store holding runs of qbench versions that judged the model's output
    differently, e.g. a single output value as is and later less the reference's mean);
    empty when all were judged alike."""
    spaces = list(dict.fromkeys(p["sqnr_space"] for p in points if p["sqnr_db"] is not None))
    if len(spaces) < 2:
        return {}
    return {space: f" [{i}]" for i, space in enumerate(spaces, start=1)}


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
    """Draw ``figure`` into a PNG at ``path``, written atomically; returns ``path``."""
    import matplotlib.pyplot as plt

    fig = figure(points, title)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    write_bytes(path, buffer.getvalue())
    return path


def figure(points, title):
    """A matplotlib figure of top-1 agreement (%), the INT8 speed-up over TVM FP32 (x) and
    the INT8 and FP32 medians (ms) against the run number (runs labelled by date), one line
    per group of comparable runs (``group``, its label); a missing value is a gap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, sharex=True, figsize=(9, 8))
    axes[0].set_title(title)
    names = list(dict.fromkeys(map(group, points)))
    for n, name in enumerate(names):
        x = [i for i, p in enumerate(points) if group(p) == name]
        ys = _series([points[i] for i in x])
        color = f"C{n % 10}"
        axes[0].plot(x, ys["agreement"], "o-", color=color, label=name, clip_on=False)
        axes[1].plot(x, ys["speedup"], "o-", color=color, label=name)
        axes[2].plot(x, ys["int8"], "o-", color=color, label=f"TVM INT8, {name}")
        axes[2].plot(x, ys["fp32"], "s--", color=color, label=f"TVM FP32, {name}")
    units = ("top-1 agreement (%)", "INT8 speed-up (x)", "median (ms)")
    for ax, unit in zip(axes, units, strict=True):
        ax.set_ylabel(unit)
        ax.legend(fontsize="small")
    axes[0].set_ylim(top=100)  # an agreement above 100 % does not exist
    axes[2].set_xticks(range(len(points)), labels(points), rotation=30, ha="right")
    fig.tight_layout()
    return fig


def _series(points):
    """The plotted values of ``points``, NaN (a gap) where one is missing."""

    def values(key, scale=1):
        return [math.nan if p[key] is None else scale * p[key] for p in points]

    return {
        "agreement": values("top1_agreement", 100),  # None (one logit): a gap, not 0 %
        "speedup": values("speedup"),
        "int8": values("int8_median_ms"),
        "fp32": values("fp32_median_ms"),
    }
