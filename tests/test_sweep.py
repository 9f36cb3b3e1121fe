"""``qbench sweep``: the grid of runs, a failing cell, the shared cache, the exit rule."""

import json
from pathlib import Path

import pytest
from test_cli import C06_MODEL

from qbench.cli.main import main
from qbench.core.errors import UserError
from qbench.pipeline import RunOptions, engine, sweep
from qbench.pipeline.sweep import split_items

TINY = ["--data", "synthetic", "--calib-size", "4", "--eval-size", "6", "--batch-size", "1"]
SAME_HOST = '{"kind": "llvm"}'  # a second llvm target: this CPU, no mcpu given


@pytest.fixture
def models(tmp_path):
    """test_cli's tiny user models, FILE.py for ``FILE.py:FUNCTION``."""
    (tmp_path / "models.py").write_text(C06_MODEL)
    return tmp_path / "models.py"


def _sweep(tmp_path, *args):
    folders = ["--cache-dir", str(tmp_path / "cal"), "--reports-dir", str(tmp_path / "rep")]
    return main(["sweep", *folders, "--tuning-db", str(tmp_path / "db"), *args])


def _summary(tmp_path):
    (folder,) = (tmp_path / "rep").glob("*-sweep")
    return json.loads((folder / "summary.json").read_text()), (folder / "summary.md").read_text()


def test_a_failing_cell_is_recorded_and_the_other_runs(tmp_path, capsys, models):
    good, bad = f"{models}:build", f"{models}:raises"
    assert _sweep(tmp_path, "--models", f"{good},{bad}", "--targets", "llvm", *TINY) == 2
    summary, markdown = _summary(tmp_path)
    ok, failed = summary["cells"]
    assert (ok["model"], ok["verdict"], ok["exit_code"]) == (good, "PASS", 0)
    assert ok["shown"] is True  # a single logit: no agreement check to show
    assert (failed["model"], failed["verdict"], failed["exit_code"]) == (bad, "ERROR", 2)
    assert "RuntimeError: weights server down" in failed["error"]
    assert failed["report_dir"] is None and summary["complete"] and summary["exit_code"] == 2
    assert (summary["state"], summary["running_cell"]) == ("complete", None)
    report = json.loads((Path(ok["report_dir"]) / "report.json").read_text())
    res = report["results"]
    assert ok["sqnr_db"] == res["tvm_int8"]["metrics"]["sqnr_db"]
    assert ok["int8_speedup"] == pytest.approx(
        1 / report["speed"]["ratios"]["tvm_int8/tvm_fp32"]["ratio"]
    )
    assert good in markdown and "weights server down" in markdown
    assert f"{ok['int8_speedup']:.2f}x" in markdown
    assert "summary.md" in capsys.readouterr().out


def test_second_target_reuses_the_calibration_and_fail_exits_1(tmp_path, models):
    args = ["--models", f"{models}:build", "--targets", f"llvm,{SAME_HOST}"]
    assert _sweep(tmp_path, *args, "--min-sqnr", "1000", *TINY) == 1
    summary, _ = _summary(tmp_path)
    first, second = summary["cells"]
    assert [c["target"] for c in summary["cells"]] == ["llvm", SAME_HOST]
    assert [c["verdict"] for c in summary["cells"]] == ["FAIL", "FAIL"]
    assert (first["calibration_cache_hit"], second["calibration_cache_hit"]) == (False, True)
    assert len(list((tmp_path / "cal").glob("*.json"))) == 1
    assert len(list((tmp_path / "rep").glob("*/report.json"))) == 2


@pytest.mark.parametrize(
    "grid, text",
    [
        (["--models", ""], "--models '': an empty entry"),
        (["--models", "resnet18,,resnet50"], "an empty entry"),
        (["--models", "resnet18,resnet18"], "resnet18 given twice"),
        (["--models", "resnet19"], "close names: resnet"),
        (["--models", "nofile.py:build"], "file nofile.py not found"),
        (["--models", "resnet18", "--targets", "llvm,tpu"], "valid: llvm, cuda"),
        (["--models", "resnet18", "--targets", "llvm,{bad json}"], "invalid JSON"),
        (["--models", "resnet18", "--targets", f"llvm,{SAME_HOST},llvm"], "llvm given twice"),
        (["--models", "resnet18,resnet50", "--weights", "w.pth"], "valid with one model"),
        (["--models", "resnet18", "--repeat", "3"], "--repeat 3: must be"),
    ],
)
def test_bad_grid_input_exits_2_before_any_cell(tmp_path, capsys, monkeypatch, grid, text):
    monkeypatch.setattr(engine, "run", lambda _opts: pytest.fail("a cell ran"))
    assert _sweep(tmp_path, *grid) == 2
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err and "sweep cell" not in err
    assert not list(tmp_path.glob("rep/*"))


