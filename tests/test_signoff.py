"""The sign-off verdict against hand-made results and hand-made logits."""

import math

import numpy as np
import pytest

from qbench.cli.main import _parser, main
from qbench.cli.runopts import run_options
from qbench.measure.metrics import (
    LOGITS,
    accuracy_metrics,
    compare_logits,
    input_ignoring,
    input_independent,
)
from qbench.measure.results import Latency, Ratio, RunnerResult, Speed
from qbench.signoff.checks import signoff
from qbench.signoff.limits import Limits

LOOSE = Limits(0.0, 100.0, 0.0, -1.0, 0.0)  # every threshold at the end of its range


def _results(agreement, ref_acc=None, int8_acc=None, fp32_agreement=1.0, nonfinite=0):
    ref = {} if ref_acc is None else {"top1_accuracy": ref_acc}
    int8 = {"top1_agreement": agreement, "nonfinite_logits": nonfinite}
    int8 |= {"top5_agreement": 0.98, "cosine": 0.999, "sqnr_db": 30.0}
    if int8_acc is not None:
        int8["top1_accuracy"] = int8_acc
    fp32 = {"top1_agreement": fp32_agreement, "nonfinite_logits": 0}
    return _runners(ref, fp32, int8)


def _runners(ref, fp32, int8, int8_median_ms=5.0):
    """{runner name: ``RunnerResult``} with these metrics; one latency sample each, ms."""
    medians = {"pytorch_fp32": 10.0, "tvm_fp32": 5.0, "tvm_int8": int8_median_ms}
    metrics = {"pytorch_fp32": ref, "tvm_fp32": fp32, "tvm_int8": int8}
    return {
        name: RunnerResult(name, Latency(ms, ms, ms, 0.0, 1), (ms,), metrics[name], {})
        for name, ms in medians.items()
    }


def _compared(ref, out, labels=None):
    """Results of a run whose PyTorch logits are ``ref``, TVM FP32 equal to them and TVM
    INT8 ``out`` (the metrics as ``pipeline.engine._results`` computes them)."""
    ref, out = np.asarray(ref, np.float64), np.asarray(out, np.float64)
    reference = {"nonfinite_logits": 0}
    if labels is not None:
        reference["top1_accuracy"] = float(np.mean(ref.argmax(1) == labels))
    return _runners(reference, compare_logits(ref, ref, labels), compare_logits(ref, out, labels))


AGAINST_PYTORCH = [  # the checks against PyTorch FP32's output, in the sign-off's order
    "FP32 top-1 agreement",
    "INT8 top-1 agreement",
    "INT8 top-5 agreement",
    "INT8 logits SQNR",
    "INT8 logits cosine",
]


def _limits(**changed):
    return Limits(**{**vars(LOOSE), **changed})


def _failed(out):
    return [c.name for c in out.checks if c.passed is False]


def _check(out, name):
    (check,) = [c for c in out.checks if c.name == name]
    return check


def test_pass_needs_every_check():
    limits = Limits(min_top1_agreement=0.97, max_accuracy_drop=1.0)
    assert signoff(_results(0.98, 0.90, 0.895), limits, 1000).verdict == "PASS"
    out = signoff(_results(0.96, 0.90, 0.90), limits, 1000)
    assert _failed(out) == ["INT8 top-1 agreement"]
    drop = signoff(_results(0.99, 0.90, 0.88), limits, 1000)
    assert _failed(drop) == ["INT8 top-1 accuracy drop"]
    assert [(c.value, c.unit) for c in drop.checks if not c.passed] == [(2.0, "points")]


def test_a_drop_equal_to_its_limit_passes_despite_float_noise():
    # 90 % -> 89 % is 1 point; in floats 100 x (0.90 - 0.89) = 1.0000000000000009.
    out = signoff(_results(1.0, 0.90, 0.89), Limits(max_accuracy_drop=1.0), 1000)
    assert out.verdict == "PASS" and _check(out, "INT8 top-1 accuracy drop").value == 1.0


def test_fp32_disagreement_and_nonfinite_logits_fail():
    assert _failed(signoff(_results(1.0, fp32_agreement=0.5), Limits(), 1000)) == [
        "FP32 top-1 agreement"
    ]
    assert _failed(signoff(_results(1.0, nonfinite=3), Limits(), 1000)) == [
        "INT8 non-finite logits"
    ]


