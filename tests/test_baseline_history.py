"""``qbench history``: runs grouped by machine and definition (the comparable ones), the
verdict, accept-fail and NOISY in the table, a file model named as ``qbench run`` names it,
and the speed-up read from the report's paired ratio."""

import math
import re

from test_baseline import _failed, _fixture, _saved, _write, redigested

from qbench.baseline import history
from qbench.cli.main import main


def _history(tmp_path, model="tiny"):
    store = str(tmp_path / "store")
    png = str(tmp_path / "h.png")
    return main(["history", "--model", model, "--target", "llvm", "--store", store, "--png", png])


def _stored_runs(tmp_path):
    """Three runs: 09:00 and 10:00 (percentile, the second NOISY and a FAIL stored with
    --accept-fail, 1 / 0.5 = 2x speed-up) and 11:00 (max; no speed recorded)."""
    _saved(tmp_path, _fixture(created="2026-11-30T09:00:00+00:00"), "b09")
    failed = _failed(_fixture(created="2026-11-30T10:00:00+00:00"))
    failed["speed"]["noisy"] = True
    failed["speed"]["ratios"]["tvm_int8/tvm_fp32"]["ratio"] = 0.5
    folder = _write(tmp_path, "b10", failed)
    store = str(tmp_path / "store")
    assert main(["baseline", "save", str(folder), "--store", store, "--accept-fail"]) == 0
    other = _fixture(created="2026-11-30T11:00:00+00:00", calib_mode="max")
    del other["speed"]
    _saved(tmp_path, other, "b11")


def test_history_table_names_each_runs_definition_verdict_and_timing(tmp_path, capsys):
    _stored_runs(tmp_path)
    capsys.readouterr()
    assert _history(tmp_path) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split("  ") for line in lines if line.startswith("2026-")]
    rows = [[cell.strip() for cell in row if cell.strip()] for row in rows]
    percentile = _fixture()["definition"]["digest"][:12]
    maximum = _fixture(calib_mode="max")["definition"]["digest"][:12]
    machine = "AMD_EPYC-x86_64-2t"
    # created, machine, definition, commit, verdict, timing, ..., speed-up (1 / ratio)
    assert [r[1:3] + r[4:6] + r[-1:] for r in rows] == [
        [machine, percentile, "PASS", "ok", "1.60x"],  # 1 / 0.625
        [machine, percentile, "FAIL (accept-fail)", "NOISY", "2.00x"],
        [machine, maximum, "PASS", "-", "-"],
    ]


def test_history_draws_a_labelled_line_per_machine_and_definition(tmp_path):
    _stored_runs(tmp_path)
    other_machine = _fixture(created="2026-11-30T12:00:00+00:00")
    other_machine["environment"]["threads"] = 8
    _saved(tmp_path, other_machine, "b12")
    points = history.history(tmp_path / "store", "tiny", "llvm")
    figure = history.figure(points, "tiny on llvm")
    percentile = _fixture()["definition"]["digest"][:12]
    maximum = _fixture(calib_mode="max")["definition"]["digest"][:12]
    lines = {line.get_label(): list(line.get_xdata()) for line in figure.axes[0].get_lines()}
    assert lines == {
        f"definition {percentile} on AMD_EPYC-x86_64-2t": [0, 1],
        f"definition {maximum} on AMD_EPYC-x86_64-2t": [2],
        f"definition {percentile} on AMD_EPYC-x86_64-8t": [3],
    }
    speedups = [list(line.get_ydata()) for line in figure.axes[1].get_lines()]
    assert speedups[0] == [1.6, 2.0] and math.isnan(speedups[1][0])  # no speed: a gap
    assert figure.axes[0].get_ylim()[1] == 100  # the agreement axis stops at 100 %


def test_history_finds_a_file_model_given_with_its_folder(tmp_path, capsys):
    report = _fixture()
    # as qbench run names ./x/tiny.py:build
    report["definition"] = redigested(report["definition"] | {"model": "tiny.py:build"})
    _saved(tmp_path, report)
    assert _history(tmp_path, "./x/tiny.py:build") == 0
    assert re.search(r"^2026-11-30T10:00:00", capsys.readouterr().out, re.M)


def test_history_marks_sqnrs_judged_in_different_spaces(tmp_path, capsys):
    """C30's kind (a store written by an older qbench): a single-output model's SQNR was
    judged as is until 42441e9 and less the reference's mean since, under the same
    definition digest (48.2 dB then, 3.5 dB now, for one build). History showed both in one
    column of one definition, a drop no build caused; each SQNR is now marked with the
    space it was judged in, and the marks say they are not comparable."""
    spaces = (None, "as is", "each value less the reference's mean over the images")
    for hour, space in zip((9, 10, 11), spaces, strict=True):
        report = _fixture(created=f"2026-11-30T{hour:02d}:00:00+00:00")
        if space is not None:
            report["results"]["tvm_int8"]["metrics"]["judged_space"] = space
        _saved(tmp_path, report, f"b{hour}")
    capsys.readouterr()
    assert _history(tmp_path) == 0
    out = capsys.readouterr().out
    cells = re.findall(r"^2026-\S+ .* (25\.0(?: \[\d\])?) ", out, re.M)
    assert cells == ["25.0 [1]", "25.0 [2]", "25.0 [3]"]
    legend = (
        f"SQNR judged on: [1] {history.NOT_RECORDED}; [2] as is; [3] {spaces[2]}. SQNRs of "
        "different marks measure different things"
    )
    assert legend in out and "not comparable" in out


def test_history_marks_nothing_where_every_sqnr_was_judged_alike(tmp_path, capsys):
    """C30's kind: runs judged in one space keep plain SQNR cells and no legend."""
    for hour in (9, 10):
        report = _fixture(created=f"2026-11-30T{hour:02d}:00:00+00:00")
        report["results"]["tvm_int8"]["metrics"]["judged_space"] = "centred logits"
        _saved(tmp_path, report, f"b{hour}")
    capsys.readouterr()
    assert _history(tmp_path) == 0
    out = capsys.readouterr().out
    assert "SQNR judged on" not in out and "[1]" not in out
