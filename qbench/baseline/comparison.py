"""``qbench compare``: every metric of a run against a baseline run, with a verdict each.

Latency: ratio of medians and Mann-Whitney U on the raw samples (``stats.latency_change``).
Top-1 agreement and top-1 accuracy: exact counts and McNemar's exact test on the per-image
outcomes (``stats.paired_change``). Top-5, SQNR, cosine and the speed-up are shown without a
test (verdict ``-``): the report holds no per-image data for them. Two runs whose definition
digests differ are "not comparable" (asv), and the definition fields that differ are listed.
"""

from tabulate import tabulate

from ..report import RUNNER_TITLES
from . import stats

NOT_COMPARABLE, UNTESTED = "not comparable", "-"
PAIRED = (("top1_agreement", "top1_match"), ("top1_accuracy", "top1_correct"))
SHOWN = ("top5_agreement", "top5_accuracy", "sqnr_db", "cosine")
COUNTED = ("top1_agreement", "top1_accuracy", "top5_agreement", "top5_accuracy")
TITLES = {
    "top1_agreement": "top-1 agreement",
    "top1_accuracy": "top-1 accuracy",
    "top5_agreement": "top-5 agreement",
    "top5_accuracy": "top-5 accuracy",
    "sqnr_db": "SQNR (dB)",
    "cosine": "cosine",
}


def definition_differences(report, baseline):
    """Names of the definition fields whose values differ (``digest`` excluded), sorted."""
    a, b = report["definition"], baseline["definition"]
    return sorted(k for k in set(a) | set(b) if k != "digest" and a.get(k) != b.get(k))


def compare(report, baseline, factor=1.10, alpha=0.01):
    """Compare ``report`` with ``baseline`` (both report dicts, schema_version >= 2).

    Args:
        factor: latency ratio of medians beyond which a change may count, > 1.
        alpha: significance level of every test, in (0, 1).
    Returns:
        dict: ``comparable`` (bool), ``differences`` (definition fields that differ),
        ``rows`` (one dict per metric and runner: ``metric``, ``runner``, ``baseline``,
        ``new``, ``change``, ``p_value``, ``verdict``; empty when not comparable),
        ``regression`` (bool: any row's verdict is "regression").
    """
    differences = definition_differences(report, baseline)
    if report["definition"]["digest"] != baseline["definition"]["digest"] or differences:
        return {"comparable": False, "differences": differences, "rows": [], "regression": False}
    rows = []
    for name, entry in report["results"].items():
        base = baseline["results"].get(name)
        if base is None:
            continue
        rows.append(_latency_row(name, base, entry, factor, alpha))
        rows += [_paired_row(name, base, entry, m, v, alpha) for m, v in PAIRED]
        rows += [_shown_row(name, base["metrics"], entry["metrics"], m) for m in SHOWN]
    rows = [r for r in rows if r is not None]
    rows.append(_speedup_row(baseline, report))
    regression = any(r["verdict"] == stats.REGRESSION for r in rows)
    return {"comparable": True, "differences": [], "rows": rows, "regression": regression}


def _row(metric, runner, baseline, new, change=None, p_value=None, verdict=UNTESTED):
    """One comparison row (see ``compare``); the defaults make an untested row."""
    return {
        "metric": metric,
        "runner": runner,
        "baseline": baseline,
        "new": new,
        "change": change,
        "p_value": p_value,
        "verdict": verdict,
    }


def _latency_row(name, base, new, factor, alpha):
    change = stats.latency_change(
        base["latency_samples_ms"], new["latency_samples_ms"], factor, alpha
    )
    p_value = change["p_slower"] if change["ratio"] >= 1 else change["p_faster"]
    medians = base["latency"]["median_ms"], new["latency"]["median_ms"]
    ratio = f"{change['ratio']:.3f}x"
    return _row("median latency (ms)", name, *medians, ratio, p_value, change["verdict"])


def _paired_row(name, base, new, metric, vector, alpha):
    """A top-1 agreement or accuracy row, tested when both runs have the per-image
    outcomes; None when neither run has the metric."""
    b, n = base["metrics"], new["metrics"]
    if b.get(metric) is None and n.get(metric) is None:
        return None
    row = _row(TITLES[metric], name, _counts(b, metric), _counts(n, metric))
    bv, nv = base.get("per_image", {}).get(vector), new.get("per_image", {}).get(vector)
    if bv is not None and nv is not None and len(bv) == len(nv):
        test = stats.paired_change(bv, nv, alpha)
        row["change"] = f"-{test['lost']} +{test['gained']} images"
        lost_more = test["lost"] > test["gained"]
        row["p_value"] = test["p_worse"] if lost_more else test["p_better"]
        row["verdict"] = test["verdict"]
    return row


def _counts(metrics, key):
    if metrics.get(key) is None:
        return None
    return f"{metrics[f'{key}_count']}/{metrics[f'{key}_total']}"


def _shown_row(name, base, new, metric):
    """A metric shown without a test; None when neither run has it."""
    if base.get(metric) is None and new.get(metric) is None:
        return None
    if metric in COUNTED:
        return _row(TITLES[metric], name, _counts(base, metric), _counts(new, metric))
    return _row(TITLES[metric], name, base.get(metric), new.get(metric))


def speedup(report):
    """INT8 speed-up over TVM FP32: median TVM FP32 latency / median TVM INT8 latency."""
    res = report["results"]
    return res["tvm_fp32"]["latency"]["median_ms"] / res["tvm_int8"]["latency"]["median_ms"]


def _speedup_row(baseline, report):
    speedups = round(speedup(baseline), 3), round(speedup(report), 3)
    return _row("INT8 speed-up over TVM FP32", "tvm_int8", *speedups)


def render(result, baseline_path, factor, alpha):
    """The comparison as text: a header naming the baseline and the rules, then a tabulate
    table (or, when not comparable, the definition fields that differ)."""
    head = f"baseline: {baseline_path}"
    if not result["comparable"]:
        fields = ", ".join(result["differences"]) or "digest only"
        return f"{head}\n{NOT_COMPARABLE}: the run's definition differs in: {fields}"
    rows = [
        [
            r["metric"],
            RUNNER_TITLES.get(r["runner"], r["runner"]),
            _text(r["baseline"]),
            _text(r["new"]),
            r["change"] or "",
            "" if r["p_value"] is None else f"{r['p_value']:.3g}",
            r["verdict"],
        ]
        for r in result["rows"]
    ]
    heads = ["metric", "runner", "baseline", "this run", "change", "p-value", "verdict"]
    rules = (
        f"latency: regression/improvement when the ratio of medians passes {factor} (or "
        f"1/{factor}) and one-sided Mann-Whitney U p < {alpha}; top-1 agreement/accuracy: "
        f"McNemar exact test p < {alpha}; '~' no significant change; '-' not tested"
    )
    table = tabulate(rows, heads, tablefmt="simple", disable_numparse=True)
    return f"{head}\n\n{table}\n\n{rules}"


def _text(value):
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)
