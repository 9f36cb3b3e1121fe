"""Baselines, compare and history on damaged input, other machines, stray files and FAIL
runs: each is named with exit 2 or said in the output, never a traceback."""

import json
import re

import pytest
from test_baseline import (
    FAILED_CHECK,
    LATER,
    _compare,
    _failed,
    _fixture,
    _saved,
    _stored,
    _write,
    lost_twelve,
    redigested,
    with_checks,
)
from test_baseline import (
    check_dict as _check,
)

from qbench.baseline import store as baseline_store
from qbench.baseline.history import labels
from qbench.baseline.layout import MARKER
from qbench.baseline.validate import CHECKED
from qbench.cli.main import main
from qbench.core.errors import UserError
from qbench.report.result import RunResult


def _int8(report):
    return report["results"]["tvm_int8"]


def _set(report, dotted, value):
    *parents, last = dotted.split(".")
    obj = report
    for k in parents:
        obj = obj[k]
    obj[last] = value


SQNR_AT = list(CHECKED).index("INT8 logits SQNR")  # its place in a run's checks


SQNR_NAN = _check("INT8 logits SQNR", 25.0, float("nan"), True, "dB")  # no value passes it


def _checks_with(check):
    """The fixture's sign-off checks with ``check`` in place of the one of its name."""
    return with_checks(_fixture(), "PASS", [check])["signoff"]["checks"]


DAMAGES = {  # dotted field: (bad value, text the message must hold)
    "results": ([], "results: expected"),
    "results.tvm_int8.latency": ({}, "results.tvm_int8.latency.median_ms: expected a positive"),
    "results.tvm_int8.latency.median_ms": (0, "results.tvm_int8.latency.median_ms: expected"),
    "results.tvm_int8.latency_samples_ms": ([], "results.tvm_int8.latency_samples_ms: expected"),
    "results.tvm_fp32.latency_samples_ms": ([1.0] * 29, "equal lengths"),
    "results.pytorch_fp32.latency_samples_ms": (["12"] * 30, "pytorch_fp32.latency_samples_ms"),
    "results.tvm_int8.metrics": ({}, "results.tvm_int8.metrics: expected a non-empty dict"),
    "results.tvm_int8.metrics.top1_agreement": (1.5, "top1_agreement: expected a fraction"),
    "results.tvm_int8.per_image.top1_match": ([1] * 39, "per_image.top1_match: expected one"),
    "results.tvm_int8.metrics.sqnr_db": ("25 dB", "results.tvm_int8.metrics.sqnr_db: expected"),
    "definition.digest": (12, "definition.digest: expected a sha256"),
    "schema_version": (99, "schema_version 99 is not one this qbench reads; supported: 2"),
    "speed.ratios.tvm_int8/tvm_fp32.ratio": (0, "speed.ratios.tvm_int8/tvm_fp32.ratio: expected"),
    "speed.noisy": ("yes", "speed.noisy: expected true or false"),
    "results.tvm_int8.metrics.top1_agreement_count": (  # the fixture's outcomes hold 38 ones
        20,
        "results.tvm_int8.metrics.top1_agreement: expected its count over its total (20/40), "
        "got 0.95",
    ),
    "results.tvm_fp32.per_image.top1_match": (  # its count says 40
        [1] * 20 + [0] * 20,
        "per_image.top1_match: expected 40 ones (top1_agreement_count), got 20",
    ),
    "results.tvm_int8.metrics.cosine": (1.5, "results.tvm_int8.metrics.cosine: expected a cosine"),
    "environment.threads": ("two", "environment.threads: expected a int, got 'two'"),
    "signoff  ": (  # an SQNR limit of NaN, which no value passes nor fails
        {"verdict": "PASS", "shown": True, "checks": _checks_with(SQNR_NAN)},
        f"signoff.checks[{SQNR_AT}].limit: expected a number or null, got nan",
    ),
    "signoff": (  # a failed check's flag edited to passed, and the verdict with it
        {"verdict": "PASS", "shown": True, "checks": _checks_with(FAILED_CHECK | {"passed": True})},
        f"signoff.checks[{SQNR_AT}].passed: expected False for 12.2 >= 17.0, got True",
    ),
    "signoff.checks": (  # a FAIL edited to PASS
        _checks_with(FAILED_CHECK),
        "signoff.verdict: expected the verdict its checks give, got PASS with failed checks "
        "(INT8 logits SQNR)",
    ),
    "signoff.shown": ("false", "signoff.shown: expected true or false, got 'false'"),
    "signoff.checks ": (  # emptied (the trailing space: another key, the same field)
        [],
        "signoff.checks: expected each of the checks every run makes once, got 'PyTorch FP32 "
        "non-finite logits' 0 times",
    ),
}


