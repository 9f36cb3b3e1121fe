"""Import (``qbench.model.frontend``): the FP32 graph equals PyTorch; what it refuses
(training mode, unsupported ops, dtypes other than float32, an exported shape that is not the
model's) it refuses before calibration, naming it; what runs by design it keeps."""

import numpy as np
import pytest
import torch
from fieldcases import SMALL_MODELS, cli_run, layer_run, refused, run_report
from helpers import LLVM, batchnorm_model, loaded, loaded_vm, quantize_tiny, randn, torch_out
from torch import nn

from qbench.cli.main import main
from qbench.compile import targets
from qbench.core.errors import UnsupportedModelError
from qbench.measure.runners import TVMRunner
from qbench.model import frontend


def fp32_tvm(module, x):
    imported = frontend.import_model(loaded(module, x.shape[1:]), len(x))
    runner = TVMRunner(
        loaded_vm(imported.mod), targets.device_for(LLVM), len(x), x.shape[1:], "fp32"
    )
    return runner.infer(x)


def test_a_batchnorm_in_eval_mode_matches_pytorch():
    """C01: Conv2d -> BatchNorm2d (running mean 2, variance 9) -> ReLU after ``model.eval()``:
    the TVM FP32 build equals PyTorch within 1e-5."""
    model, x = batchnorm_model().eval(), randn(2, 3, 8, 8)
    assert np.abs(fp32_tvm(model, x) - torch_out(model, x)).max() <= 1e-5


def test_a_model_in_training_mode_is_refused_before_calibration():
    """C01: a model left in training mode is refused at import, before calibration, with a
    message that says so."""
    model = batchnorm_model().train()
    lm = loaded(model, (3, 8, 8))
    model.train()  # ``loaded`` calls eval(); undo it as a user would have
    with pytest.raises(UnsupportedModelError, match="training mode"):
        frontend.import_model(lm, 2)


def test_an_adaptive_pool_head_matches_pytorch_in_fp32_and_int8():
    """C02 (a): Conv2d -> AdaptiveAvgPool2d(1) -> flatten -> Linear imports and matches PyTorch
    within 1e-6 in FP32, and within quantization tolerance in INT8."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10)
    ).eval()
    x = randn(1, 3, 16, 16)
    ref = torch_out(model, x)
    assert np.abs(fp32_tvm(model, x) - ref).max() <= 1e-6
    q = quantize_tiny(model, [randn(1, 3, 16, 16, seed=s) for s in range(8)] + [x])
    assert np.abs(q.run("int8", x) - ref).max() <= 0.05 * np.abs(ref).max()


def test_adaptive_pooling_with_uneven_windows_matches_pytorch():
    """C02 (b): AdaptiveAvgPool2d((3, 3)) on 10 x 10 inputs, whose windows do not divide
    evenly, matches PyTorch within 1e-6."""
    model, x = nn.AdaptiveAvgPool2d((3, 3)).eval(), randn(2, 3, 10, 10)
    assert np.abs(fp32_tvm(model, x) - torch_out(model, x)).max() <= 1e-6


@pytest.mark.parametrize(
    "kernel, stride, padding, size",
    [(3, 2, 0, 12), (3, 2, 1, 12), (2, 2, 1, 11), (3, 1, 1, 7)],
)
def test_a_ceil_mode_max_pool_matches_pytorch_on_qbench_kernel(kernel, stride, padding, size):
    """googlenet's kind: MaxPool2d(ceil_mode=True), whose last window runs past the padded
    input (or would start in the padding, and is dropped), on qbench's taps kernel (it had
    kept TVM's default schedule): equal to PyTorch on all-negative inputs, where a padding
    of 0 would win the max."""
    from qbench.compile.kernels.select import kernel_paths

    model = nn.MaxPool2d(kernel, stride, padding, ceil_mode=True).eval()
    x = randn(2, 3, size, size) - 10.0
    np.testing.assert_array_equal(fp32_tvm(model, x), torch_out(model, x))
    imported = frontend.import_model(loaded(model, x.shape[1:]), len(x))
    assert kernel_paths(imported.mod, LLVM) == {"float32 max_pool2d taps": 1}


class Lgamma(nn.Module):
    def forward(self, x):
        return torch.lgamma(x.abs() + 1)


def test_an_unsupported_op_is_named_in_one_line_with_the_tvm_version():
    """C03: an ATen op the Relax importer lacks (lgamma) stops the import with one line naming
    the op and the installed TVM version."""
    import tvm

    with pytest.raises(UnsupportedModelError) as err:
        frontend.import_model(loaded(Lgamma(), (3, 4, 4)), 1)
    message = str(err.value)
    assert "lgamma" in message and tvm.__version__ in message and "\n" not in message


def c04_model(inplace):
    torch.manual_seed(4)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3),
        nn.LeakyReLU(0.1, inplace=inplace),
        nn.Conv2d(8, 8, 3),
        nn.ReLU6(inplace=inplace),
    ).eval()
    with torch.no_grad():
        model[2].weight.mul_(12.0)  # some pre-activations exceed 6
    return model


def test_inplace_activations_equal_out_of_place_ones_and_relu6_clamps_at_6():
    """C04: in-place LeakyReLU and ReLU6 give the out-of-place model's result; ReLU6 clamps at
    6 in the FP32 and INT8 builds."""
    x = np.random.default_rng(0).uniform(-3, 3, (1, 3, 12, 12)).astype(np.float32)
    inplace, plain = c04_model(True), c04_model(False)
    ref = torch_out(plain, x)
    assert ref.max() == 6.0
    assert np.array_equal(torch_out(inplace, x), ref)
    fp32 = fp32_tvm(inplace, x)
    assert fp32.max() <= 6.0 and np.abs(fp32 - ref).max() <= 1e-5
    calib = [
        np.random.default_rng(s).uniform(-3, 3, (1, 3, 12, 12)).astype(np.float32) for s in range(6)
    ]
    int8 = quantize_tiny(inplace, calib).run("int8", x)
    assert int8.max() <= 6.0 and np.mean(int8 == 6.0) == pytest.approx(
        np.mean(ref == 6.0), abs=0.02
    )


def test_saved_program_with_another_input_shape_exits_2(tmp_path, capsys):
    """C16: a saved ExportedProgram run with another ``--input-shape`` exits 2 naming the input
    it was exported for and the ``--input-shape`` that fits it."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval()
    ep = torch.export.export(model, (torch.zeros(2, 3, 16, 16),))
    torch.export.save(ep, str(tmp_path / "m.pt2"))
    args = ["--model", str(tmp_path / "m.pt2"), "--input-shape", "3", "16", "24"]
    assert cli_run(tmp_path, *args, "--data", "synthetic") == 2
    refused(capsys, tmp_path, "exported for input (2, 3, 16, 16)", "--input-shape 3 16 16")


