"""``qbench compare``: every metric of a run against a baseline run, with a verdict each.

Latency is judged on the ratios of runners timed in the same rounds (TVM INT8 / TVM FP32,
TVM FP32 / PyTorch, TVM INT8 / PyTorch: one per-round ratio per sample, ``timing.interleaved``):
load on the machine hits every runner of a round, so it cancels there, fully between the two
TVM builds, which share a runtime; the ratios to PyTorch are judged only while the load
stayed the same (see below). Each ratio:
ratio of medians and Mann-Whitney U on the per-round ratios (``stats.latency_change``). The
absolute medians are shown with the same test, and judged only while PyTorch eager, the
control (qbench does not change it), is shown to have kept its speed (``stats.steady``: its
ratio of medians' interval inside 1/1.05-1.05). A control whose change is merely not
significant proves nothing: in A/A runs under bursty load PyTorch moved x1.18 with p 0.28
while TVM's absolute medians moved x1.21-1.25 with p < 0.01, every per-round ratio `~`.
Without that proof the absolute rows and the ratios to PyTorch say so instead of a verdict.
Top-1 agreement and top-1 accuracy: exact counts and McNemar's exact test on the per-image
outcomes (``stats.paired_change``). Top-5, SQNR, cosine and the speed-up are shown without a
test (verdict ``-``): the report holds no per-image data for them; but a sign-off check of
fidelity or accuracy that the baseline passed and this run fails is a regression, and so is
a PASS that became a FAIL on such a check (``_signoff_rows``). Two runs whose definition
digests differ are "not comparable" (asv), and the definition fields that differ are listed.
Runs from different machines (CPU, architecture, threads: the store's machine key, which
``--baseline`` can cross) keep their accuracy verdicts, but no latency row is judged.
"""

import json

import numpy as np
from tabulate import tabulate

from ..measure.metrics import ROWS
from ..report.tables import RUNNER_TITLES
from . import stats
from .layout import normal

NOT_COMPARABLE, UNTESTED = "not comparable", "-"
CONTROL = "pytorch_fp32"
RATIOS = (  # judged where both runs timed both runners (PyTorch INT8: --torch-int8)
    ("tvm_int8", "tvm_fp32"),
    ("tvm_fp32", CONTROL),
    ("tvm_int8", CONTROL),
    ("tvm_int8", "torch_int8_fx"),
    ("tvm_int8", "torch_int8_pt2e"),
)
PYTORCH_RUNTIME = (CONTROL, "torch_int8_fx", "torch_int8_pt2e")  # PyTorch's thread pool
PAIRED = (("top1_agreement", "top1_match"), ("top1_accuracy", "top1_correct"))
SHOWN = ("top5_agreement", "top5_accuracy", "sqnr_db", "cosine")
LATENCY_METRICS = ("median latency", "latency ratio")  # the latency rows' metric prefixes
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
    """The definition fields whose values differ (``digest`` excluded), nested dicts
    followed down to their leaves: a list of ``{"field": dotted name (e.g.
    "quant.calib_mode"), "baseline": its value there, "new": in ``report``}``, sorted by
    field; a value absent on one side is None there. A model file named by its full path
    (an older qbench's store) counts by its base name (``layout.normal``)."""
    return _differences(
        {k: v for k, v in normal(baseline.definition).items() if k != "digest"},
        {k: v for k, v in normal(report.definition).items() if k != "digest"},
    )


def _differences(old, new, prefix=""):
    found = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            found += _differences(a, b, f"{prefix}{k}.")
        elif a != b:
            found.append({"field": prefix + k, "baseline": a, "new": b})
    return found


def _said(difference):
    """A definition difference in words: ``field: baseline value -> this run's``."""

    def value(v):
        if v is None:
            return "(absent)"
        return v if isinstance(v, str) else json.dumps(v)

    old, new = value(difference["baseline"]), value(difference["new"])
    return f"{difference['field']}: {old} -> {new}"


