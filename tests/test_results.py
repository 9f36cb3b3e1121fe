"""The typed run results: report.json is ``RunResult.to_json()`` and reads back the same."""

import copy
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from qbench.core.atomic import to_json
from qbench.core.errors import UserError
from qbench.report.result import RunResult
from qbench.signoff.verdict import Check, Verdict

FIXTURE = Path(__file__).parent / "fixtures" / "report.json"


@pytest.fixture
def stored():
    return json.loads(FIXTURE.read_text())


def test_the_fixture_round_trips_exactly(stored):
    result = RunResult.from_json(stored)
    assert RunResult.from_json(result.to_json()) == result
    assert result.to_json() == stored
    assert list(result.to_json()) == list(stored)  # report.json's key order too
    int8 = result.results["tvm_int8"]
    assert int8.samples_ms == tuple(stored["results"]["tvm_int8"]["latency_samples_ms"])
    assert int8.latency.median_ms == stored["results"]["tvm_int8"]["latency"]["median_ms"]
    stored_ratio = stored["speed"]["ratios"]["tvm_int8/tvm_fp32"]
    assert result.speed.ratios["tvm_int8/tvm_fp32"].ci_high == stored_ratio["ci_high"]


@pytest.mark.parametrize(
    "path, name",
    [
        (("signoff",), "signoff"),
        (("model", "input_shape"), "model.input_shape"),
        (("results", "tvm_int8", "latency", "p90_ms"), "results.tvm_int8.latency.p90_ms"),
        (
            ("results", "pytorch_fp32", "latency_samples_ms"),
            "results.pytorch_fp32.latency_samples_ms",
        ),
        (("signoff", "checks", 6, "limit"), "signoff.checks[6].limit"),
        (
            ("speed", "ratios", "tvm_int8/tvm_fp32", "ci_low"),
            "speed.ratios.tvm_int8/tvm_fp32.ci_low",
        ),
    ],
)
def test_a_missing_field_names_itself(stored, path, name):
    damaged = copy.deepcopy(stored)
    parent = damaged
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    with pytest.raises(UserError, match=f"missing field {re.escape(name)};"):
        RunResult.from_json(damaged)


def test_a_report_without_speed_reads_back_without_it(stored):
    del stored["speed"]
    result = RunResult.from_json(stored)
    assert result.speed is None and "speed" not in result.to_json()


def test_a_not_applicable_check_survives_the_round_trip(stored):
    na = Check("INT8 top-5 agreement", None, ">=", 0.9, None, "fraction", detail="not applicable")
    result = RunResult.from_json(stored)
    result = replace(result, signoff=Verdict("PASS", (na,)))
    text = to_json(result.to_json())
    assert '"passed": null' in text
    keys = {"name", "value", "op", "limit", "passed", "unit", "detail"}  # unset options left out
    assert set(json.loads(text)["signoff"]["checks"][0]) == keys
    (back,) = RunResult.from_json(json.loads(text)).signoff.checks
    assert back == na and back.passed is None and back.value is None


# The typed sections of report.json: (their reader, the path of their dict in the fixture, a
# required field, the dotted path a missing one is named by)
SECTION_TYPES = [
    ("CalibrationInfo", ("calibration",), "mode", "calibration.mode"),
    ("TuningInfo", ("tuning",), "pretuned_database", "tuning.pretuned_database"),
    ("Int8Kernels", ("int8_kernels",), "cpu_class", "int8_kernels.cpu_class"),
    ("DiagnosisReport", ("diagnosis",), "ranking", "diagnosis.ranking"),
    (
        "DiagnosisReport.calibration",
        ("diagnosis", "calibration"),
        "cache_key",
        "diagnosis.calibration.cache_key",
    ),
    ("FallbackRecord", ("diagnosis", "fallback"), "reached", "diagnosis.fallback.reached"),
    (
        "FallbackStep",
        ("diagnosis", "fallback", "steps", 0),
        "top1_agreement_ci95",
        "diagnosis.fallback.steps[0].top1_agreement_ci95",
    ),
]


def _readers():
    from qbench.calibration.calibrate import CalibrationInfo
    from qbench.compile.info import Int8Kernels, TuningInfo
    from qbench.report.diagnosis import DiagnosisReport, FallbackRecord, FallbackStep

    return {
        "CalibrationInfo": CalibrationInfo.from_json,
        "TuningInfo": TuningInfo.from_json,
        "Int8Kernels": Int8Kernels.from_json,
        "DiagnosisReport": DiagnosisReport.from_json,
        "DiagnosisReport.calibration": lambda d: CalibrationInfo.from_json(
            d, "diagnosis.calibration"
        ),
        "FallbackRecord": FallbackRecord.from_json,
        "FallbackStep": lambda d: FallbackStep.from_json(d, "diagnosis.fallback.steps[0]"),
    }


def _at(d, path):
    for key in path:
        d = d[key]
    return d


@pytest.mark.parametrize("kind, path, field, name", SECTION_TYPES)
def test_each_typed_section_round_trips_byte_for_byte(stored, kind, path, field, name):
    d = _at(stored, path)
    typed = _readers()[kind](d)
    assert json.dumps(typed.to_json()) == json.dumps(d)  # the same keys in the same order
    assert _readers()[kind](typed.to_json()) == typed
    assert to_json(RunResult.from_json(stored).to_json()) == to_json(stored)


