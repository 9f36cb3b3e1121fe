"""Baseline store, ``qbench compare`` and ``qbench history`` on fixture reports, and the
report fields they need on a seconds-long tiny run."""

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from qbench.baseline.validate import CHECKED
from qbench.cli.main import main
from qbench.measure.metrics import latency_stats, per_image

N_IMAGES, N_SAMPLES = 40, 30
LATER = "2026-11-30T11:00:00+00:00"  # after _fixture's default created time
FULL = Path(__file__).parent / "fixtures" / "report.json"  # a whole report, for the rest


def _definition(calib_mode="percentile"):
    fields = {
        "model": "tiny",
        "weights_digest": "ab" * 32,
        "data_digest": "cd" * 32,
        "quant": {"calib_mode": calib_mode, "per_channel": True},
        "batch_size": 1,
        "target": {"kind": "llvm", "num-cores": 2},
        "qbench": "0.1.0",
        "tvm": "0.27.0.post1",
    }
    return redigested(fields)


def redigested(definition):
    """``definition`` with the sha256 of the canonical JSON of its other fields."""
    fields = {k: v for k, v in definition.items() if k != "digest"}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return {**fields, "digest": hashlib.sha256(text.encode()).hexdigest()}


def _runner(rng, median_ms, matches=None, correct=None):
    samples = (median_ms * rng.lognormal(0, 0.05, N_SAMPLES)).tolist()
    entry = {
        "device": "host",
        "latency": latency_stats(samples),
        "latency_samples_ms": samples,
        "metrics": {},
        "per_image": {},
    }
    pairs = (("top1_correct", "top1_accuracy", correct), ("top1_match", "top1_agreement", matches))
    for vector, metric, outcomes in pairs:
        if outcomes is not None:
            entry["per_image"][vector] = outcomes
            entry["metrics"][metric] = sum(outcomes) / N_IMAGES
            entry["metrics"][f"{metric}_count"] = sum(outcomes)
            entry["metrics"][f"{metric}_total"] = N_IMAGES
    if matches is not None:
        entry["metrics"]["sqnr_db"] = 25.0
    return entry


def _speed(int8_over_fp32=0.625, noisy=False):
    """A report's ``speed``: its paired TVM INT8 / TVM FP32 ratio (speed-up = 1 / it)."""
    ratio = {"ratio": int8_over_fp32, "ci_low": 0.6, "ci_high": 0.65, "confidence": 0.95}
    return {"ratios": {"tvm_int8/tvm_fp32": ratio}, "noisy": noisy, "noisy_reason": None}


def _fixture(seed=0, created="2026-11-30T10:00:00+00:00", calib_mode="percentile"):
    """A schema-2 report: what compare, save and history read set here, the rest from the
    golden fixture."""
    rng = np.random.default_rng(seed)
    report = json.loads(FULL.read_text()) | {
        "created": created,
        "environment": {
            "cpu": "AMD EPYC",
            "machine": "x86_64",
            "threads": 2,
            "target": {"kind": "llvm", "num-cores": 2},
            "qbench_commit": "0123456789abcdef0123456789abcdef01234567",
        },
        "definition": _definition(calib_mode),
        "signoff": {"verdict": "PASS", "shown": True, "checks": []},
        "speed": _speed(),
        "results": {
            "pytorch_fp32": _runner(rng, 12.0, correct=[1] * 30 + [0] * 10),
            "tvm_fp32": _runner(rng, 4.0, [1] * N_IMAGES, [1] * 30 + [0] * 10),
            "tvm_int8": _runner(rng, 2.5, [1] * 38 + [0, 0], [1] * 28 + [0] * 12),
        },
    }
    report["signoff"]["checks"] = _made_checks(report["results"])
    return report


def check_dict(name, value, limit, passed, unit):
    """A sign-off check as report.json holds it, of the ``>=`` kind."""
    return {
        "name": name,
        "value": value,
        "op": ">=",
        "limit": limit,
        "passed": passed,
        "unit": unit,
    }


UNITS = {"sqnr_db": "dB", "cosine": "cosine", "nonfinite_logits": "count"}  # else fractions


