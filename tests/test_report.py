"""Report writing: atomic folders, JSON without NaN, a readable Markdown, and the report
files the help names."""

import json
from dataclasses import replace

import pytest

from qbench.core import atomic
from qbench.report.result import RunResult
from qbench.signoff.verdict import Check


def test_write_folder_is_complete_and_never_overwrites(tmp_path):
    first = atomic.write_folder(tmp_path / "run", {"a.json": "{}", "b.md": "# b"})
    second = atomic.write_folder(tmp_path / "run", {"a.json": "[]"})
    assert first.name == "run" and second.name == "run-2"
    assert (first / "b.md").read_text() == "# b" and (second / "a.json").read_text() == "[]"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "run-2"]


def test_failed_folder_write_leaves_nothing(tmp_path):
    with pytest.raises(TypeError):
        atomic.write_folder(tmp_path / "run", {"a.json": "{}", "b.json": None})
    assert list(tmp_path.iterdir()) == []


def test_to_json_writes_nonfinite_as_null():
    assert json.loads(atomic.to_json({"x": float("nan"), "y": [float("inf"), 1.5]})) == {
        "x": None,
        "y": [None, 1.5],
    }


def test_the_latency_table_marks_slower_int8_and_counts_added_ops():
    """C07: a depthwise conv -> BatchNorm -> ReLU -> 1x1 conv, where INT8 may be slower than
    FP32: the latency table shows the per-round ratio, says when INT8 does not pay off, and
    the casts and pads the INT8 graph added are counted."""
    import numpy as np
    import torch
    from helpers import LLVM, loaded_vm, quantize_tiny
    from torch import nn

    from qbench.compile import targets
    from qbench.measure import timing
    from qbench.measure.metrics import latency_stats
    from qbench.measure.results import Latency, RunnerResult
    from qbench.measure.runners import TVMRunner
    from qbench.report.assemble import graph_ops
    from qbench.report.tables import latency_table

    torch.manual_seed(7)
    model = nn.Sequential(
        nn.Conv2d(32, 32, 4, stride=2, padding=1, groups=32),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 64, 1),
    ).eval()
    calib = [
        np.random.default_rng(s).standard_normal((1, 32, 64, 64)).astype(np.float32)
        for s in range(2)
    ]
    q = quantize_tiny(model, calib)
    found = [
        TVMRunner(loaded_vm(mod), targets.device_for(LLVM), 1, (32, 64, 64), name)
        for name, mod in (("tvm_fp32", q.fp32_mod), ("tvm_int8", q.int8_mod))
    ]
    timed = timing.Rounds(warmup=2, repeat=20).time(found, calib[0]).samples_ms
    results = {
        name: RunnerResult(name, Latency(**latency_stats(s)), s, {}, {})
        for name, s in timed.items()
    }
    table = latency_table(results, "simple")
    per_round = np.asarray(results["tvm_int8"].samples_ms) / results["tvm_fp32"].samples_ms
    slower = np.median(per_round) >= 1.005  # within half a percent it is "1.00x (same)"
    assert ("INT8 does not pay off" in table) == slower and "vs TVM FP32 (per round)" in table
    added = graph_ops(q.fp32_mod, q.int8_mod)["int8_added_ops"]
    # two integer layers: the input's quantize, the depthwise conv's integer requantize to
    # the 1x1 conv's uint8 (its casts to float32 and back to uint8), the 1x1 conv's cast to
    # float32; the padded depthwise conv reads a signed input (zero point 128), so its
    # padding became explicit
    assert added["relax.quantize"] == 1 and added["relax.round"] == 1
    assert added["relax.astype"] == 3
    assert added["relax.nn.pad"] == 1


def _metrics(**counts):
    """Metrics with fractions and their counts, from ``key=(count, total)``."""
    m = {}
    for key, (count, total) in counts.items():
        m.update({key: count / total, f"{key}_count": count, f"{key}_total": total})
    return m


def _check(name, value, op, limit, unit, passed, **extra):
    return dict(name=name, value=value, op=op, limit=limit, passed=passed, unit=unit, **extra)


@pytest.fixture
def report(report_json):
    return RunResult.from_json(report_json)


