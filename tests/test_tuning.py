"""Tuning database layout (fast) and a real tune-then-run round trip (slow)."""

import json
import textwrap

import pytest

from qbench import tuning
from qbench.cli import main

TINY = textwrap.dedent("""
    import torch
    from torch import nn

    def build():
        torch.manual_seed(3)
        return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.Conv2d(8, 8, 3),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval(), (1, 3, 16, 16)
""")


def test_one_database_folder_per_target(tmp_path):
    a = tuning.db_dir(tmp_path, {"kind": "llvm", "mcpu": "znver5", "num-cores": 2})
    b = tuning.db_dir(tmp_path, {"num-cores": 2, "mcpu": "znver5", "kind": "llvm"})
    c = tuning.db_dir(tmp_path, {"kind": "llvm", "mcpu": "znver5", "num-cores": 1})
    assert a == b != c and a.name.startswith("llvm-znver5-")


def test_record_count_counts_lines(tmp_path):
    assert tuning.record_count(tmp_path) == 0
    (tmp_path / tuning.RECORDS).write_text("[1]\n[2]\n\n[3]\n")
    assert tuning.record_count(tmp_path) == 3


@pytest.mark.slow
def test_tune_then_run_applies_the_records(tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    common = [
        "--model",
        f"{tmp_path / 'tiny.py'}:build",
        "--data",
        "synthetic",
        "--calib-size",
        "2",
        "--eval-size",
        "4",
        "--batch-size",
        "1",
        "--tuning-db",
        str(tmp_path / "db"),
        "--cache-dir",
        str(tmp_path / "cal"),
        "--reports-dir",
        str(tmp_path / "rep"),
    ]
    assert main(["tune", *common, "--trials", "2"]) == 0
    (folder,) = (tmp_path / "db").iterdir()
    assert tuning.record_count(folder) > 0
    main(["run", *common])
    (run,) = (tmp_path / "rep").iterdir()
    report = json.loads((run / "report.json").read_text())
    assert report["tuning"]["records"] == tuning.record_count(folder)
    assert report["results"]["tvm_fp32"]["metrics"]["top1_agreement"] == 1.0
