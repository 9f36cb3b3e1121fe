"""Tuning database layout, budgets, Ctrl-C (fast), damaged database files (C19) and a real
tune-then-run round trip (slow)."""

import json
import os
import shutil
import signal
import textwrap
from types import SimpleNamespace

import pytest
from fieldcases import cli_run
from helpers import shipped_database

from qbench.cli.main import main
from qbench.compile import dbfiles, recordcheck, tuning
from qbench.compile.targets import Llvm
from qbench.compile.tuner import StopOnInterrupt, trial_budgets

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


def test_record_count_counts_readable_records_only(tmp_path):
    """By hand: 3 pairs, a blank line, a line cut mid-write, a bare list and a negative
    workload line: 3 records."""
    assert tuning.record_count(tmp_path) == 0
    lines = '[0, {"r": 1}]\n[1, {}]\n\n[0, {"r": 2}]\n[2, {"tra\n[1]\n[-1, {}]\n'
    (tmp_path / dbfiles.RECORDS).write_text(lines)
    assert tuning.record_count(tmp_path) == 3


def test_trial_budgets_follow_flops_with_a_floor_and_a_cap():
    # floor 16 // 4 = 4; spare 3 * 16 - 3 * 4 = 36 shared 3:1:0 -> 31, 13, 4;
    # rounded down to 4 * 2^k -> 16, 8, 4
    assert trial_budgets([3.0, 1.0, 0.0], 16) == [16, 8, 4]
    # floor 1, spare 20 all to the first, capped at 16
    assert trial_budgets([1e9, 0.0, 0.0, 0.0, 0.0, 0.0], 4) == [16, 1, 1, 1, 1, 1]
    assert trial_budgets([0.0, 0.0], 1) == [1, 1]


def test_first_ctrl_c_requests_a_stop_second_aborts(sigint_default):
    with StopOnInterrupt() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_rejected_workloads_are_left_out_of_the_merged_database(tmp_path):
    shipped = shipped_database()
    folder = tmp_path / "db"
    shutil.copytree(shipped, folder)
    (folder / recordcheck.REJECTED).unlink(missing_ok=True)
    assert recordcheck.rejected(folder) == set()
    checked = json.loads((folder / dbfiles.CHECKED).read_text())
    assert len(tuning.union_database([folder])) == len(checked) > 1  # one per kept workload
    key = checked[0].split(":")[0]  # the structural hash of a checked workload
    (folder / recordcheck.REJECTED).write_text(json.dumps([key]))
    assert recordcheck.rejected(folder) == {key}
    kept = sum(not k.startswith(f"{key}:") for k in checked)
    assert len(tuning.union_database([folder])) == kept == len(checked) - 1


def test_databases_name_their_source(tmp_path, monkeypatch):
    target = {"kind": "llvm", "mcpu": "znver5", "num-cores": 2}
    monkeypatch.setattr(tuning, "PRETUNED_ROOT", tmp_path / "shipped")
    assert tuning.databases(tmp_path / "user", target) == ([], "none")
    shipped = tuning.db_dir(tmp_path / "shipped", target)
    shipped.mkdir(parents=True)
    (shipped / dbfiles.RECORDS).write_text("[0, {}]\n")
    assert tuning.databases(tmp_path / "user", target) == ([shipped], "pre-tuned")
    user = tuning.db_dir(tmp_path / "user", target)
    user.mkdir(parents=True)
    (user / dbfiles.RECORDS).write_text("[0, {}]\n")
    assert tuning.databases(tmp_path / "user", target) == (
        [user, shipped],
        "pre-tuned + user database",
    )


def _tiny_args(tmp_path, db="db"):
    (tmp_path / "tiny.py").write_text(TINY)
    args = ["--model", f"{tmp_path / 'tiny.py'}:build", "--data", "synthetic"]
    args += ["--calib-size", "2", "--eval-size", "2", "--batch-size", "1"]
    args += ["--tuning-db", str(tmp_path / db), "--cache-dir", str(tmp_path / "cal")]
    return args + ["--reports-dir", str(tmp_path / f"rep-{db}")]