def test_a_model_file_without_the_function_exits_2_before_any_cell(tmp_path, capsys, models):
    """``build`` is defined in the file; ``biuld`` appears nowhere in it: refused before the
    grid runs, the file not executed."""
    assert _sweep(tmp_path, "--models", f"{models}:build,{models}:biuld", *TINY) == 2
    assert f"{models} defines no 'biuld'" in capsys.readouterr().err
    assert not (tmp_path / "rep").exists()


def test_same_model_file_by_two_paths_is_refused(tmp_path, capsys, models):
    twice = f"{models}:build,{models.parent / '..' / models.parent.name / models.name}:build"
    assert _sweep(tmp_path, "--models", twice, *TINY) == 2
    assert "are the same model" in capsys.readouterr().err
    assert not (tmp_path / "rep").exists()


def test_same_target_twice_in_two_spellings_is_refused(tmp_path, capsys):
    from helpers import LLVM

    host = json.dumps({**LLVM, "num-cores": 1})
    grid = ["--models", "resnet18", "--threads", "1", "--targets", f"llvm,{host}"]
    assert _sweep(tmp_path, *grid) == 2
    assert "are the same target" in capsys.readouterr().err


def test_a_crashing_cell_exits_3_and_ctrl_c_stops_the_sweep(tmp_path, monkeypatch, models):
    calls = []

    def crash(opts):
        calls.append(opts.model)
        raise (RuntimeError if len(calls) == 1 else KeyboardInterrupt)("boom")

    monkeypatch.setattr(engine, "run", crash)
    names = ",".join(f"{models}:{f}" for f in ("build", "training", "returns_int"))
    assert _sweep(tmp_path, "--models", names) == 130
    assert len(calls) == 2  # the third cell never ran
    summary, markdown = _summary(tmp_path)
    (crashed,) = summary["cells"]
    assert (crashed["exit_code"], crashed["error"]) == (3, "RuntimeError: boom")
    assert summary["complete"] is False and "INCOMPLETE" in markdown


CRASH = """
import os, sys
from qbench.cli.main import main
from qbench.core.errors import UserError
from qbench.pipeline import engine

def run(opts):  # the first cell has bad input, the second kills the process (as SIGILL would)
    if opts.model.endswith(":build"):
        raise UserError("bad weights")
    os.abort()

engine.run = run
sys.exit(main(sys.argv[1:]))
"""


def test_a_cell_that_kills_the_process_leaves_the_summary_of_those_before(tmp_path, models):
    import subprocess
    import sys

    names = f"{models}:build,{models}:training"
    folders = ["--cache-dir", str(tmp_path / "cal"), "--reports-dir", str(tmp_path / "rep")]
    argv = [sys.executable, "-c", CRASH, "sweep", *folders, "--models", names]
    done = subprocess.run([*argv, "--targets", "llvm"], capture_output=True, text=True)
    assert done.returncode < 0, done.stderr  # killed by a signal
    summary, markdown = _summary(tmp_path)
    (first,) = summary["cells"]
    assert (first["exit_code"], first["error"]) == (2, "UserError: bad weights")
    assert (summary["state"], summary["exit_code"], summary["cells_total"]) == ("running", None, 2)
    assert summary["running_cell"] == f"{models}:training on llvm" and not summary["complete"]
    assert f"1 of 2 cells finished; cell {models}:training on llvm had started" in markdown


TERMINATE = CRASH.replace("os.abort()", "os.kill(os.getpid(), signal.SIGTERM)").replace(
    "import os, sys", "import os, signal, sys"
)


def test_sigterm_stops_a_sweep_as_ctrl_c_does_naming_the_cell(tmp_path, models):
    """SIGTERM (timeout, a CI job cancelled, docker stop) in the second cell: exit 130 and a
    summary that says interrupted in that cell (a break-test find: it had been left
    ``running``, which blames the cell for a crash)."""
    import subprocess
    import sys

    names = f"{models}:build,{models}:training"
    folders = ["--cache-dir", str(tmp_path / "cal"), "--reports-dir", str(tmp_path / "rep")]
    argv = [sys.executable, "-c", TERMINATE, "sweep", *folders, "--models", names]
    done = subprocess.run([*argv, "--targets", "llvm"], capture_output=True, text=True)
    assert done.returncode == 130, done.stderr
    summary, markdown = _summary(tmp_path)
    assert (summary["state"], summary["exit_code"], len(summary["cells"])) == (
        "interrupted",
        130,
        1,
    )
    assert summary["running_cell"] == f"{models}:training on llvm"
    assert f"stopped by Ctrl-C or SIGTERM in cell {models}:training on llvm" in markdown