def _made_checks(results):
    """The checks every run makes (``validate.CHECKED``): each its metric's value where the
    fixture has one, passed at a limit of 0, else not applicable (null)."""
    checks = []
    for name, (runner, key) in CHECKED.items():
        value = results[runner]["metrics"].get(key)
        given = value is not None
        limit, passed = (0.0, True) if given else (None, None)
        checks.append(check_dict(name, value, limit, passed, UNITS.get(key, "fraction")))
    return checks


FAILED_CHECK = {  # a failed sign-off check, for a FAIL verdict: it must have one
    "name": "INT8 logits SQNR", "value": 12.2, "op": ">=", "limit": 17.0, "passed": False,
    "unit": "dB",
}  # fmt: skip


def _failed(report):
    """``report`` with the sign-off FAIL, its SQNR check failed (and the metric its value)."""
    report["results"]["tvm_int8"]["metrics"]["sqnr_db"] = FAILED_CHECK["value"]
    return with_checks(report, "FAIL", [FAILED_CHECK])


def with_checks(report, verdict, checks):
    """``report`` with this sign-off ``verdict`` and ``checks`` (dicts) in place of its
    checks of the same names, the others kept (every run makes the checks that
    ``baseline.validate.CHECKED`` names)."""
    named = {c["name"]: c for c in checks}
    kept = [named.pop(c["name"], c) for c in report["signoff"]["checks"]]
    return report | {
        "signoff": {"verdict": verdict, "shown": True, "checks": kept + [*named.values()]}
    }


def _write(tmp_path, name, report):
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)  # a later compare may rewrite "new"
    (folder / "report.json").write_text(json.dumps(report))
    return folder


def _stored(tmp_path):
    (path,) = (tmp_path / "store").rglob("*.json")
    return path


def _saved(tmp_path, report, name="base"):
    folder = _write(tmp_path, name, report)
    assert main(["baseline", "save", str(folder), "--store", str(tmp_path / "store")]) == 0
    return folder


def _compare(tmp_path, report, *extra):
    """``qbench compare`` of ``report``, made an hour newer than the fixture's baseline."""
    new = _write(tmp_path, "new", report | {"created": LATER})
    return main(["compare", str(new), "--store", str(tmp_path / "store"), *extra])


def test_save_then_compare_the_same_report_is_no_regression(tmp_path, capsys):
    report = _fixture()
    _saved(tmp_path, report)
    stored = json.loads(_stored(tmp_path).read_text())
    assert stored["report"] == report and stored["key"]["digest"] == report["definition"]["digest"]
    assert _compare(tmp_path, report, "--json", str(tmp_path / "c.json")) == 0
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    assert {r["verdict"] for r in rows} == {"~", "-", "control"}
    out = capsys.readouterr().out
    chosen = "the newest stored before this report with its definition digest"
    assert f"{_stored(tmp_path)} ({chosen} {report['definition']['digest'][:12]}, created " in out
    assert "itself" not in out
    assert "38/40" in out and "28/40" in out  # INT8 top-1 agreement and accuracy counts
    untested = sum(r["verdict"] != "~" for r in rows)
    assert out.rstrip().endswith(
        f"compare: NO REGRESSION (exit 0): 0 improved, {untested} of {len(rows)} rows not judged"
    )
    assert {r["runner"] for r in rows if r["metric"] == "top-1 accuracy"} == {
        "pytorch_fp32",
        "tvm_fp32",
        "tvm_int8",
    }


def test_a_slowed_int8_build_is_a_regression(tmp_path, capsys):
    _saved(tmp_path, _fixture())
    slowed = _fixture()
    int8 = slowed["results"]["tvm_int8"]
    int8["latency_samples_ms"] = [1.5 * s for s in int8["latency_samples_ms"]]
    int8["latency"]["median_ms"] *= 1.5
    assert _compare(tmp_path, slowed, "--json", str(tmp_path / "c.json")) == 1
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    flagged = {(r["metric"], r["runner"]) for r in rows if r["verdict"] == "regression"}
    assert flagged == {
        ("median latency (ms)", "tvm_int8"),
        ("latency ratio / TVM FP32", "tvm_int8"),
        ("latency ratio / PyTorch FP32 (eager)", "tvm_int8"),
    }
    (latency,) = [r for r in rows if r["runner"] == "tvm_int8" and "median" in r["metric"]]
    assert latency["change"] == "1.500x"  # every sample x1.5: the medians' ratio is 1.5
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last == (
        "compare: REGRESSION (exit 1): latency ratio / TVM FP32 of TVM INT8; latency ratio / "
        "PyTorch FP32 (eager) of TVM INT8; median latency (ms) of TVM INT8; 0 improved, "
        f"{sum(r['verdict'] not in ('~', 'regression') for r in rows)} of {len(rows)} rows "
        "not judged"
    )