@pytest.fixture
def report_json():
    """A finished report.json with known numbers: 718 evaluation images, INT8 agrees on 629."""
    lat = {"mean_ms": 0.0, "runs": 1}
    int8_metrics = _metrics(
        top1_agreement=(629, 718),
        top5_agreement=(3400, 3590),
        top1_accuracy=(560, 718),
        top5_accuracy=(690, 718),
    )
    int8_metrics.update(nonfinite_logits=0, max_abs_diff=0.25, cosine=0.99, sqnr_db=18.5)
    fp32_metrics = _metrics(
        top1_agreement=(718, 718),
        top5_agreement=(3590, 3590),
        top1_accuracy=(575, 718),
        top5_accuracy=(700, 718),
    )
    fp32_metrics.update(nonfinite_logits=0, max_abs_diff=1e-6, cosine=1.0, sqnr_db=120.0)
    ref_metrics = _metrics(top1_accuracy=(575, 718), top5_accuracy=(700, 718))
    checks = [
        _check("FP32 non-finite logits", 0.0, "<=", 0, "count", True),
        _check("FP32 top-1 agreement", 1.0, ">=", 0.97, "fraction", True),
        _check("INT8 non-finite logits", 0.0, "<=", 0, "count", True),
        _check("INT8 top-1 agreement", 629 / 718, ">=", 0.97, "fraction", False),
        _check("INT8 top-1 accuracy drop", 100 * 15 / 718, "<=", 1.0, "points", False),
        _check("layers built in INT8", 3.0, ">=", 1, "count", True),
        _check("trained weights", 0.0, ">=", 1, "flag", False, detail="random initialisation"),
    ]
    added = {"relax.quantize": 12, "relax.astype": 12, "relax.nn.pad": 1, "relax.where": 2}
    layer = {
        "index": 0,
        "name": "conv1",
        "op": "conv2d",
        "in_channels": 3,
        "out_channels": 64,
        "groups": 1,
        "reason": "",
        "nonfinite_excluded": 0,
        "nonfinite_batches": [],
        "dtype": "uint8 x int8 -> int32",
        "act_scale": 0.02,
        "act_zero_point": 128,
        "weight_sqnr_min_db": 40.0,
        "collapsed_channels": [],
    }
    model = {"name": "resnet18", "weights": "random", "random_weights": True}
    model |= {"input_shape": [3, 224, 224], "aten_ops": {"aten.conv2d.default": 20}}
    data = {"source": "photos", "synthetic": False, "labelled": True, "calib_size": 32}
    data |= {"eval_size": 718, "seed": 0}
    return {
        "schema_version": 2,
        "created": "2026-11-30T12:00:00+00:00",
        "definition": {"model": "resnet18", "digest": "ab" * 32},
        "policy": None,
        "diagnosis": None,
        "model": model,
        "data": data,
        "environment": {
            "target": {"kind": "llvm"},
            "threads": 2,
            "cpu": "AMD EPYC",
            "machine": "x86_64",
            "qbench": "0.1.0",
            "tvm": "0.27.0.post1",
            "torch": "2.14.1",
            "python": "3.11.7",
        },  # fmt: skip
        "config": {"batch_size": 8},
        "precision": {"integer_ops": "conv2d, matmul", "between_layers": "float32"},
        "calibration": {"cache_key": "0" * 24, "cache_dir": "cal", "cache_hit": False}
        | {"images": 32, "mode": "max", "params": {}},
        "tuning": {"source": "none", "records": 0, "database": "db", "pretuned_records": 0}
        | {"pretuned_database": None, "fresh": {}},
        "graph": {"int8_added_ops": added},
        "int8_kernels": {
            "cpu_class": "AVX2",
            "paths": {"conv2d avx2": 48, "conv2d default": 2, "matmul avx2": 1},
        },
        "layers": [layer],
        "results": {
            "pytorch_fp32": {
                "device": "host",
                "latency": {**lat, "median_ms": 12.0, "p90_ms": 13.0, "std_ms": 0.5},
                "latency_samples_ms": [12.0],
                "metrics": ref_metrics,
                "per_image": {},
            },
            "tvm_fp32": {
                "device": "host",
                "latency": {**lat, "median_ms": 4.0, "p90_ms": 4.2, "std_ms": 0.1},
                "latency_samples_ms": [4.0],
                "metrics": fp32_metrics,
                "per_image": {},
            },
            "tvm_int8": {
                "device": "host",
                "latency": {**lat, "median_ms": 2.5, "p90_ms": 2.6, "std_ms": 0.1},
                "latency_samples_ms": [2.5],
                "metrics": int8_metrics,
                "per_image": {},
            },
        },
        "signoff": {"verdict": "FAIL", "shown": True, "checks": checks},
        "speed": {
            "ratios": {
                "tvm_int8/tvm_fp32": {
                    "ratio": 0.625,
                    "ci_low": 0.5,
                    "ci_high": 0.75,
                    "confidence": 0.95,
                },
            },
            "noisy": True,
            "noisy_reason": "tvm_int8/tvm_fp32: 95 % CI 0.500-0.750 spans 40 % of the ratio",
        },  # fmt: skip
        "wall_time_s": 61.5,
    }