def test_a_float16_model_exits_2_naming_the_dtype(tmp_path, capsys, small_models):
    """C20: a half-precision model exits 2 naming float16: only float32 models are supported
    yet."""
    assert cli_run(tmp_path, "--model", f"{small_models}:half", "--data", "synthetic") == 2
    refused(capsys, tmp_path, "float16", "only float32 models are supported yet")


def test_casts_inside_forward_and_other_dtypes_are_refused(tmp_path, capsys, small_models):
    """C20: a float16 conv inside the forward() of a float32 model is named by its layer;
    bfloat16 and float64 modules are refused, float32 passes."""
    assert cli_run(tmp_path, "--model", f"{small_models}:casts", "--data", "synthetic") == 2
    refused(capsys, tmp_path, "layer 0 (conv2d) computes in float16")
    for dtype in (torch.bfloat16, torch.float64):
        with pytest.raises(UnsupportedModelError, match=str(dtype).removeprefix("torch.")):
            frontend.check_float32(nn.Linear(2, 2).to(dtype), "m")
    frontend.check_float32(nn.Linear(2, 2), "m")  # float32 passes


def test_bfloat16_model_and_bad_returns_exit_2(tmp_path, capsys, small_models):
    """C20: a bfloat16 model exits 2 naming the dtype; a model function that returns three
    values exits 2 saying so."""
    small_models.write_text(
        SMALL_MODELS.replace("FACTOR", "1.0")
        + "\ndef bf16():\n    return Wide().to(torch.bfloat16).eval(), (3, 16, 16)\n"
        + "\ndef three():\n    return Wide().eval(), (3, 16, 16), 'x'\n"
    )
    assert cli_run(tmp_path, "--model", f"{small_models}:bf16", "--data", "synthetic") == 2
    refused(capsys, tmp_path, "bfloat16", "only float32 models are supported yet")
    assert cli_run(tmp_path, "--model", f"{small_models}:three", "--data", "synthetic") == 2
    refused(capsys, tmp_path, "returned 3 values")


@pytest.mark.parametrize("name", ["instance_norm", "batch_norm_no_stats"])
def test_norms_using_batch_statistics_by_design_run_and_match(tmp_path, capsys, layer_models, name):
    """C25: An eval-mode model whose norm uses the batch's statistics by design is not a model
    left in training mode: it runs, and TVM FP32 matches PyTorch (it had exited 2 with "call
    model.eval()")."""
    code = layer_run(tmp_path, "--model", f"{layer_models}:{name}")
    assert code in (0, 1), capsys.readouterr().err
    fp32 = run_report(tmp_path)["results"]["tvm_fp32"]["metrics"]
    assert fp32["top1_agreement"] == 1.0 and fp32["sqnr_db"] > 60


def test_training_ops_in_an_eval_model_name_the_functional_call(tmp_path, capsys):
    """Issue 20: F.dropout(x, training=True) in an eval-mode model: exit 2 naming the
    functional call, not "call model.eval()", which the user did."""
    path = tmp_path / "m.py"
    path.write_text(
        "import torch\nfrom torch import nn\n\n"
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4, 2)\n\n"
        "    def forward(self, x):\n"
        "        h = nn.functional.dropout(self.conv(x), 0.5, training=True)\n"
        "        return self.fc(h.mean(dim=(2, 3)))\n\n"
        "def build():\n"
        "    return M().eval(), (3, 8, 8)\n"
    )
    dirs = ["--cache-dir", str(tmp_path / "c"), "--reports-dir", str(tmp_path / "r")]
    code = main(["run", "--model", f"{path}:build", "--data", "synthetic", *dirs])
    err = capsys.readouterr().err
    assert code == 2 and "training=True" in err and "call model.eval()" not in err
