"""``qbench run --policy FILE``: precedence, bad files (exit 2), the report's record."""

import hashlib
import json
import textwrap

import pytest

from qbench.cli.main import _parser, main
from qbench.cli.runopts import run_options
from qbench.signoff import policy
from qbench.signoff.limits import Limits

POLICY = textwrap.dedent("""
    [defaults]
    min_top1_agreement = 0.985
    min_int8_speedup = 0.9

    [models.resnet18]
    min_top1_agreement = 0.99
    max_accuracy_drop = 0.5

    [models.resnet18.targets.llvm]
    min_int8_speedup = 1.1
    max_int8_latency_ms = 80
""")


@pytest.fixture
def policy_file(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text(POLICY)
    return path


def test_the_most_specific_table_wins(policy_file):
    loaded = policy.load(policy_file)
    assert loaded["sha256"] == hashlib.sha256(POLICY.encode()).hexdigest()
    on_llvm = policy.resolve(loaded, "resnet18", "llvm")
    assert on_llvm == {
        "min_top1_agreement": (0.99, "models.resnet18"),
        "min_int8_speedup": (1.1, "models.resnet18.targets.llvm"),
        "max_accuracy_drop": (0.5, "models.resnet18"),
        "max_int8_latency_ms": (80.0, "models.resnet18.targets.llvm"),
    }
    on_cuda = policy.resolve(loaded, "resnet18", "cuda")
    assert on_cuda["min_int8_speedup"] == (0.9, "defaults") and "max_int8_latency_ms" not in on_cuda
    assert policy.resolve(loaded, "vgg11", "llvm") == {
        "min_top1_agreement": (0.985, "defaults"),
        "min_int8_speedup": (0.9, "defaults"),
    }


def test_a_flag_beats_the_policy_which_beats_the_builtin_default(policy_file):
    argv = ["run", "--model", "resnet18", "--policy", str(policy_file)]
    opts = run_options(_parser().parse_args([*argv, "--min-int8-speedup", "1.5"]))
    assert opts.limits == Limits(
        min_top1_agreement=0.99,  # [models.resnet18]
        max_accuracy_drop=0.5,
        min_int8_speedup=1.5,  # the flag, over [models.resnet18.targets.llvm]'s 1.1
        max_int8_latency_ms=80.0,
    )  # min_sqnr_db, min_cosine, min_top5_agreement: Limits' defaults
    assert opts.policy["overridden_by_flags"] == ["min_int8_speedup"]
    assert opts.policy["limits"]["max_int8_latency_ms"] == {
        "value": 80.0,
        "from": "models.resnet18.targets.llvm",
    }
    assert opts.policy["target_kind"] == "llvm" and opts.policy["path"] == str(policy_file)
    assert run_options(_parser().parse_args(["run", "--model", "resnet18"])).policy is None


BAD = [
    ("[default]\nmin_cosine = 0.9\n", ["'default'", "the top level", "valid: defaults, models"]),
    ("[defaults]\nmin_sqnr = 20\n", ["'min_sqnr'", "in defaults", "valid: min_top1_agreement"]),
    ("[defaults]\nmin_top1_agreement = 1.5\n", ["[defaults] min_top1_agreement = 1.5", "[0, 1]"]),
    ("[defaults]\nmin_int8_speedup = -1\n", ["min_int8_speedup = -1", ">= 0"]),
    ("[defaults]\nmin_cosine = 'high'\n", ["min_cosine = 'high'", "must be a number"]),
    ("[defaults]\nmin_cosine = true\n", ["min_cosine = True", "must be a number"]),
    ("[defaults]\nmin_sqnr_db = nan\n", ["min_sqnr_db = nan", "finite"]),
    ("[models.resnet18.targets.rocm]\nmin_cosine = 0.9\n", ["'rocm'", "valid: llvm, cuda"]),
    ("[models.resnet18]\ntarget = 3\n", ["'target'", "models.resnet18", "targets"]),
    ("models = 3\n", ["models must be a table"]),
    ("[defaults\n", ["not valid TOML"]),
    (b"\xff\xfe", ["not valid TOML"]),
]


@pytest.mark.parametrize("text, words", BAD)
def test_a_bad_policy_exits_2_naming_the_file_and_key(tmp_path, capsys, text, words):
    path = tmp_path / "policy.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert _main(tmp_path, "--policy", str(path)) == 2
    err = capsys.readouterr().err
    assert f"--policy {path}: " in err and "Traceback" not in err
    for word in words:
        assert word in err
    assert not (tmp_path / "cal").exists() and not (tmp_path / "rep").exists()


@pytest.mark.parametrize("name", ["missing.toml", "."])
def test_an_unreadable_policy_exits_2(tmp_path, capsys, name):
    assert _main(tmp_path, "--policy", str(tmp_path / name)) == 2
    assert "cannot read it" in capsys.readouterr().err


def _main(tmp_path, *args):
    folders = ["--cache-dir", str(tmp_path / "cal"), "--reports-dir", str(tmp_path / "rep")]
    return main(["run", "--model", "resnet18", *folders, *args])


def test_the_report_records_the_policy_and_each_criterion(tmp_path):
    from test_cli import C06_MODEL

    (tmp_path / "models.py").write_text(C06_MODEL)
    model = f"{tmp_path / 'models.py'}:build"
    path = tmp_path / "policy.toml"
    path.write_text('[models."models.py:build".targets.llvm]\nmin_int8_speedup = 1000\n')
    sizes = "--calib-size 4 --eval-size 4 --batch-size 2 --repeat 20 --min-sqnr 0".split()
    args = ["--data", "synthetic", *sizes, "--min-cosine", "-1", "--policy", str(path)]
    folders = ["--cache-dir", str(tmp_path / "cal"), "--reports-dir", str(tmp_path / "rep")]
    assert main(["run", "--model", model, *folders, *args]) == 1  # no build is 1000x faster
    (folder,) = (tmp_path / "rep").iterdir()
    report = json.loads((folder / "report.json").read_text())
    record = report["policy"]
    assert record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    where = "models.models.py:build.targets.llvm"
    assert record["limits"] == {"min_int8_speedup": {"value": 1000.0, "from": where}}
    (check,) = [c for c in report["signoff"]["checks"] if c["name"].startswith("INT8 speed-up")]
    assert check["limit"] == 1000.0 and check["passed"] is False and check["ci_high"] < 1000
    assert set(report["speed"]["ratios"]) == {
        "tvm_int8/tvm_fp32",
        "tvm_fp32/pytorch_fp32",
        "tvm_int8/pytorch_fp32",
    }
    rounds = report["environment"]["timing"]["timed_rounds"]  # the suite's quick rounds
    assert all(len(r["latency_samples_ms"]) == rounds for r in report["results"].values())
    text = (folder / "report.md").read_text()
    assert f"policy: {path}" in text and "speed (median per-round latency ratio" in text


def test_a_file_model_matches_its_table_from_any_folder_and_a_miss_is_named(tmp_path):
    """``[models."m.py:build"]`` applies to ``./m.py:build`` and ``/abs/.../m.py:build``
    alike (``zoo.model_id``); a model without a table is told which tables the file has."""
    path = tmp_path / "p.toml"
    path.write_text('[models."m.py:build"]\nmin_cosine = 0.5\n[models.vgg13]\nmin_cosine = 0.6\n')
    for spelling in ("m.py:build", "./m.py:build", str(tmp_path / "sub" / "m.py:build")):
        opts = run_options(
            _parser().parse_args(["run", "--model", spelling, "--policy", str(path)])
        )
        assert opts.limits.min_cosine == 0.5 and opts.policy["unmatched"] is None
    opts = run_options(_parser().parse_args(["run", "--model", "vgg11", "--policy", str(path)]))
    assert opts.limits.min_cosine == Limits.min_cosine
    assert opts.policy["unmatched"] == (
        "no [models.'vgg11'] table, so [defaults] apply; the file names: m.py:build, vgg13"
    )


def test_a_policy_saved_with_a_byte_order_mark_is_read(tmp_path):
    """A UTF-8 byte order mark (Windows Notepad writes one) is no TOML error: the file reads
    as without it, and its sha256 is of the bytes as saved."""
    path = tmp_path / "policy.toml"
    raw = b"\xef\xbb\xbf" + POLICY.encode()
    path.write_bytes(raw)
    loaded = policy.load(path)
    assert loaded["defaults"] == {"min_top1_agreement": 0.985, "min_int8_speedup": 0.9}
    assert loaded["sha256"] == hashlib.sha256(raw).hexdigest()
