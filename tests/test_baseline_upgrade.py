"""Field case C30 (issue 35): what an older qbench stored, today's qbench reads.

The stores under ``tests/fixtures/store-<commit>/`` were written by those commits' own code
(each folder's README.md gives the commands): 059ab2a (the first store, its reports without a
``policy`` section), c90aedb and 77147ae filed a model file by the full path given to
``qbench run`` (layout 1), 1837634 by its base name (still layout 1).
Today's ``compare`` and ``history`` find their runs (compared, or "not comparable" naming the
definition fields that differ, never "no baseline"), ``baseline migrate`` moves them to
today's layout saying each move, and a store of a newer layout is refused with exit 2. Every
test copies a fixture store into its tmp folder first: tests/fixtures is never written.
"""

import json
import re
import shutil
from pathlib import Path

import pytest

from qbench.baseline.layout import LAYOUT, MARKER, STORE_VERSION
from qbench.cli.main import main

FIXTURES = Path(__file__).parent / "fixtures"
FULL_PATH = ("store-059ab2a", "store-c90aedb", "store-77147ae")  # layout 1, model files by
# their full path (059ab2a: the first store, reports without a policy section)
STORES = (*FULL_PATH, "store-1837634")  # and layout 1 by the base name
MODEL = "/tmp/c30/ci/models/tiny_model.py:build"  # as the fixtures' runs were given it
SPELLINGS = (MODEL, "tiny_model.py:build", "elsewhere/tiny_model.py:build")


def _copy(tmp_path, name):
    """A copy of the fixture store ``name`` (README.md left out), in ``tmp_path``."""
    store = tmp_path / name
    shutil.copytree(FIXTURES / name, store, ignore=shutil.ignore_patterns("README.md"))
    return store


def _files(store):
    """{path relative to the store: bytes} of every stored run."""
    return {p.relative_to(store): p.read_bytes() for p in sorted(store.glob("*/*/*/*.json"))}


def _entries(name):
    """The fixture store's files, oldest first, as (path, parsed JSON)."""
    paths = sorted((FIXTURES / name).glob("*/*/*/*.json"), key=lambda p: p.name)
    return [(p, json.loads(p.read_text())) for p in paths]


def _on_store_machine(tmp_path, tiny_run, name):
    """Today's tiny run (``tiny_run``: the same model file, run by today's qbench), its
    machine fields set to the machine the fixture store ran on, so that the store's machine
    folder is this run's on any host (the rest of the report as the run wrote it)."""
    report = tiny_run.report
    stored = _entries(name)[0][1]["report"]["environment"]
    for field in ("cpu", "machine", "threads"):
        report["environment"][field] = stored[field]
    folder = tmp_path / "fresh"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps(report))
    return folder


def _stamp(tiny_run):
    """The tiny run's created time as the store's file names give it."""
    created = tiny_run.report["created"]
    return created[:19].replace("-", "").replace(":", "")


def _history_rows(out):
    """The created times of ``qbench history``'s table rows."""
    return re.findall(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00) ", out, re.M)


@pytest.mark.parametrize("name", STORES)
def test_compare_of_a_fresh_run_finds_an_older_qbenchs_baseline(tmp_path, capsys, tiny_run, name):
    """C30: today's run of the model compared with a store an older qbench wrote finds its
    baseline there: compared, or "not comparable" with each differing definition field named
    (a model file's full path is not one of them), never exit 4 with "no baseline"."""
    store = _copy(tmp_path, name)
    fresh = _on_store_machine(tmp_path, tiny_run, name)
    out_json = tmp_path / "c.json"
    code = main(["compare", str(fresh), "--store", str(store), "--json", str(out_json)])
    out = capsys.readouterr().out
    result = json.loads(out_json.read_text())
    assert "no baseline" not in out and result["baseline"] is not None
    stored = {str(store / p) for p in _files(store)}
    assert result["baseline"] in stored and f"baseline: {result['baseline']}" in out
    if result["comparable"]:
        assert code in (0, 1) and result["rows"]
    else:
        assert code == 4 and "not comparable: the run's definition differs" in out
        fields = [d["field"] for d in result["differences"]]
        assert fields and "model" not in fields
        assert all(f"{field}: " in out for field in fields)