def test_unlabelled_data_skips_the_accuracy_check():
    names = [c.name for c in signoff(_results(1.0), Limits(), 1000).checks]
    assert not any("accuracy" in n for n in names)


def test_nothing_quantized_and_random_weights_are_never_signed_off():
    assert _failed(signoff(_results(1.0), Limits(), 1000, quantized_layers=0)) == [
        "layers built in INT8"
    ]
    out = signoff(_results(1.0, 0.0, 0.0), Limits(), 1000, random_weights=True)
    assert _failed(out) == ["trained weights"]
    check = _check(out, "trained weights")
    assert check.unit == "flag" and check.detail == "random initialisation"
    assert check.value == 0 and check.op == ">=" and check.limit == 1


def test_a_simulated_int8_build_is_never_signed_off():
    out = signoff(_results(1.0, 0.9, 0.9), Limits(), 1000, quantized_layers=3, simulated=True)
    assert out.verdict == "FAIL" and _failed(out) == ["integer INT8 build"]
    check = _check(out, "integer INT8 build")
    assert check.unit == "flag" and check.value == 0
    assert "simulated (fake-quantized FP32)" in check.detail
    assert "proves nothing about the integer build" in check.detail


def test_every_check_names_the_unit_of_its_value_and_limit():
    out = signoff(_results(0.98, 0.90, 0.895), Limits(), 1000, quantized_layers=3)
    units = {c.name: c.unit for c in out.checks}
    assert units == {
        "PyTorch FP32 non-finite logits": "count",
        "FP32 non-finite logits": "count",
        "FP32 top-1 agreement": "fraction",
        "INT8 non-finite logits": "count",
        "INT8 top-1 agreement": "fraction",
        "INT8 top-5 agreement": "fraction",
        "INT8 logits SQNR": "dB",
        "INT8 logits cosine": "cosine",
        "INT8 top-1 accuracy drop": "points",
        "layers built in INT8": "count",
    }
    keys = {"name", "value", "op", "limit", "passed", "unit"}
    assert all(set(c.to_json()) == keys for c in out.checks)  # the JSON keys of schema 1, plus unit


def test_non_finite_reference_logits_fail_the_sign_off():
    results = _results(1.0, 0.9, 0.9)
    results["pytorch_fp32"].metrics["nonfinite_logits"] = 40
    out = signoff(results, Limits(), 1000, quantized_layers=3)
    assert out.verdict == "FAIL" and _failed(out) == ["PyTorch FP32 non-finite logits"]


# One image, K = 10, distinct logits; INT8 moves the last logit from -5 to -4.5 (order kept).
REF = [[4.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0]]
NOISY = [[4.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0, -3.0, -4.0, -4.5]]
# Judged on centred logits (each row less its mean; metrics.judged): ref's mean is -0.5, so
# r = [4.5, 3.5, ..., -4.5], signal 2 x (4.5^2 + 3.5^2 + 2.5^2 + 1.5^2 + 0.5^2) = 82.5; out's
# mean is -0.45, so the noise d = [-0.05] x 9 + [0.45]: 9 x 0.0025 + 0.2025 = 0.225.
NOISY_SQNR_DB = 10 * math.log10(82.5 / 0.225)  # 25.64 dB
# r . d = -0.05 x 4.5 + 0.45 x -4.5 = -2.25: r . o = 80.25; |o|^2 = 82.5 - 4.5 + 0.225 = 78.225.
NOISY_COSINE = 80.25 / math.sqrt(82.5 * 78.225)  # 0.99895


def test_sqnr_passes_at_its_limit_and_fails_above_it():
    results = _compared(REF, NOISY)
    at = signoff(results, _limits(min_sqnr_db=round(NOISY_SQNR_DB, 6)), 10)
    assert at.verdict == "PASS"
    check = _check(at, "INT8 logits SQNR")
    assert check.value == pytest.approx(NOISY_SQNR_DB, abs=1e-6) and check.op == ">="
    above = signoff(results, _limits(min_sqnr_db=round(NOISY_SQNR_DB, 6) + 1e-6), 10)
    assert _failed(above) == ["INT8 logits SQNR"]


