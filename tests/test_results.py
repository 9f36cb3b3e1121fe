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
