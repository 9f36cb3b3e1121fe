"""The sign-off verdict: PASS only when every check holds."""


def signoff(
    results, min_top1_agreement, max_accuracy_drop, random_weights=False, quantized_layers=1
):
    """Check the builds against thresholds.

    Checks: the PyTorch reference's logits are finite (agreement with NaN means nothing);
    TVM FP32 and INT8 logits are finite; both builds reach ``min_top1_agreement``
    with PyTorch (an FP32 miss is a compiler or import fault, not quantization); the INT8
    top-1 accuracy drop stays within ``max_accuracy_drop`` where the data has labels; at
    least one layer runs in INT8; the weights are not random.

    Args:
        results: per-runner results with ``metrics`` (see ``pipeline._results``).
        min_top1_agreement: lowest allowed top-1 agreement with PyTorch, in [0, 1].
        max_accuracy_drop: highest allowed top-1 accuracy drop, percentage points.
        random_weights: the model runs on random initialisation; such a run is never
            signed off (its agreement says nothing about the trained model).
        quantized_layers: number of layers built in INT8.

    Returns:
        dict: ``verdict`` ("PASS"/"FAIL") and ``checks`` (name, value, op, limit, passed,
        unit). ``unit`` says how to read value and limit: ``"fraction"`` (in [0, 1], shown
        as %), ``"points"`` (percentage points), ``"count"``, or ``"flag"`` (1 yes, 0 no;
        ``detail`` says why).
    """
    reference = results["pytorch_fp32"]["metrics"].get("nonfinite_logits", 0)
    checks = [_check("PyTorch FP32 non-finite logits", reference, "<=", 0, "count")]
    for name in ("tvm_fp32", "tvm_int8"):
        m, label = results[name]["metrics"], name.removeprefix("tvm_").upper()
        checks.append(_check(f"{label} non-finite logits", m["nonfinite_logits"], "<=", 0, "count"))
        checks.append(
            _check(
                f"{label} top-1 agreement",
                m["top1_agreement"],
                ">=",
                min_top1_agreement,
                "fraction",
            )
        )
    int8, ref = results["tvm_int8"]["metrics"], results["pytorch_fp32"]["metrics"]
    if "top1_accuracy" in int8:
        drop = 100.0 * (ref["top1_accuracy"] - int8["top1_accuracy"])
        checks.append(_check("INT8 top-1 accuracy drop", drop, "<=", max_accuracy_drop, "points"))
    checks.append(_check("layers built in INT8", quantized_layers, ">=", 1, "count"))
    if random_weights:
        trained = _check("trained weights", 0, ">=", 1, "flag")
        checks.append({**trained, "detail": "random initialisation"})
    verdict = "PASS" if all(c["passed"] for c in checks) else "FAIL"
    return {"verdict": verdict, "checks": checks}


def _check(name, value, op, limit, unit):
    passed = value >= limit if op == ">=" else value <= limit
    return {
        "name": name,
        "value": round(float(value), 6),
        "op": op,
        "limit": limit,
        "passed": bool(passed),
        "unit": unit,
    }
