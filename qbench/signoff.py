"""The sign-off verdict: PASS only when every check holds."""


def signoff(results, min_top1_agreement, max_accuracy_drop, random_weights=False):
    """Check the INT8 build against thresholds.

    Args:
        results: per-runner results with ``metrics`` (see ``pipeline._results``).
        min_top1_agreement: lowest allowed INT8 top-1 agreement with PyTorch, in [0, 1].
        max_accuracy_drop: highest allowed top-1 accuracy drop, percentage points
            (checked only when the data has labels).
        random_weights: the model runs on random initialisation; such a run is never
            signed off (its agreement says nothing about the trained model).

    Returns:
        dict: ``verdict`` ("PASS"/"FAIL") and ``checks`` (name, value, limit, passed).
    """
    int8 = results["tvm_int8"]["metrics"]
    checks = [_check("int8 top-1 agreement", int8["top1_agreement"], ">=", min_top1_agreement)]
    ref = results["pytorch_fp32"]["metrics"]
    if "top1_accuracy" in int8:
        drop = 100.0 * (ref["top1_accuracy"] - int8["top1_accuracy"])
        checks.append(_check("int8 top-1 accuracy drop (points)", drop, "<=", max_accuracy_drop))
    if random_weights:
        checks.append(_check("random weights (1 = yes)", 1, "<=", 0))
    verdict = "PASS" if all(c["passed"] for c in checks) else "FAIL"
    return {"verdict": verdict, "checks": checks}


def _check(name, value, op, limit):
    passed = value >= limit if op == ">=" else value <= limit
    return {
        "name": name,
        "value": round(float(value), 6),
        "op": op,
        "limit": limit,
        "passed": bool(passed),
    }