def test_identical_logits_have_infinite_sqnr_and_pass():
    out = signoff(_compared(REF, REF), _limits(min_sqnr_db=200.0, min_cosine=1.0), 10)
    assert out.verdict == "PASS" and _check(out, "INT8 logits SQNR").value == math.inf


def test_cosine_passes_at_its_limit_and_fails_above_it():
    results = _compared(REF, NOISY)
    at = signoff(results, _limits(min_cosine=round(NOISY_COSINE, 6)), 10)
    assert at.verdict == "PASS"
    assert _check(at, "INT8 logits cosine").value == pytest.approx(NOISY_COSINE, abs=1e-6)
    above = signoff(results, _limits(min_cosine=round(NOISY_COSINE, 6) + 1e-6), 10)
    assert _failed(above) == ["INT8 logits cosine"]


def test_top5_agreement_passes_at_its_limit_and_fails_above_it():
    # Image 2: INT8 swaps the 5th and 6th class (0 and -1), so 4 of PyTorch's top 5 are in
    # INT8's top 5: agreement (5/5 + 4/5) / 2 = 0.9; top-1 stays the same.
    swapped = [4.0, 3.0, 2.0, 1.0, -1.0, 0.0, -2.0, -3.0, -4.0, -5.0]
    results = _compared(REF * 2, [REF[0], swapped])
    at = signoff(results, _limits(min_top1_agreement=1.0, min_top5_agreement=0.9), 10)
    assert at.verdict == "PASS" and _check(at, "INT8 top-5 agreement").value == 0.9
    above = signoff(results, _limits(min_top5_agreement=0.9 + 1e-6), 10)
    assert _failed(above) == ["INT8 top-5 agreement"]


def test_fidelity_checks_of_nonfinite_int8_logits_fail_with_the_reason():
    nan = [[4.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0, -3.0, -4.0, math.nan]]
    out = signoff(_compared(REF, nan), LOOSE, 10)
    failed = _failed(out)
    assert {"INT8 non-finite logits", "INT8 logits SQNR", "INT8 logits cosine"} <= set(failed)
    for name in ("INT8 logits SQNR", "INT8 logits cosine"):
        check = _check(out, name)
        assert check.value is None and "not finite" in check.detail


# K = 1: one logit per image. INT8 is off by 0.25 on two of three images.
SINGLE = [[2.0], [-1.0], [0.5]]
SINGLE_INT8 = [[2.25], [-0.75], [0.5]]
# judged less the reference's mean over the images (0.5): (1.5, -1.5, 0) against (1.75,
# -1.25, 0). SQNR 10 log10(4.5 / 0.125) = 15.56 dB; one cosine over the three values (each
# row's own is +-1): 4.5 / sqrt(4.5 x 4.625) = 0.9864
SINGLE_SQNR_DB = 10 * math.log10((2.25 + 2.25) / (0.0625 + 0.0625))
SINGLE_COSINE = (2.625 + 1.875) / math.sqrt(4.5 * (3.0625 + 1.5625))


def test_a_single_logit_is_judged_by_fidelity_not_ranking():
    labels = np.zeros(3, dtype=np.int64)
    results = _compared(SINGLE, SINGLE_INT8, labels)
    limits = _limits(min_top1_agreement=1.0, min_top5_agreement=1.0, max_accuracy_drop=0.0)
    fidelity = _limits(min_sqnr_db=round(SINGLE_SQNR_DB, 6), min_cosine=round(SINGLE_COSINE, 6))
    out = signoff(results, fidelity, 1)
    assert out.verdict == "PASS"
    ranking = ("FP32 top-1 agreement", "INT8 top-1 agreement", "INT8 top-5 agreement")
    for name in (*ranking, "INT8 top-1 accuracy drop"):
        check = _check(out, name)
        assert check.passed is None and check.value is None
        assert check.detail == "not applicable: a single output logit"
    assert _check(out, "INT8 logits cosine").value == pytest.approx(SINGLE_COSINE, abs=1e-6)
    assert signoff(results, limits, 1).verdict == "PASS"  # ranking limits do not apply
    low = signoff(results, _limits(min_sqnr_db=round(SINGLE_SQNR_DB, 6) + 1e-6), 1)
    assert _failed(low) == ["INT8 logits SQNR"]
    flipped = _compared(SINGLE, [[2.0], [1.0], [0.5]], labels)  # (1.5, .5, 0): 1.5 / sqrt 11.25
    out = signoff(flipped, _limits(min_cosine=0.7), 1)
    assert _failed(out) == ["INT8 logits cosine"]
    assert _check(out, "INT8 logits cosine").value == pytest.approx(
        1.5 / math.sqrt(11.25), abs=1e-6
    )


