"""Tuning database layout, budgets, Ctrl-C (fast) and a real tune-then-run round trip (slow)."""

import json
import os
import signal
import textwrap

import pytest

from qbench import tuning
from qbench.cli import main
from qbench.tuner import StopOnInterrupt, trial_budgets

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


def test_trial_budgets_follow_flops_with_a_floor_and_a_cap():
    # floor 16 // 4 = 4; spare 3 * 16 - 3 * 4 = 36 shared 3:1:0 -> 31, 13, 4;
    # rounded down to 4 * 2^k -> 16, 8, 4
    assert trial_budgets([3.0, 1.0, 0.0], 16) == [16, 8, 4]
    # floor 1, spare 20 all to the first, capped at 16
    assert trial_budgets([1e9, 0.0, 0.0, 0.0, 0.0, 0.0], 4) == [16, 1, 1, 1, 1, 1]
    assert trial_budgets([0.0, 0.0], 1) == [1, 1]


def test_first_ctrl_c_requests_a_stop_second_aborts():
    with StopOnInterrupt() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_databases_name_their_source(tmp_path, monkeypatch):
    target = {"kind": "llvm", "mcpu": "znver5", "num-cores": 2}
    monkeypatch.setattr(tuning, "PRETUNED_ROOT", tmp_path / "shipped")
    assert tuning.databases(tmp_path / "user", target) == ([], "none")
    shipped = tuning.db_dir(tmp_path / "shipped", target)
    shipped.mkdir(parents=True)
    (shipped / tuning.RECORDS).write_text("[1]\n")
    assert tuning.databases(tmp_path / "user", target) == ([shipped], "pre-tuned")
    user = tuning.db_dir(tmp_path / "user", target)
    user.mkdir(parents=True)
    (user / tuning.RECORDS).write_text("[1]\n")
    assert tuning.databases(tmp_path / "user", target) == (
        [user, shipped],
        "pre-tuned + user database",
    )


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
    records = tuning.record_count(folder)
    assert main(["tune", *common, "--trials", "2"]) == 0  # a re-run tunes nothing
    assert tuning.record_count(folder) == records
    main(["run", *common])
    (run,) = (tmp_path / "rep").iterdir()
    report = json.loads((run / "report.json").read_text())
    assert report["tuning"]["records"] == records
    assert report["tuning"]["source"] == "user database"
    assert report["results"]["tvm_fp32"]["metrics"]["top1_agreement"] == 1.0


@pytest.mark.slow
def test_time_budget_stops_tuning_and_keeps_records(tmp_path, capsys):
    (tmp_path / "tiny.py").write_text(TINY)
    args = ["tune", "--model", f"{tmp_path / 'tiny.py'}:build", "--data", "synthetic"]
    args += ["--calib-size", "2", "--eval-size", "2", "--batch-size", "1", "--trials", "4"]
    args += ["--tuning-db", str(tmp_path / "db"), "--cache-dir", str(tmp_path / "cal")]
    args += ["--reports-dir", str(tmp_path / "rep"), "--time-budget", "0.001"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "tvm_fp32:" in out and "stopped by --time-budget" in out
    assert "tvm_int8:" not in out  # nothing starts after the budget
    (folder,) = (tmp_path / "db").iterdir()
    assert tuning.record_count(folder) > 0  # the first measured batch was kept
