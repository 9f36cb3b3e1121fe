"""The report's tables (tabulate): latency, agreement and accuracy, flips, layers,
sign-off, and the ``qbench layers`` preview; the markdown, console and HTML reports share
them."""

from tabulate import tabulate

from ..core.words import plural
from ..measure.intervals import TYPICAL_AGREEMENT, images_to_show

ACCURACY_COLUMNS = [
    ("top1_agreement", "top-1 agreement"),
    ("decisive_top1_agreement", "decisive top-1 agreement"),
    ("top5_agreement", "top-5 agreement"),
    ("top1_accuracy", "top-1 accuracy"),
    ("top5_accuracy", "top-5 accuracy"),
]
ACCURACY_NOTE = (
    "Agreement: % of images whose top-1 class is PyTorch FP32's (top-5: % of PyTorch's 5 top "
    "classes found in the runner's 5); decisive: near-tie flips (PyTorch FP32's top-1 minus "
    "top-2 softmax probability under the near-tie margin) forgiven; accuracy: % of images "
    "whose label is in the top 1 / 5; "
    "counts in brackets, with the 95 % Clopper-Pearson interval (CI) over the images. max abs "
    "diff in logit units; cosine 1 = same direction."
)
UNIT_FORMATS = {  # unit: (scale, suffix, fewest decimals)
    "fraction": (100, " %", 1),
    "points": (1, " points", 1),
    "dB": (1, " dB", 1),
    "cosine": (1, "", 3),
    "speed-up": (1, "x", 2),
    "ms": (1, " ms", 2),
}

RUNNER_TITLES = {
    "pytorch_fp32": "PyTorch FP32 (eager)",
    "tvm_fp32": "TVM FP32",
    "tvm_int8": "TVM INT8",
    "torch_int8_fx": "PyTorch INT8 (FX x86)",
    "torch_int8_pt2e": "PyTorch INT8 (torchao PT2E)",
}


def latency_table(results, fmt, simulated=False, unavailable=None):
    """Latency per runner ({name: ``results.RunnerResult``}), ms; how many times slower
    or faster than TVM FP32 it is: the median per-round ratio of the interleaved samples
    (``speed.median_ratio``, the statistic the sign-off and compare judge), not the ratio of
    the medians shown; and, when a runner ran on a remote device, each runner's device.
    ``simulated``: TVM INT8 is fake-quantized FP32; ``unavailable``: {runner name: why it
    could not be built}, a row each."""
    fp32 = results["tvm_fp32"].samples_ms
    rows = []
    for name, entry in results.items():
        lat = entry.latency
        title = RUNNER_TITLES[name]
        if simulated and name == "tvm_int8":  # an FP32 graph: its speed says nothing of INT8
            title, name = f"{title} (SIMULATED: fake-quantized FP32)", "simulated"
        rows.append(
            [
                title,
                f"{lat.median_ms:.2f}",
                f"{lat.p90_ms:.2f}",
                f"{lat.std_ms:.2f}",
                _versus(_per_round(entry.samples_ms, fp32), name),
                entry.device,
            ]
        )
    for name, why in (unavailable or {}).items():
        rows.append([RUNNER_TITLES[name], f"not available: {why}", "", "", "", ""])
    heads = ["runner", "median (ms)", "p90 (ms)", "std (ms)", "vs TVM FP32 (per round)"]
    heads.append("device")
    if all(entry.device == "host" for entry in results.values()):  # the usual run: no column
        rows, heads = [row[:-1] for row in rows], heads[:-1]
    return tabulate(rows, heads, tablefmt=fmt)


def _per_round(samples, fp32):
    """``speed.median_ratio`` of a runner's samples to TVM FP32's (ms), or None when the
    report holds no paired samples."""
    from ..measure.speed import median_ratio

    if not samples or len(samples) != len(fp32):
        return None
    return float(median_ratio(samples, fp32))


def _versus(ratio, name):
    """A latency ratio to TVM FP32 in words: ``3.00x slower``, ``1.80x faster``, ``1.00x
    (same)`` within half a percent; ``-`` without one."""
    if name == "tvm_fp32":
        return "1.00x (reference)"
    if ratio is None:
        return "-"
    if abs(ratio - 1) < 0.005:
        return "1.00x (same)"
    if ratio < 1:
        return f"{1 / ratio:.2f}x faster"
    return f"{ratio:.2f}x slower" + (": INT8 does not pay off" if name == "tvm_int8" else "")


