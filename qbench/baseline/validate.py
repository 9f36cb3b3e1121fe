"""Check a stored or given ``report.json`` dict before ``baseline save``, ``compare`` and
``history`` compute with it: the one place where their input's types and ranges are checked,
so that a damaged field is named (exit 2) instead of failing deep inside a comparison.

Every check raises ``UserError`` with a message of the form
``<what> <file>: <dotted field>: expected <what was expected>``.
"""

import datetime as dt
import json
import math
import re

from ..core.errors import UserError
from ..measure.provenance import digest as definition_digest

SUPPORTED_SCHEMAS = (2,)
OLD_SCHEMAS = (1,)  # lacks the definition and the per-image outcomes
RUNNERS = ("pytorch_fp32", "tvm_fp32", "tvm_int8")
REQUIRED = {  # fields every compared report must have, as dotted key paths: their type
    "environment.cpu": str,
    "environment.machine": str,
    "environment.threads": int,
    "environment.target.kind": str,
    "definition.digest": str,
    "definition.model": str,
}
LATENCY = {"median_ms": 0.0, "p90_ms": 0.0, "mean_ms": 0.0}  # each > its bound, ms
NUMBERS = ("sqnr_db", "cosine", "max_abs_diff")  # numbers or null (not finite when written)
DIGEST = re.compile(r"[0-9a-f]{64}")  # sha256, hex
FRACTIONS = ("top1_agreement", "top5_agreement", "top1_accuracy", "top5_accuracy")
PER_IMAGE = {"top1_match": "top1_agreement", "top1_correct": "top1_accuracy"}
VERDICTS = ("PASS", "FAIL")
CHECKED = {  # sign-off check name -> (runner, metric) its value is (``signoff.checks``)
    "PyTorch FP32 non-finite logits": ("pytorch_fp32", "nonfinite_logits"),
    "FP32 non-finite logits": ("tvm_fp32", "nonfinite_logits"),
    "INT8 non-finite logits": ("tvm_int8", "nonfinite_logits"),
    "FP32 top-1 agreement": ("tvm_fp32", "top1_agreement"),
    "INT8 top-1 agreement": ("tvm_int8", "top1_agreement"),
    "INT8 top-5 agreement": ("tvm_int8", "top5_agreement"),
    "INT8 logits SQNR": ("tvm_int8", "sqnr_db"),
    "INT8 logits cosine": ("tvm_int8", "cosine"),
}


def check_report(report, path, what):
    """Check that ``report`` (the dict read from the file ``path``) is a qbench report that
    compare, save and history can use.

    Args:
        report: the parsed JSON.
        path: its file, for the messages.
        what: ``"report"`` or ``"baseline file"``, for the messages.
    Raises:
        UserError: not a dict with ``results``; ``schema_version`` not in
            ``SUPPORTED_SCHEMAS``; a required field missing; a field of the wrong type or
            out of range: the definition digest a sha256 hex string, the one of its fields;
            latency statistics and samples positive finite ms, with samples of equal length
            across runners (they pair by timing round); metrics a non-empty dict, fractions
            in [0, 1] with counts within their totals, SQNR, cosine and the largest
            difference numbers; per-image 0/1 lists as long as their metric's total, with as
            many ones as its count; the speed ratios (when ``speed`` is there) positive
            numbers and NOISY a bool; the sign-off verdict PASS or FAIL, and FAIL exactly
            when a check failed; each check's value its metric's (``CHECKED``, the top-1
            accuracy drop).
    """

    def fail(field, expected):
        raise UserError(f"{what} {path}: {field}: expected {expected}")

    if not isinstance(report, dict) or "results" not in report:
        fail("results", "a qbench report.json (no results found)")
    _check_schema(report.get("schema_version"), path, what)
    missing = [name for name in REQUIRED if _get(report, name.split(".")) is None]
    if missing:
        raise UserError(f"{what} {path}: damaged (missing {', '.join(missing)})")
    _check_created(report.get("created"), fail)
    _check_digest(report["definition"], fail)
    for name, kind in REQUIRED.items():
        value = _get(report, name.split("."))
        if not isinstance(value, kind) or isinstance(value, bool):
            fail(name, f"a {kind.__name__}, got {value!r}")
    results = report["results"]
    if not isinstance(results, dict):
        fail("results", f"a dict with the runners {', '.join(RUNNERS)}")
    for name in RUNNERS:
        _check_runner(name, results.get(name), fail)
    lengths = {name: len(results[name]["latency_samples_ms"]) for name in RUNNERS}
    if len(set(lengths.values())) > 1:
        fail(
            "results.*.latency_samples_ms",
            f"one sample per timing round for every runner (equal lengths), got {lengths}",
        )
    if report.get("speed") is not None:
        _check_speed(report["speed"], fail)
    _check_signoff(report.get("signoff"), fail)
    _check_values(report["signoff"]["checks"], results, fail)


