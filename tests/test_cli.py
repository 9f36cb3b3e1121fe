"""The command line: exit codes, error messages, reports, user models."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from qbench.cli import main

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

    def gray():
        return nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten()).eval(), (1, 1, 8, 8)

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


@pytest.mark.parametrize(
    "args, text",
    [
        (["--target", '{"kind": "cuda"}'], "cuda"),
        (["--target", '{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}'], "cannot run on this"),
        (["--target", '{"kind": "llvm", "mcpu": "bogus"}'], "mcpu 'bogus' unknown"),
        (["--repeat", "3"], "--repeat 3: must be a finite number >= 20"),
        (["--percentile", "150"], "--percentile 150.0"),
        (["--global-scale", "inf"], "--global-scale inf"),
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


@pytest.mark.parametrize(
    "func, text",
    [
        ("returns_int", "returned int, not a torch.nn.Module"),
        ("feature_map", "compares classification logits"),
        ("gray", "C must be 3"),
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
            "not a state dict",
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
    err = capsys.readouterr().err.strip()
    assert "lgamma" in err and tvm.__version__ in err and len(err.splitlines()) == 1


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
    assert report["schema_version"] == 1 and report["data"]["synthetic"] is True
    layers = report["layers"]
    assert [la["dtype"] for la in layers] == ["float32"] + ["uint8 x int8 -> int32"] * 2
    assert "first conv" in layers[0]["reason"]
    assert layers[2]["out_channels"] == 1
    samples = report["results"]["tvm_int8"]["latency_samples_ms"]
    assert len(samples) == 20 and all(s > 0 for s in samples)
    assert set(report["environment"]) >= {"qbench", "tvm", "torch", "cpu", "target", "threads"}
    assert report["graph"]["int8_added_ops"]["relax.quantize"] == 2
    out = capsys.readouterr().out
    assert "TVM INT8" in out and "sign-off:" in out and "SYNTHETIC" in out


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
