"""The sign-off verdict against hand-made results."""

from qbench.signoff import signoff


def _results(agreement, ref_acc=None, int8_acc=None):
    ref = {} if ref_acc is None else {"top1_accuracy": ref_acc}
    int8 = {"top1_agreement": agreement}
    if int8_acc is not None:
        int8["top1_accuracy"] = int8_acc
    return {"pytorch_fp32": {"metrics": ref}, "tvm_int8": {"metrics": int8}}


def test_pass_needs_every_check():
    assert signoff(_results(0.98, 0.90, 0.895), 0.97, 1.0)["verdict"] == "PASS"
    assert signoff(_results(0.96, 0.90, 0.90), 0.97, 1.0)["verdict"] == "FAIL"
    drop = signoff(_results(0.99, 0.90, 0.88), 0.97, 1.0)
    assert drop["verdict"] == "FAIL" and drop["checks"][1]["value"] == 2.0


def test_unlabelled_data_checks_agreement_only():
    assert [c["name"] for c in signoff(_results(1.0), 0.97, 1.0)["checks"]] == [
        "int8 top-1 agreement"
    ]


def test_random_weights_are_never_signed_off():
    out = signoff(_results(1.0, 0.0, 0.0), 0.97, 1.0, random_weights=True)
    assert out["verdict"] == "FAIL" and not out["checks"][-1]["passed"]
