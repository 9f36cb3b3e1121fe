"""The Python entry point, ``qbench.pipeline.run(RunOptions)``, as docs/usage.md shows it:
the same run as ``qbench run`` with the same options, to the same numbers."""

import json
import re
from pathlib import Path

import pytest

from qbench.cli.main import main
from qbench.core.errors import UserError
from qbench.pipeline import RunOptions, run
from qbench.report.write import write_reports

TINY = str(Path(__file__).parent / "fixtures" / "tiny_model.py") + ":build"
SIZES = {"data": "synthetic", "calib_size": 4, "eval_size": 8, "batch_size": 4}


def test_the_python_entry_gives_what_the_command_gives(tmp_path):
    """The same verdict, metrics and exit code; the speed-up limit is 0 on both, so that the
    verdict does not hang on two timings of a tiny model on a loaded machine (CI saw the
    API's FAIL against the command's PASS)."""
    from qbench.signoff.limits import Limits

    folders = {f: str(tmp_path / f) for f in ("cache_dir", "tuning_db")}
    options = RunOptions(
        model=TINY,
        **SIZES,
        **folders,
        reports_dir=str(tmp_path / "api"),
        limits=Limits(min_int8_speedup=0.0),
    )
    report = run(options)
    written = write_reports(report, tmp_path / "api")
    argv = ["run", "--model", TINY, "--data", "synthetic", "--calib-size", "4"]
    argv += ["--eval-size", "8", "--batch-size", "4", "--reports-dir", str(tmp_path / "cli")]
    argv += ["--min-int8-speedup", "0"]
    argv += ["--cache-dir", folders["cache_dir"], "--tuning-db", folders["tuning_db"]]
    code = main(argv)
    (cli_json,) = (tmp_path / "cli").glob("*/report.json")
    api, cli = (json.loads(p.read_text()) for p in (written / "report.json", cli_json))
    assert code == (0 if report.signoff.verdict == "PASS" else 1)
    assert api["signoff"]["verdict"] == cli["signoff"]["verdict"]
    for runner in ("tvm_fp32", "tvm_int8"):
        assert api["results"][runner]["metrics"] == cli["results"][runner]["metrics"]
    assert api["calibration"]["cache_hit"] is False and cli["calibration"]["cache_hit"] is True


def test_a_fallback_without_held_out_images_is_refused_where_the_options_are_made(tmp_path):
    """RunOptions' holdout_size is 0 (no fallback); the command line's is 64."""
    with pytest.raises(UserError, match="--holdout-size 0: must be >= 1 with --accuracy-target"):
        RunOptions(model=TINY, **SIZES, accuracy_target=0.9, cache_dir=str(tmp_path / "c"))
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    "fields, flags",
    [
        ({"repeat": 5}, ["--repeat", "5"]),
        ({"threads": 0}, ["--threads", "0"]),
        ({"calib_size": 0}, ["--calib-size", "0"]),
        ({"accuracy_target": 1.5}, ["--accuracy-target", "1.5"]),
        ({"trials": 0, "tune": True}, ["--trials", "0", "--tune"]),
        ({"limits": {"min_sqnr_db": -1.0}}, ["--min-sqnr", "-1"]),
        ({"quant": {"percentile": 0.0}}, ["--percentile", "0"]),
        ({"torch_int8": ("tvm",)}, ["--torch-int8", "tvm"]),
    ],
)
def test_a_bad_value_gets_the_same_message_from_the_api_and_the_flag(capsys, fields, flags):
    """RunOptions is checked where it is made, by the command line and the API alike: the
    same UserError text, which the command line prints with exit 2 (issue 34)."""
    from qbench.quantize import QuantConfig
    from qbench.signoff.limits import Limits

    made = {"limits": Limits, "quant": QuantConfig}
    with pytest.raises(UserError) as api:  # a Limits or QuantConfig refuses as it is made
        kwargs = {k: made[k](**v) if k in made else v for k, v in fields.items()}
        RunOptions(model="resnet18", **kwargs)
    assert main(["run", "--model", "resnet18", *flags]) == 2
    assert capsys.readouterr().err.strip() == f"qbench: error: {api.value}"


def test_flow_and_graph_names_are_read_as_the_flag_reads_them_once_each():
    """A new user's findings: ("fx", "fx") crashed after the whole run (exit 3), and a string
    was split into letters; now the API takes the flag's text and names each flow once."""
    opts = RunOptions(model="resnet18", torch_int8="fx,pt2e,fx", tune_graphs="int8")
    assert opts.torch_int8 == ("fx", "pt2e") and opts.tune_graphs == ("int8",)
    assert RunOptions(model="resnet18", torch_int8=["fx", "fx"]).torch_int8 == ("fx",)


def test_a_speedup_limit_over_pytorch_int8_without_its_runners_is_refused_first(capsys):
    """--min-speedup-vs-torch-int8 without --torch-int8 could only fail after the whole run."""
    assert main(["run", "--model", "resnet18", "--min-speedup-vs-torch-int8", "2"]) == 2
    err = capsys.readouterr().err
    assert "--min-speedup-vs-torch-int8 2.0: needs PyTorch INT8 runners" in err
    assert "--torch-int8 fx,pt2e" in err


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"calib_size": 2.5}, "--calib-size 2.5: must be an integer >= 1"),
        ({"eval_size": True}, "--eval-size True: must be an integer >= 1"),
        ({"seed": -1}, "--seed -1: must be an integer >= 0"),
    ],
)
def test_counts_must_be_whole_numbers(fields, message):
    """A count through the API is refused as a whole number (a flag's int type already is);
    a NumPy integer is one."""
    import numpy as np

    with pytest.raises(UserError, match=re.escape(message)):
        RunOptions(model="resnet18", **fields)
    assert RunOptions(model="resnet18", calib_size=np.int64(4)).calib_size == 4
