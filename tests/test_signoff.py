"""The sign-off verdict against hand-made results."""

from qbench.signoff import signoff


def _results(agreement, ref_acc=None, int8_acc=None, fp32_agreement=1.0, nonfinite=0):
    ref = {} if ref_acc is None else {"top1_accuracy": ref_acc}
    int8 = {"top1_agreement": agreement, "nonfinite_logits": nonfinite}
    if int8_acc is not None:
        int8["top1_accuracy"] = int8_acc
    fp32 = {"top1_agreement": fp32_agreement, "nonfinite_logits": 0}
    return {
        "pytorch_fp32": {"metrics": ref},
        "tvm_fp32": {"metrics": fp32},
        "tvm_int8": {"metrics": int8},
    }


def _failed(out):
    return [c["name"] for c in out["checks"] if not c["passed"]]


def test_pass_needs_every_check():
    assert signoff(_results(0.98, 0.90, 0.895), 0.97, 1.0)["verdict"] == "PASS"
    assert _failed(signoff(_results(0.96, 0.90, 0.90), 0.97, 1.0)) == ["INT8 top-1 agreement"]
    drop = signoff(_results(0.99, 0.90, 0.88), 0.97, 1.0)
    assert _failed(drop) == ["INT8 top-1 accuracy drop"]
    assert [(c["value"], c["unit"]) for c in drop["checks"] if not c["passed"]] == [(2.0, "points")]


def test_fp32_disagreement_and_nonfinite_logits_fail():
    assert _failed(signoff(_results(1.0, fp32_agreement=0.5), 0.97, 1.0)) == [
        "FP32 top-1 agreement"
    ]
    assert _failed(signoff(_results(1.0, nonfinite=3), 0.97, 1.0)) == ["INT8 non-finite logits"]


def test_unlabelled_data_skips_the_accuracy_check():
    names = [c["name"] for c in signoff(_results(1.0), 0.97, 1.0)["checks"]]
    assert not any("accuracy" in n for n in names)


def test_nothing_quantized_and_random_weights_are_never_signed_off():
    assert _failed(signoff(_results(1.0), 0.97, 1.0, quantized_layers=0)) == [
        "layers built in INT8"
    ]
    out = signoff(_results(1.0, 0.0, 0.0), 0.97, 1.0, random_weights=True)
    assert _failed(out) == ["trained weights"]
    (check,) = [c for c in out["checks"] if c["name"] == "trained weights"]
    assert check["unit"] == "flag" and check["detail"] == "random initialisation"
    assert check["value"] == 0 and check["op"] == ">=" and check["limit"] == 1


def test_every_check_names_the_unit_of_its_value_and_limit():
    out = signoff(_results(0.98, 0.90, 0.895), 0.97, 1.0, quantized_layers=3)
    units = {c["name"]: c["unit"] for c in out["checks"]}
    assert units == {
        "PyTorch FP32 non-finite logits": "count",
        "FP32 non-finite logits": "count",
        "FP32 top-1 agreement": "fraction",
        "INT8 non-finite logits": "count",
        "INT8 top-1 agreement": "fraction",
        "INT8 top-1 accuracy drop": "points",
        "layers built in INT8": "count",
    }
    keys = {"name", "value", "op", "limit", "passed", "unit"}
    assert all(set(c) == keys for c in out["checks"])  # the JSON keys of schema 1, plus unit


def test_non_finite_reference_logits_fail_the_sign_off():
    results = _results(1.0, 0.9, 0.9)
    results["pytorch_fp32"]["metrics"]["nonfinite_logits"] = 40
    out = signoff(results, 0.97, 1.0, quantized_layers=3)
    failed = [c["name"] for c in out["checks"] if not c["passed"]]
    assert out["verdict"] == "FAIL" and failed == ["PyTorch FP32 non-finite logits"]
