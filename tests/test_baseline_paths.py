"""Output and store paths of ``baseline save``, ``compare`` and ``history`` are checked
before any work: a bad one exits 2 naming it, prints no comparison and writes nothing."""

import json

import pytest
from test_baseline import _compare, _fixture, _saved

from qbench.cli.main import main
from qbench.core.errors import UserError


def _slowed():
    """The fixture with TVM INT8 x1.5 slower: a regression against the fixture (exit 1)."""
    report = _fixture()
    int8 = report["results"]["tvm_int8"]
    int8["latency_samples_ms"] = [1.5 * s for s in int8["latency_samples_ms"]]
    return report


@pytest.mark.parametrize("where", ["under a file", "a folder"])
def test_a_bad_json_path_exits_2_before_the_comparison(tmp_path, capsys, where):
    _saved(tmp_path, _fixture())
    capsys.readouterr()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad = blocker / "c.json" if where == "under a file" else tmp_path
    assert _compare(tmp_path, _slowed(), "--json", str(bad)) == 2  # not 1: nothing compared
    out, err = capsys.readouterr()
    assert out == "" and f"--json {bad}: " in err
    expected = (
        f"({blocker} is a file)" if where == "under a file" else "cannot write there (a folder"
    )
    assert expected in err and "File exists" not in err
    assert blocker.read_text() == ""


def test_a_json_path_in_folders_not_made_yet_is_written(tmp_path):
    _saved(tmp_path, _fixture())
    out = tmp_path / "new" / "folders" / "c.json"
    assert _compare(tmp_path, _slowed(), "--json", str(out)) == 1
    assert json.loads(out.read_text())["regression"] is True


def _history(tmp_path, *extra):
    return main(["history", "--model", "tiny", "--target", "llvm", *extra])


@pytest.mark.parametrize("command", ["compare", "history", "save"])
def test_a_store_that_is_a_file_exits_2_naming_it(tmp_path, capsys, command):
    folder = _saved(tmp_path, _fixture())
    store = tmp_path / "a-file"
    store.write_text("")
    if command == "compare":
        code = _compare(tmp_path, _fixture(), "--store", str(store))
    elif command == "history":
        code = _history(tmp_path, "--store", str(store), "--png", str(tmp_path / "h.png"))
    else:
        code = main(["baseline", "save", str(folder), "--store", str(store)])
    assert code == 2
    assert f"--store {store}: not a" in capsys.readouterr().err and store.read_text() == ""
    assert not (tmp_path / "h.png").exists()


def test_a_png_path_under_a_file_exits_2_before_reading_the_store(tmp_path, capsys):
    store = tmp_path / "store"  # empty: reading it first would say "no stored run"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad = blocker / "h.png"
    assert _history(tmp_path, "--store", str(store), "--png", str(bad)) == 2
    err = capsys.readouterr().err
    assert f"--png {bad}: " in err and f"({blocker} is a file)" in err and "no stored" not in err


def test_a_report_page_given_for_json_names_the_file_to_pass(tmp_path):
    """Issue 20: report.md or report.html given where report.json is read names the file to
    pass, and does not call it damaged."""
    from qbench.baseline.store import load_report

    for page in ("report.md", "report.html"):
        (tmp_path / page).write_text("# qbench report\n")
        with pytest.raises(UserError) as err:
            load_report(tmp_path / page)
        assert "pass its report.json" in str(err.value) and "damaged" not in str(err.value)