def compare(report, baseline, factor=1.10, alpha=0.01):
    """Compare ``report`` with ``baseline`` (both ``result.RunResult``).

    Args:
        factor: latency ratio of medians beyond which a change may count, > 1.
        alpha: significance level of every test, in (0, 1).
    Returns:
        dict: ``comparable`` (bool), ``differences`` (the definition fields that differ,
        ``definition_differences``), ``reason`` (why not comparable, naming each differing
        field with both values, or None), ``notes`` (lines on the comparison as a whole,
        ``_notes``), ``rows`` (one dict per metric and runner: ``metric``, ``runner``,
        ``baseline``, ``new``, ``change``, ``p_value``, ``verdict``; empty when not
        comparable), ``regression`` (bool: any row's verdict is "regression").
    """
    differences = definition_differences(report, baseline)
    digests = normal(report.definition)["digest"], normal(baseline.definition)["digest"]
    if digests[0] != digests[1] or differences:
        said = "; ".join(map(_said, differences)) or "the digest only"
        reason = f"the run's definition differs (baseline -> this run): {said}"
        return not_comparable(reason, differences)
    rows = _rows(report, baseline, factor, alpha) + _signoff_rows(baseline, report)
    notes = _notes(report, baseline)
    other = machine(baseline)
    if other != machine(report):
        for row in rows:
            if row["metric"].startswith(LATENCY_METRICS):
                row["verdict"] = f"not judged: another machine ({other})"
    regression = any(r["verdict"] == stats.REGRESSION for r in rows)
    return {
        "comparable": True,
        "differences": [],
        "reason": None,
        "notes": notes,
        "rows": rows,
        "regression": regression,
    }


def _notes(report, baseline):
    """Lines on the comparison as a whole: a baseline that FAILed its sign-off, the report
    compared with itself, a baseline from another machine."""
    notes = []
    other, this = machine(baseline), machine(report)
    if baseline.signoff.verdict != "PASS":
        notes.append(
            "note: the baseline FAILed its sign-off (a store keeps such a run only with "
            "--accept-fail): no regression against it does not make this run a PASS"
        )
    if report == baseline:
        notes.append("note: the baseline is this report itself: nothing can have changed")
    if other != this:
        notes.append(
            f"note: the baseline ran on another machine ({other}; this run: {this}): "
            "latency is not judged, accuracy is"
        )
    return notes


def not_comparable(reason, differences=()):
    """The ``compare`` result of runs that cannot be compared, for ``reason`` (words)."""
    return {
        "comparable": False,
        "differences": list(differences),
        "reason": reason,
        "notes": [],
        "rows": [],
        "regression": False,
    }


def machine(report):
    """The machine a report ran on, in words: CPU model, architecture, threads."""
    env = report.environment
    return f"{env['cpu']}, {env['machine']}, {env['threads']} threads"


def _rows(report, baseline, factor, alpha):
    """Every metric's row (see ``compare``), None rows dropped."""
    load = _load_change(baseline.results, report.results, alpha)
    rows = _ratio_rows(baseline.results, report.results, factor, alpha, load)
    for name, entry in report.results.items():
        base = baseline.results.get(name)
        if base is None:
            continue
        rows.append(_latency_row(name, base, entry, factor, alpha, load))
        rows += [_paired_row(name, base, entry, m, v, alpha) for m, v in PAIRED]
        rows += [_shown_row(name, base.metrics, entry.metrics, m) for m in SHOWN]
    rows = [r for r in rows if r is not None]
    return [*rows, _speedup_row(baseline, report)]


SPEED_UNITS = ("speed-up", "ms")  # sign-off checks of speed: the latency rows judge speed


def _signoff_rows(baseline, report):
    """A row per sign-off check the baseline passed and this run fails, and the verdicts'
    row. A fidelity or accuracy check crossing its limit is a regression, with no test
    needed: the limit is the team's own, and SQNR and cosine have no per-image test, so a
    drop through their limits is caught here alone. A speed check's row is shown untested:
    the latency rows judge speed, with their tests and load control. An SQNR or cosine check
    of runs that judged the output's error differently (``_judged_alike``) is not
    comparable."""
    before = {c.name: c for c in baseline.signoff.checks}
    int8 = [_int8_metrics(r) for r in (baseline, report)]
    rows, counted = [], False
    for check in report.signoff.checks:
        if check.passed is not False:
            continue
        speed = check.unit in SPEED_UNITS
        verdict = UNTESTED if speed else stats.REGRESSION
        if check.unit in JUDGED_UNITS:
            verdict = _judged_alike(*int8, check.unit == "cosine") or verdict
        counted = counted or verdict == stats.REGRESSION
        old = before.get(check.name)
        if old is None or old.passed is not True:
            continue
        words = _check_words(old), _check_words(check)
        rows.append(_row(f"sign-off: {check.name}", "-", *words, verdict=verdict))
    verdicts = baseline.signoff.verdict, report.signoff.verdict
    worse = verdicts == ("PASS", "FAIL") and counted
    rows.append(_row("sign-off", "-", *verdicts, verdict=stats.REGRESSION if worse else UNTESTED))
    return rows


