"""The command line: exit codes, error messages, reports, user models."""

import argparse
import json
import logging
import platform
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from qbench.cli.main import _HelpFormatter, _parser, main
from qbench.model import zoo

C06_MODEL = textwrap.dedent("""
    import torch
    from torch import nn

    def build():
        torch.manual_seed(6)
        model = nn.Sequential(
            nn.Conv2d(3, 8, 7, stride=2, padding=3), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 1, 1),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        return model.eval(), {"input_shape": (1, 3, 32, 32)}

    def training():
        return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)), (1, 3, 8, 8)

    class Lgamma(nn.Module):
        def forward(self, x):
            return torch.lgamma(x.abs() + 1)

    def unsupported():
        return Lgamma().eval(), (1, 3, 8, 8)

    def returns_int():
        return 42

    def feature_map():
        return nn.Conv2d(3, 4, 3).eval(), (1, 3, 8, 8)

    def four_channels():
        return nn.Sequential(nn.Conv2d(4, 4, 3), nn.Flatten()).eval(), (1, 4, 8, 8)

    def raises():
        raise RuntimeError("weights server down")
""")


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "models.py"
    path.write_text(C06_MODEL)
    return path


def _run(tmp_path, *args):
    return main(
        ["run", "--cache-dir", str(tmp_path / "cal"), "--reports-dir", str(tmp_path / "rep"), *args]
    )


def _report(tmp_path):
    (folder,) = (tmp_path / "rep").iterdir()
    assert (folder / "report.md").is_file()
    return json.loads((folder / "report.json").read_text())


def test_models_lists_torchvision_and_lite0(capsys):
    assert main(["models", "resnet*"]) == 0
    names = capsys.readouterr().out.split()
    assert "resnet18" in names and "resnet50" in names and "mobilenet_v2" not in names
    main(["models"])
    assert "efficientnet_lite0" in capsys.readouterr().out.split()