def accuracy_table(report, fmt, note=True):
    """Agreement with PyTorch FP32 and accuracy, as ``87.6 % (629/718)``, and logit error,
    followed (with ``note``) by ``ACCURACY_NOTE`` on how to read them."""
    heads = ["runner"] + [title for _, title in ACCURACY_COLUMNS]
    heads += ["max abs diff (logits)", "cosine", "SQNR (dB)"]
    rows = []
    for name, entry in report.results.items():
        m = entry.metrics
        rows.append(
            [RUNNER_TITLES[name]]
            + [percent_with_counts(m, key) for key, _ in ACCURACY_COLUMNS]
            + [_fmt(m.get(k)) for k in ("max_abs_diff", "cosine", "sqnr_db")]
        )
    for name, why in report.unavailable.items():
        rows.append([RUNNER_TITLES[name], f"not available: {why}"] + [""] * (len(heads) - 2))
    table = tabulate(rows, heads, tablefmt=fmt, disable_numparse=True)
    return table + "\n\n" + ACCURACY_NOTE if note else table


def flip_lines(report):
    """Per compared runner, its top-1 flips split into near-ties and decisive ones, e.g.
    ``TVM INT8: 3 flips, 3 near-ties (PyTorch FP32 margin < 0.05), 0 decisive``."""
    lines = []
    for name, entry in report.results.items():
        m = entry.metrics
        if "decisive_flips" not in m:
            continue
        total = m["near_tie_flips"] + m["decisive_flips"]
        lines.append(
            f"{RUNNER_TITLES[name]}: {plural(total, 'flip')} of "
            f"{plural(m['top1_agreement_total'], 'image')}, "
            f"{m['near_tie_flips']} near-ties (PyTorch FP32 margin < {m['near_tie_margin']:g}), "
            f"{m['decisive_flips']} decisive"
        )
    return lines


def decisive_table(report, fmt):
    """The decisive flips (``metrics.flips``), one row each: runner, image, PyTorch FP32
    margin, PyTorch's class, the runner's class; None when there are none."""
    rows = [
        [RUNNER_TITLES[name], f.get("image") or f"#{f['index']}", f"{f['margin']:.3f}"]
        + [f["pytorch_class"], f["class"]]
        for name, entry in report.results.items()
        for f in entry.per_image.get("flips", [])
        if f["kind"] == "decisive"
    ]
    if not rows:
        return None
    heads = ["runner", "image", "PyTorch FP32 margin", "PyTorch class", "runner's class"]
    return tabulate(rows, heads, tablefmt=fmt, disable_numparse=True)


def flip_parts(report, fmt):
    """The flips section's parts: one line per runner and the decisive flips' table."""
    lines = flip_lines(report)
    if not lines:
        return []
    bullet = "- " if fmt == "github" else ""
    table = decisive_table(report, fmt)
    return ["\n".join(bullet + line for line in lines)] + ([table] if table else [])


def percent_with_counts(metrics, key):
    """``87.6 % (629/718; CI 85.0-89.9)`` for the fraction ``metrics[key]``, its counts and
    its 95 % interval (where the metrics have one); a top-5 agreement's counts are class
    slots and its interval is over images (``metrics.with_counts``): ``95.7 % (67/70
    classes; CI 66.1-99.8 over images)``. ``-`` if absent."""
    if metrics.get(key) is None:
        return "-"
    counts = f"{metrics[f'{key}_count']}/{metrics[f'{key}_total']}"
    slots = key == "top5_agreement"  # counted in class slots, its interval over images
    ci = metrics.get(f"{key}_ci95")
    if ci is not None:  # reports written before intervals have none
        counts += f"{' classes' if slots else ''}; CI {100 * ci[0]:.1f}-{100 * ci[1]:.1f}"
        counts += " over images" if slots else ""
    return f"{100 * metrics[key]:.1f} % ({counts})"


def layer_table(report, fmt):
    heads = [
        "#",
        "layer",
        "op",
        "channels in->out",
        "groups",
        "built dtype",
        "act scale (real units per step)",
        "act zero point",
        "clipped (calibration)",
        "weight SQNR min (dB)",
        "collapsed channels",
        "note",
    ]
    rows = []
    for la in report.layers:
        note = la["reason"]
        if la.get("range_from"):
            note += f" reads a max pool of {la['range_from']}'s input: its scale and clip"
        if la["nonfinite_excluded"]:
            note += (
                f" {la['nonfinite_excluded']} non-finite values excluded "
                f"(batches {la['nonfinite_batches']})"
            )
        rows.append(
            [
                "-" if la["index"] is None else la["index"],
                la["name"],
                la["op"],
                f"{la['in_channels']}->{la['out_channels']}",
                la["groups"],
                la["dtype"],
                _fmt(la.get("act_scale")),
                la.get("act_zero_point", ""),
                _percent(la.get("clipped_fraction")),
                _fmt(la.get("weight_sqnr_min_db")),
                ",".join(map(str, la["collapsed_channels"])) or "",
                note.strip(),
            ]
        )
    return tabulate(rows, heads, tablefmt=fmt)