def test_up_to_five_classes_have_no_top5_check():
    ref = [[1.0, 0.0, -1.0], [0.0, 2.0, 1.0]]
    out = [[1.0, 0.0, -1.0], [0.0, 0.5, 1.0]]  # image 2: INT8's top-1 is class 2, not 1
    out = signoff(_compared(ref, out), _limits(min_top1_agreement=0.6), 3)
    top5 = _check(out, "INT8 top-5 agreement")
    assert top5.passed is None and top5.detail == ("not applicable: 3 classes: always in the top 5")
    assert _failed(out) == ["INT8 top-1 agreement"]  # 1 of 2 = 0.5 < 0.6
    assert _check(out, "INT8 top-1 agreement").value == 0.5


def test_a_single_value_that_does_not_vary_over_the_images_is_not_judged():
    """K = 1 on one image (a break-test find: SQNR -inf, a FAIL, beside a cosine of 1.0):
    less its mean over the images the reference is 0, so the SQNR and cosine are not
    applicable, and say why; the other checks still judge."""
    results = _compared([[2.0]], [[2.5]])
    assert results["tvm_int8"].metrics["sqnr_db"] is None
    out = signoff(results, LOOSE, 1)
    for name in ("INT8 logits SQNR", "INT8 logits cosine"):
        check = _check(out, name)
        assert check.passed is None and check.value is None
        assert check.detail.startswith("not applicable: the reference's single value is the same")
    assert _failed(out) == [] and _check(out, "INT8 non-finite logits").passed is True


def test_the_signoff_table_shows_units_and_not_applicable_checks():
    from qbench.report.tables import signoff_table

    results = _compared(SINGLE, SINGLE_INT8)
    verdict = signoff(results, _limits(min_sqnr_db=17.0, min_cosine=0.99), 1)
    rows = {line.split("  ")[0]: line for line in signoff_table(verdict, "simple").splitlines()}
    assert "15.6 dB" in rows["INT8 logits SQNR"] and ">= 17.0 dB" in rows["INT8 logits SQNR"]
    assert rows["INT8 logits SQNR"].endswith("FAIL")
    assert "0.986 " in rows["INT8 logits cosine"] and ">= 0.990" in rows["INT8 logits cosine"]
    top1 = rows["INT8 top-1 agreement"]
    assert "not applicable: a single output logit" in top1 and top1.endswith("n/a")


@pytest.mark.parametrize(
    "flag, value, text",
    [
        ("--min-sqnr", "-1", "--min-sqnr -1.0: must be a finite number >= 0"),
        ("--min-sqnr", "nan", "--min-sqnr nan: must be a finite number >= 0"),
        ("--min-cosine", "1.5", "--min-cosine 1.5: must be a finite number in [-1, 1]"),
        ("--min-cosine", "-2", "--min-cosine -2.0: must be a finite number in [-1, 1]"),
        (
            "--min-top5-agreement",
            "2",
            "--min-top5-agreement 2.0: must be a finite number in [0, 1]",
        ),
        ("--min-top5-agreement", "inf", "--min-top5-agreement inf: must be a finite number"),
    ],
)
def test_bad_signoff_limits_exit_2_naming_the_flag_and_range(tmp_path, capsys, flag, value, text):
    folders = ["--cache-dir", str(tmp_path / "cal"), "--reports-dir", str(tmp_path / "rep")]
    assert main(["run", "--model", "resnet18", *folders, flag, value]) == 2
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "cal").exists()  # refused before anything ran