def _tuning_report(tmp_path, db):
    (run,) = (tmp_path / f"rep-{db}").iterdir()
    return json.loads((run / "report.json").read_text())


@pytest.mark.slow
def test_tune_then_run_applies_user_and_shipped_records(tmp_path, monkeypatch, capsys):
    from helpers import LLVM
    from tvm.s_tir import meta_schedule as ms

    from qbench.compile.kernels.select import NO_FAST_PATH, cpu_class

    monkeypatch.setattr(tuning, "PRETUNED_ROOT", tmp_path / "none")
    assert main(["tune", *_tiny_args(tmp_path), "--trials", "2"]) == 0
    (folder,) = (tmp_path / "db").iterdir()
    records = tuning.record_count(folder)
    assert records > 0
    assert main(["tune", *_tiny_args(tmp_path), "--trials", "2"]) == 0  # re-run tunes nothing
    assert tuning.record_count(folder) == records
    # the record check may reject records slower than the default schedule, never wrong ones
    assert "wrong results" not in capsys.readouterr().out
    workloads = ms.database.JSONDatabase(work_dir=str(folder)).get_all_tuning_records()
    kept = {r.workload.as_json()[0] for r in workloads} - recordcheck.rejected(folder)
    main(["run", *_tiny_args(tmp_path)])
    report = _tuning_report(tmp_path, "db")
    assert report["tuning"]["records"] == records
    assert report["tuning"]["source"] == "user database"
    assert report["results"]["tvm_fp32"]["metrics"]["top1_agreement"] == 1.0
    kernels = report["tuning"]["kernels"]
    # 2 convs: qbench's FP32 kernels on every x86 CPU; its INT8 kernels with VNNI or AVX2,
    # and there the input's quantize-pack-pad (kernels/input_quantize.py)
    assert kernels["tvm_fp32"]["hand"] == 2, kernels
    assert kernels["tvm_int8"]["hand"] == (0 if cpu_class(LLVM) == NO_FAST_PATH else 3), kernels
    # one kept record may serve both graphs (the same `mean` kernel), never more kernels each
    assert kernels["tvm_fp32"]["tuned"] <= len(kept) and kernels["tvm_int8"]["tuned"] <= len(kept)
    # the same records, shipped as pre-tuned, with an empty user database
    monkeypatch.setattr(tuning, "PRETUNED_ROOT", tmp_path / "db")
    main(["run", *_tiny_args(tmp_path, "empty")])
    report = _tuning_report(tmp_path, "empty")
    assert report["tuning"]["source"] == "pre-tuned"
    assert report["tuning"]["pretuned_records"] == records and report["tuning"]["records"] == 0
    assert report["results"]["tvm_int8"]["metrics"]["top1_agreement"] is not None
    # both at once: the records merged in memory
    shutil.copytree(tmp_path / "db", tmp_path / "shipped")
    monkeypatch.setattr(tuning, "PRETUNED_ROOT", tmp_path / "shipped")
    shutil.rmtree(tmp_path / "rep-db")
    main(["run", *_tiny_args(tmp_path)])
    report = _tuning_report(tmp_path, "db")
    assert report["tuning"]["source"] == "pre-tuned + user database"
    assert report["results"]["tvm_fp32"]["metrics"]["top1_agreement"] == 1.0