def _row(text, title):
    (line,) = [line for line in text.splitlines() if line.startswith(title)]
    return line


def test_agreement_and_accuracy_are_percentages_with_counts(report):
    from qbench.report.tables import accuracy_table

    table = accuracy_table(report, "simple")
    int8, fp32, ref = (_row(table, t) for t in ("TVM INT8", "TVM FP32", "PyTorch FP32"))
    # 629/718 = 0.87604, 3400/3590 = 0.94708, 560/718 = 0.77994, 690/718 = 0.96100
    for text in ("87.6 % (629/718)", "94.7 % (3400/3590)", "78.0 % (560/718)", "96.1 % (690/718)"):
        assert text in int8
    assert "100.0 % (718/718)" in fp32 and "80.1 % (575/718)" in ref  # 575/718 = 0.80084
    assert ref.split()[3] == "-"  # PyTorch does not agree with itself: no agreement shown
    assert "(dB)" in table and "(logits)" in table


def test_latency_ratios_say_slower_or_faster_than_tvm_fp32(report):
    from qbench.report.tables import latency_table

    table = latency_table(report.results, "simple")
    assert _row(table, "PyTorch FP32").endswith("3.00x slower")  # 12.0 / 4.0
    assert _row(table, "TVM FP32").endswith("1.00x (reference)")
    assert _row(table, "TVM INT8").endswith("1.60x faster")  # 4.0 / 2.5
    assert "median (ms)" in table and "p90 (ms)" in table and "std (ms)" in table


def test_a_simulated_int8_latency_is_not_presented_as_int8(report):
    """--simulate builds fake-quantized FP32: its latency row says so and draws no INT8
    speed conclusion."""
    from qbench.report.tables import latency_table

    int8, fp32 = report.results["tvm_int8"], report.results["tvm_fp32"]
    slow = replace(int8, samples_ms=tuple(2 * s for s in fp32.samples_ms))  # 2x every round
    results = report.results | {"tvm_int8": slow}
    row = _row(latency_table(results, "simple", simulated=True), "TVM INT8")
    assert "SIMULATED" in row and row.endswith("2.00x slower") and "pay off" not in row
    assert _row(latency_table(results, "simple"), "TVM INT8").endswith("INT8 does not pay off")
    precision = {"integer_ops": "conv2d, matmul (SIMULATED: fake-quantized FP32)"}
    assert replace(report, precision=precision).simulated and not report.simulated


def test_signoff_values_are_in_the_units_of_their_limits(report):
    from qbench.report.tables import signoff_table

    table = signoff_table(report.signoff, "simple")
    assert "87.6 %" in _row(table, "INT8 top-1 agreement")
    assert ">= 97.0 %" in _row(table, "INT8 top-1 agreement")
    drop = _row(table, "INT8 top-1 accuracy drop")  # 100 * 15 / 718 = 2.089 points
    assert "2.1 points" in drop and "<= 1.0 points" in drop and drop.endswith("FAIL")
    weights = _row(table, "trained weights")
    assert "no: random initialisation" in weights and weights.endswith("FAIL")
    assert "1 = yes" not in table


def test_a_failing_value_never_looks_equal_to_its_limit():
    from qbench.report.tables import check_value_and_limit

    check = Check("INT8 top-1 agreement", 0.9699, ">=", 0.97, False, "fraction")
    assert check_value_and_limit(check) == ("96.99 %", ">= 97.00 %")
    check = Check("INT8 top-1 accuracy drop", 1.0, "<=", 1.0, True, "points")
    assert check_value_and_limit(check) == ("1.0 points", "<= 1.0 points")
    check = Check("INT8 median latency", 0.05, "<=", 0.001, False, "ms")  # not "<= 0.00 ms"
    assert check_value_and_limit(check) == ("0.050 ms", "<= 0.001 ms")


