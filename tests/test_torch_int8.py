"""PyTorch's own INT8 beside TVM's (``qbench run --torch-int8``): the FX x86 runner's
numbers recomputed with torch's own quantization, a flow that cannot be built as a "not
available" row, and the line and check that name the faster INT8."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from qbench.cli.main import main
from qbench.measure.results import Ratio, Speed
from qbench.report.lines import int8_choice_line
from qbench.signoff.checks import signoff
from qbench.signoff.limits import Limits

RESIDUAL = """
import torch
from torch import nn
from torchvision.models.resnet import BasicBlock


def build():
    torch.manual_seed(0)
    down = nn.Sequential(nn.Conv2d(8, 16, 1, stride=2, bias=False), nn.BatchNorm2d(16))
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1), BasicBlock(8, 8), BasicBlock(8, 16, stride=2, downsample=down),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )
    return net.eval(), {"input_shape": (3, 16, 16)}
"""
SIZES = ["--data", "synthetic", "--calib-size", "8", "--eval-size", "16", "--batch-size", "4"]


def _run(tmp_path, model, *extra):
    args = ["run", "--model", model, *SIZES, "--cache-dir", str(tmp_path / "c")]
    code = main([*args, "--reports-dir", str(tmp_path / "r"), *extra])
    (folder,) = (tmp_path / "r").iterdir()
    return code, json.loads((folder / "report.json").read_text()), folder


@pytest.fixture(scope="module")
def residual_run(tmp_path_factory):
    """A residual net (resnet18's pattern, on which PT2E fails) run with both flows."""
    tmp = tmp_path_factory.mktemp("torch_int8")
    (tmp / "residual.py").write_text(RESIDUAL)
    return _run(tmp, f"{tmp / 'residual.py'}:build", "--torch-int8", "fx,pt2e")


def _centred(z):
    return z - z.mean(1, keepdims=True)


def test_fx_agreement_and_sqnr_equal_torchs_own_quantized_model(residual_run):
    """The FX x86 runner's numbers, recomputed: torch.ao's prepare_fx / convert_fx with the
    x86 qconfig mapping, calibrated on the run's calibration images (read back by the data
    stage's seeded split), evaluated on its evaluation images; agreement and SQNR (centred
    logits: the model returns logits) in numpy."""
    from torch.ao.quantization import get_default_qconfig_mapping, quantize_fx

    from qbench import data
    from qbench.model import zoo

    code, report, folder = residual_run
    model = zoo.load_model(_model_path(folder))
    images = data.open_source("synthetic", 0, 8 + 16)
    split = data.split(images, 8, 16, 0)
    calib = [x for x, _ in data.full_batches(images, split.calib, model, 4)]
    evals = [x for x, _ in data.full_batches(images, split.eval, model, 4)]
    example = (torch.zeros((4, *model.input_shape)),)
    fx = quantize_fx.prepare_fx(model.module, get_default_qconfig_mapping("x86"), example)
    with torch.no_grad():
        for x in calib:
            fx(torch.from_numpy(x))
        fx = quantize_fx.convert_fx(fx)
        ref = np.concatenate([model.module(torch.from_numpy(x)).numpy() for x in evals])
        out = np.concatenate([fx(torch.from_numpy(x)).numpy() for x in evals])
    agreement = float((ref.argmax(1) == out.argmax(1)).mean())
    r, e = _centred(ref.astype(np.float64)), _centred(out.astype(np.float64))
    sqnr = 10 * np.log10((r**2).sum() / ((r - e) ** 2).sum())
    metrics = report["results"]["torch_int8_fx"]["metrics"]
    assert metrics["top1_agreement"] == pytest.approx(agreement)
    assert metrics["sqnr_db"] == pytest.approx(sqnr, abs=1e-3)


def _model_path(folder):
    """The model file the run read, from its report's config."""
    return json.loads((folder / "report.json").read_text())["config"]["model"]


def test_a_flow_that_fails_is_a_not_available_row_and_the_verdict_is_unchanged(
    residual_run, tmp_path
):
    code, report, folder = residual_run
    why = report["unavailable_runners"]["torch_int8_pt2e"]
    assert why == "ValueError: Input partition has more than one output node"
    assert "torch_int8_pt2e" not in report["results"]
    assert (
        f"PyTorch INT8 (torchao PT2E) | not available: {why}" in (folder / "report.md").read_text()
    )
    assert "not available" in (folder / "report.html").read_text()
    (tmp_path / "residual.py").write_text(RESIDUAL)
    _, without, _ = _run(tmp_path, f"{tmp_path / 'residual.py'}:build")
    checks = [(c["name"], c["passed"]) for c in without["signoff"]["checks"]]
    speed = ("INT8 speed-up over TVM FP32",)  # timed: its verdict may move with the load
    assert [c for c in checks if c[0] not in speed] == [
        (c["name"], c["passed"]) for c in report["signoff"]["checks"] if c["name"] not in speed
    ]


def _fake(ratio, low, high, ours=0.99, theirs=0.99):
    """A report's speed and results with TVM INT8 / PyTorch INT8 (FX x86) = ``ratio``."""
    ratios = {"tvm_int8/torch_int8_fx": Ratio(ratio, low, high, 0.95)}
    results = {
        "tvm_int8": SimpleNamespace(metrics={"top1_agreement": ours}),
        "torch_int8_fx": SimpleNamespace(metrics={"top1_agreement": theirs}),
    }
    return SimpleNamespace(speed=Speed(ratios, False, None), results=results)


def test_the_line_names_the_faster_int8_with_its_interval():
    line = int8_choice_line(_fake(2.37, 2.1, 2.6))
    assert line.startswith(
        "INT8 to ship: PyTorch INT8 (FX x86) is 2.37x faster than TVM INT8 at the same top-1 "
        "agreement (99.0 %)"
    )
    assert "(2.10-2.60x, 95 % CI)" in line
    line = int8_choice_line(_fake(0.5, 0.4, 0.625, ours=0.99, theirs=0.98))
    assert "TVM INT8 is 2.00x faster than PyTorch INT8 (FX x86)" in line
    assert "(1.60-2.50x, 95 % CI)" in line and "99.0 % (TVM INT8) and 98.0 % (PyTorch)" in line
    assert "as fast within the interval" in int8_choice_line(_fake(1.02, 0.9, 1.1))
    assert int8_choice_line(SimpleNamespace(speed=Speed({}, False, None), results={})) is None


def _results():
    metrics = {
        "nonfinite_logits": 0,
        "top1_agreement": 1.0,
        "top5_agreement": 1.0,
        "sqnr_db": 40.0,
        "cosine": 1.0,
    }
    entry = SimpleNamespace(metrics=metrics, latency=SimpleNamespace(median_ms=1.0))
    return {"pytorch_fp32": SimpleNamespace(metrics={}), "tvm_fp32": entry, "tvm_int8": entry}


@pytest.mark.parametrize(
    "ratio, low, high, limit, passed",
    [
        (2.0, 1.8, 2.2, 1.0, False),  # PyTorch INT8 2x faster: best case 1/1.8 = 0.56x < 1
        (0.5, 0.45, 0.55, 1.5, True),  # TVM 2x faster (1.82-2.22x) >= 1.5
        (0.9, 0.8, 1.05, 1.2, True),  # 1.11x, but its best case 1.25x reaches 1.2
    ],
)
def test_the_optional_check_fails_only_below_its_whole_interval(ratio, low, high, limit, passed):
    speed = Speed(
        {
            "tvm_int8/tvm_fp32": Ratio(0.5, 0.45, 0.55, 0.95),
            "tvm_int8/torch_int8_fx": Ratio(ratio, low, high, 0.95),
        },
        False,
        None,
    )
    verdict = signoff(_results(), Limits(min_speedup_vs_torch_int8=limit), 10, speed=speed)
    (check,) = [c for c in verdict.checks if c.name.startswith("TVM INT8 speed-up over")]
    assert check.name == "TVM INT8 speed-up over PyTorch INT8 (FX x86)"
    assert check.value == pytest.approx(1 / ratio, abs=1e-6)
    assert check.ci_low == pytest.approx(1 / high, abs=1e-6)
    assert check.ci_high == pytest.approx(1 / low, abs=1e-6)
    assert check.passed is passed and (verdict.verdict == "PASS") is passed


def test_the_check_without_a_pytorch_int8_runner_fails_saying_why():
    speed = Speed({"tvm_int8/tvm_fp32": Ratio(0.5, 0.45, 0.55, 0.95)}, False, None)
    verdict = signoff(_results(), Limits(min_speedup_vs_torch_int8=1.0), 10, speed=speed)
    (check,) = [c for c in verdict.checks if c.name.startswith("TVM INT8 speed-up over")]
    assert check.passed is False and "--torch-int8" in check.detail