@pytest.mark.parametrize("kind, path, field, name", SECTION_TYPES)
def test_a_typed_section_names_its_missing_field(stored, kind, path, field, name):
    damaged = copy.deepcopy(stored)
    del _at(damaged, path)[field]
    with pytest.raises(UserError, match=f"missing field {re.escape(name)};"):
        _readers()[kind](_at(damaged, path))
    with pytest.raises(UserError, match=f"missing field {re.escape(name)};"):
        RunResult.from_json(damaged)


def test_the_typed_sections_are_read_as_types_with_their_units(stored):
    from qbench.calibration.calibrate import CalibrationInfo
    from qbench.compile.info import Int8Kernels, TuningInfo
    from qbench.report.diagnosis import DiagnosisReport, FallbackRecord, FallbackStep

    result = RunResult.from_json(stored)
    assert isinstance(result.calibration, CalibrationInfo) and result.calibration.seconds == 1.5
    assert isinstance(result.tuning, TuningInfo) and result.tuning.tuned_kernels == 0
    assert isinstance(result.int8_kernels, Int8Kernels)
    assert result.int8_kernels.paths == stored["int8_kernels"]["paths"]
    diagnosis = result.diagnosis
    assert isinstance(diagnosis, DiagnosisReport)
    assert isinstance(diagnosis.calibration, CalibrationInfo)
    assert isinstance(diagnosis.fallback, FallbackRecord)
    (step,) = diagnosis.fallback.steps
    assert isinstance(step, FallbackStep) and step.top1_agreement_ci95 == (0.794093, 1.0)
    assert diagnosis.fallback.last_accepted is step and diagnosis.layers[0]["layer"] == "0"


def test_optional_parts_are_left_out_of_the_json_when_absent(stored):
    """A cache hit has no ``seconds``, a record before the INT8 rewrite no rounding or bias
    correction, a tuning before the builds no ``kernels``, a diagnosis without
    ``--accuracy-target`` no ``fallback``; each reads back as it was."""
    from qbench.calibration.calibrate import CalibrationInfo
    from qbench.compile.info import TuningInfo
    from qbench.report.diagnosis import DiagnosisReport

    hit = {k: v for k, v in stored["calibration"].items() if k != "seconds"} | {"cache_hit": True}
    bare = {k: v for k, v in hit.items() if k not in ("weight_rounding", "bias_correction")}
    for d in (hit, bare):
        assert CalibrationInfo.from_json(d).to_json() == d
    assert CalibrationInfo.from_json(bare).weight_rounding is None
    untuned = {k: v for k, v in stored["tuning"].items() if k != "kernels"}
    assert TuningInfo.from_json(untuned).kernels is None
    assert TuningInfo.from_json(untuned).to_json() == untuned
    diagnosed = {k: v for k, v in stored["diagnosis"].items() if k != "fallback"}
    assert DiagnosisReport.from_json(diagnosed).fallback is None
    assert DiagnosisReport.from_json(diagnosed).to_json() == diagnosed


def test_a_timed_fallback_round_trips_with_its_latency(stored):
    """A fallback that kept a layer in FP32: each accepted step's latency and the
    ``FallbackLatency`` (ms) read back; a missing one is named."""
    from qbench.report.diagnosis import FallbackLatency, FallbackRecord

    fb = copy.deepcopy(stored["diagnosis"]["fallback"])
    second = fb["steps"][0] | {"layer": "2", "latency_ms": 1.25, "logits_sqnr_db": 70.0}
    fb["steps"] = [fb["steps"][0] | {"latency_ms": 1.0}, second]
    fb |= {"kept_fp32": ["2"], "latency_ms": {"all_int8": 1.0, "with_fallback": 1.25}}
    record = FallbackRecord.from_json(fb)
    assert record.latency_ms == FallbackLatency(all_int8=1.0, with_fallback=1.25)
    assert record.kept_fp32 == ("2",) and record.last_accepted.latency_ms == 1.25
    assert json.dumps(record.to_json()) == json.dumps(fb)
    assert FallbackRecord.from_json(record.to_json()) == record
    del fb["latency_ms"]["with_fallback"]
    match = "missing field diagnosis.fallback.latency_ms.with_fallback;"
    with pytest.raises(UserError, match=re.escape(match)):
        FallbackRecord.from_json(fb)


def test_a_fallback_record_written_before_the_gain_rule_still_reads():
    """Invariant of issue 35 (what qbench stored, every later qbench reads): a fallback of a
    report written before 2026-12-03 has no needed_images, min_gain_db, stop, steps'
    accepted or latency; it reads, with those marked as not recorded."""
    from qbench.report.diagnosis import OLDER_STOP, FallbackRecord

    step = {
        "layer": None,
        "top1_agreement": 0.9,
        "top1_agreement_count": 18,
        "top1_agreement_total": 20,
        "top1_agreement_ci95": [0.683, 0.988],
        "logits_sqnr_db": 21.5,
    }
    old = {"target": 0.97, "held_out_images": 20, "reached": False, "kept_fp32": []}
    record = FallbackRecord.from_json(old | {"steps": [step]})
    assert record.stop == OLDER_STOP and record.min_gain_db is None
    assert record.needed_images == 122  # 0.025 ** (1 / 122) >= 0.97 > 0.025 ** (1 / 121)
    assert record.steps[0].accepted is True and record.steps[0].latency_ms is None
    with pytest.raises(UserError, match="diagnosis.fallback.reached"):
        FallbackRecord.from_json({k: v for k, v in old.items() if k != "reached"} | {"steps": []})