def _int8_metrics(run):
    entry = run.results.get("tvm_int8")
    return {} if entry is None else entry.metrics


def _check_words(check):
    """A check's value and result, e.g. ``61.3 (ok)`` or ``None (failed)``."""
    value = None if check.value is None else round(check.value, 4)
    return f"{value} ({'ok' if check.passed else 'failed'})"


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


def _load_change(base, new, alpha):
    """The control's (PyTorch eager's) ``stats.steady`` result when it is not shown steady
    (the machine's load may have changed between the runs), else None; also for runs
    without the control."""
    if CONTROL not in base or CONTROL not in new:
        return {"ratio": None}
    samples = base[CONTROL].samples_ms, new[CONTROL].samples_ms
    if min(map(len, samples)) < 2:
        return {"ratio": None}
    found = stats.steady(*samples, alpha=alpha)
    return None if found["steady"] else found


def _latency_row(name, base, new, factor, alpha, load):
    """Absolute median latency; the control's row, and every row while the control is not
    shown steady (``load``), carry a note instead of a verdict."""
    change = stats.latency_change(base.samples_ms, new.samples_ms, factor, alpha)
    verdict = change["verdict"]
    if load is not None:
        verdict = _not_judged(load)
    elif name == CONTROL:
        verdict = "control"  # shown steady: otherwise ``load`` would be set
    medians = base.latency.median_ms, new.latency.median_ms
    return _change_row("median latency (ms)", name, medians, change, verdict)


def _not_judged(load):
    if load["ratio"] is None:
        return "not judged: no PyTorch eager samples to show the load unchanged"
    return (
        f"not judged: machine load not shown unchanged (PyTorch x{load['ratio']:.2f}, "
        f"{100 * load['confidence']:g} % CI {load['ci_low']:.2f}-{load['ci_high']:.2f}, "
        f"steady needs {1 / load['band']:.2f}-{load['band']:.2f})"
    )


def _ratio_rows(base, new, factor, alpha, load):
    """One row per runner ratio of ``RATIOS`` both runs timed: the per-round ratios of the
    baseline against this run's (``round_ratios``), judged by ``stats.latency_change``.

    While the load is not shown unchanged (``load``), only TVM INT8 / TVM FP32 is judged: the
    two TVM builds share one runtime and thread pool, so contention slows them alike, while
    PyTorch's thread pool suffers more (measured: a busy loop on one of two cores slowed
    PyTorch eager x10.2 and TVM x3.9-4.5 on efficientnet_lite0), so ratios to PyTorch move."""
    rows = []
    for num, den in RATIOS:
        if not all(k in r for k in (num, den) for r in (base, new)):
            continue
        b, n = round_ratios(base, num, den), round_ratios(new, num, den)
        change = stats.latency_change(b, n, factor, alpha)
        medians = round(float(np.median(b)), 4), round(float(np.median(n)), 4)
        metric = f"latency ratio / {RUNNER_TITLES.get(den, den)}"
        verdict = _not_judged(load) if load and den in PYTORCH_RUNTIME else change["verdict"]
        rows.append(_change_row(metric, num, medians, change, verdict))
    return rows


def round_ratios(results, num, den):
    """Per-round latency ratios ``num / den`` (float64 (R,)): sample i of both runners
    comes from timing round i (``timing.interleaved``)."""
    a = np.asarray(results[num].samples_ms, np.float64)
    b = np.asarray(results[den].samples_ms, np.float64)
    return a / b


def _change_row(metric, runner, values, change, verdict):
    p_value = change["p_slower"] if change["ratio"] >= 1 else change["p_faster"]
    return _row(metric, runner, *values, f"{change['ratio']:.3f}x", p_value, verdict)


