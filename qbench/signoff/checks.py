"""The sign-off verdict: PASS only when every applicable check holds."""

from dataclasses import replace

from ..measure.intervals import CONFIDENCE, clopper_pearson, images_needed
from ..measure.metrics import TOP5
from ..measure.torch_int8 import TITLES
from .verdict import Check, Verdict


def signoff(
    results,
    limits,
    classes,
    random_weights=False,
    quantized_layers=1,
    simulated=False,
    speed=None,
):
    """Check the builds against ``limits``.

    Checks: the PyTorch reference's logits are finite (agreement with NaN means nothing);
    TVM FP32 and INT8 logits are finite; both builds reach ``limits.min_top1_agreement``
    with PyTorch (an FP32 miss is a compiler or import fault, not quantization); INT8
    top-5 agreement, logits SQNR and mean cosine reach their limits; the INT8 top-1
    accuracy drop stays within ``limits.max_accuracy_drop`` where the data has labels; at
    least one layer runs in INT8; the INT8 build is integer, not simulated; the weights are
    not random; with ``speed``, the INT8 speed-up and latency (``_speed_checks``). Where the
    reference's output is the same for every image (``input_independent``), the passed
    checks against it (agreements, SQNR, cosine) show nothing: PASS, NOT SHOWN. A single
    logit (``classes`` 1) has no top-1/top-5 agreement or accuracy,
    and up to 5 classes make top-5 agreement trivially 1: those checks are recorded as not
    applicable, and the fidelity checks (finite logits, SQNR, cosine) judge such outputs.

    Args:
        results: {runner name: ``results.RunnerResult``} (see ``pipeline.engine._results``).
        limits: the thresholds, a ``Limits``.
        classes: K of the (N, K) logits, >= 1.
        random_weights: the model runs on random initialisation; such a run is never
            signed off (its agreement says nothing about the trained model).
        quantized_layers: number of layers built in INT8.
        simulated: the INT8 graph is fake-quantized FP32 (``--simulate``); never signed off,
            and its speed checks do not apply.
        speed: the run's ``results.Speed`` (``speed.speed``), or None: a run not timed, without
            speed checks.

    Returns:
        ``verdict.Verdict``: ``verdict`` ("PASS"/"FAIL") and ``checks`` (``verdict.Check``:
        name, value, op, limit, passed, unit). ``passed`` is True, False, or None for a check
        that does not apply (its ``value`` is None and ``detail`` says why). ``unit`` says
        how to read value and limit: ``"fraction"`` (in [0, 1], shown as %), ``"points"``
        (percentage points), ``"dB"``, ``"cosine"`` (in [-1, 1]), ``"count"``,
        ``"speed-up"`` (a factor; the check also sets ``ci_low``, ``ci_high`` and
        ``confidence``), ``"ms"``, or ``"flag"`` (1 yes, 0 no; ``detail`` says why).
    """
    ref, int8 = results["pytorch_fp32"].metrics, results["tvm_int8"].metrics
    reference = ref.get("nonfinite_logits", 0)
    checks = [_check("PyTorch FP32 non-finite logits", reference, "<=", 0, "count")]
    for name in ("tvm_fp32", "tvm_int8"):
        m, label = results[name].metrics, name.removeprefix("tvm_").upper()
        checks.append(_check(f"{label} non-finite logits", m["nonfinite_logits"], "<=", 0, "count"))
        checks.append(
            _ranking(f"{label} top-1 agreement", m, limits.min_top1_agreement, classes, 1)
        )
    checks.append(_ranking("INT8 top-5 agreement", int8, limits.min_top5_agreement, classes, TOP5))
    if limits.min_decisive_top1_agreement is not None:
        checks.append(_decisive(int8, limits, classes))
    checks += _fidelity(int8, limits)
    if "top1_accuracy" in int8:
        checks.append(_accuracy_drop(ref, int8, limits.max_accuracy_drop, classes))
    checks.append(_check("layers built in INT8", quantized_layers, ">=", 1, "count"))
    if speed is not None:
        checks += _speed_checks(speed, results, limits, simulated)
        if limits.min_speedup_vs_torch_int8 is not None:
            checks.append(_versus_torch_int8(speed, limits.min_speedup_vs_torch_int8, simulated))
    if simulated:
        checks.append(
            _flag(
                "integer INT8 build",
                "simulated (fake-quantized FP32): proves nothing about the integer build",
            )
        )
    if random_weights:
        checks.append(_flag("trained weights", "random initialisation"))
    ignoring = ref.get("input_ignoring") or {}
    checks = [_unless_ignoring_passes(c, ignoring) for c in checks]
    if ref.get("input_independent"):
        checks = [_doubted(c, SAME_OUTPUT) if c.unit in COMPARED else c for c in checks]
    verdict = "FAIL" if any(c.passed is False for c in checks) else "PASS"
    return Verdict(verdict, tuple(checks))


