"""report.html, and the golden files of the Markdown, JSON and HTML report writers.

The fixture ``fixtures/report.json`` is a real report of a tiny run, made by
``tests/fixtures/regenerate.py`` with::

    python -m qbench.cli run --model tests/fixtures/tiny_model.py:build --data synthetic \\
        --calib-size 16 --eval-size 32 --batch-size 4 --repeat 20 \\
        --accuracy-target 1.0 --holdout-size 16 --min-sqnr 70

(a FAIL: logits SQNR 62.6 dB against 70), then its machine paths made relative and its
``created``, ``wall_time_s`` and ``diagnosis.wall_s`` fixed. After an intended change of a
writer, rewrite the goldens with ``QBENCH_UPDATE_GOLDEN=1 pytest tests/test_html.py`` and
review their diff.
"""

import json
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from qbench.report.html import render_html
from qbench.report.result import RunResult
from qbench.report.write import write_reports
from qbench.signoff.verdict import Verdict

HERE = Path(__file__).parent
GOLDEN = HERE / "golden"
WRITTEN = ("report.md", "report.json", "report.html")


@pytest.fixture
def report():
    return RunResult.from_json(json.loads((HERE / "fixtures" / "report.json").read_text()))


def test_report_writers_match_the_golden_files(report, tmp_path):
    out = write_reports(report, tmp_path)
    assert sorted(p.name for p in out.iterdir()) == sorted(WRITTEN)
    for name in WRITTEN:
        written = (out / name).read_bytes()
        if os.environ.get("QBENCH_UPDATE_GOLDEN") == "1":
            (GOLDEN / name).write_bytes(written)
        assert written == (GOLDEN / name).read_bytes(), (
            f"{name} differs from tests/golden/{name}; if intended, rerun with "
            "QBENCH_UPDATE_GOLDEN=1 and review the diff"
        )


def test_the_verdict_comes_first_with_each_failed_check(report):
    page = render_html(report)
    verdict = page.index('<div class="verdict FAIL">')
    assert verdict < page.index("<table") and verdict < page.index("<h2>")
    (check,) = [c for c in report.signoff.checks if c.name == "INT8 logits SQNR"]
    assert check.passed is False and check.limit == 70.0
    assert f"INT8 logits SQNR: {check.value:.1f} dB, limit &gt;= 70.0 dB" in page
    assert "1 of 10 sign-off checks failed" in page
    assert page.count('<td class="failed">FAIL</td>') == 1  # the sign-off table's row


def test_a_passing_report_says_so_without_a_failure_list(report):
    checks = tuple(replace(c, passed=True, sample=None) for c in report.signoff.checks)
    page = render_html(replace(report, signoff=Verdict("PASS", checks)))
    assert '<div class="verdict PASS">' in page and "every sign-off check passed" in page
    assert 'class="failed"' not in page


def test_the_page_is_self_contained(report):
    page = render_html(report)
    assert "<script" not in page and "<link" not in page and "<img" not in page
    # every reference is to an element of the page itself (SVG glyphs, clip paths)
    assert set(re.findall(r'(?:src|href)="(.)', page)) == {"#"}
    assert page.count("<svg") == 2  # latency distributions, per-layer SQNR
    for runner in ("PyTorch FP32 (eager)", "TVM FP32", "TVM INT8"):  # SVG text as comments
        assert f"<!-- {runner} -->" in page


def test_report_values_are_escaped(report):
    page = render_html(replace(report, model=replace(report.model, name="<b>net</b> & co")))
    assert "&lt;b&gt;net&lt;/b&gt; &amp; co" in page and "<b>net" not in page


def test_absent_sections_are_skipped(report):
    results = {name: replace(r, samples_ms=()) for name, r in report.results.items()}
    bare = replace(report, diagnosis=None, speed=None, definition={}, results=results)
    page = render_html(bare)
    assert "<svg" not in page and "Latency distributions" not in page
    assert "Diagnosis" not in page and "<h2>Layers</h2>" in page


def _chromium():
    return shutil.which("chromium")


def _headless(chromium, profile, *args):
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
    ]
    done = subprocess.run(
        [chromium, *flags, *args], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout


@pytest.mark.skipif(_chromium() is None, reason="no chromium (Debian: apt-get install chromium)")
def test_report_html_renders_in_headless_chromium(report, tmp_path):
    from matplotlib.image import imread

    page = write_reports(report, tmp_path / "rep") / "report.html"
    shot = tmp_path / "shot.png"
    args = [f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri()]
    _headless(_chromium(), tmp_path / "profile", *args)
    rgb = imread(shot)[..., :3]  # floats in [0, 1]
    assert rgb.shape[:2] == (2000, 1280) and rgb.std() > 0.05  # not a blank page
    # the FAIL box's background (#fdecea) fills a band at the top: the CSS was applied
    box = (abs(rgb[:300] - [0xFD / 255, 0xEC / 255, 0xEA / 255]) < 0.02).all(axis=-1)
    assert box.sum() > 100 * 1000
    dom = _headless(_chromium(), tmp_path / "profile", "--dump-dom", page.as_uri())
    assert '<div class="verdict FAIL"><span class="word">FAIL</span>' in dom


def test_a_real_runs_page_opens_with_its_verdict_and_is_self_contained(tiny_run):
    """On the session's shared tiny run (``tiny_run``): report.html opens with the verdict
    that report.json records (the run's exit code says the same) and each failed check by
    name, and refers to nothing outside itself."""
    from html import escape

    page, signoff = tiny_run.html, tiny_run.report["signoff"]
    verdict = page.index('<div class="verdict ')
    assert verdict < page.index("<table") and verdict < page.index("<h2>")
    word = page[verdict:].split('<span class="word">', 1)[1].split("<", 1)[0]
    assert word.startswith(signoff["verdict"])
    assert tiny_run.code == (0 if signoff["verdict"] == "PASS" else 1)
    for check in signoff["checks"]:
        if check["passed"] is False:
            assert f"{escape(check['name'])}: " in page
    assert "<script" not in page and "<link" not in page and "<img" not in page
    assert set(re.findall(r'(?:src|href)="(.)', page)) <= {"#"}
