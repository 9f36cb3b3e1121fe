"""End-to-end runs on real models (slow: minutes each; ``pytest -m slow``)."""

import json
from pathlib import Path

import pytest

from qbench.cli.main import main

pytestmark = pytest.mark.slow


def _only_report(folder):
    (run,) = folder.iterdir()
    assert (run / "report.md").read_text().startswith("# qbench report")
    return json.loads((run / "report.json").read_text())


def test_efficientnet_lite0_kl_on_real_photos(tmp_path, imagenet_sample):
    args = "run --model efficientnet_lite0 --target llvm --calib-mode kl_divergence"
    sizes = "--calib-size 32 --eval-size 64"
    dirs = ["--cache-dir", str(tmp_path / "cal"), "--reports-dir", str(tmp_path / "rep")]
    code = main(args.split() + ["--data", str(imagenet_sample)] + sizes.split() + dirs)
    report = _only_report(tmp_path / "rep")
    assert code == (0 if report["signoff"]["verdict"] == "PASS" else 1)
    assert report["model"]["random_weights"] is False
    assert report["data"]["labelled"] and report["data"]["eval_size"] == 64
    int8 = report["results"]["tvm_int8"]["metrics"]
    assert int8["top1_agreement"] > 0.9
    assert report["results"]["tvm_fp32"]["metrics"]["top1_agreement"] == 1.0
    assert report["results"]["pytorch_fp32"]["metrics"]["top1_accuracy"] > 0.8


def test_resnet18_random_weights_are_flagged(tmp_path, capsys):
    import torch

    if list((Path(torch.hub.get_dir()) / "checkpoints").glob("resnet18-*.pth")):
        pytest.skip("resnet18 weights are in the torch hub cache here")
    args = "run --model resnet18 --target llvm --calib-size 2 --eval-size 2 --batch-size 1"
    dirs = ["--cache-dir", str(tmp_path / "cal"), "--reports-dir", str(tmp_path / "rep")]
    code = main(args.split() + dirs)
    report = _only_report(tmp_path / "rep")
    assert report["model"]["weights"] == "random" and report["model"]["random_weights"]
    assert code == 1 and report["signoff"]["verdict"] == "FAIL"  # never signed off
    assert "weights: RANDOM" in capsys.readouterr().out