@pytest.mark.parametrize(
    "args, text",
    [
        (["--model", "resnet19"], "resnet18"),
        (["--model", "resnet18", "--target", "tpu"], "valid: llvm, cuda"),
        (["--model", "resnet18", "--target", "{bad json"], "invalid JSON"),
        (["--model", "resnet18", "--batch-size", "0"], "--batch-size"),
        (["--model", "nofile.py:build"], "not found"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(tmp_path, capsys, args, text):
    assert _run(tmp_path, *args) == 2
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err
    assert not list(tmp_path.glob("rep/*"))  # no report, not even a partial one


def _foreign_cpu_target():
    """A target whose code this host cannot run (a Sapphire Rapids: AVX-512, AVX-VNNI), with
    the first feature the refusal names; skipped on a host that runs it."""
    from helpers import LLVM

    from qbench.compile.features import has_feature, host_lacks

    wanted = ("avx512f", "avx512vnni", "avxvnni", "amx-int8")
    lacking = host_lacks(wanted)  # the CPU's own flags (None where they cannot be read)
    if lacking is None:
        lacking = [f for f in wanted if not has_feature(LLVM, f)]
    return pytest.param(
        ["--target", '{"kind": "llvm", "mcpu": "sapphirerapids"}'],
        lacking[0] if lacking else "",
        marks=pytest.mark.skipif(not lacking, reason="this CPU runs Sapphire Rapids code"),
    )


@pytest.mark.parametrize(
    "args, text",
    [
        (["--target", '{"kind": "cuda"}'], "cuda"),
        (["--target", '{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}'], "cannot run on this"),
        (["--target", '{"kind": "llvm", "mcpu": "bogus"}'], "mcpu 'bogus' unknown"),
        _foreign_cpu_target(),
        (["--target", '{"kind": "llvm", "mcpu": "bdver4"}'], "fma4"),  # AMD FMA4/XOP
        (["--target", '{"kind": "llvm", "mtriple": "x86_64-pc-windows-msvc"}'], "cannot run"),
        (["--target", '{"kind": "llvm", "mcpu": "i386"}'], "32-bit CPU"),
        (["--target", '{"kind": "llvm", "foo": 1}'], "not a valid llvm target"),
        (["--target", '{"kind": "llvm", "mcpu": 5}'], "not a valid llvm target"),
        (["--target", '{"kind": "llvm", "num-cores": "two"}'], "num-cores must be"),
        (["--repeat", "3"], "--repeat 3: must be an integer >= 20"),
        (["--calib-size", "-3"], "--calib-size -3: must be an integer >= 1"),
        (["--target", '{"kind": "llvm", "mcpu": "nosuchcpu"}'], f"for {platform.machine()};"),
        (["--percentile", "150"], "--percentile 150.0"),
        (["--calib-mode", "global_scale", "--global-scale", "inf"], "--global-scale inf"),
        (["--calib-mode", "max", "--percentile", "99"], "only --calib-mode percentile takes"),
        (["--global-scale", "4"], "only --calib-mode global_scale takes it, and this run"),
        (["--fit-pairs", "--reduce-range"], "--fit-pairs with --reduce-range: 7-bit weights"),
        (["--trials", "5"], "--trials 5: only read with --tune, which this run does not have"),
        (["--tune-graphs", "fp32"], "--tune-graphs fp32: only read with --tune"),
        (["--holdout-size", "10"], "--holdout-size 10: only read with --accuracy-target"),
        (["--min-top1-agreement", "2"], "in [0, 1]"),
        (["--std", "0", "0", "0"], "non-zero"),
        (["--data", ""], "--data ''"),
        (["--data", "hf:"], "no dataset name"),
    ],
)
def test_bad_option_values_exit_2_before_any_work(tmp_path, capsys, args, text):
    assert _run(tmp_path, "--model", "resnet18", *args) == 2
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_sweep_refuses_tuning_budget_flags_it_never_reads(tmp_path, capsys):
    """``qbench sweep`` has no ``--tune``: ``--trials`` there is refused before any cell (a
    break-test find: it was recorded in every report and never read)."""
    args = ["sweep", "--models", "resnet18", "--trials", "4", "--reports-dir", str(tmp_path)]
    assert main(args) == 2
    assert "--trials 4: only read with --tune" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_diagnose_refuses_timing_flags_without_the_fallback_that_times(tmp_path, capsys):
    """``qbench diagnose`` times only its ``--accuracy-target`` fallback's latency cost:
    ``--repeat`` without it is refused (a break-test find: accepted, never read)."""
    args = ["diagnose", "--model", "resnet18", "--repeat", "30", "--reports-dir", str(tmp_path)]
    assert main(args) == 2
    assert "--repeat 30: only read with --accuracy-target" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "func, text",
    [
        ("returns_int", "returned int, not a torch.nn.Module"),
        ("feature_map", "compares class scores"),
        ("four_channels", "C must be 1 (greyscale) or 3 (RGB)"),
        ("raises", "RuntimeError: weights server down"),
    ],
)
def test_bad_user_models_exit_2(tmp_path, capsys, model_file, func, text):
    assert _run(tmp_path, "--model", f"{model_file}:{func}", "--data", "synthetic") == 2
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err
    assert not list(tmp_path.glob("cal/*"))  # refused before calibration


def test_broken_files_exit_2(tmp_path, capsys, model_file):
    (tmp_path / "bad.py").write_text("def make(:\n")
    (tmp_path / "bad.pt2").write_bytes(b"not a zip")
    (tmp_path / "bad.pth").write_bytes(b"garbage")
    cases = [
        (["--model", f"{tmp_path / 'bad.py'}:make"], "SyntaxError"),
        (["--model", str(tmp_path / "bad.pt2")], "not a saved torch.export program"),
        (
            ["--model", f"{model_file}:build", "--weights", str(tmp_path / "bad.pth")],
            "not a readable state dict",
        ),
        (
            ["--model", f"{model_file}:build", "--reports-dir", str(model_file)],
            "not a writable folder",
        ),
    ]
    for args, text in cases:
        assert _run(tmp_path, *args, "--data", "synthetic") == 2, args
        err = capsys.readouterr().err
        assert text in err and "Traceback" not in err, (args, err)


def test_training_mode_pt2_is_refused(tmp_path, capsys):
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten()).train()
    ep = torch.export.export(model, (torch.zeros(2, 3, 8, 8),))
    torch.export.save(ep, str(tmp_path / "train.pt2"))
    args = ["--model", str(tmp_path / "train.pt2"), "--data", "synthetic", "--batch-size", "2"]
    assert _run(tmp_path, *args) == 2
    assert "training mode" in capsys.readouterr().err


def test_models_pattern_matching_nothing_exits_2(capsys):
    assert main(["models", "zzz*"]) == 2
    assert "no registered model" in capsys.readouterr().err


def test_bad_calibration_mode_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        _run(tmp_path, "--model", "resnet18", "--calib-mode", "entropy")
    assert e.value.code == 2 and "kl_divergence" in capsys.readouterr().err


def test_c03_unsupported_op_exits_2_in_one_line(tmp_path, capsys, model_file):
    import tvm

    assert _run(tmp_path, "--model", f"{model_file}:unsupported", "--data", "synthetic") == 2
    lines = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in lines if not line.startswith("[qbench] ")]  # not stage lines
    assert len(errors) == 1 and "lgamma" in errors[0] and tvm.__version__ in errors[0]
    assert lines[-1] == errors[0]  # the stages that passed came first


