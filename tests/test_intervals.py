"""Intervals on agreement: Clopper-Pearson bounds, the images a limit needs, and a verdict
that says when its images cannot show a limit."""

import numpy as np
import pytest
from test_signoff import _compared

from qbench.measure.intervals import clopper_pearson, images_needed
from qbench.signoff.checks import signoff
from qbench.signoff.limits import Limits


def test_all_agreeing_images_have_the_hand_derived_lower_bound():
    """For n of n, the exact lower bound solves p^n = 0.025: 14 of 14 gives 0.025^(1/14)."""
    low, high = clopper_pearson(14, 14)
    assert low == pytest.approx(0.025 ** (1 / 14), abs=1e-9) and high == 1.0
    assert low == pytest.approx(0.7684, abs=1e-4)  # the "about 77-100 %"
    low, high = clopper_pearson(0, 10)
    assert low == 0.0 and high == pytest.approx(1 - 0.025 ** (1 / 10), abs=1e-9)


def test_images_needed_is_the_smallest_count_whose_perfect_score_shows_the_limit():
    n = images_needed(0.97)
    assert n == 122
    assert 0.025 ** (1 / n) >= 0.97 > 0.025 ** (1 / (n - 1))
    assert images_needed(0.9) == 36 and images_needed(0.0) == 1 and images_needed(1.0) is None


def _verdict(n_images, misses=0):
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((n_images, 10))
    out = ref + 1e-3
    out[:misses] = -out[:misses]  # these images flip their top-1 class
    return signoff(_compared(ref, out), Limits(), classes=10)


def test_a_pass_on_too_few_images_says_what_it_cannot_show():
    from qbench.report.lines import unshown_words

    verdict = _verdict(14)
    assert verdict.verdict == "PASS" and not verdict.to_json()["shown"]
    check = next(c for c in verdict.checks if c.name == "INT8 top-1 agreement")
    assert check.sample == 14 and check.needed == 122 and check.unshown
    assert check.ci_low == pytest.approx(0.025 ** (1 / 14), abs=1e-6)
    words = unshown_words(verdict)
    assert words.startswith("14 images cannot show") and "at least 122 needed" in words
    assert "INT8 top-5 agreement >= 90.0 % (at least 36 needed; 54 at a good build's" in words


def test_enough_agreeing_images_show_every_limit():
    verdict = _verdict(130)
    assert verdict.verdict == "PASS" and verdict.to_json()["shown"] and not verdict.unshown


def test_enough_images_with_misses_are_not_shown_when_the_interval_reaches_below():
    """128 of 130 is 98.5 %, above 97 %, but its interval (94.6-99.8 %, Beta quantiles)
    reaches below the limit: 130 >= 122 images, yet the limit is not shown."""
    from scipy.stats import beta

    from qbench.report.lines import unshown_words

    verdict = _verdict(130, misses=2)
    check = next(c for c in verdict.checks if c.name == "INT8 top-1 agreement")
    assert check.passed and check.value == pytest.approx(128 / 130)
    assert check.ci_low == pytest.approx(beta.ppf(0.025, 128, 3), abs=1e-6)
    assert check.ci_low < 0.97 and check.unshown and not verdict.to_json()["shown"]
    words = unshown_words(verdict)
    assert "INT8 top-1 agreement >= 97.0 % (95 % CI 94.6-99.8 % reaches below; 290 at a" in words


def test_html_verdict_box_and_signoff_table_say_not_shown():
    from qbench.report.html import verdict_block
    from qbench.report.tables import signoff_table

    verdict = _verdict(14)
    box = verdict_block(verdict)
    assert 'class="verdict NOTSHOWN"><span class="word">PASS, NOT SHOWN</span>' in box
    assert "NOT SHOWN: 14 images cannot show" in box
    assert 'class="verdict PASS"><span class="word">PASS</span>' in verdict_block(_verdict(130))
    table = signoff_table(verdict, "simple")
    assert "ok, not shown (14 images; at least 122 needed; 290 at a good build's 99 %" in table
    assert "100.0 % (95 % CI 76.8-100.0 %)" in table
    assert "not shown" not in signoff_table(_verdict(130), "simple")


def test_every_agreement_and_accuracy_figure_carries_its_interval():
    """compare_logits adds ``<key>_ci95`` over the images (top-5 too); the runner table
    prints it beside the counts."""
    from qbench.measure.metrics import compare_logits
    from qbench.report.tables import percent_with_counts

    rng = np.random.default_rng(1)
    ref = rng.standard_normal((20, 10))
    out = ref.copy()
    out[:3] = -out[:3]  # three images flip their top-1 class
    labels = ref.argmax(1)
    m = compare_logits(ref, out, labels)
    assert m["top1_agreement_count"] == 17
    assert m["top1_agreement_ci95"] == pytest.approx(clopper_pearson(17, 20), abs=1e-6)
    assert m["top1_accuracy_ci95"] == pytest.approx(clopper_pearson(17, 20), abs=1e-6)
    top5_images = round(m["top5_agreement"] * 20)
    assert m["top5_agreement_ci95"] == pytest.approx(clopper_pearson(top5_images, 20), abs=1e-6)
    low, high = clopper_pearson(17, 20)
    text = f"85.0 % (17/20; CI {100 * low:.1f}-{100 * high:.1f})"
    assert percent_with_counts(m, "top1_agreement") == text
    slots = f"{m['top5_agreement_count']}/100 classes; CI "
    assert slots in percent_with_counts(m, "top5_agreement")
    assert percent_with_counts(m, "top5_agreement").endswith(" over images)")


@pytest.mark.parametrize("limit, rate", [(0.97, 0.99), (0.90, 0.97), (0.97, 0.995)])
def test_images_to_show_a_limit_at_a_builds_agreement(limit, rate):
    """The fewest n whose floor(rate x n) agreeing images have a Clopper-Pearson low end at
    or above the limit, searched here with scipy's Beta quantile (0.97 at 0.99: 290)."""
    import math

    from scipy.stats import beta

    from qbench.measure.intervals import images_to_show

    def low(n):
        k = math.floor(rate * n + 1e-9)
        return beta.ppf(0.025, k, n - k + 1) if k else 0.0

    expected = next(n for n in range(1, 10_000) if low(n) >= limit)
    assert images_to_show(limit, rate) == expected
    assert images_to_show(0.99, 0.99) is None  # at its own rate, no number of images can
