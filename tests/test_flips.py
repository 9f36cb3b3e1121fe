"""Flips split into near-ties and decisive ones: hand-made logits, hand-derived margins."""

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import beta

from qbench.measure.metrics import compare_logits, flips, softmax_margin
from qbench.report.markdown import render_markdown
from qbench.report.result import RunResult
from qbench.report.tables import decisive_table, flip_lines
from qbench.signoff.checks import signoff
from qbench.signoff.limits import Limits

HERE = Path(__file__).parent
LN3 = math.log(3.0)
# softmax of [0, ln 3] is [1/4, 3/4]: margin 1/2; of [0, 0.02] about [0.495, 0.505]: 0.01
REF = np.array([[0.0, LN3, -50.0], [0.0, 0.02, -50.0], [5.0, 0.0, -50.0], [0.0, 1.0, -50.0]])
OUT = np.array([[1.0, 0.0, -50.0], [0.03, 0.0, -50.0], [5.0, 0.0, -50.0], [0.0, 1.0, -50.0]])


def test_margin_is_hand_derived():
    m = softmax_margin(REF)
    assert m[0] == pytest.approx(0.5)
    assert m[1] == pytest.approx(math.tanh(0.01))  # p1 - p2 = tanh(d / 2) for two classes
    assert softmax_margin(np.array([[2.0, 2.0, 0.0]]))[0] == 0.0


def test_flips_are_split_at_the_margin():
    found = flips(REF, OUT, margin=0.05)
    assert [(f["index"], f["kind"]) for f in found] == [(0, "decisive"), (1, "near-tie")]
    assert (found[0]["pytorch_class"], found[0]["class"]) == (1, 0)
    assert [f["kind"] for f in flips(REF, OUT, margin=0.99)] == ["near-tie", "near-tie"]


def test_metrics_count_decisive_agreement_with_interval():
    m = compare_logits(REF, OUT, margin=0.05)
    assert (m["near_tie_flips"], m["decisive_flips"]) == (1, 1)
    assert m["top1_agreement"] == 0.5 and m["decisive_top1_agreement"] == 0.75
    assert (m["decisive_top1_agreement_count"], m["decisive_top1_agreement_total"]) == (3, 4)
    low, high = m["decisive_top1_agreement_ci95"]
    assert high == pytest.approx(0.975**0.25, abs=1e-6)  # Beta(4, 1) quantile: q^(1/4)
    assert low == pytest.approx(beta.ppf(0.025, 3, 2), abs=1e-6)


def _runners(int8):
    from qbench.measure.results import Latency, RunnerResult

    fp32 = compare_logits(REF, REF, margin=0.05)
    metrics = {"pytorch_fp32": {"nonfinite_logits": 0}, "tvm_fp32": fp32, "tvm_int8": int8}
    return {
        n: RunnerResult(n, Latency(1.0, 1.0, 1.0, 0.0, 1), (1.0,), metrics[n], {}) for n in metrics
    }


def test_signoff_judges_decisive_agreement_only_when_asked():
    loose = Limits(0.0, 100.0, 0.0, -1.0, 0.0)
    only_near_tie = compare_logits(REF, np.vstack([REF[0], OUT[1], REF[2:]]), margin=0.05)
    with_decisive = compare_logits(REF, OUT, margin=0.05)
    asked = replace(loose, min_decisive_top1_agreement=1.0, near_tie_margin=0.05)
    assert signoff(_runners(only_near_tie), asked, 3).verdict == "PASS"
    out = signoff(_runners(with_decisive), asked, 3)
    (check,) = [c for c in out.checks if c.name.startswith("INT8 decisive")]
    assert (out.verdict, check.passed, check.value) == ("FAIL", False, 0.75)
    names = [c.name for c in signoff(_runners(with_decisive), loose, 3).checks]
    assert not any(n.startswith("INT8 decisive") for n in names)


def test_decisive_agreement_fails_when_no_image_can_flip_decisively():
    """Only images whose PyTorch FP32 margin reaches the near-tie margin can flip
    decisively (``decisive_images``: 3 of REF's 4 at 0.05, none at 0.99): with none, the
    decisive check could not fail, so it fails with why instead of passing."""
    assert compare_logits(REF, OUT, margin=0.05)["decisive_images"] == 3
    none = compare_logits(REF, OUT, margin=0.99)
    assert none["decisive_images"] == 0 and none["decisive_top1_agreement"] == 1.0
    limits = replace(
        Limits(0.0, 100.0, 0.0, -1.0, 0.0), min_decisive_top1_agreement=0.9, near_tie_margin=0.99
    )
    out = signoff(_runners(none), limits, 3)
    (check,) = [c for c in out.checks if c.name.startswith("INT8 decisive")]
    assert (out.verdict, check.passed, check.value) == ("FAIL", False, None)
    assert "cannot fail: none of the 4 images has a PyTorch FP32 margin of 0.99" in check.detail


def test_report_lists_decisive_flips_with_their_image_files():
    report = RunResult.from_json(json.loads((HERE / "fixtures" / "report.json").read_text()))
    int8 = report.results["tvm_int8"]
    flipped = flips(REF, OUT, margin=0.05)
    for f, name in zip(flipped, ("n01440764_tench.JPEG", "n02102040_spaniel.JPEG"), strict=True):
        f["image"] = name
    metrics = {**int8.metrics, **compare_logits(REF, OUT, margin=0.05)}
    results = {
        **report.results,
        "tvm_int8": replace(int8, metrics=metrics, per_image={"flips": flipped}),
    }
    report = replace(report, results=results)
    assert (
        "TVM INT8: 2 flips of 4 images, 1 near-ties (PyTorch FP32 margin < 0.05), 1 decisive"
        in (flip_lines(report))
    )
    table = decisive_table(report, "github")
    assert "n01440764_tench.JPEG" in table and "0.500" in table
    assert "n02102040_spaniel.JPEG" not in table  # a near-tie is counted, not listed
    assert "## Flips" in render_markdown(report)


def test_counts_are_plural_except_one():
    from qbench.core.words import plural

    assert [plural(n, "flip") for n in (0, 1, 2)] == ["0 flips", "1 flip", "2 flips"]