def test_an_error_after_ctrl_c_stops_the_sweep(monkeypatch):
    monkeypatch.setattr(engine, "run", lambda _opts: 1 / 0)  # TVM's error for a Ctrl-C
    with pytest.raises(KeyboardInterrupt):
        sweep.run_cell(RunOptions(model="m"), interrupted=lambda: True)


@pytest.mark.parametrize(
    "codes, expected", [((), 0), ((0, 0), 0), ((0, 1), 1), ((1, 2, 0), 2), ((3, 1, 2), 3)]
)
def test_exit_code_is_the_worst_cell(codes, expected):
    cells = [sweep.Cell("m", "llvm", "-", code) for code in codes]
    assert sweep.exit_code(cells) == expected


def test_targets_split_at_commas_outside_json():
    text = 'llvm, {"kind": "llvm", "mcpu": "znver3"} ,cuda'
    expected = ["llvm", '{"kind": "llvm", "mcpu": "znver3"}', "cuda"]
    assert sweep.split_items(text, "--targets") == expected


@pytest.mark.parametrize(
    "text", ['llvm,{"kind": "llvm", "mcpu": "znver3"', 'llvm,"kind": "llvm"}', "{llvm"]
)
def test_unbalanced_braces_in_a_grid_exit_2(text):
    """An unclosed or stray brace is named, not silently dropped with the entry after it."""
    with pytest.raises(UserError, match="never closed|without its"):
        split_items(text, "--targets")


def test_an_abbreviated_option_is_not_taken_for_another(capsys):
    """``--model`` is not an abbreviation of ``--models`` (argparse's default would let the
    last of them replace the grid)."""
    with pytest.raises(SystemExit) as e:
        main(["sweep", "--models", "a,b", "--model", "c"])
    assert e.value.code == 2 and "--model" in capsys.readouterr().err


def test_policy_gives_each_cell_its_own_models_limits(tmp_path, monkeypatch, models):
    """``--policy`` reaches every cell, each with its model's table (``zoo.model_id``)."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[defaults]\nmin_sqnr_db = 20\n[models."models.py:build"]\nmin_sqnr_db = 3\n')
    seen = {}

    def record(opts):
        seen[opts.model] = opts.limits.min_sqnr_db
        raise RuntimeError("recorded")

    monkeypatch.setattr(engine, "run", record)
    names = f"{models}:build,{models}:four_channels"
    assert _sweep(tmp_path, "--models", names, "--policy", str(policy), *TINY) == 3
    assert seen == {f"{models}:build": 3.0, f"{models}:four_channels": 20.0}


def test_a_pass_not_shown_never_reads_as_a_plain_pass_in_the_summary():
    cells = [
        sweep.Cell("a", "llvm", "PASS", 0, shown=False),
        sweep.Cell("b", "llvm", "PASS", 0, shown=True),
        sweep.Cell("c", "llvm", "ERROR", 2, error="UserError: x"),
    ]
    rows = sweep.summary_table(cells, "tsv").splitlines()[1:]
    assert [row.split("\t")[2].strip() for row in rows] == ["PASS, NOT SHOWN", "PASS", "ERROR"]


def test_an_interrupted_sweep_keeps_its_finished_cells_and_says_130(tmp_path):
    cells = [sweep.Cell("a", "llvm", "PASS", 0, shown=True)]
    folder = sweep.write_summary(cells, ["a", "b"], ["llvm"], tmp_path, sweep.INTERRUPTED)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["exit_code"] == 130 and len(summary["cells"]) == 1
    assert not summary["complete"] and "Exit code 130" in (folder / "summary.md").read_text()


def test_cells_that_finish_after_a_running_one_keep_their_rows_on_ctrl_c():
    """An interrupted parallel sweep: cell 1 still runs, cells 2 and 4 finished, cell 3
    failed; the summary gets cells 2 and 4, in grid order."""
    from concurrent.futures import Future

    from qbench.pipeline.sweep import finished_after

    futures = [Future() for _ in range(4)]
    futures[1].set_result("cell 2")
    futures[2].set_exception(RuntimeError("device lost"))
    futures[3].set_result("cell 4")
    assert finished_after(futures, 0) == ["cell 2", "cell 4"]
    assert finished_after(futures, 2) == ["cell 4"]