@pytest.mark.slow
def test_run_tune_with_time_budget_stops_and_keeps_records(tmp_path, monkeypatch):
    from qbench.compile import tuner

    monkeypatch.setattr(tuning, "PRETUNED_ROOT", tmp_path / "none")
    # the budget runs out during the first measurements: the check before the first chunk
    # passes, the one after the first measured batch stops (a wall-clock budget would make
    # the test depend on this machine's speed; the clock itself is tested without tuning)
    checks = iter(["", "--time-budget"])
    monkeypatch.setattr(tuner, "_why_stop", lambda *_: next(checks, "--time-budget"))
    main(["run", "--tune", *_tiny_args(tmp_path), "--trials", "4", "--time-budget", "60"])
    (folder,) = (tmp_path / "db").iterdir()
    t = _tuning_report(tmp_path, "db")["tuning"]
    assert t["source"] == "fresh tuning + user database"
    assert list(t["fresh"]) == ["tvm_fp32"]  # nothing starts after the budget
    assert t["fresh"]["tvm_fp32"]["stopped"] == "--time-budget"
    assert t["records"] == tuning.record_count(folder) > 0  # the first measured batch was kept


def test_record_slower_than_default_schedule_is_rejected():
    from types import SimpleNamespace

    import tvm
    from helpers import LLVM
    from tvm import s_tir, te

    x = te.placeholder((2048, 2048), "float32", name="x")
    y = te.compute(x.shape, lambda i, j: x[i, j] * 2.0 + 1.0, name="y")
    mod = tvm.IRModule({"main": te.create_prim_func([x, y]).with_attr("global_symbol", "main")})
    # a column-major walk over a row-major 16 MiB array, against CpuFallback's parallel rows
    slow = s_tir.Schedule(mod)
    slow.reorder(*reversed(slow.get_loops(slow.get_sblock("y"))))
    record = SimpleNamespace(trace=slow.trace, workload=SimpleNamespace(mod=mod))
    assert recordcheck._fault(record, LLVM).startswith("slower than the default schedule")


@pytest.mark.parametrize(
    "timings, rejected",
    [
        ([1.20, 1.00, 1.15, 1.00], True),  # slower past 1.10 twice
        ([1.20, 1.00, 1.05, 1.00], False),  # the second timing clears it: a busy moment
        ([1.09, 1.00], False),  # within the margin: not timed again
    ],
)
def test_a_slower_record_is_rejected_only_when_two_timings_agree(monkeypatch, timings, rejected):
    """Each ``_run`` returns the next hand-made timing (ms), tuned then default; results agree."""
    from types import SimpleNamespace

    import tvm
    from helpers import LLVM
    from tvm import s_tir, te

    x = te.placeholder((4,), "float32", name="x")
    y = te.compute(x.shape, lambda i: x[i] + 1.0, name="y")
    mod = tvm.IRModule({"main": te.create_prim_func([x, y]).with_attr("global_symbol", "main")})
    record = SimpleNamespace(trace=s_tir.Schedule(mod).trace, workload=SimpleNamespace(mod=mod))
    left = iter(timings)
    monkeypatch.setattr(recordcheck, "_run", lambda mod, inputs, *_: (inputs, next(left)))
    reason = recordcheck._fault(record, LLVM)
    assert reason.startswith("slower than the default schedule") == rejected
    assert next(left, None) is None  # each timing was taken, none more