def _percent(fraction):
    """A clipped fraction as a percentage ('0.0012 %'), '0 %' for none, '-' when absent."""
    if fraction is None:
        return "-"
    return f"{100 * fraction:.2g} %" if fraction else "0 %"


def _fmt(v):
    if v is None:
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def check_value_and_limit(check):
    """A sign-off check's value and limit as text, in the unit of the limit.

    Fractions are shown as %, accuracy drops in percentage points, SQNR in dB, cosines as
    plain numbers, with as many decimals as it takes (up to 3 more than the fewest) to tell
    a failing value from its limit and to show a non-zero limit as non-zero; speed-ups as
    ``0.62x`` and latencies in ms. A check with a confidence interval (the INT8 speed-up)
    shows it after the value. A check without a value (not applicable, or not computable)
    shows its ``detail``.

    Args:
        check: a ``verdict.Check``.
    Returns:
        (value text, limit text), e.g. ``("96.43 %", ">= 97.00 %")``.
    """
    unit, value, limit, op = check.unit, check.value, check.limit, check.op
    if unit == "flag":
        shown = "yes" if value else "no"
        detail = check.detail
        return (f"{shown}: {detail}" if detail else shown), "yes"
    if unit not in UNIT_FORMATS:
        return _fmt(int(value) if float(value).is_integer() else value), f"{op} {limit}"
    scale, suffix, fewest = UNIT_FORMATS[unit]
    if value is None:
        return check.detail, f"{op} {scale * limit:.{fewest}f}{suffix}"
    for decimals in range(fewest, fewest + 4):
        v, lim = f"{scale * value:.{decimals}f}", f"{scale * limit:.{decimals}f}"
        told_apart = v != lim or value == limit
        if told_apart and (float(lim) != 0 or limit == 0):  # a limit of 0.001 is not "0.00"
            break
    v += suffix
    if check.ci_low is not None:
        low, high = (
            f"{scale * b:.{fewest if scale == 1 else 1}f}" for b in (check.ci_low, check.ci_high)
        )
        v += f" ({100 * check.confidence:g} % CI {low}-{high}{suffix if scale != 1 else ''})"
    return v, f"{op} {lim}{suffix}"


def signoff_table(verdict, fmt):
    """One row per sign-off check of ``verdict`` (a ``verdict.Verdict``): value and limit in
    the same unit, ok, FAIL or n/a (not applicable)."""
    rows = []
    for c in verdict.checks:
        value, limit = check_value_and_limit(c)
        result = {True: "ok", False: "FAIL", None: "n/a"}[c.passed]
        if c.unshown:
            count = f"{c.sample} images; " if c.sample is not None else ""
            result = f"ok, not shown ({count}{unshown_why(c)})"
        rows.append([c.name, value, limit, result])
    heads = ["sign-off check", "value", "limit", "result"]
    return tabulate(rows, heads, tablefmt=fmt, disable_numparse=True)


def layers_preview_table(layers, reasons, fmt):
    """The quantizable layers of an imported model, for ``qbench layers``.

    Args:
        layers: ``graph.Layer`` list.
        reasons: per layer, why it stays FP32, or "" when it would run in INT8.
        fmt: tabulate format, e.g. ``"simple"``.
    """
    rows = [
        [
            la.index,
            la.name,
            la.op,
            " x ".join(str(d) for d in la.weight.shape),
            f"{la.in_channels}->{la.out_channels}",
            la.groups,
            f"FP32: {reason}" if reason else "INT8",
        ]
        for la, reason in zip(layers, reasons, strict=True)
    ]
    heads = ["#", "layer", "op", "weight shape", "channels in->out", "groups", "would run in"]
    return tabulate(rows, heads, tablefmt=fmt, disable_numparse=True)


def unshown_why(check):
    """Why a passed check is not shown: its doubt, too few images, or too many misses."""
    if check.doubt is not None:
        return check.doubt
    if check.needed is None:
        return "no number can"
    typical = images_to_show(check.limit)
    at = f"; {typical} at a good build's {100 * TYPICAL_AGREEMENT:g} % agreement" if typical else ""
    if check.sample < check.needed:
        return f"at least {check.needed} needed{at}"
    return f"95 % CI {100 * check.ci_low:.1f}-{100 * check.ci_high:.1f} % reaches below{at}"