def test_signoff_flags_reach_the_run_options_with_limits_defaults():
    opts = run_options(_parser().parse_args(["run", "--model", "resnet18"]))
    assert opts.limits == Limits()
    args = "--min-sqnr 25 --min-cosine 0.995 --min-top5-agreement 0.95".split()
    opts = run_options(_parser().parse_args(["run", "--model", "resnet18", *args]))
    assert (opts.limits.min_sqnr_db, opts.limits.min_cosine, opts.limits.min_top5_agreement) == (
        25.0,
        0.995,
        0.95,
    )


def _speed(ratio, low, high):
    """A run's ``Speed`` whose TVM INT8 / TVM FP32 latency ratio is ``ratio`` (CI low-high)."""
    return Speed({"tvm_int8/tvm_fp32": Ratio(ratio, low, high, 0.95)}, False, None)


def _timed(int8_median_ms=5.0):
    metrics = [r.metrics for r in _results(1.0).values()]
    return _runners(*metrics, int8_median_ms)


SPEEDUP = "INT8 speed-up over TVM FP32"


def test_int8_wholly_slower_than_its_limit_fails_the_speed_check():
    out = signoff(_timed(), Limits(), 1000, quantized_layers=3, speed=_speed(2.0, 1.6, 2.5))
    assert _failed(out) == [SPEEDUP]
    check = _check(out, SPEEDUP)  # speed-up = 1 / ratio: 0.5, CI 1/2.5-1/1.6 = 0.4-0.625
    assert check.value == 0.5 and check.op == ">=" and check.limit == 1.0
    assert (check.ci_low, check.ci_high) == (0.4, 0.625) and check.unit == "speed-up"
    accepted = signoff(
        _timed(), Limits(min_int8_speedup=0), 1000, quantized_layers=3, speed=_speed(2.0, 1.6, 2.5)
    )
    assert accepted.verdict == "PASS"  # --min-int8-speedup 0 accepts a slower INT8 build


def test_a_speed_up_below_the_limit_within_its_ci_passes():
    """Ratio 1.25 (INT8 slower on the medians), but the CI 0.8-1.6 gives a best case
    speed-up of 1/0.8 = 1.25 >= 1.1: noise alone does not fail a run."""
    limits = Limits(min_int8_speedup=1.1)
    out = signoff(_timed(), limits, 1000, quantized_layers=3, speed=_speed(1.25, 0.8, 1.6))
    check = _check(out, SPEEDUP)
    assert out.verdict == "PASS" and check.passed and check.value == 0.8
    assert "within the confidence interval" in check.detail
    limits = Limits(min_int8_speedup=1.3)  # above the best case 1.25: FAIL
    out = signoff(_timed(), limits, 1000, quantized_layers=3, speed=_speed(1.25, 0.8, 1.6))
    assert _failed(out) == [SPEEDUP]


def test_int8_latency_limit_is_checked_only_when_given():
    speed = _speed(0.5, 0.45, 0.55)
    names = [
        c.name
        for c in signoff(_timed(12.0), Limits(), 1000, quantized_layers=3, speed=speed).checks
    ]
    assert "INT8 median latency" not in names and SPEEDUP in names
    out = signoff(
        _timed(12.0), Limits(max_int8_latency_ms=10.0), 1000, quantized_layers=3, speed=speed
    )
    assert _failed(out) == ["INT8 median latency"]
    check = _check(out, "INT8 median latency")
    assert (check.value, check.op, check.limit, check.unit) == (12.0, "<=", 10.0, "ms")
    out = signoff(
        _timed(12.0), Limits(max_int8_latency_ms=12.0), 1000, quantized_layers=3, speed=speed
    )
    assert out.verdict == "PASS"


def test_speed_checks_of_a_simulated_build_do_not_apply():
    limits = Limits(max_int8_latency_ms=1.0)
    slow = _speed(3.0, 2.9, 3.1)
    out = signoff(_timed(12.0), limits, 1000, quantized_layers=3, simulated=True, speed=slow)
    assert _failed(out) == ["integer INT8 build"]
    for name in (SPEEDUP, "INT8 median latency"):
        check = _check(out, name)
        assert check.passed is None and check.value is None
        assert check.detail.startswith("not applicable: simulated")


