"""Comparison metrics carry the counts behind every fraction (issue 8: ``87.6 % (629/718)``)."""

import math

import numpy as np
import pytest

from qbench.measure.metrics import accuracy_metrics, compare_logits, mean_row_cosine


def _logits(order_per_row, classes=7):
    """Logits (N, classes) whose classes rank as given, best first, in each row."""
    out = np.zeros((len(order_per_row), classes))
    for i, order in enumerate(order_per_row):
        for rank, c in enumerate(order):
            out[i, c] = classes - rank
    return out


def test_counts_beside_agreement_and_accuracy():
    ref = _logits([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5], [2, 3, 4, 5, 6], [3, 4, 5, 6, 0]])
    # row 0: same top-1, top-5 shares {0,1,2,3} (4); row 1: top-1 differs, shares all 5;
    # row 2: same top-1, shares {2,3,4} (3); row 3: top-1 differs, shares {3,4,5,6,0} (5)
    out = _logits([[0, 1, 2, 3, 6], [2, 1, 3, 4, 5], [2, 3, 4, 0, 1], [4, 3, 5, 6, 0]])
    labels = np.array([0, 5, 0, 1])  # top-1 right: row 0; in the top 5: rows 0, 1, 2
    m = compare_logits(ref, out, labels)
    assert (m["top1_agreement_count"], m["top1_agreement_total"]) == (2, 4)
    assert (m["top5_agreement_count"], m["top5_agreement_total"]) == (17, 20)
    assert m["top5_agreement"] == 17 / 20
    assert (m["top1_accuracy_count"], m["top1_accuracy_total"]) == (1, 4)
    assert (m["top5_accuracy_count"], m["top5_accuracy_total"]) == (3, 4)


def test_nonfinite_logits_count_no_agreement():
    ref = _logits([[0, 1, 2, 3, 4]] * 3)
    out = ref.copy()
    out[1, 2] = np.nan
    m = compare_logits(ref, out)
    assert m["nonfinite_logits"] == 1
    assert (m["top1_agreement_count"], m["top1_agreement_total"]) == (0, 3)
    assert (m["top5_agreement_count"], m["top5_agreement_total"]) == (0, 15)


def test_reference_accuracy_has_counts():
    m = accuracy_metrics(_logits([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]), np.array([0, 0]))
    assert (m["top1_accuracy_count"], m["top1_accuracy_total"]) == (1, 2)
    assert (m["top5_accuracy_count"], m["top5_accuracy_total"]) == (1, 2)


def test_a_real_runs_fractions_are_their_counts_over_their_totals(tiny_run):
    """On the session's shared tiny run (``tiny_run``): every fraction in report.json that
    has a count has its total beside it, and equals count / total."""
    checked = 0
    for result in tiny_run.report["results"].values():
        metrics = result["metrics"]
        for key in [k for k in metrics if f"{k}_count" in metrics]:
            assert metrics[key] == metrics[f"{key}_count"] / metrics[f"{key}_total"]
            checked += 1
    assert checked >= 5  # PyTorch's accuracy, TVM's agreement and accuracy


@pytest.mark.parametrize(
    "ref, out, expected",
    [  # two logits (rows that sum to 2: no probabilities), centred: ref (1, -1), (-1, 1);
        # out (.25, -.25), (-1, 1); by hand 2.5 / (2 x sqrt(2.125)), each row's own cosine 1
        ([[2.0, 0.0], [0.0, 2.0]], [[1.0, 0.5], [0.0, 2.0]], 1.25 / math.sqrt(2.125)),
        # a single value, less the reference's mean over the images (1.5): (-.5, .5) against
        # (.5, -.5), opposite
        ([[1.0], [2.0]], [[2.0], [1.0]], -1.0),
    ],
)
def test_a_row_of_one_degree_of_freedom_takes_the_cosine_over_all_values(ref, out, expected):
    """Two centred logits are (a, -a), a single value is one number: a row's cosine is +-1
    (every image with the same top-1 gave a perfect 1.0, whatever the error), so the cosine
    is one over all values, and says so."""
    m = compare_logits(np.array(ref), np.array(out))
    assert m["cosine"] == pytest.approx(expected, rel=1e-12) and m["cosine_over"] == "all values"
    centred = [
        np.subtract(x, np.mean(x, 1, keepdims=True)) if len(x[0]) > 1 else x for x in (ref, out)
    ]
    assert mean_row_cosine(*centred) == pytest.approx(1.0)  # what the mean of rows had said
    three = compare_logits(np.array([[1.0, 0.0, 0.0]]), np.array([[1.0, 0.5, 0.0]]))
    assert three["cosine_over"] == "rows"


def test_a_single_values_offset_shared_by_every_image_does_not_count():
    """A value of 50 +- 1 against an unrelated one of 50 +- 2 (a break-test find): as is,
    cosine 0.9997 and SQNR 31.6 dB, a PASS. Less the reference's mean over the images (50):
    (1, -1, 0) against (0, 0, 2), cosine 0 and SQNR 10 log10(2 / 6) = -4.77 dB by hand."""
    m = compare_logits(np.array([[51.0], [49.0], [50.0]]), np.array([[50.0], [50.0], [52.0]]))
    assert m["cosine"] == pytest.approx(0.0, abs=1e-12)
    assert m["sqnr_db"] == pytest.approx(10 * math.log10(2 / 6), rel=1e-12)
    assert m["max_abs_diff"] == 2.0 and m["judged_space"].startswith("each value less")


@pytest.mark.parametrize("size", [1.0, 1e-8, 1e-160, 1e150])
def test_cosine_does_not_depend_on_the_logits_size(size):
    """[1, 2, 3] against [1, 2, 3.3]: cosine 14.9 / sqrt(14 x 15.89) by hand, at any size
    of the logits (1e-8 logits had given 6.7e-22 through a 1e-30 floor on the norms)."""
    expected = 14.9 / math.sqrt(14 * 15.89)
    m = compare_logits(np.array([[1.0, 2.0, 3.0]]) * size, np.array([[1.0, 2.0, 3.3]]) * size)
    assert mean_row_cosine([[1.0, 2.0, 3.0]], [[1.0, 2.0, 3.3]]) == pytest.approx(expected)
    centred = compare_logits(np.array([[1.0, 2.0, 3.0]]), np.array([[1.0, 2.0, 3.3]]))["cosine"]
    assert m["cosine"] == pytest.approx(centred, rel=1e-12)


def test_an_output_row_of_equal_logits_has_cosine_0_and_two_such_rows_1():
    """A row of equal logits (all zero once centred) says nothing: against a reference row
    that varies its cosine is 0, not 1; two such rows agree (1). A single value equal to the
    reference's mean over the images (zero once that mean is taken out) likewise reads 0."""
    assert mean_row_cosine([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], [[0.0, 0.0, 0.0]] * 2) == 0.5
    m = compare_logits(np.array([[1.0, 2.0, 3.0]] * 2), np.array([[5.0, 5.0, 5.0]] * 2))
    assert m["cosine"] == 0.0
    single = compare_logits(np.array([[1.0], [3.0]]), np.array([[2.0], [2.0]]))
    assert single["cosine"] == 0.0 and single["sqnr_db"] == 0.0