def test_added_ops_are_words_most_frequent_first(report):
    from qbench.report.lines import added_ops_words

    text = added_ops_words(report.graph["int8_added_ops"])
    assert text.startswith("INT8 graph adds 12 dtype casts, 12 quantizes, 2 where, 1 pad (")
    assert added_ops_words({}) == "INT8 graph adds no ops to the FP32 graph"


def test_written_report_is_readable_and_json_keeps_its_keys(report, report_json, tmp_path):
    from qbench.report.markdown import render_console
    from qbench.report.write import write_reports

    out = write_reports(report, tmp_path)
    assert json.loads((out / "report.json").read_text()) == report_json
    for text in (render_console(report), (out / "report.md").read_text()):
        assert "87.6 % (629/718)" in text and "1.60x faster" in text
        assert "INT8 graph adds 12 dtype casts" in text
        assert "TVM INT8 / TVM FP32 0.625 (95 % CI 0.500-0.750)" in text
        assert "timing: NOISY (tvm_int8/tvm_fp32: 95 % CI 0.500-0.750 spans 40 %" in text
        assert "{'relax." not in text and "1 = yes" not in text


def test_environment_line_names_cpu_threads_versions_and_target():
    from qbench.report.lines import environment_line

    env = {
        "cpu": "AMD EPYC", "machine": "x86_64", "threads": 2, "qbench": "0.1.0",
        "tvm": "0.27.0.post1", "torch": "2.14.1", "python": "3.11.7",
        "target": {"kind": "llvm", "mcpu": "znver3", "num-cores": 2},
    }  # fmt: skip
    line = environment_line(env)
    assert line.startswith("Environment: CPU AMD EPYC (x86_64, LLVM mcpu znver3), 2 threads;")
    assert "TVM 0.27.0.post1, PyTorch 2.14.1" in line
    assert '`{"kind": "llvm", "mcpu": "znver3", "num-cores": 2}`' in line


def test_int8_kernel_paths_are_named_with_the_cpu_class():
    from qbench.compile.info import Int8Kernels
    from qbench.report.lines import int8_kernels_line

    info = Int8Kernels("AVX2", {"conv2d avx2": 48, "conv2d default": 2})
    assert int8_kernels_line(info) == (
        "CPU class AVX2; INT8 layers by kernel: conv2d avx2 48, conv2d default 2"
    )
    assert int8_kernels_line(Int8Kernels("cuda", {})).endswith("by kernel: none")


def test_environment_line_names_the_timing_protocol_and_its_settings():
    from qbench.measure import timing
    from qbench.report.lines import environment_line

    env = {
        "cpu": "AMD EPYC",
        "machine": "x86_64",
        "threads": 2,
        "qbench": "0.1.0",
        "tvm": "0.27.0.post1",
        "torch": "2.14.1",
        "python": "3.11.7",
        "target": {"kind": "llvm", "mcpu": "znver3"},
    }
    assert "Timing" not in environment_line(env)  # reports from before the protocol
    env["timing"] = timing.record(3, 20, [(9.0, True), (240.0, True)])
    line = environment_line(env)
    assert "Timing: settled blocks v1: 3 warm-up + 20 timed rounds" in line
    assert "2 settles between runtimes (median 124.5 ms, max 240.0 ms)" in line
    assert "TVM_THREAD_POOL_SPIN_COUNT=" in line and "torch.get_num_threads=" in line


def test_precision_names_the_requantize_scheme_and_simulation():
    from qbench.quantize import QuantConfig
    from qbench.report.assemble import precision

    built, simulated = precision(QuantConfig()), precision(QuantConfig(simulate=True))
    assert built["integer_ops"].startswith("conv2d, matmul: uint8 x int8 -> int32")
    reduced = precision(QuantConfig(reduce_range=True))["integer_ops"]
    assert "7-bit values ([-63, 63], --reduce-range)" in reduced
    assert "round half to even" in built["integer_ops"]
    assert "integer requantize" in built["integer_ops"] and "multiplier" in built["integer_ops"]
    assert built["between_layers"].startswith("uint8 from one such layer")
    assert "SIMULATED" in simulated["integer_ops"] and "float32" in simulated["between_layers"]


def test_help_names_every_report_file(capsys, tiny_run):
    """Issue 20: the help names report.md, report.json and report.html, and they are what a
    run writes (the session's shared ``tiny_run``)."""
    from qbench.cli.main import main

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in ("report.md", "report.json", "report.html"))
    written = {p.name for p in tiny_run.folder.iterdir()}
    assert {"report.md", "report.json", "report.html"} <= written