@pytest.mark.parametrize("field", DAMAGES)
def test_a_damaged_report_field_exits_2_naming_the_file_and_field(tmp_path, capsys, field):
    _saved(tmp_path, _fixture())
    report = _fixture()
    value, text = DAMAGES[field]
    _set(report, field.strip(), value)
    assert _compare(tmp_path, report) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "new" / "report.json") in err and text in err


EDITED_VALUES = {  # check (the fixture's metrics hold SQNR 25 dB, INT8 top-1 agreement
    # 38/40 = 0.95, top-1 accuracy 30/40 FP32 and 28/40 INT8: a drop of 5 points)
    "INT8 logits SQNR": (30.0, ">=", 17.0, "results.tvm_int8.metrics.sqnr_db (25), got 30.0"),
    "INT8 top-1 agreement": (
        0.99,
        ">=",
        0.9,
        "results.tvm_int8.metrics.top1_agreement (0.95), got 0.99",
    ),
    "INT8 top-1 accuracy drop": (
        1.0,
        "<=",
        6.0,
        "100 x (pytorch_fp32 - tvm_int8) results.*.metrics.top1_accuracy (5)",
    ),
}


@pytest.mark.parametrize("name", EDITED_VALUES)
def test_a_check_value_other_than_its_metric_exits_2(tmp_path, capsys, name):
    """A check's value edited away from the metric it is computed from (or the metric away
    from the check): the report says two things, and neither is stored or compared."""
    _saved(tmp_path, _fixture())
    value, op, limit, text = EDITED_VALUES[name]
    check = {"name": name, "value": value, "op": op, "limit": limit, "passed": True, "unit": ""}
    report = with_checks(_fixture(), "PASS", [check])
    at = [c["name"] for c in report["signoff"]["checks"]].index(name)
    assert _compare(tmp_path, report) == 2
    assert f"signoff.checks[{at}].value: expected {text}" in capsys.readouterr().err
    check["value"] = {"INT8 top-1 accuracy drop": 5.0, "INT8 logits SQNR": 25.0}.get(name, 0.95)
    assert _compare(tmp_path, report) == 0  # the values the metrics give


def test_a_check_not_applicable_beside_its_metric_is_saved(tmp_path):
    """Top-5 agreement of 5 classes or fewer is always 1: its check is not applicable (no
    value) while the metric is there; a run qbench wrote so is saved (a break-test find:
    exit 2)."""
    report = _fixture()
    _int8(report)["metrics"] |= {"top5_agreement": 1.0, "top5_agreement_count": 40}
    _int8(report)["metrics"]["top5_agreement_total"] = 40
    top5 = {"name": "INT8 top-5 agreement", "value": None, "op": ">=", "limit": 0.9}
    _saved(tmp_path, with_checks(report, "PASS", [top5 | {"passed": None, "unit": "fraction"}]))


def test_per_image_outcomes_of_another_length_are_said_untested(tmp_path):
    _saved(tmp_path, _fixture())
    report = _fixture()
    metrics = _int8(report)["metrics"]
    _int8(report)["per_image"]["top1_match"] = [1] * 41
    metrics.update(top1_agreement=1.0, top1_agreement_count=41, top1_agreement_total=41)
    agreement = {"name": "INT8 top-1 agreement", "value": 1.0, "op": ">=", "limit": 0.0}
    report = with_checks(report, "PASS", [agreement | {"passed": True, "unit": "fraction"}])
    assert _compare(tmp_path, report, "--json", str(tmp_path / "c.json")) == 0
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    (row,) = [r for r in rows if r["metric"] == "top-1 agreement" and r["runner"] == "tvm_int8"]
    assert row["verdict"] == "not tested: per-image outcomes of 40 and 41 images"