def test_a_rerun_on_a_loaded_machine_is_no_regression(tmp_path):
    """Load slows every runner of a timing round (here x1.8 for all samples): the per-round
    ratios do not move, and the absolute medians are not judged because the control
    (PyTorch eager) moved too."""
    _saved(tmp_path, _fixture())
    loaded = _fixture()
    for entry in loaded["results"].values():
        entry["latency_samples_ms"] = [1.8 * s for s in entry["latency_samples_ms"]]
        entry["latency"]["median_ms"] *= 1.8
    assert _compare(tmp_path, loaded, "--json", str(tmp_path / "c.json")) == 0
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    ratios = [r for r in rows if r["metric"].startswith("latency ratio")]
    assert len(ratios) == 3 and all(r["change"] == "1.000x" for r in ratios)
    absolute = [r for r in rows if r["metric"] == "median latency (ms)"]
    assert len(absolute) == 3
    assert all(
        r["verdict"].startswith("not judged: machine load not shown unchanged") for r in absolute
    )


def test_load_that_slows_pytorch_more_than_tvm_is_not_judged_an_improvement(tmp_path):
    """Contention slows PyTorch's thread pool more than TVM's (measured x10 against x4): the
    ratios to PyTorch then move without any change of qbench, so only TVM INT8 / TVM FP32 is
    judged; a slower INT8 build is still caught by it."""
    _saved(tmp_path, _fixture())
    loaded = _fixture()
    for name, factor in (("pytorch_fp32", 10.0), ("tvm_fp32", 4.0), ("tvm_int8", 6.0)):
        entry = loaded["results"][name]
        entry["latency_samples_ms"] = [factor * s for s in entry["latency_samples_ms"]]
    assert _compare(tmp_path, loaded, "--json", str(tmp_path / "c.json")) == 1
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    verdicts = {r["metric"] + " " + r["runner"]: r["verdict"] for r in rows if "lat" in r["metric"]}
    assert verdicts.pop("latency ratio / TVM FP32 tvm_int8") == "regression"  # 6 / 4 = 1.5x
    assert all(
        v.startswith("not judged: machine load not shown unchanged") for v in verdicts.values()
    )


def lost_twelve(report):
    """``report`` with 12 of INT8's 38 agreeing images lost, none gained (26/40), in its
    outcomes, metrics and sign-off check."""
    int8 = report["results"]["tvm_int8"]
    int8["per_image"]["top1_match"] = [0] * 12 + [1] * 26 + [0, 0]
    int8["metrics"].update(top1_agreement=26 / 40, top1_agreement_count=26)
    check = {"name": "INT8 top-1 agreement", "value": 0.65, "op": ">=", "limit": 0.0}
    return with_checks(report, "PASS", [check | {"passed": True, "unit": "fraction"}])


def test_twelve_images_lost_in_agreement_is_a_regression(tmp_path):
    _saved(tmp_path, _fixture())
    assert _compare(tmp_path, lost_twelve(_fixture())) == 1


def test_another_calibration_mode_is_not_comparable_naming_the_nested_field(tmp_path, capsys):
    _saved(tmp_path, _fixture())
    changed = _fixture(calib_mode="max")
    changed["definition"]["quant"]["symmetric"] = True  # a field the baseline lacks
    changed["definition"] = redigested(changed["definition"])
    assert _compare(tmp_path, changed, "--json", str(tmp_path / "c.json")) == 4
    out = capsys.readouterr().out
    said = "quant.calib_mode: percentile -> max; quant.symmetric: (absent) -> true"
    assert f"not comparable: the run's definition differs (baseline -> this run): {said}" in out
    assert json.loads((tmp_path / "c.json").read_text())["differences"] == [
        {"field": "quant.calib_mode", "baseline": "percentile", "new": "max"},
        {"field": "quant.symmetric", "baseline": None, "new": True},
    ]