SPEEDUP, LATENCY = "INT8 speed-up over TVM FP32", "INT8 median latency"
COMPARED = ("fraction", "dB", "cosine")  # the units of the checks against PyTorch's outputs
SAME_OUTPUT = (
    "PyTorch FP32 gives the same output for every image: the model ignores its input, and "
    "agreement with it shows nothing about quantization"
)


IGNORING_KEYS = {  # words of a check's name -> ``metrics.input_ignoring`` key
    "top-1 agreement": "top1_agreement",  # the decisive one too: a constant has no near ties
    "top-5 agreement": "top5_agreement",
    "logits SQNR": "sqnr_db",
    "logits cosine": "cosine",
}


def _unless_ignoring_passes(check, ignoring):
    """``check`` doubted when it passed and the best output that ignores its input
    (``metrics.input_ignoring``) would pass it too: it then shows nothing about
    quantization."""
    key = next((v for words, v in IGNORING_KEYS.items() if words in check.name), None)
    value = ignoring.get(key)
    if value is None or not check.passed:
        return check
    if not _check(check.name, value, check.op, check.limit, check.unit).passed:
        return check
    if check.unit == "fraction":
        what, shown = "always the reference's most frequent top classes", f"{100 * value:.1f} %"
    else:
        what = "always the reference's mean over the images"
        shown = f"{value:.1f} dB" if check.unit == "dB" else f"{value:.3f}"
    return _doubted(
        check,
        f"an output that ignores its input ({what}) would pass this check too ({shown}): at "
        "this limit the check cannot tell a build that lost its input from a good one",
    )


def _doubted(check, why):
    """``check`` with the doubt ``why`` when it passed (a failure stands as it is)."""
    return replace(check, doubt=why) if check.passed else check


def _speed_checks(speed, results, limits, simulated):
    """The INT8 speed-up over TVM FP32 (the inverse of the ``tvm_int8/tvm_fp32`` latency
    ratio; its confidence interval inverted likewise, exact for the bootstrap percentile
    interval) and, with ``limits.max_int8_latency_ms``, the INT8 median latency of one
    batch, ms (``results["tvm_int8"].latency.median_ms``).

    The speed-up fails only when the interval's high end (its best case) is below
    ``limits.min_int8_speedup``: noise alone cannot fail a run. Neither applies to a
    simulated (fake-quantized FP32) build.
    """
    lat = limits.max_int8_latency_ms
    if simulated:
        why = "simulated (fake-quantized FP32): its speed says nothing of INT8"
        checks = [_not_applicable(SPEEDUP, ">=", limits.min_int8_speedup, "speed-up", why)]
        if lat is not None:
            checks.append(_not_applicable(LATENCY, "<=", lat, "ms", why))
        return checks
    r = speed.ratios["tvm_int8/tvm_fp32"]
    low, high = 1 / r.ci_high, 1 / r.ci_low
    check = _check(SPEEDUP, 1 / r.ratio, ">=", limits.min_int8_speedup, "speed-up")
    passed = round(high, 6) >= limits.min_int8_speedup
    within = passed and check.value < limits.min_int8_speedup
    check = replace(
        check,
        passed=passed,
        ci_low=round(low, 6),
        ci_high=round(high, 6),
        confidence=r.confidence,
        detail="below the limit, but within the confidence interval" if within else None,
    )
    checks = [check]
    if lat is not None:
        int8_ms = results["tvm_int8"].latency.median_ms
        checks.append(_check(LATENCY, int8_ms, "<=", lat, "ms"))
    return checks