def test_a_baseline_from_another_machine_leaves_latency_unjudged(tmp_path, capsys):
    other = _fixture()
    other["environment"]["cpu"] = "Intel Xeon"
    _saved(tmp_path, other)
    slowed = lost_twelve(_fixture())  # an accuracy regression
    _int8(slowed)["latency_samples_ms"] = [2 * s for s in _int8(slowed)["latency_samples_ms"]]
    stored = str(_stored(tmp_path))  # a stored baseline file is a valid --baseline
    new = str(_write(tmp_path, "new", slowed | {"created": LATER}))
    assert main(["compare", new, "--baseline", stored, "--json", str(tmp_path / "c")]) == 1
    out = capsys.readouterr().out
    assert "another machine (Intel Xeon, x86_64, 2 threads; this run: AMD EPYC" in out
    rows = json.loads((tmp_path / "c").read_text())["rows"]
    latency = [r for r in rows if "latency" in r["metric"]]
    assert len(latency) == 6  # three ratios, three absolute medians
    assert {r["verdict"] for r in latency} == {
        "not judged: another machine (Intel Xeon, x86_64, 2 threads)"
    }
    flagged = [(r["metric"], r["runner"]) for r in rows if r["verdict"] == "regression"]
    assert flagged == [("top-1 agreement", "tvm_int8")]


def test_a_report_compared_with_itself_says_so(tmp_path, capsys):
    folder = _write(tmp_path, "rep", _fixture())
    assert main(["compare", str(folder), "--baseline", str(folder)]) == 0
    assert "the baseline is this report itself" in capsys.readouterr().out


def test_the_newest_baseline_is_the_newest_stored_before_the_report(tmp_path, capsys):
    for hour in ("09", "10", "12"):
        _saved(tmp_path, _fixture(created=f"2026-11-30T{hour}:00:00+00:00"), f"b{hour}")
    assert _compare(tmp_path, _fixture()) == 0  # created 11:00 (LATER)
    assert "created 2026-11-30T10:00:00+00:00)" in capsys.readouterr().out
    store = str(tmp_path / "store")
    assert main(["compare", str(tmp_path / "b10"), "--store", store]) == 0  # not itself
    assert "created 2026-11-30T09:00:00+00:00)" in capsys.readouterr().out
    early = _write(tmp_path, "early", _fixture(created="2026-11-30T08:00:00+00:00"))
    out_json = tmp_path / "c.json"
    assert main(["compare", str(early), "--store", store, "--json", str(out_json)]) == 4
    result = json.loads(out_json.read_text())
    assert result["comparable"] is False and "no baseline" in result["reason"]
    assert result["baseline"] is None and result["rows"] == []


def test_the_newest_baseline_with_the_reports_digest_is_chosen(tmp_path, capsys):
    """A newer stored run of another definition is skipped (said); with no stored run of
    the report's digest, the newest is named "not comparable" with the differing field."""
    _saved(tmp_path, _fixture(created="2026-11-30T09:00:00+00:00"), "b09")
    _saved(tmp_path, _fixture(created="2026-11-30T10:00:00+00:00", calib_mode="max"), "b10")
    assert _compare(tmp_path, _fixture()) == 0  # percentile, created 11:00 (LATER)
    digest = _fixture()["definition"]["digest"][:12]
    out = capsys.readouterr().out
    assert f"-{digest}.json (the newest stored before this report with its definition " in out
    assert "1 newer with another definition skipped, created 2026-11-30T09:00:00+00:00)" in out
    entropy = _fixture(calib_mode="entropy")
    assert _compare(tmp_path, entropy) == 4
    out = capsys.readouterr().out
    newest = _fixture(calib_mode="max")["definition"]["digest"][:12]
    digest = entropy["definition"]["digest"][:12]
    assert f"no run stored before this report has its definition digest {digest}" in out
    assert f"the newest stored before it, digest {newest}, created 2026-11-30T10:00" in out
    assert "quant.calib_mode: max -> entropy" in out