def test_c01_training_mode_exits_2(tmp_path, capsys, model_file):
    assert _run(tmp_path, "--model", f"{model_file}:training", "--data", "synthetic") == 2
    assert "training mode" in capsys.readouterr().err


def test_c06_run_reports_built_dtype_per_layer(tmp_path, capsys, model_file):
    code = _run(
        tmp_path,
        "--model",
        f"{model_file}:build",
        "--data",
        "synthetic",
        "--calib-size",
        "4",
        "--eval-size",
        "6",
        "--batch-size",
        "1",
        "--repeat",
        "20",
        "--keep-first-fp32",
    )
    report = _report(tmp_path)
    assert code == (0 if report["signoff"]["verdict"] == "PASS" else 1)
    assert report["schema_version"] == 2 and report["data"]["synthetic"] is True
    layers = report["layers"]
    assert [la["dtype"] for la in layers] == ["float32"] + ["uint8 x int8 -> int32"] * 2
    assert "first conv" in layers[0]["reason"]
    assert layers[2]["out_channels"] == 1
    int8 = report["results"]["tvm_int8"]  # one logit: no ranking, so no agreement at all
    assert "top1_agreement" not in int8["metrics"] and "top5_agreement" not in int8["metrics"]
    assert "top1_match" not in int8["per_image"] and int8["metrics"]["sqnr_db"] is not None
    samples = report["results"]["tvm_int8"]["latency_samples_ms"]
    rounds = report["environment"]["timing"]["timed_rounds"]  # the suite's quick rounds
    assert len(samples) == rounds and all(s > 0 for s in samples)
    assert set(report["environment"]) >= {"qbench", "tvm", "torch", "cpu", "target", "threads"}
    # the maxpool output is quantized; the second conv's ReLU output is requantized in
    # integer from its accumulator (multiply, round, add the zero point, clip)
    added = report["graph"]["int8_added_ops"]
    assert added["relax.quantize"] == 1 and added["relax.round"] == 1
    out = capsys.readouterr().out
    assert "TVM INT8" in out and "sign-off:" in out and "SYNTHETIC" in out
    assert "weight rounding gptq (4 images, 2 of 2 layers), bias correction off" in out
    printed = re.search(r"reports: \S+report\.md  \S+report\.json  (\S+report\.html)", out)
    assert printed and "<!DOCTYPE html>" in open(printed.group(1)).read()