VERSUS_TORCH = "TVM INT8 speed-up over PyTorch INT8"


def fastest_torch_int8(speed):
    """(runner name, ``Ratio`` of TVM INT8 / it) of the fastest PyTorch INT8 runner timed
    beside TVM INT8 (the largest ratio), or None when none ran."""
    ratios = {
        key.split("/")[1]: r
        for key, r in speed.ratios.items()
        if key.startswith("tvm_int8/torch_int8_")
    }
    if not ratios:
        return None
    name = max(ratios, key=lambda k: ratios[k].ratio)
    return name, ratios[name]


def _versus_torch_int8(speed, limit, simulated):
    """TVM INT8's speed-up over the fastest PyTorch INT8 runner (the inverse of their paired
    latency ratio, its interval inverted); fails only when the interval's best case is
    below ``limit``, as the speed-up over FP32 does."""
    if simulated:
        why = "simulated (fake-quantized FP32): its speed says nothing of INT8"
        return _not_applicable(VERSUS_TORCH, ">=", limit, "speed-up", why)
    fastest = fastest_torch_int8(speed)
    if fastest is None:
        why = "no PyTorch INT8 runner ran (qbench run --torch-int8 fx,pt2e)"
        return _valueless(VERSUS_TORCH, ">=", limit, "speed-up", False, why)
    name, r = fastest
    check = _check(f"TVM INT8 speed-up over {TITLES[name]}", 1 / r.ratio, ">=", limit, "speed-up")
    low, high = 1 / r.ci_high, 1 / r.ci_low
    return replace(
        check,
        passed=round(high, 6) >= limit,
        ci_low=round(low, 6),
        ci_high=round(high, 6),
        confidence=r.confidence,
    )


def _ranking(name, metrics, limit, classes, k):
    """A top-``k`` agreement check; not applicable to a single logit, nor for k > 1 to at
    most k classes (every class is then in the top k)."""
    key = f"top{k}_agreement"
    if classes == 1:
        return _not_applicable(name, ">=", limit, "fraction", "a single output logit")
    if k > 1 and classes <= k:
        return _not_applicable(
            name, ">=", limit, "fraction", f"{classes} classes: always in the top {k}"
        )
    check = _check(name, metrics[key], ">=", limit, "fraction")
    if f"{key}_total" not in metrics:  # metrics without counts: no interval
        return check
    images = metrics[f"{key}_total"] // k  # top-5 counts 5 classes an image
    return with_interval(check, round(metrics[key] * images), images)


def _decisive(int8, limits, classes):
    """INT8 top-1 agreement with near-tie flips forgiven (``metrics.flips``); failed, with
    why, when no image is decisive (``decisive_images`` 0: a check that cannot fail)."""
    name = f"INT8 decisive top-1 agreement (margin {limits.near_tie_margin:g})"
    limit = limits.min_decisive_top1_agreement
    if classes == 1:
        return _not_applicable(name, ">=", limit, "fraction", "a single output logit")
    if "decisive_top1_agreement" not in int8:
        return _valueless(
            name,
            ">=",
            limit,
            "fraction",
            False,
            "not computed: INT8 or PyTorch FP32 logits are not finite",
        )
    images = int8["decisive_top1_agreement_total"]
    if int8.get("decisive_images") == 0:
        why = (
            f"cannot fail: none of the {images} images has a PyTorch FP32 margin of "
            f"{limits.near_tie_margin:g} or more, so every flip would be a near-tie"
        )
        return _valueless(name, ">=", limit, "fraction", False, why)
    check = _check(name, int8["decisive_top1_agreement"], ">=", limit, "fraction")
    return with_interval(check, int8["decisive_top1_agreement_count"], images)


def with_interval(check, count, images):
    """``check`` (an agreement fraction over ``images``, ``count`` of them agreeing) with its
    95 % Clopper-Pearson interval, its sample and the images its limit needs
    (``intervals``). A top-5 agreement is counted per image here (its share of PyTorch's 5
    classes, rounded), as images, not class slots, are the independent trials."""
    low, high = clopper_pearson(count, images)
    return replace(
        check,
        ci_low=round(low, 6),
        ci_high=round(high, 6),
        confidence=CONFIDENCE,
        sample=images,
        needed=images_needed(check.limit),
    )