def test_records_never_checked_are_left_out_until_the_check_runs(tmp_path, monkeypatch, caplog):
    """A database written by TVM itself (or a qbench from before the record checks) has no
    check list: its records were never run against the default schedule, and TVM 0.27's
    tuned schedules can compute wrong results. Builds leave them out with a warning that
    says what checks them; the check runs each best record once and lists it, and a better
    record appended later is left out until it is checked in turn."""
    import tvm
    from helpers import LLVM
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    kernel = _row_sum("red")
    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    workload = database.commit_workload(kernel)

    def record(secs, split):
        sch = s_tir.Schedule(kernel)
        sch.split(sch.get_loops(sch.get_sblock("red"))[1], [None, split])
        rec = ms.database.TuningRecord(sch.trace, workload, [secs], tvm.target.Target(LLVM))
        database.commit_tuning_record(rec)
        return dbfiles.record_key(workload, rec)

    first = record(2e-6, 2)
    assert dbfiles.unchecked(tmp_path) == 1 and len(tuning.union_database([tmp_path])) == 0
    assert "never checked" in caplog.text and "qbench tune" in caplog.text
    runs = []
    monkeypatch.setattr(recordcheck, "_fault", lambda rec, *_: runs.append(rec) or "")
    task = SimpleNamespace(dispatched=[kernel], task_name="row_sum")
    assert recordcheck.check_records([task], LLVM, tmp_path) == []
    assert recordcheck.check_records([task], LLVM, tmp_path) == []  # listed: not run again
    assert len(runs) == 1 and dbfiles.read_checked(tmp_path) == {first}
    assert dbfiles.unchecked(tmp_path) == 0 and len(tuning.union_database([tmp_path])) == 1
    second = record(1e-6, 4)  # faster, so the best record now, and never checked
    (applied,) = tuning.union_database([tmp_path]).get_all_tuning_records()
    assert dbfiles.record_key(workload, applied) == first != second
    recordcheck.check_records([task], LLVM, tmp_path)
    assert len(runs) == 2 and dbfiles.read_checked(tmp_path) == {first, second}
    assert len(tuning.union_database([tmp_path])) == 2


def test_the_report_counts_kernels_whose_records_were_never_checked(tmp_path):
    """The shipped records without their check list, as a user's database: every workload
    not rejected is counted (by hand from the files) and named in the tuning line."""
    from types import SimpleNamespace

    from qbench.compile.info import TuningInfo
    from qbench.pipeline.prepare import tuning_databases
    from qbench.report.lines import _left_out

    folder = _host_db(tmp_path, "db")
    (folder / dbfiles.CHECKED).unlink()
    keys = {json.loads(x)[0] for x in (folder / dbfiles.WORKLOADS).read_text().splitlines()}
    tuned = {int(json.loads(x)[0]) for x in (folder / dbfiles.RECORDS).read_text().splitlines()}
    assert len(tuned) == len(keys)  # every workload line has records
    expected = len(keys - set(json.loads((folder / dbfiles.REJECTED).read_text())))
    _, info = tuning_databases(SimpleNamespace(tuning_db=tmp_path / "db"), Llvm.host(2))
    assert info.unchecked == expected > 0 and info.left_out == 0
    assert TuningInfo.from_json(json.loads(json.dumps(info.to_json()))) == info
    assert f"the records of {expected} tuned kernel(s) of this database" in _left_out(info)
    assert "never checked" in _left_out(info)


def test_a_workload_with_only_failed_records_is_tuned_again():
    from tvm.s_tir import meta_schedule as ms

    from qbench.compile import dbfiles
    from qbench.compile.tuner import _has_valid_record

    shipped = shipped_database()
    workload, record = dbfiles.read_folder(shipped).records[0]
    for secs, valid in [(1e10, False), (2e-5, True)]:  # MetaSchedule stores 1e10 s on failure
        db = ms.database.MemoryDatabase()
        committed = db.commit_workload(workload.mod)
        db.commit_tuning_record(
            ms.database.TuningRecord(
                record.trace, committed, [secs], record.target, record.args_info
            )
        )
        assert _has_valid_record(db, workload.mod) is valid
    assert not _has_valid_record(ms.database.MemoryDatabase(), workload.mod)


def test_time_budget_and_ctrl_c_stop_reasons():
    import time
    from types import SimpleNamespace

    from qbench.compile.tuner import _why_stop

    calm, interrupted = SimpleNamespace(requested=False), SimpleNamespace(requested=True)
    assert _why_stop(calm, None) == "" and _why_stop(calm, time.time() + 60) == ""
    assert _why_stop(calm, time.time() - 1) == "--time-budget"
    assert _why_stop(interrupted, time.time() + 60) == "Ctrl-C"