def _check_digest(definition, fail):
    """The definition's digest: a sha256 hex string, and the one of its other fields (an
    edited field would otherwise be told apart from its run only by the digest, as another
    benchmark: "not comparable" where the file is damaged)."""
    digest = definition["digest"]
    if not (isinstance(digest, str) and DIGEST.fullmatch(digest)):
        fail("definition.digest", f"a sha256 hex digest, got {digest!r}")
    if definition_digest({k: v for k, v in definition.items() if k != "digest"}) != digest:
        fail(
            "definition",
            "the fields its digest was made of (a field edited after the run? rerun qbench "
            "run for a report to compare)",
        )


def _check_signoff(signoff, fail):
    """The verdict PASS or FAIL, and the one its checks give: PASS only when none failed (a
    verdict edited to PASS over a failed check would be stored as an accepted run)."""
    verdict = _get(signoff, ("verdict",))
    if verdict not in VERDICTS:
        fail("signoff.verdict", f"one of {', '.join(VERDICTS)}, got {verdict!r}")
    if signoff.get("shown") not in (True, False, None):
        fail("signoff.shown", f"true or false, got {signoff['shown']!r}")
    checks = signoff.get("checks")
    if not (isinstance(checks, list) and all(isinstance(c, dict) for c in checks)):
        fail("signoff.checks", "a list of checks")
    for i, check in enumerate(checks):
        _check_fields(check, f"signoff.checks[{i}]", fail)
        _check_passed(check, f"signoff.checks[{i}]", fail)
    names = [c["name"] for c in checks]
    lacking = [name for name in CHECKED if names.count(name) != 1]
    if lacking:
        fail(
            "signoff.checks",
            f"each of the checks every run makes once, got {lacking[0]!r} "
            f"{names.count(lacking[0])} times",
        )
    failed = [c.get("name") for c in checks if c.get("passed") is False]
    if (verdict == "PASS") == bool(failed):
        said = f"failed checks ({', '.join(map(str, failed))})" if failed else "no failed check"
        fail("signoff.verdict", f"the verdict its checks give, got {verdict} with {said}")


def _check_fields(check, where, fail):
    """A check's name a string, its value and limit finite numbers or null, passed true,
    false or null."""
    if not isinstance(check.get("name"), str):
        fail(f"{where}.name", f"a string, got {check.get('name')!r}")
    for key in ("value", "limit"):
        if check.get(key) is not None and not _number(check[key]):
            fail(f"{where}.{key}", f"a number or null, got {check[key]!r}")
    if check.get("passed") not in (True, False, None):
        fail(f"{where}.passed", f"true, false or null, got {check['passed']!r}")


def _check_passed(check, where, fail):
    """A check with a value: ``passed`` is what its value gives against its limit (an SQNR
    edited to 5 dB under a 17 dB limit and left passed would be stored as a good run); a
    speed-up's, what the high end of its interval gives (``signoff.checks``)."""
    value, limit, op = check.get("value"), check.get("limit"), check.get("op")
    if check.get("unit") == "speed-up" and "ci_high" in check:
        value = check["ci_high"]
    if not (_number(value) and _number(limit) and op in (">=", "<=")):
        return
    gives = value >= limit if op == ">=" else value <= limit
    if check.get("passed") is not gives:
        fail(f"{where}.passed", f"{gives} for {value} {op} {limit}, got {check.get('passed')}")


def _check_values(checks, results, fail):
    """Each check's value is its metric's in ``results``, to the 6 decimals a check keeps (an
    SQNR edited in the metrics but not in its check, or the reverse, would be stored as a
    run whose numbers say two things)."""
    for i, check in enumerate(checks):
        value = check.get("value")
        if check.get("name") == "INT8 top-1 accuracy drop":
            ref, int8 = (_get(results, (r, "metrics", "top1_accuracy")) for r in RUNNERS[::2])
            metric = _difference(ref, int8)
            field = "100 x (pytorch_fp32 - tvm_int8) results.*.metrics.top1_accuracy"
        elif check.get("name") in CHECKED:
            runner, key = CHECKED[check["name"]]
            metric = _get(results, (runner, "metrics", key))
            field = f"results.{runner}.metrics.{key}"
        else:
            continue
        if _number(value) and not _number(metric):  # a value without its metric (a check
            # of a metric, e.g. top-5 of 5 classes, may be not applicable: no value)
            fail(f"signoff.checks[{i}].value", f"{field} ({metric!r}) where given, got {value}")
        if _number(value) and abs(value - round(metric, 6)) > 1e-6:
            fail(f"signoff.checks[{i}].value", f"{field} ({metric:.6g}), got {value}")


def _difference(ref, int8):
    """Percentage points of top-1 accuracy lost, or None without both accuracies."""
    return 100.0 * (ref - int8) if _number(ref) and _number(int8) else None


def _check_schema(version, path, what):
    supported = ", ".join(map(str, SUPPORTED_SCHEMAS))
    said = _json_words(version)
    if not _is_int(version):
        raise UserError(
            f"{what} {path}: schema_version: expected an integer ({supported}), got {said} "
            "(the file was edited or not written by qbench)"
        )
    if version in OLD_SCHEMAS:
        raise UserError(
            f"{what} {path}: schema_version {version} has no run definition; supported: "
            f"{supported} (rerun with this qbench)"
        )
    if version not in SUPPORTED_SCHEMAS:
        raise UserError(
            f"{what} {path}: schema_version {version} is not one this qbench reads; "
            f"supported: {supported}"
            + (" (a newer qbench wrote it?)" if version > max(SUPPORTED_SCHEMAS) else "")
        )