def test_a_baseline_that_failed_its_signoff_is_noted(tmp_path, capsys):
    failed = _failed(_fixture())
    folder = _write(tmp_path, "base", failed)
    store = str(tmp_path / "store")
    assert main(["baseline", "save", str(folder), "--store", store, "--accept-fail"]) == 0
    assert _compare(tmp_path, _fixture()) == 0
    assert "note: the baseline FAILed its sign-off" in capsys.readouterr().out
    assert main(["compare", str(tmp_path / "new"), "--baseline", str(folder)]) == 0  # a report
    assert "note: the baseline FAILed its sign-off" in capsys.readouterr().out


def test_the_int8_speed_up_is_one_over_the_reports_paired_ratio(tmp_path, capsys):
    """Speed-up = 1 / speed.ratios["tvm_int8/tvm_fp32"] (here 1 / 0.5 = 2 and 1 / 0.25 =
    4), not the ratio of the medians (4.0 / 2.5 ms = 1.6); a report without speed: "-"."""
    base = _fixture()
    base["speed"]["ratios"]["tvm_int8/tvm_fp32"]["ratio"] = 0.5
    _saved(tmp_path, base)
    new = _fixture()
    new["speed"]["ratios"]["tvm_int8/tvm_fp32"]["ratio"] = 0.25
    assert _compare(tmp_path, new, "--json", str(tmp_path / "c.json")) == 0
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    (row,) = [r for r in rows if r["metric"] == "INT8 speed-up over TVM FP32"]
    assert (row["baseline"], row["new"]) == (2.0, 4.0)
    del new["speed"]
    assert _compare(tmp_path, new, "--json", str(tmp_path / "c.json")) == 0
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    (row,) = [r for r in rows if r["metric"] == "INT8 speed-up over TVM FP32"]
    assert (row["baseline"], row["new"]) == (2.0, None)
    assert re.search(r"INT8 speed-up over TVM FP32\s+TVM INT8\s+2\s+-\s", capsys.readouterr().out)


def _history(tmp_path, *extra):
    store = str(tmp_path / "store")
    return main(["history", "--model", "tiny", "--target", "llvm", "--store", store, *extra])


def test_another_models_damaged_file_and_stray_files_block_nothing(tmp_path, capsys):
    _saved(tmp_path, _fixture())
    other = _fixture()
    other["definition"] = redigested(other["definition"] | {"model": "other"})
    _saved(tmp_path, other, "other")
    (other_file,) = (tmp_path / "store").rglob("other/*/*.json")
    other_file.write_text("{")
    key_folder = _stored_tiny(tmp_path).parent
    (key_folder / "notes.json").write_text("{")  # stray, and sorts after the stored runs
    assert _history(tmp_path, "--png", str(tmp_path / "h.png")) == 0
    assert _compare(tmp_path, _fixture()) == 0
    assert "notes.json" not in capsys.readouterr().out
    damaged = key_folder / "20261130T093000-0123456789ab.json"
    damaged.write_text("{")  # the store's own name pattern: read, and named when damaged
    assert _history(tmp_path) == 2
    assert str(damaged) in capsys.readouterr().err and damaged.read_text() == "{"


def _stored_tiny(tmp_path):
    (path,) = (tmp_path / "store").rglob("tiny/*/*.json")
    return path