def _row_sum(block_name):
    """A (4, 8) -> (4,) row-sum kernel whose reduction block is named ``block_name``."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def row_sum(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
        for i, k in T.grid(4, 8):
            with T.sblock(block_name):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    B[vi] = T.float32(0)
                B[vi] = B[vi] + A[vi, vk]

    return tvm.IRModule({"main": row_sum})


def test_record_check_takes_a_kernel_that_differs_from_the_record_in_block_names(tmp_path):
    """A database matches kernels by structural equality, which ignores block names: the
    record of a kernel whose block is "x_red" serves one whose block is "red". Checking it
    had applied the trace to the second kernel and crashed `qbench tune` (exit 3) on
    efficientnet_lite0 at batch 1 after batch 8 was tuned."""
    from types import SimpleNamespace

    import tvm
    from helpers import LLVM
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    recorded, other = _row_sum("x_red"), _row_sum("red")
    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    sch = s_tir.Schedule(recorded)
    sch.parallel(sch.get_loops(sch.get_sblock("x_red"))[0])
    workload = database.commit_workload(recorded)
    target = tvm.target.Target(LLVM)
    database.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, [1e-6], target))
    task = SimpleNamespace(dispatched=[other], task_name="row_sum")
    assert database.has_workload(other)
    rejected = recordcheck.check_records([task], LLVM, tmp_path)
    assert not any("wrong" in reason for reason in rejected), rejected


def _host_db(tmp_path, root):
    """The shipped records, copied where ``qbench run`` looks for this host's database."""
    shipped = shipped_database()
    folder = tuning.db_dir(tmp_path / root, Llvm.host(2))
    shutil.copytree(shipped, folder)
    return folder


def test_a_cut_record_line_is_warned_and_ignored_and_never_rewritten(
    tmp_path, capsys, small_models
):
    """C19: a tuning database whose last record line was cut mid-write: the run warns naming
    the file and line and leaves the file as it is; tune refuses the damaged database before
    it calibrates."""
    folder = _host_db(tmp_path, "db")
    records = folder / dbfiles.RECORDS
    records.write_bytes(records.read_bytes()[:-200])  # the last line cut mid-write
    before = records.read_bytes()
    args = ["--model", f"{small_models}:square", "--data", "synthetic", "--threads", "2"]
    assert cli_run(tmp_path, *args, "--tuning-db", str(tmp_path / "db")) in (0, 1)
    err = capsys.readouterr().err
    assert str(records) in err and "line 64" in err and "Traceback" not in err
    assert records.read_bytes() == before  # never rewritten, never emptied
    cache = tmp_path / "tune-cache"
    tune = ["tune", *args, "--tuning-db", str(tmp_path / "db"), "--cache-dir", str(cache)]
    assert main([*tune, "--trials", "1"]) == 2
    assert "damaged" in capsys.readouterr().err and records.read_bytes() == before
    assert not any(cache.rglob("*.json"))  # refused before the calibration, not after


def test_damaged_workloads_and_rejection_list_leave_out_only_what_they_spoil(tmp_path):
    """C19: a damaged workloads file leaves out only the records of the lines it spoils; a
    damaged rejection list, every record of the folder."""
    folder = _host_db(tmp_path, "db")
    lines = (folder / dbfiles.WORKLOADS).read_text().splitlines(keepends=True)
    (folder / dbfiles.WORKLOADS).write_text("".join(lines[:3]) + lines[3][:40])
    recs = [json.loads(x) for x in (folder / dbfiles.RECORDS).read_text().splitlines()]
    contents = dbfiles.read_folder(folder)
    assert len(contents.records) == sum(r[0] != 3 for r in recs)
    assert f"{dbfiles.WORKLOADS}: line 4" in contents.problems[0]
    (folder / dbfiles.REJECTED).write_text('["1", "2"')
    contents = dbfiles.read_folder(folder)
    assert contents.records == [] and "every record of the folder is ignored" in str(
        contents.problems
    )