@pytest.mark.parametrize(
    ("name", "report", "baseline"),
    [
        ("store-c90aedb", "20261204T181021-3e4c189a003b", "20261204T181010-3e4c189a003b"),
        ("store-77147ae", "20261204T181259-3e4c189a003b", "20261204T181250-3e4c189a003b"),
    ],
)
def test_an_older_qbenchs_report_compares_with_the_run_it_stored_before(
    tmp_path, capsys, name, report, baseline
):
    """C30: a report an older qbench wrote (taken from its store: real bytes), named by its
    model file's full path, compares with the earlier run of its definition in that store:
    every metric judged, the model's name in the new layout no obstacle."""
    store = _copy(tmp_path, name)
    entry = json.loads(next(store.glob(f"*/*/*/{report}.json")).read_text())
    assert entry["report"]["definition"]["model"] == MODEL
    folder = tmp_path / "old-report"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps(entry["report"]))
    assert main(["compare", str(folder), "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert f"{baseline}.json (the newest stored before this report with its definition" in out
    assert "top-1 agreement" in out and "not comparable" not in out


@pytest.mark.parametrize("name", STORES)
def test_history_lists_every_stored_run_and_a_new_one(tmp_path, capsys, tiny_run, name):
    """C30: ``history`` of the model lists every run the older qbench stored, under every
    spelling of the model file (full path, base name, another folder), and today's run once
    it is saved beside them."""
    store = _copy(tmp_path, name)
    created = sorted(e["report"]["created"] for _, e in _entries(name))
    for model in SPELLINGS:
        args = ["history", "--model", model, "--target", "llvm", "--store", str(store)]
        assert main(args) == 0
        assert _history_rows(capsys.readouterr().out) == created
    save = ["baseline", "save", str(tiny_run.folder), "--store", str(store), "--accept-fail"]
    assert main(save) == 0
    capsys.readouterr()
    assert main(["history", "--model", MODEL, "--target", "llvm", "--store", str(store)]) == 0
    rows = _history_rows(capsys.readouterr().out)
    assert rows == sorted([*created, tiny_run.report["created"]])
    assert (store / MARKER).read_text() == f"{LAYOUT}\n"
    saved = next(store.glob(f"*/tiny_model.py_build/*/{_stamp(tiny_run)}-*.json"))
    assert json.loads(saved.read_text())["layout"] == LAYOUT


@pytest.mark.parametrize("name", FULL_PATH)
def test_saving_an_older_qbenchs_report_again_finds_it_stored(tmp_path, capsys, name):
    """C30: ``baseline save`` of a report that an older qbench stored under the full path
    finds it there ("already stored"), instead of storing the run a second time."""
    store = _copy(tmp_path, name)
    path, entry = _entries(name)[-1]
    (tmp_path / "report.json").write_text(json.dumps(entry["report"]))
    save = ["baseline", "save", str(tmp_path / "report.json"), "--store", str(store)]
    assert main([*save, "--accept-fail"]) == 0
    out = capsys.readouterr().out
    assert "already stored, unchanged" in out and path.name in out
    assert _files(store) == _files(FIXTURES / name)


@pytest.mark.parametrize("name", FULL_PATH)
def test_migrate_moves_what_it_says_once(tmp_path, capsys, name):
    """C30: ``baseline migrate`` moves each full-path file to the model's base-name folder,
    a line per move, the report inside unchanged and the file marked with today's layout
    and where it came from; a second run moves nothing; history reads the same runs."""
    store = _copy(tmp_path, name)
    before = _files(store)
    history = ["history", "--model", MODEL, "--target", "llvm", "--store", str(store)]
    assert main(history) == 0
    table = capsys.readouterr().out
    assert main(["baseline", "migrate", "--store", str(store), "--dry-run"]) == 0
    assert "would move" in capsys.readouterr().out and _files(store) == before
    assert main(["baseline", "migrate", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    moves = re.findall(r"^moved (\S+) -> (\S+)$", out, re.M)
    assert sorted(Path(old).relative_to(store) for old, _ in moves) == sorted(before)
    assert f"{len(before)} moved" in out
    for old, new in moves:
        moved, original = (
            json.loads(Path(new).read_text()),
            json.loads(before[Path(old).relative_to(store)]),
        )
        assert not Path(old).exists() and Path(new).parent.parent.name == "tiny_model.py_build"
        assert moved["report"] == original["report"] and moved["layout"] == LAYOUT
        assert moved["store_version"] == original["store_version"] == STORE_VERSION
        assert moved["migrated"]["from"] == Path(old).relative_to(store).as_posix()
        assert moved["migrated"]["layout"] == 1 and "layout" not in original
    assert not [p for p in store.glob("*/*") if p.name != "tiny_model.py_build"]
    after = _files(store)
    assert main(["baseline", "migrate", "--store", str(store)]) == 0
    assert "nothing to move" in capsys.readouterr().out and _files(store) == after
    assert main(history) == 0
    assert capsys.readouterr().out == table


def test_migrate_of_a_base_name_store_moves_nothing(tmp_path, capsys):
    """C30: a store already filed by base name (1837634) has nothing to move."""
    store = _copy(tmp_path, "store-1837634")
    before = _files(store)
    assert main(["baseline", "migrate", "--store", str(store)]) == 0
    assert "nothing to move" in capsys.readouterr().out and _files(store) == before


@pytest.mark.parametrize("name", FULL_PATH)
def test_a_migration_stopped_between_write_and_delete_reads_once_and_finishes(
    tmp_path, capsys, name
):
    """C30: a run left in both folders (migrate stopped after writing the new file) is
    listed once by history, and the next migrate removes the old copy, saying so."""
    store = _copy(tmp_path, name)
    before = _files(store)
    assert main(["baseline", "migrate", "--store", str(store)]) == 0
    capsys.readouterr()
    old = next(iter(before))
    (store / old).parent.mkdir(parents=True, exist_ok=True)
    (store / old).write_bytes(before[old])  # as if the delete had not happened
    assert main(["history", "--model", MODEL, "--target", "llvm", "--store", str(store)]) == 0
    assert len(_history_rows(capsys.readouterr().out)) == len(before)
    assert main(["baseline", "migrate", "--store", str(store)]) == 0
    assert f"duplicate removed {store / old}" in capsys.readouterr().out
    assert not (store / old).exists()


def _future_marker(store):
    (store / MARKER).write_text(f"{LAYOUT + 1}\n")
    return str(store / MARKER), f"store layout {LAYOUT + 1}"


def _future_layout(store):
    return _future_field(store, "layout", LAYOUT + 1), f"store layout {LAYOUT + 1}"


def _future_format(store):
    where = _future_field(store, "store_version", STORE_VERSION + 1)
    return where, f"store file format {STORE_VERSION + 1}"


def _future_field(store, field, value):
    path = sorted(store.glob("*/*/*/*.json"))[-1]
    entry = json.loads(path.read_text())
    path.write_text(json.dumps(entry | {field: value}))
    return str(path)


@pytest.mark.parametrize("future", [_future_marker, _future_layout, _future_format])
def test_a_store_of_a_newer_layout_exits_2_naming_it(tmp_path, capsys, tiny_run, future):
    """C30: a store (its marker) or a stored file of a layout (or file format) newer than
    this qbench reads is refused by compare, history and migrate (and save, for the store)
    with exit 2, naming it and the layouts this qbench reads; nothing is moved or
    written."""
    store = _copy(tmp_path, "store-c90aedb")
    where, what = future(store)
    files = _files(store)
    fresh = _on_store_machine(tmp_path, tiny_run, "store-c90aedb")
    commands = [
        ["compare", str(fresh), "--store", str(store)],
        ["history", "--model", MODEL, "--target", "llvm", "--store", str(store)],
        ["baseline", "migrate", "--store", str(store)],
    ]
    if future is _future_marker:
        commands.append(["baseline", "save", str(fresh), "--store", str(store)])
    for args in commands:
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert f"written by a newer qbench ({what})" in err, args
        assert where.removesuffix(f"/{MARKER}") in err and "this qbench reads layouts" in err
    assert _files(store) == files and not list(store.glob("*/tiny_model.py_build"))


@pytest.mark.parametrize("name", FULL_PATH)
def test_no_baseline_for_this_machine_names_the_models_runs_on_others(
    tmp_path, capsys, tiny_run, name
):
    """C30: on a machine the store has no run for, compare still exits 4 with "no
    baseline" for this machine (latency is not compared across machines), but counts and
    names the model's runs the older qbench stored for other machines."""
    store = _copy(tmp_path, name)
    fresh = _on_store_machine(tmp_path, tiny_run, name)
    report = json.loads((fresh / "report.json").read_text())
    report["environment"]["cpu"] = "Another CPU"
    (fresh / "report.json").write_text(json.dumps(report))
    assert main(["compare", str(fresh), "--store", str(store)]) == 4
    out = capsys.readouterr().out
    newest = max(_files(store), key=lambda p: p.name)
    assert "no baseline" in out and "for machine Another_CPU-x86_64-1t" in out
    assert f"{len(_files(store))} run(s) of this model are stored for other machines" in out
    assert f"the newest {store / newest} (compare --baseline FILE" in out