@pytest.mark.parametrize("command", ["compare", "save"])
def test_a_definition_edited_after_its_run_exits_2_naming_it(tmp_path, capsys, command):
    """A report whose definition no longer gives its digest (its target edited by hand) is
    damaged, exit 2: before, compare called it another benchmark (exit 4)."""
    _saved(tmp_path, _fixture())
    edited = _fixture()
    edited["definition"]["target"]["mcpu"] = "sapphirerapids"
    path = _write(tmp_path, "edited", edited)
    store = str(tmp_path / "store")
    argv = ["compare", str(path)] if command == "compare" else ["baseline", "save", str(path)]
    assert main([*argv, "--store", store]) == 2
    err = capsys.readouterr().err
    assert str(path / "report.json") in err and "definition: expected the fields" in err


def test_no_baseline_for_the_machine_exits_4(tmp_path, capsys):
    _saved(tmp_path, _fixture())
    other = _fixture()
    other["environment"]["threads"] = 8
    assert _compare(tmp_path, other) == 4
    out = capsys.readouterr().out
    assert "no baseline" in out
    assert out.rstrip().splitlines()[-1].startswith("compare: NOT COMPARABLE (exit 4)")


@pytest.mark.parametrize("damage", ["truncated", "no samples"])
def test_a_damaged_baseline_file_exits_2_and_is_left_unchanged(tmp_path, capsys, damage):
    _saved(tmp_path, _fixture())
    path = _stored(tmp_path)
    damaged = path.read_bytes()[:100]
    if damage == "no samples":
        entry = json.loads(path.read_text())
        del entry["report"]["results"]["tvm_int8"]["latency_samples_ms"]
        damaged = json.dumps(entry).encode()
    path.write_bytes(damaged)
    assert _compare(tmp_path, _fixture()) == 2
    err = capsys.readouterr().err
    assert str(path) in err and (damage == "truncated" or "tvm_int8.latency_samples_ms" in err)
    _saved(tmp_path, _fixture(created="2026-11-29T10:00:00+00:00"), "older")
    store = str(tmp_path / "store")
    # saved again under that name: the damage is named (it had said "already stored")
    assert main(["baseline", "save", str(tmp_path / "base"), "--store", store]) == 2
    assert str(path) in capsys.readouterr().err
    assert path.read_bytes() == damaged