def test_the_signoff_table_shows_the_speed_up_with_its_ci():
    from qbench.report.tables import signoff_table

    out = signoff(
        _timed(12.0),
        Limits(max_int8_latency_ms=10.0),
        1000,
        quantized_layers=3,
        speed=_speed(2.0, 1.6, 2.5),
    )
    rows = {line.split("  ")[0]: line for line in signoff_table(out, "simple").splitlines()}
    assert "0.50x (95 % CI 0.40-0.62)" in rows[SPEEDUP] and ">= 1.00x" in rows[SPEEDUP]
    assert (
        "12.00 ms" in rows["INT8 median latency"] and "<= 10.00 ms" in rows["INT8 median latency"]
    )


@pytest.mark.parametrize(
    "flag, value, text",
    [
        ("--min-int8-speedup", "-1", "--min-int8-speedup -1.0: must be a finite number >= 0"),
        ("--max-int8-latency-ms", "-5", "--max-int8-latency-ms -5.0: must be a finite number > 0"),
        ("--max-int8-latency-ms", "inf", "--max-int8-latency-ms inf: must be a finite number"),
    ],
)
def test_bad_speed_limits_exit_2(tmp_path, capsys, flag, value, text):
    test_bad_signoff_limits_exit_2_naming_the_flag_and_range(tmp_path, capsys, flag, value, text)


def test_speed_flags_reach_the_run_options():
    opts = run_options(_parser().parse_args(["run", "--model", "resnet18"]))
    assert (opts.limits.min_int8_speedup, opts.limits.max_int8_latency_ms) == (1.0, None)
    args = "--min-int8-speedup 1.2 --max-int8-latency-ms 80".split()
    opts = run_options(_parser().parse_args(["run", "--model", "resnet18", *args]))
    assert opts.limits == Limits(min_int8_speedup=1.2, max_int8_latency_ms=80.0)


def test_a_non_finite_reference_leaves_no_comparison_looking_ok():
    """A PyTorch FP32 reference holding NaN (one image of two) compares with nothing: the
    INT8 build's agreement is 0 (not its 100 % agreement with argmax 0 of the NaN row), its
    SQNR and cosine are not computed (the NaN row's cosine had counted as 1) and fail; the
    NaN row's top-1 is no label's, so PyTorch's accuracy is 1 of 2 by hand."""
    ref = np.array([[np.nan, 1.0, 0.0], [0.0, 2.0, 1.0]])
    out = np.array([[1.0, 0.5, 0.0], [0.0, 2.0, 1.0]])
    m = compare_logits(ref, out, labels=np.array([0, 1]))
    assert (m["top1_agreement"], m["top1_agreement_count"]) == (0.0, 0)
    assert "cosine" not in m and "sqnr_db" not in m
    assert accuracy_metrics(ref, np.array([0, 1]))["top1_accuracy"] == 0.5
    results = _runners({"nonfinite_logits": 1}, m, m)
    out = signoff(results, LOOSE, 3)
    assert out.verdict == "FAIL"
    for name in ("INT8 logits SQNR", "INT8 logits cosine"):
        check = _check(out, name)
        assert check.passed is False and "PyTorch FP32 logits are not finite" in check.detail


@pytest.mark.parametrize(
    "ref, same",
    [
        ([[1.0, 2.0, -3.0]] * 4, True),  # one row four times
        ([[1.0, 2.0, -3.0], [1.0, 2.0 + 4e-7, -3.0]], True),  # spread 4e-7 <= 2.5e-7 x 2
        ([[1.0, 2.0, -3.0], [1.0, 2.0 + 1e-6, -3.0]], False),  # spread 1e-6 > 5e-7
        # logits 1e5 + 0.04 tanh(...) in float32: 10 ulps of spread (> 2.5e-7 x 1e5)
        ([[1e5 + 0.0391, 1e5, 1e5 - 0.0391], [1e5 + 0.0391, 1e5, 1e5 + 0.0391]], False),
        # a spread within 2.5e-7 x 1e5 = 0.025, but the top-1 class moves
        ([[1e5 + 0.01, 1e5], [1e5, 1e5 + 0.01]], False),
        ([[1e5 + 0.01, 1e5], [1e5 + 0.01, 1e5]], True),  # no spread at all
        ([[1e5 + 0.4], [1e5 - 0.3], [1e5 + 0.1]], False),  # an input's 0.7 on an offset of 1e5
        ([[1e5, 0.01], [1e5, 0.02], [1e5, 0.015]], False),  # constant 1e5 beside a varying 0.01
        ([[1.0, 2.0, -3.0]], False),  # one image: nothing to compare
        ([[1.0, np.nan], [1.0, np.nan]], False),  # non-finite: its own check fails
    ],
)
def test_an_output_the_same_for_every_image_is_input_independent(ref, same):
    assert input_independent(np.asarray(ref)) is same