def _json_words(value):
    """``value`` as JSON spells it (null, true, "2"), or as Python does where JSON cannot."""
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)


def _check_created(created, fail):
    try:
        dt.datetime.fromisoformat(created)
    except (TypeError, ValueError):
        fail("created", f"an ISO 8601 time, got {created!r}")


def _check_speed(speed, fail):
    ratios = speed.get("ratios") if isinstance(speed, dict) else None
    if not isinstance(ratios, dict):
        fail("speed.ratios", 'a dict of latency ratios ("tvm_int8/tvm_fp32": {ratio, ...})')
    for name, ratio in ratios.items():
        for key in ("ratio", "ci_low", "ci_high"):
            if not _positive(_get(ratio, (key,))):
                fail(f"speed.ratios.{name}.{key}", "a positive number")
    if not isinstance(speed.get("noisy"), bool):
        fail("speed.noisy", f"true or false, got {speed.get('noisy')!r}")


def _check_runner(name, entry, fail):
    where = f"results.{name}"
    if not isinstance(entry, dict):
        fail(where, "a dict with latency, latency_samples_ms, metrics and per_image")
    latency = entry.get("latency")
    if not isinstance(latency, dict):
        fail(f"{where}.latency", "a dict of " + ", ".join([*LATENCY, "std_ms", "runs"]))
    for key in LATENCY:
        if not _positive(latency.get(key)):
            fail(f"{where}.latency.{key}", "a positive number of ms")
    std = latency.get("std_ms")
    if not (_number(std) and std >= 0):
        fail(f"{where}.latency.std_ms", "a number of ms >= 0")
    if not (_is_int(latency.get("runs")) and latency["runs"] >= 1):
        fail(f"{where}.latency.runs", "an integer >= 1")
    samples = entry.get("latency_samples_ms")
    if not (isinstance(samples, list) and samples and all(map(_positive, samples))):
        fail(f"{where}.latency_samples_ms", "a non-empty list of positive numbers (ms)")
    _check_metrics(entry.get("metrics"), f"{where}.metrics", fail)
    _check_per_image(entry.get("per_image"), entry["metrics"], f"{where}.per_image", fail)


def _check_metrics(metrics, where, fail):
    if not (isinstance(metrics, dict) and metrics):
        fail(where, "a non-empty dict of metrics")
    for key in NUMBERS:
        if metrics.get(key) is not None and not _number(metrics[key]):
            fail(f"{where}.{key}", f"a number or null, got {metrics[key]!r}")
    if _number(metrics.get("cosine")) and abs(metrics["cosine"]) > 1 + 1e-9:
        fail(f"{where}.cosine", f"a cosine in [-1, 1], got {metrics['cosine']}")
    nonfinite = metrics.get("nonfinite_logits")
    if nonfinite is not None and not (_is_int(nonfinite) and nonfinite >= 0):
        fail(f"{where}.nonfinite_logits", f"a count >= 0, got {nonfinite!r}")
    for key in FRACTIONS:
        if key not in metrics:
            continue
        if not (_number(metrics[key]) and 0 <= metrics[key] <= 1):
            fail(f"{where}.{key}", "a fraction in [0, 1]")
        count, total = metrics.get(f"{key}_count"), metrics.get(f"{key}_total")
        if not (_is_int(count) and _is_int(total) and 0 <= count <= total and total >= 1):
            fail(
                f"{where}.{key}_count/_total", f"integers 0 <= count <= total, got {count}/{total}"
            )
        if abs(metrics[key] - count / total) > 1e-9:
            fail(
                f"{where}.{key}", f"its count over its total ({count}/{total}), got {metrics[key]}"
            )


def _check_per_image(per_image, metrics, where, fail):
    if not isinstance(per_image, dict):
        fail(where, "a dict of per-image 0/1 lists")
    for vector, metric in PER_IMAGE.items():
        outcomes = per_image.get(vector)
        if outcomes is None:
            continue
        if not (isinstance(outcomes, list) and all(_is_int(v) and v in (0, 1) for v in outcomes)):
            fail(f"{where}.{vector}", "a list of 0/1 integers, one per image")
        total, count = metrics.get(f"{metric}_total"), metrics.get(f"{metric}_count")
        if total is not None and len(outcomes) != total:
            fail(
                f"{where}.{vector}",
                f"one outcome per image ({metric}_total {total}), got {len(outcomes)}",
            )
        if count is not None and sum(outcomes) != count:
            fail(f"{where}.{vector}", f"{count} ones ({metric}_count), got {sum(outcomes)}")


def _get(obj, keys):
    for k in keys:
        obj = obj.get(k) if isinstance(obj, dict) else None
    return obj


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value):
    return _number(value) and value > 0