@pytest.mark.parametrize(
    "damage, said",
    [
        ("missing", "no such report file"),
        ("not json", "damaged report file (not JSON"),
        ("schema 1", "schema_version 1 has no run definition"),
        ("schema 3", "schema_version 3 is not one this qbench reads"),
        ("schema '2'", 'schema_version: expected an integer (2), got "2" (the file was'),
        ("schema null", "schema_version: expected an integer (2), got null"),
        ("schema 0", "schema_version 0 is not one this qbench reads; supported: 2\n"),
    ],
)
def test_a_bad_report_exits_2_naming_the_file(tmp_path, capsys, damage, said):
    folder = tmp_path / "rep"
    folder.mkdir()
    if damage == "not json":
        (folder / "report.json").write_text('{"results": ')
    elif damage.startswith("schema"):
        version = json.loads(damage.split()[1].replace("'", '"'))
        (folder / "report.json").write_text(json.dumps({"schema_version": version, "results": {}}))
    assert main(["compare", str(folder), "--store", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert str(folder / "report.json") in err and said in err


def test_compare_with_an_explicit_baseline_report(tmp_path):
    base = _write(tmp_path, "base", _fixture(seed=1))
    new = _write(tmp_path, "new", _fixture(seed=2))
    assert main(["compare", str(new), "--baseline", str(base)]) == 0


def test_history_lists_stored_runs_oldest_first_and_draws_a_png(tmp_path, capsys):
    _saved(tmp_path, _fixture(created="2026-11-30T10:00:00+00:00"), "b")
    _saved(tmp_path, _fixture(created="2026-11-29T10:00:00+00:00"), "a")
    png = tmp_path / "h.png"
    store = str(tmp_path / "store")
    args = ["history", "--model", "tiny", "--target", "llvm", "--store", store, "--png", str(png)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.index("2026-11-29") < out.index("2026-11-30")
    # agreement 38/40; accuracy drop 30/40 - 28/40 = 5 points; SQNR 25 dB
    assert len(re.findall(r"95\.00 %\s+5\.00\s+25\.0\s", out)) == 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and str(png) in out
    assert main([*args[:4], "cuda", "--store", store]) == 2  # no run on that target


def test_per_image_outcomes_on_hand_made_logits():
    ref = np.array([[0.0, 1.0], [2.0, 0.0], [0.0, 3.0]])
    out = np.array([[0.0, 2.0], [0.0, 1.0], [1.0, 0.0]])
    labels = np.array([1, 1, 0])
    outcomes = per_image(ref, out, labels)
    flipped = outcomes.pop("flips")
    assert outcomes == {"top1_match": [1, 0, 0], "top1_correct": [1, 1, 1]}
    # two classes: margin p1 - p2 = tanh(d / 2); d = 2 and 3, both decisive
    assert [(f["index"], f["kind"]) for f in flipped] == [(1, "decisive"), (2, "decisive")]
    assert [f["margin"] for f in flipped] == pytest.approx([np.tanh(1.0), np.tanh(1.5)], abs=1e-6)
    assert per_image(ref, ref, labels) == {"top1_correct": [1, 0, 0]}  # PyTorch itself
    nan = out.copy()
    nan[0, 0] = np.nan  # non-finite logits agree with nothing, as compare_logits says
    assert per_image(ref, nan, labels) == {"top1_match": [0] * 3, "top1_correct": [0] * 3}


def test_a_tiny_run_records_definition_commit_and_per_image(tmp_path, tiny_run):
    """On the session's shared tiny run (``tiny_run``: batch 1, one thread, timed by the
    run's own protocol)."""
    report = tiny_run.report
    definition = dict(report["definition"])
    digest = definition.pop("digest")
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"))
    assert digest == hashlib.sha256(canonical.encode()).hexdigest()
    assert definition["quant"]["calib_mode"] == "percentile" and definition["batch_size"] == 1
    assert set(definition) >= {"weights_digest", "data_digest", "target", "qbench", "tvm"}
    assert (
        definition["graph_digest"].startswith(definition["tvm"]) and "labels_digest" in definition
    )
    assert definition["timing"] == "settled blocks v1"
    timed = report["environment"]["timing"]
    samples = {len(r["latency_samples_ms"]) for r in report["results"].values()}
    assert samples == {timed["timed_rounds"]} == {20} and timed["warmup_rounds"] == 3
    # 23 rounds rotating (PyTorch, TVM FP32, TVM INT8): p f i | f i p | i p f switch runtime
    # 4 times within and 2 times between rounds per 3 rounds: 7 x 6 + 2 (p f i | f i p) = 44,
    # and the first block settles too: 45
    assert timed["settles"] == 45 and timed["unsettled"] == 0
    assert timed["settings"]["TVM_NUM_THREADS"] == "1"
    assert "Timing: settled blocks v1: 3 warm-up + 20 timed rounds" in tiny_run.markdown
    assert report["environment"]["qbench_commit"] == _checkout_commit()
    for name in ("tvm_fp32", "tvm_int8"):
        match = report["results"][name]["per_image"]["top1_match"]
        assert (
            len(match) == 6
            and sum(match) == report["results"][name]["metrics"]["top1_agreement_count"]
        )
    folder = tiny_run.folder
    store = str(tmp_path / "store")
    assert main(["baseline", "save", str(folder), "--store", store, "--accept-fail"]) == 0
    assert main(["compare", str(folder), "--baseline", str(_stored(tmp_path))]) == 0


def test_an_a_a_pair_under_bursty_load_flags_nothing(tmp_path):
    """The issue's A/A pair: between two runs of one build the control (PyTorch) moved x1.18
    in scattered samples (not significant), TVM x1.21 in tight ones (significant). A control
    not shown steady proves nothing, so no absolute median is judged, and the per-round
    ratios, which load cancels in, stay '~'."""
    base, new = _fixture(seed=3), _fixture(seed=3)
    rng = np.random.default_rng(5)
    bursts = rng.lognormal(0, 0.25, N_SAMPLES)  # one load factor per round, all runners
    for name, factor in (("pytorch_fp32", 1.18), ("tvm_fp32", 1.21), ("tvm_int8", 1.21)):
        entry = new["results"][name]
        entry["latency_samples_ms"] = [
            s * factor * (b if name == "pytorch_fp32" else 1.0)
            for s, b in zip(entry["latency_samples_ms"], bursts, strict=True)
        ]
        entry["latency"] = latency_stats(entry["latency_samples_ms"])
    _saved(tmp_path, base)
    assert _compare(tmp_path, new, "--json", str(tmp_path / "c.json")) == 0
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    absolute = {r["runner"]: r for r in rows if r["metric"] == "median latency (ms)"}
    assert float(absolute["tvm_fp32"]["change"].rstrip("x")) > 1.10
    assert absolute["tvm_fp32"]["p_value"] < 0.01  # the old rule flagged this row
    assert absolute["pytorch_fp32"]["p_value"] > 0.01  # and took the control as unchanged
    assert all(
        r["verdict"].startswith("not judged: machine load not shown") for r in absolute.values()
    )
    assert {r["verdict"] for r in rows if r["metric"] == "latency ratio / TVM FP32"} == {"~"}


def _checkout_commit():
    """What a report should name as its qbench commit, read with git itself: HEAD of the
    checkout whose top holds the imported qbench package (+ "-dirty" with tracked changes),
    or None for an installed package."""
    import subprocess

    import qbench

    root = Path(qbench.__file__).resolve().parent.parent

    def git(*args):
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    if git("rev-parse", "--show-toplevel") != str(root):
        return None
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "HEAD") + ("-dirty" if dirty else "")


def test_a_report_names_the_commit_of_the_checkout_it_ran_from():
    """In a git checkout (this suite's), the commit is found; a report of a checkout must
    never say "unknown" (the moved provenance module once looked one folder too low)."""
    import qbench
    from qbench.measure.provenance import qbench_commit

    expected = _checkout_commit()
    assert qbench_commit() == expected
    repo = Path(__file__).resolve().parents[1]
    if (repo / ".git").exists() and Path(qbench.__file__).resolve().parent == repo / "qbench":
        assert len(expected.removesuffix("-dirty")) == 40  # this suite runs from a checkout


TWO_FORWARDS = """
import torch
from torch import nn

def _net(act):
    torch.manual_seed(3)
    return nn.Sequential(nn.Conv2d(3, 4, 3), act, nn.Flatten(), nn.Linear(4 * 30 * 30, 5)).eval()

def relu():
    return _net(nn.ReLU()), (3, 32, 32)

def tanh():
    return _net(nn.Tanh()), (3, 32, 32)
"""


def test_the_definition_holds_the_graph_and_the_labels(tmp_path, capsys):
    """Two models with the same weights and another forward (ReLU, Tanh), and the same
    photos under other labels, are other definitions (compare had judged them against each
    other's baselines); the labels' digest is the sha256 of the evaluated labels' JSON."""
    from fieldcases import cli_run, labels_csv, photos, run_report

    from qbench.measure.provenance import labels_digest

    (tmp_path / "m.py").write_text(TWO_FORWARDS)
    names = photos(tmp_path / "d", 4)
    found = {}
    for case, model, labels in (("a", "relu", 1), ("b", "tanh", 1), ("c", "relu", 2)):
        labels_csv(tmp_path / "d", [(n, labels) for n in names])
        args = ["--model", f"{tmp_path / 'm.py'}:{model}", "--data", str(tmp_path / "d")]
        assert cli_run(tmp_path / case, *args) in (0, 1), capsys.readouterr().err
        found[case] = run_report(tmp_path / case)["definition"]
    a, b, c = found["a"], found["b"], found["c"]
    assert a["weights_digest"] == b["weights_digest"] and a["graph_digest"] != b["graph_digest"]
    assert a["data_digest"] == c["data_digest"] and a["labels_digest"] != c["labels_digest"]
    assert a["labels_digest"] == hashlib.sha256(b"[1, 1]").hexdigest() == labels_digest([1, 1])
    assert len({d["digest"] for d in found.values()}) == 3
