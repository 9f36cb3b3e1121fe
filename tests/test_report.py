"""Report writing: atomic folders, JSON without NaN, a readable Markdown."""

import json

import pytest

from qbench import atomic


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


def test_c07_latency_table_marks_slower_int8_and_counts_added_ops():
    import numpy as np
    import torch
    from helpers import LLVM, quantize_tiny
    from torch import nn

    from qbench import build
    from qbench.compare import latency_stats
    from qbench.report import _graph, latency_table
    from qbench.runners import TVMRunner

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
    q = quantize_tiny(model, calib, vnni=False)  # plain integer ops, on any CPU
    results = {}
    for name, mod in (("tvm_fp32", q.fp32_mod), ("tvm_int8", q.int8_mod)):
        runner = TVMRunner(build.build(mod, LLVM), build.device_for(LLVM), 1, (32, 64, 64), name)
        results[name] = {"latency": latency_stats(runner.time(calib[0], warmup=2, repeat=20))}
    table = latency_table({"results": results}, "simple")
    slower = (
        results["tvm_int8"]["latency"]["median_ms"] > results["tvm_fp32"]["latency"]["median_ms"]
    )
    assert ("SLOWER" in table) == slower and "ratio to TVM FP32" in table
    added = _graph(q.fp32_mod, q.int8_mod)["int8_added_ops"]
    # two integer layers, each with one quantize and one cast back to float32; the padded
    # depthwise conv reads a signed input (zero point 128), so its padding became explicit
    assert added["relax.quantize"] == 2 and added["relax.astype"] == 2
    assert added["relax.nn.pad"] == 1