def test_save_refuses_a_fail_verdict_unless_accepted(tmp_path, capsys):
    report = _failed(_fixture())
    folder = _write(tmp_path, "rep", report)
    store = tmp_path / "store"
    assert main(["baseline", "save", str(folder), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "verdict is FAIL" in err and "--accept-fail" in err and not store.exists()
    assert main(["baseline", "save", str(folder), "--store", str(store), "--accept-fail"]) == 0
    assert json.loads(_stored(tmp_path).read_text())["accept_fail"] is True


def test_history_names_the_valid_target_kinds(tmp_path, capsys):
    _saved(tmp_path, _fixture())
    store = str(tmp_path / "store")
    assert main(["history", "--model", "tiny", "--target", "bogus", "--store", store]) == 2
    assert "valid: llvm, cuda" in capsys.readouterr().err


def test_history_labels_of_runs_in_one_minute_differ():
    created = ["2026-11-30T10:00:05+00:00", LATER, LATER, "2026-11-30T11:00:59+00:00"]
    assert labels([{"created": c} for c in created]) == [
        "2026-11-30 10:00:05",
        "2026-11-30 11:00:00",
        "2026-11-30 11:00:00 #2",
        "2026-11-30 11:00:59",
    ]


SQNR_OK = _check("INT8 logits SQNR", 61.3, 17.0, True, "dB")
SPEED_OK = _check("INT8 speed-up over TVM FP32", 1.6, 1.0, True, "speed-up")


def _signed_off(report, verdict, checks):
    """``report`` with this sign-off, its SQNR metric the value of its SQNR check."""
    (sqnr,) = [c["value"] for c in checks if c["name"] == "INT8 logits SQNR"]
    _int8(report)["metrics"]["sqnr_db"] = sqnr
    return with_checks(report, verdict, checks)


@pytest.mark.parametrize(
    "failed, regression",
    [
        (_check("INT8 logits SQNR", 12.2, 17.0, False, "dB"), True),
        (_check("INT8 speed-up over TVM FP32", 0.8, 1.0, False, "speed-up"), False),
    ],
)
def test_a_sign_off_check_the_baseline_passed_and_this_run_fails(
    tmp_path, capsys, failed, regression
):
    """The baseline PASSed with SQNR 61.3 dB; this run FAILs its SQNR check at 12.2 dB with
    the same top-1 outcomes: a regression, named (compare had said NO REGRESSION: SQNR has
    no per-image test). A speed check failing is shown untested: the latency rows judge
    speed, with their load control."""
    _saved(tmp_path, _signed_off(_fixture(), "PASS", [SQNR_OK, SPEED_OK]))
    checks = [failed if c["name"] == failed["name"] else c for c in (SQNR_OK, SPEED_OK)]
    new = _signed_off(_fixture(created=LATER), "FAIL", checks)
    assert _compare(tmp_path, new) == (1 if regression else 0)
    out = capsys.readouterr().out
    row = next(x for x in out.splitlines() if x.startswith(f"sign-off: {failed['name']}"))
    assert f"{failed['value']} (failed)" in row and row.rstrip().endswith(
        "regression" if regression else "-"
    )
    verdict = next(x for x in out.splitlines() if x.startswith("compare: "))
    if regression:
        assert "REGRESSION (exit 1): sign-off: INT8 logits SQNR; sign-off;" in verdict
    else:
        assert verdict.startswith("compare: NO REGRESSION")


def test_a_cosine_taken_over_other_values_than_the_baselines_is_not_comparable(tmp_path, capsys):
    """A two-class model's baseline took the cosine per row (+-1 each: 1.0, passed); this
    run takes it over all values (0.95, failed under 0.99): another measure, not a
    regression, and the rows say so."""
    cosine = _check("INT8 logits cosine", 1.0, 0.99, True, "cosine")
    base = _signed_off(_fixture(), "PASS", [SQNR_OK, cosine])
    _int8(base)["metrics"]["cosine"] = 1.0
    _saved(tmp_path, base)
    new = _signed_off(
        _fixture(created=LATER), "FAIL", [SQNR_OK, cosine | {"value": 0.95, "passed": False}]
    )
    _int8(new)["metrics"] |= {"cosine": 0.95, "cosine_over": "all values"}
    assert _compare(tmp_path, new) == 0
    out = capsys.readouterr().out
    said = "not comparable: the cosine was taken over rows, now over all values"
    rows = [x for x in out.splitlines() if x.startswith(("sign-off: INT8 logits cosine", "cosine"))]
    assert len(rows) == 2 and all(said in x for x in rows), rows
    assert next(x for x in out.splitlines() if x.startswith("compare: ")).startswith(
        "compare: NO REGRESSION"
    )


def test_an_sqnr_judged_in_another_space_than_the_baselines_is_not_comparable(tmp_path, capsys):
    """A single-value model's baseline judged its SQNR as is (61.3 dB, an offset shared by
    every image in the signal); this run judges it less the mean over the images (12.2 dB,
    failed under 17): another measure, not a regression."""
    base = _signed_off(_fixture(), "PASS", [SQNR_OK])
    _int8(base)["metrics"]["judged_space"] = "as is"
    _saved(tmp_path, base)
    new = _signed_off(_fixture(created=LATER), "FAIL", [FAILED_CHECK])
    _int8(new)["metrics"]["judged_space"] = "each value less the reference's mean over the images"
    assert _compare(tmp_path, new) == 0
    out = capsys.readouterr().out
    said = "not comparable: judged on as is, now on each value less"
    rows = [x for x in out.splitlines() if x.startswith(("sign-off: INT8 logits SQNR", "SQNR"))]
    rows = [x for x in rows if "TVM FP32" not in x]  # the FP32 build's: no space recorded
    assert len(rows) == 2 and all(said in x for x in rows), rows


def test_another_run_of_the_same_second_is_not_dropped(tmp_path, capsys):
    """Two runs of one definition started in the same second have one store file name: the
    second is refused, naming the file (it had been dropped as "already stored", exit 0),
    while saving the stored run again still says so; compare no longer calls the other run
    "this report itself"."""
    first = _fixture()
    _saved(tmp_path, first)
    second = _fixture(seed=1)  # other latencies, same created time and definition
    folder = _write(tmp_path, "second", second)
    store = str(tmp_path / "store")
    assert main(["baseline", "save", str(folder), "--store", store]) == 2
    assert "holds another run of the same definition created in the same second" in (
        capsys.readouterr().err
    )
    assert main(["baseline", "save", str(tmp_path / "base"), "--store", store]) == 0
    assert "already stored" in capsys.readouterr().out
    assert main(["compare", str(folder), "--baseline", str(_stored(tmp_path))]) in (0, 1)
    assert "this report itself" not in capsys.readouterr().out


def test_a_save_racing_another_of_the_same_second_keeps_both_apart(tmp_path, monkeypatch):
    """C30's kind (what a store keeps): two saves of runs of one definition created in the
    same second, the other save's file landing between this save's look and its write. The
    store file is never replaced (the first save's run had been overwritten without a
    word, both saves saying "saved"): this save is refused naming the file."""
    first, second = _fixture(), _fixture(seed=1)  # other latencies, one file name
    store = tmp_path / "store"
    real = baseline_store.to_json

    def other_save_lands_first(entry):
        baseline_store.to_json = real  # once: the other save, then this one
        path, written = baseline_store.save(RunResult.from_json(first), store)
        assert written
        return real(entry)

    monkeypatch.setattr(baseline_store, "to_json", other_save_lands_first)
    with pytest.raises(UserError, match="holds another run of the same definition"):
        baseline_store.save(RunResult.from_json(second), store)
    (path,) = store.rglob("*.json")
    assert json.loads(path.read_text())["report"] == first
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp file


def test_a_store_marker_that_is_a_folder_exits_2_before_writing(tmp_path, capsys):
    """C30's kind: a store whose layout marker is a folder: save refuses it naming the
    marker before it writes anything (it had stored the run, then failed writing the marker
    with "cannot write there"); compare and history name it too."""
    store = tmp_path / "store"
    (store / MARKER).mkdir(parents=True)
    folder = _write(tmp_path, "base", _fixture())
    assert main(["baseline", "save", str(folder), "--store", str(store)]) == 2
    assert f"{store / MARKER}: the store marker is not a file" in capsys.readouterr().err
    assert not list(store.rglob("*.json"))
    assert main(["compare", str(folder), "--store", str(store)]) == 2
    assert "the store marker is not a file" in capsys.readouterr().err


@pytest.mark.parametrize("links", [True, False])
def test_write_new_never_replaces_a_file(tmp_path, monkeypatch, links):
    """The store's kind: ``write_new`` creates a file and refuses one already there, with
    hard links and on a file system without them (os.link failing with EPERM), leaving no
    temporary file."""
    from qbench.core import atomic

    if not links:

        def no_links(src, dst):
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr(atomic.os, "link", no_links)
    path = tmp_path / "a.json"
    atomic.write_new(path, "one")
    with pytest.raises(FileExistsError):
        atomic.write_new(path, "two")
    assert path.read_text() == "one" and [p.name for p in tmp_path.iterdir()] == ["a.json"]