def _paired_row(name, base, new, metric, vector, alpha):
    """A top-1 agreement or accuracy row, tested when both runs have the per-image
    outcomes; None when neither run has the metric."""
    b, n = base.metrics, new.metrics
    if b.get(metric) is None and n.get(metric) is None:
        return None
    row = _row(TITLES[metric], name, _counts(b, metric), _counts(n, metric))
    bv, nv = base.per_image.get(vector), new.per_image.get(vector)
    if bv is not None and nv is not None and len(bv) != len(nv):
        row["verdict"] = f"not tested: per-image outcomes of {len(bv)} and {len(nv)} images"
    elif bv is not None and nv is not None:
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
    verdict = _judged_alike(base, new, metric == "cosine") if metric in JUDGED else None
    return _row(TITLES[metric], name, base.get(metric), new.get(metric), verdict=verdict or "-")


JUDGED = ("sqnr_db", "cosine")  # figures of the judged space; their sign-off checks' units:
JUDGED_UNITS = ("dB", "cosine")


def _judged_alike(base, new, cosine):
    """None where both runs' metrics ``base`` and ``new`` judged the output's error alike
    (the same ``metrics.judged_space`` where both record one; for the ``cosine``, also taken
    over the same values, ``metrics.cosine_over``: rows in a report from before it was
    recorded), else why their SQNR (or cosine) are not comparable."""
    spaces = [m.get("judged_space") for m in (base, new)]
    if None not in spaces and spaces[0] != spaces[1]:
        return f"{NOT_COMPARABLE}: judged on {spaces[0]}, now on {spaces[1]}"
    over = [m.get("cosine_over", ROWS) for m in (base, new)]
    if cosine and over[0] != over[1]:
        return f"{NOT_COMPARABLE}: the cosine was taken over {over[0]}, now over {over[1]}"
    return None


def _speedup_row(baseline, report):
    speedups = [r.int8_speedup for r in (baseline, report)]
    speedups = [None if s is None else round(s, 3) for s in speedups]
    return _row("INT8 speed-up over TVM FP32", "tvm_int8", *speedups)


def render(result, baseline_path, factor, alpha):
    """The comparison as text: a header naming the baseline and the rules, then a tabulate
    table (or, when not comparable, the definition fields that differ)."""
    head = "\n".join([f"baseline: {baseline_path}", *result["notes"]])
    if not result["comparable"]:
        return f"{head}\n{NOT_COMPARABLE}: {result['reason']}"
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
        f"latency ratios (runners timed in the same rounds, so load cancels) and absolute "
        f"medians: regression/improvement when the ratio of medians passes {factor} (or "
        f"1/{factor}) and one-sided Mann-Whitney U p < {alpha}; absolute medians and ratios "
        f"to PyTorch are judged only while PyTorch eager (the control) is shown steady (its "
        f"ratio of medians' {100 * (1 - alpha):g} % bootstrap CI within "
        f"1/{stats.STEADY_BAND}-{stats.STEADY_BAND}); top-1 "
        f"agreement/accuracy: McNemar exact test p < {alpha}; '~' no significant change; "
        "'-' not tested"
    )
    table = tabulate(rows, heads, tablefmt="simple", disable_numparse=True)
    return f"{head}\n\n{table}\n\n{rules}"


def verdict_line(result):
    """The comparison's one-line verdict, as the run's sign-off line: ``compare: REGRESSION
    (...)``, ``compare: NO REGRESSION (...)`` or ``compare: NOT COMPARABLE``, with the rows
    behind it."""
    if not result["comparable"]:
        return "compare: NOT COMPARABLE (exit 4): see the reason above"
    rows = result["rows"]
    worse = [_row_words(r) for r in rows if r["verdict"] == stats.REGRESSION]
    better = sum(r["verdict"] == stats.IMPROVEMENT for r in rows)
    untested = sum(
        r["verdict"] not in (stats.REGRESSION, stats.IMPROVEMENT, stats.SAME) for r in rows
    )
    counts = f"{better} improved, {untested} of {len(rows)} rows not judged"
    if worse:
        return f"compare: REGRESSION (exit 1): {'; '.join(worse)}; {counts}"
    return f"compare: NO REGRESSION (exit 0): {counts}"


def _row_words(row):
    """A row's metric and runner in words: ``top-1 agreement of TVM INT8``, or the metric
    alone for a row of the whole run (runner ``-``: the sign-off's)."""
    if row["runner"] == "-":
        return row["metric"]
    return f"{row['metric']} of {RUNNER_TITLES.get(row['runner'], row['runner'])}"


def _text(value):
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)