def test_exported_program_model_and_calibration_cache(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.Flatten()).eval()
    ep = torch.export.export(model, (torch.zeros(2, 3, 12, 12),))
    torch.export.save(ep, str(tmp_path / "m.pt2"))
    args = [
        "--model",
        str(tmp_path / "m.pt2"),
        "--data",
        "synthetic",
        "--calib-size",
        "4",
        "--eval-size",
        "4",
        "--batch-size",
        "2",
        "--repeat",
        "20",
    ]
    assert _run(tmp_path, *args) in (0, 1)
    assert _report(tmp_path)["calibration"]["cache_hit"] is False
    assert len(list((tmp_path / "cal").glob("*.json"))) == 1
    for folder in (tmp_path / "rep").iterdir():
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()
    _run(tmp_path, *args)
    assert _report(tmp_path)["calibration"]["cache_hit"] is True


def test_entry_point_exit_code():
    done = subprocess.run(
        [sys.executable, "-m", "qbench.cli", "run", "--model", "nope"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "qbench: error: model 'nope'" in done.stderr


def _commands():
    (sub,) = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices


def test_help_lists_every_command_and_the_exit_codes(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "``" not in out  # plain text, no RST markup
    commands = {"run", "tune", "layers", "models", "diagnose", "sweep", "build"}
    commands |= {"baseline", "compare", "history"}
    assert set(_commands()) == commands
    for name in _commands():
        assert re.search(rf"^ +{name} +\w", out, re.M), name  # listed with a one-line help
    codes = [(0, "PASS"), (1, "FAIL"), (2, "usage"), (3, "internal"), (4, "baseline")]
    for code, word in [*codes, (130, "interr")]:
        assert re.search(rf"^ +{code} +.*{word}", out, re.M), code


def test_every_option_has_a_help_text_and_shows_its_default(capsys):
    for name, parser in _commands().items():
        formatter = _HelpFormatter(f"qbench {name}")
        for action in parser._actions:
            if action.dest == "help":
                continue
            text = formatter._get_help_string(action)
            assert action.help and re.search(r"default|\(required\)", text), (name, action.dest)
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert "{global_scale,kl_divergence,percentile,max}" in out  # the choices
    assert "(default: percentile)" in out and "(default: 8.0)" in " ".join(out.split())
    assert "(default: off)" in out and "(required)" in out


def _flags(name):
    return {f for a in _commands()[name]._actions for f in a.option_strings}


def test_each_command_offers_only_the_options_it_uses():
    """run and sweep take every group; build runs nothing (no device, timing, sign-off or
    tuning budget); tune neither times nor signs off; diagnose signs nothing off and tunes
    nothing."""
    timing, remote = {"--warmup", "--repeat"}, {"--rpc", "--rpc-tracker", "--rpc-key"}
    signoff = {"--min-sqnr", "--min-cosine", "--min-top1-agreement", "--max-int8-latency-ms"}
    budget = {"--trials", "--time-budget", "--tune-graphs"}
    for name in ("run", "sweep"):
        assert timing | remote | signoff | budget <= _flags(name), name
    assert not (timing | remote | signoff | budget) & _flags("build")
    assert not (timing | signoff) & _flags("tune") and budget | remote <= _flags("tune")
    assert not (signoff | budget) & _flags("diagnose") and timing | remote <= _flags("diagnose")
    for name in ("build", "tune", "diagnose"):
        assert {"--model", "--target", "--calib-mode", "--tuning-db"} <= _flags(name), name


@pytest.mark.parametrize(
    "argv, named",
    [
        (
            ["run", "--model", "x", "--calib-mode", "nope"],
            "qbench run: error: argument --calib-mode",
        ),
        (["runn"], "qbench: error: argument COMMAND: invalid choice: 'runn' (choose from 'run'"),
        (["build", "--model", "x", "--repeat", "3"], "qbench build: error: unrecognized"),
        (["baseline", "save"], "qbench baseline save: error: the following arguments are"),
    ],
)
def test_a_command_line_error_is_one_line_naming_it(argv, named, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and err.startswith(named), err
    assert err.rstrip().endswith("--help')")


TINY = textwrap.dedent("""
    import torch
    from torch import nn

    def build():
        torch.manual_seed(1)
        model = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, groups=8),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
        return model.eval(), (3, 12, 12)
""")


@pytest.fixture
def tiny_file(tmp_path):
    path = tmp_path / "tiny.py"
    path.write_text(TINY)
    return path


def _cells(out, index):
    """The cells of the layer table's row ``index`` (columns split on 2+ spaces)."""
    (line,) = [line for line in out.splitlines() if re.match(rf"{index} {{2,}}", line)]
    return re.split(r" {2,}", line.strip())


def test_layers_lists_quantizable_layers_without_calibration_or_build(
    tmp_path, capsys, tiny_file, monkeypatch
):
    from qbench.calibration import calibrate
    from qbench.compile import build

    monkeypatch.setattr(build, "lower", lambda *a, **k: pytest.fail("layers built"))
    monkeypatch.setattr(calibrate, "calibrate_module", lambda *a, **k: pytest.fail("calibrated"))
    args = ["layers", "--model", f"{tiny_file}:build", "--keep-first-fp32", "--skip-layers", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    first, depthwise, linear = _cells(out, 0), _cells(out, 1), _cells(out, 2)
    assert first[:6] == ["0", "0", "conv2d", "8 x 3 x 3 x 3", "3->8", "1"]
    assert first[6].startswith("FP32: first conv kept")
    assert depthwise == ["1", "2", "conv2d", "8 x 1 x 3 x 3", "8->8", "8", "INT8"]
    assert linear == ["2", "5", "matmul", "8 x 10", "8->10", "1", "FP32: skipped by --skip-layers"]
    assert "1 of 3 layers would run in INT8" in out


@pytest.mark.parametrize(
    "args, text",
    [
        (["--skip-layers", "7"], "--skip-layers [7]: no such layer"),
        (["--batch-size", "0"], "--batch-size 0"),
        (["--input-shape", "3", "0", "12"], "--input-shape"),
    ],
)
def test_layers_bad_input_exits_2(capsys, tiny_file, args, text):
    assert main(["layers", "--model", f"{tiny_file}:build", *args]) == 2
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err


def test_verbose_adds_details(capsys, caplog, tiny_file):
    caplog.set_level(logging.DEBUG, logger="qbench")
    assert main(["layers", "--model", f"{tiny_file}:build"]) == 0
    assert not [r for r in caplog.records if r.levelno == logging.INFO]
    assert main(["layers", "--model", f"{tiny_file}:build", "-v"]) == 0
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert "load model ..." in info and "import to Relax ..." in info


def test_models_marks_where_weights_come_from_and_the_last_report(tmp_path, capsys, monkeypatch):
    import torchvision

    hub = tmp_path / "hub"
    url = torchvision.models.get_model_weights("resnet18").DEFAULT.url
    (hub / "checkpoints").mkdir(parents=True)
    (hub / "checkpoints" / url.rsplit("/", 1)[1]).write_bytes(b"")
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(hub))
    reports = tmp_path / "rep"
    for folder in ("20261130-101010-resnet18-llvm", "20261201-090000-resnet18-llvm-2"):
        (reports / folder).mkdir(parents=True)
        (reports / folder / "report.json").write_text("{}")
    (reports / "20261202-090000-resnet34-llvm").mkdir()  # unfinished: no report.json
    assert main(["models", "resnet*", "--reports-dir", str(reports)]) == 0
    out = capsys.readouterr().out
    assert _cells(out, "resnet18") == ["resnet18", "cached", "2026-12-01"]
    assert _cells(out, "resnet34") == ["resnet34", "download", "-"]
    assert main(["models", "efficientnet_lite0"]) == 0
    assert _cells(capsys.readouterr().out, "efficientnet_lite0")[1] == "shipped (offline)"


STAGES = [
    "open data",
    "load model",
    "import to Relax",
    "calibration",
    "INT8 rewrite",
    "build TVM FP32",
    "build TVM INT8",
    "evaluation",
    "timing",
    "report",
]


def test_random_weights_are_announced_first_and_every_stage_has_a_line(
    tmp_path, capsys, caplog, monkeypatch
):
    """A registry model whose pretrained weights cannot load (stood in for by a tiny model)."""
    namespace = {}
    exec(TINY, namespace)  # noqa: S102 - the test's own model code
    spec = zoo.ModelSpec("resnet18", "torchvision", (3, 12, 12), zoo.Preprocess(14, 12))
    monkeypatch.setattr(zoo, "get_spec", lambda name: spec)
    monkeypatch.setattr(zoo, "_torchvision", lambda name: (namespace["build"]()[0], "random"))
    caplog.set_level(logging.INFO, logger="qbench")
    sizes = "--calib-size 2 --eval-size 4 --batch-size 2 --calib-mode max --warmup 0".split()
    sizes += ["--min-int8-speedup", "0"]  # a tiny model's INT8 may be slower: not this test's
    code = _run(tmp_path, "--model", "resnet18", "--data", "synthetic", *sizes, "-v")
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    at = {}
    for name in STAGES:
        (i,) = [
            i for i, line in enumerate(lines) if re.match(rf"\[qbench\] {name}: \d+\.\d s", line)
        ]
        at[name] = i
    assert list(at.values()) == sorted(at.values())  # one line per stage, in order
    (warned,) = [i for i, line in enumerate(lines) if "resnet18 runs on RANDOM weights" in line]
    assert at["load model"] < warned < at["import to Relax"]
    assert "--weights FILE" in captured.err and "efficientnet_lite0" in captured.err
    assert "calibration ..." in [r.getMessage() for r in caplog.records]  # -v
    assert code == 1 and "no: random initialisation" in captured.out  # it went on, then FAIL
    assert [c["name"] for c in _report(tmp_path)["signoff"]["checks"] if not c["passed"]] == [
        "trained weights"
    ]


def test_ctrl_c_that_tvm_turns_into_its_own_error_exits_130(monkeypatch, capsys, sigint_default):
    import os
    import signal
    import time

    from qbench.cli import main as cli

    def converted():  # what TVM does to a KeyboardInterrupt raised inside its callbacks
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            raise RuntimeError("error from TVM") from None

    monkeypatch.setitem(cli.COMMANDS, "models", lambda *_: converted())
    assert main(["models"]) == 130
    assert "qbench: interrupted" in capsys.readouterr().err

    def bug(*_):
        raise RuntimeError("a real bug")

    monkeypatch.setitem(cli.COMMANDS, "models", bug)
    assert main(["models"]) == 3  # without a Ctrl-C the same error is an internal error
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_the_console_command_ends_the_process_with_mains_exit_code(monkeypatch, capsys):
    """``entry`` skips the interpreter's exit, which waits for TVM's spinning workers."""
    from qbench.cli import main as cli

    ended = []
    monkeypatch.setattr(cli, "main", lambda: print("done") or 4)
    monkeypatch.setattr(cli.os, "_exit", ended.append)
    cli.entry()
    assert ended == [4] and capsys.readouterr().out == "done\n"


HEAVY = ("tvm", "torch", "torchvision", "scipy.stats", "matplotlib")


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["run", "--model", "resnet18", "--repeat", "3"], ["compare", "--help"]],
)
def test_the_parser_and_option_errors_import_no_heavy_library(argv):
    """Issue 35 (every command took 4-6 s to start): the parser, --version and a bad option
    value load none of TVM, torch, torchvision, scipy.stats or matplotlib (a structural
    check, not a timing: each of them costs seconds to import)."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom qbench.cli.main import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stderr