@pytest.mark.parametrize(
    "damage",
    [
        "rejection list",
        "check list",
        "deep list",
        "workload line",
        "folder as list",
        "link to nothing",
    ],
)
def test_the_report_says_how_many_records_a_damaged_database_lost(tmp_path, damage):
    """C19's kind: a database whose records a build cannot use (a damaged rejection list:
    all of them; a workload line cut mid-write: that workload's) was reported as "user
    database (N records in ...)" with every readable line counted, the loss said only in a
    console warning. The report now says how many were left out and the first damage, the
    count being the readable records less those ``read_folder`` keeps (counted here from
    the files by hand)."""
    from types import SimpleNamespace

    from qbench.compile.info import TuningInfo
    from qbench.pipeline.prepare import tuning_databases
    from qbench.report.lines import _left_out

    folder = _host_db(tmp_path, "db")
    recs = [json.loads(x) for x in (folder / dbfiles.RECORDS).read_text().splitlines()]
    if damage == "rejection list":
        (folder / dbfiles.REJECTED).write_text('["1", "2"')
        lost, where = len(recs), dbfiles.REJECTED
    elif damage == "check list":
        (folder / dbfiles.CHECKED).write_text('{"1": 2}')
        lost, where = len(recs), dbfiles.CHECKED
    elif damage in ("folder as list", "link to nothing"):  # read as no list, its
        (folder / dbfiles.REJECTED).unlink(missing_ok=True)  # rejections would apply
        if damage == "folder as list":
            (folder / dbfiles.REJECTED).mkdir()
        else:
            (folder / dbfiles.REJECTED).symlink_to(tmp_path / "nothing")
        lost, where = len(recs), dbfiles.REJECTED
    elif damage == "deep list":  # json's parser recurses: RecursionError, not ValueError
        (folder / dbfiles.CHECKED).write_text("[" * 5000 + "]" * 5000)
        lost, where = len(recs), dbfiles.CHECKED
    else:
        lines = (folder / dbfiles.WORKLOADS).read_text().splitlines(keepends=True)
        (folder / dbfiles.WORKLOADS).write_text("".join(lines[:3]) + lines[3][:40] + "\n")
        lost, where = sum(r[0] == 3 for r in recs), f"{dbfiles.WORKLOADS}: line 4"
    assert lost > 0
    _, info = tuning_databases(SimpleNamespace(tuning_db=tmp_path / "db"), Llvm.host(2))
    assert (info.records, info.left_out) == (len(recs), lost) and where in info.damage
    assert TuningInfo.from_json(json.loads(json.dumps(info.to_json()))) == info
    assert f"{lost} of them left out as damaged (first: {folder}" in _left_out(info)


@pytest.mark.parametrize("kind", ["folder", "link to nothing"])
def test_a_records_file_that_is_no_file_is_named_in_the_tuning_line(
    tmp_path, capsys, small_models, kind
):
    """A tuning records file that is a folder or a dangling link read as "no records"
    without a word; the run's tuning line now names it, where no shipped database makes the
    source "none" too."""
    folder = tuning.db_dir(tmp_path / "db", Llvm.host(2))
    folder.mkdir(parents=True)
    records = folder / dbfiles.RECORDS
    records.mkdir() if kind == "folder" else records.symlink_to(tmp_path / "nothing")
    (folder / dbfiles.WORKLOADS).write_text("")
    args = ["--model", f"{small_models}:square", "--data", "synthetic", "--threads", "2"]
    assert cli_run(tmp_path, *args, "--tuning-db", str(tmp_path / "db")) in (0, 1)
    out = capsys.readouterr().out
    assert f"{records}: not a file" in out, out


def test_an_undamaged_database_reports_as_before(tmp_path):
    """C19's kind: nothing left out, nothing added to report.json's ``tuning``."""
    from types import SimpleNamespace

    from qbench.pipeline.prepare import tuning_databases

    _host_db(tmp_path, "db")
    _, info = tuning_databases(SimpleNamespace(tuning_db=tmp_path / "db"), Llvm.host(2))
    assert info.left_out == 0 and info.damage is None and info.unchecked == 0
    assert not {"left_out", "damage", "unchecked"} & set(info.to_json())