def _fidelity(int8, limits):
    """INT8 logits SQNR (dB; identical logits count as infinite) and mean cosine against
    PyTorch's. Both are absent when the INT8 or PyTorch logits are not finite: the checks
    then fail; or when a single value does not vary over the images (``metrics.NO_SPREAD``):
    not applicable."""
    checks = (
        ("INT8 logits SQNR", "sqnr_db", limits.min_sqnr_db, "dB"),
        ("INT8 logits cosine", "cosine", limits.min_cosine, "cosine"),
    )
    if "cosine" not in int8:
        why = "not computed: INT8 or PyTorch FP32 logits are not finite"
        return [_valueless(name, ">=", limit, unit, False, why) for name, _, limit, unit in checks]
    if int8.get("unjudged"):  # a single value that does not vary over the images
        return [
            _not_applicable(n, ">=", limit, unit, int8["unjudged"]) for n, _, limit, unit in checks
        ]
    values = {
        "sqnr_db": float("inf") if int8["sqnr_db"] is None else int8["sqnr_db"],
        "cosine": int8["cosine"],
    }
    return [_check(name, values[key], ">=", limit, unit) for name, key, limit, unit in checks]


def _accuracy_drop(ref, int8, limit, classes):
    """INT8's top-1 accuracy drop from PyTorch FP32's, percentage points; not shown when FP32
    accuracy itself is near chance (``near_chance``)."""
    name = "INT8 top-1 accuracy drop"
    if classes == 1:
        return _not_applicable(name, "<=", limit, "points", "a single output logit")
    drop = 100.0 * (ref["top1_accuracy"] - int8["top1_accuracy"])
    return replace(_check(name, drop, "<=", limit, "points"), doubt=near_chance(ref, classes))


CHANCE_FACTOR = 2  # FP32 accuracy whose 95 % interval reaches this many times chance: near it


def near_chance(ref, classes):
    """Why PyTorch FP32's top-1 accuracy says the labels or weights are wrong, or None.

    Chance is one in the classes a guess picks from: the labels present among the images
    (``labels_present``, when at least 2), at most the model's ``classes``. Accuracy is near
    chance when the low end of its 95 % Clopper-Pearson interval is at most
    ``CHANCE_FACTOR`` times it: a trained model on correctly labelled images is far above.
    """
    present = ref.get("labels_present", classes)
    chance = 1 / (min(present, classes) if present >= 2 else classes)
    low = ref["top1_accuracy_ci95"][0] if "top1_accuracy_ci95" in ref else ref["top1_accuracy"]
    if low > CHANCE_FACTOR * chance:
        return None
    return (
        f"PyTorch FP32 top-1 accuracy {100 * ref['top1_accuracy']:.1f} % is near chance "
        f"({100 * chance:.1f} %, one in {round(1 / chance)} classes): the labels or the weights "
        "are likely wrong (class folders named by position rather than WordNet id or class "
        "index, a labels.csv of another class order, untrained weights)"
    )


def _flag(name, detail):
    """A failing yes/no check (value 0 = no), ``detail`` saying why."""
    return replace(_check(name, 0, ">=", 1, "flag"), detail=detail)


def _not_applicable(name, op, limit, unit, why):
    return _valueless(name, op, limit, unit, None, f"not applicable: {why}")


def _valueless(name, op, limit, unit, passed, detail):
    """A check without a value: ``passed`` None (not applicable) or False; ``detail`` why."""
    return Check(name, None, op, limit, passed, unit, detail=detail)


def _check(name, value, op, limit, unit):
    """A check of ``value`` rounded to 6 decimals, the value the report shows: float noise
    (100 x (0.90 - 0.89) = 1.0000000000000009 points) neither fails nor passes a limit."""
    value = round(float(value), 6)
    passed = value >= limit if op == ">=" else value <= limit
    return Check(name, value, op, limit, bool(passed), unit)