def test_a_model_that_ignores_its_input_passes_only_not_shown():
    """PyTorch FP32 and INT8 give one row for all 4 images: agreement 100 %, SQNR infinite,
    and every check against that output says it shows nothing (PASS, NOT SHOWN); the
    non-finite and layer-count checks keep no doubt."""
    ref = np.array([[3.0, 1.0, 0.5, -2.0, 0.0, 4.0]] * 4)
    results = _compared(ref, ref)
    results["pytorch_fp32"].metrics["input_independent"] = input_independent(ref)
    out = signoff(results, Limits(), 6)
    assert out.verdict == "PASS"
    doubted = [c.name for c in out.checks if c.doubt is not None]
    assert doubted == AGAINST_PYTORCH
    assert all("ignores its input" in c.doubt for c in out.checks if c.doubt)
    assert _check(out, "INT8 non-finite logits").doubt is None


def test_the_best_input_ignoring_output_is_scored_by_hand():
    """Rows [4, 0, 0], [4, 3, 0], [4, 0, 0], [0, 4, 0]: class 0 is the top-1 of 3 images of 4
    (75 %); the top-3 class sets are all {0, 1, 2} (100 %). Centred rows (mean 4/3, 7/3, 4/3,
    4/3) less their mean over the images: SQNR and cosine of that constant, by numpy."""
    ref = np.array([[4.0, 0, 0], [4, 3, 0], [4, 0, 0], [0, 4, 0]])
    got = input_ignoring(ref, LOGITS)
    assert got["top1_agreement"] == 0.75
    assert got["top5_agreement"] == 1.0
    centred = ref - ref.mean(1, keepdims=True)
    constant = centred.mean(0)
    noise = ((centred - constant) ** 2).sum()
    assert math.isclose(got["sqnr_db"], 10 * math.log10((centred**2).sum() / noise))
    cosines = centred @ constant / np.linalg.norm(centred, axis=1) / np.linalg.norm(constant)
    assert math.isclose(got["cosine"], cosines.mean())
    assert input_ignoring(ref[:1], LOGITS) == {}  # one image: nothing to compare


def test_checks_an_output_ignoring_its_input_would_pass_show_nothing():
    """A reference of a per-class offset of 1000 shared by every image, with an input's
    variation of 0.01 on it (a constant fed to the classifier): an INT8 output that lost the
    input (the offset alone) agrees on top-1 and top-5 and has an SQNR near 90 dB, and so
    would any output that ignores its input: PASS, but every such check is doubted. A
    reference that varies with its input keeps its checks."""
    rng = np.random.default_rng(0)
    offset = rng.normal(0, 1000, (1, 20))
    ref = offset + rng.normal(0, 0.01, (16, 20))
    results = _compared(ref, np.repeat(offset, 16, axis=0))
    results["pytorch_fp32"].metrics["input_ignoring"] = input_ignoring(ref, LOGITS)
    out = signoff(results, Limits(min_decisive_top1_agreement=0.97), 20)
    assert out.verdict == "PASS" and _check(out, "INT8 logits SQNR").value > 80
    doubted = [c.name for c in out.checks if c.doubt is not None]
    decisive = "INT8 decisive top-1 agreement (margin 0.05)"
    assert doubted == [*AGAINST_PYTORCH[:3], decisive, *AGAINST_PYTORCH[3:]]
    assert "ignores its input" in _check(out, "INT8 logits SQNR").doubt
    varied = rng.normal(0, 3, (16, 20))
    results = _compared(varied, varied + rng.normal(0, 0.01, varied.shape))
    results["pytorch_fp32"].metrics["input_ignoring"] = input_ignoring(varied, LOGITS)
    assert all(c.doubt is None for c in signoff(results, Limits(), 20).checks)
