"""Field cases C22-C26 of ../shared/cases/README.md, each with a second input of its kind."""

import importlib.util
import json
import textwrap

import numpy as np
import pytest
import torch

from qbench.cli.main import main
from qbench.measure.runners import TorchRunner

MODELS = textwrap.dedent("""
    import torch
    from torch import nn

    class Rescaling(nn.Module):  # C22: forward rewrites its input in place
        def __init__(self):
            super().__init__()
            torch.manual_seed(22)
            self.conv, self.fc = nn.Conv2d(3, 8, 3), nn.Linear(8, 6)

        def forward(self, x):
            x.sub_(0.5).mul_(2)
            return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))

    def rescaling():
        return Rescaling().eval(), (3, 16, 16)

    class InplaceFirst(nn.Module):  # C22's kind: a first in-place activation on the input
        def __init__(self):
            super().__init__()
            torch.manual_seed(23)
            self.act = nn.ReLU(inplace=True)
            self.conv, self.fc = nn.Conv2d(3, 8, 3), nn.Linear(8, 6)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(self.act(x))).mean(dim=(2, 3)))

    def inplace_first():
        return InplaceFirst().eval(), (3, 16, 16)

    class Keywords(nn.Module):  # C23: layers called with a keyword argument
        def __init__(self, conv_keyword):
            super().__init__()
            torch.manual_seed(24)
            self.conv_keyword = conv_keyword
            self.conv, self.fc = nn.Conv2d(3, 8, 3), nn.Linear(8, 6)

        def forward(self, x):
            y = self.conv(input=x) if self.conv_keyword else self.conv(x)
            return self.fc(input=torch.relu(y).mean(dim=(2, 3)))

    def linear_keyword():
        return Keywords(False).eval(), (3, 16, 16)

    def both_keywords():
        return Keywords(True).eval(), (3, 16, 16)

    class DirectForward(nn.Module):  # C23's kind: module.forward(x), which skips hooks
        def __init__(self):
            super().__init__()
            torch.manual_seed(25)
            self.conv, self.fc = nn.Conv2d(3, 8, 3), nn.Linear(8, 6)

        def forward(self, x):
            return self.fc.forward(torch.relu(self.conv(x)).mean(dim=(2, 3)))

    def direct_forward():
        return DirectForward().eval(), (3, 16, 16)

    class ChannelsLast(nn.Module):  # C24: a ConvNeXt block, Linears over (N, H, W, C)
        def __init__(self, channels, size):
            super().__init__()
            torch.manual_seed(26)
            self.size = size
            self.stem = nn.Conv2d(3, channels, 3, padding=1)
            self.dw = nn.Conv2d(channels, channels, 7, padding=3, groups=channels)
            self.norm = nn.LayerNorm(channels)
            self.up = nn.Linear(channels, 4 * channels)
            self.down = nn.Linear(4 * channels, channels)
            self.fc = nn.Linear(channels, 6)

        def forward(self, x):
            x = self.stem(x)
            y = self.norm(self.dw(x).permute(0, 2, 3, 1))
            y = self.down(nn.functional.gelu(self.up(y))).permute(0, 3, 1, 2)
            return self.fc((x + y).mean(dim=(2, 3)))

    def convnext_block():
        return ChannelsLast(12, 32).eval(), (3, 32, 32)

    def convnext_square():  # H equals the channel count
        return ChannelsLast(16, 16).eval(), (3, 16, 16)

    class BatchStatistics(nn.Module):  # C25: normalised by each batch's statistics by design
        def __init__(self, norm):
            super().__init__()
            torch.manual_seed(27)
            self.conv, self.norm, self.fc = nn.Conv2d(3, 8, 3, padding=1), norm, nn.Linear(8, 6)

        def forward(self, x):
            return self.fc(torch.relu(self.norm(self.conv(x))).mean(dim=(2, 3)))

    def instance_norm():
        return BatchStatistics(nn.InstanceNorm2d(8, affine=True)).eval(), (3, 16, 16)

    def batch_norm_no_stats():
        return BatchStatistics(nn.BatchNorm2d(8, track_running_stats=False)).eval(), (3, 16, 16)

    class TwoConsumers(nn.Module):  # C26: a conv read by its BatchNorm and another branch
        def __init__(self, residual):
            super().__init__()
            torch.manual_seed(28)
            self.residual = residual
            self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.fc = nn.Linear(8 if residual else 16, 6)
            with torch.no_grad():
                self.bn.running_mean.uniform_(-0.5, 0.5)
                self.bn.running_var.uniform_(0.5, 2.0)

        def forward(self, x):
            y = self.conv(x)
            a = torch.relu(self.bn(y))
            if self.residual:
                return self.fc((a + y).mean(dim=(2, 3)))
            return self.fc(torch.cat([a.mean(dim=(2, 3)), (y * y).mean(dim=(2, 3))], 1))

    def two_branches():
        return TwoConsumers(False).eval(), (3, 16, 16)

    def skip_around_batchnorm():
        return TwoConsumers(True).eval(), (3, 16, 16)

    class Shared(nn.Module):  # one conv called twice: a weight shared by two layers
        def __init__(self):
            super().__init__()
            torch.manual_seed(29)
            self.stem, self.conv = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
            self.fc = nn.Linear(8, 6)

        def forward(self, x):
            y = self.conv(torch.relu(self.conv(torch.relu(self.stem(x)))))
            return self.fc(y.mean(dim=(2, 3)))

    def shared():
        return Shared().eval(), (3, 16, 16)

    class PermutedLinear(nn.Module):  # a Linear on a permuted tensor: a batched matmul
        def __init__(self):
            super().__init__()
            torch.manual_seed(30)
            self.conv, self.mix, self.fc = nn.Conv2d(3, 8, 3), nn.Linear(8, 8), nn.Linear(8, 6)

        def forward(self, x):
            y = self.mix(self.conv(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            return self.fc(torch.relu(y).mean(dim=(2, 3)))

    def permuted_linear():
        return PermutedLinear().eval(), (3, 16, 16)

    class SharedWeight(nn.Module):  # two convs sharing one weight, or one conv under 2 names
        def __init__(self, alias):
            super().__init__()
            torch.manual_seed(31)
            self.stem, self.a = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
            self.b = self.a if alias else nn.Conv2d(8, 8, 3, padding=1)
            self.b.weight = self.a.weight
            self.fc = nn.Linear(8, 6)

        def forward(self, x):
            y = self.b(torch.relu(self.a(torch.relu(self.stem(x)))))
            return self.fc(y.mean(dim=(2, 3)))

    def shared_weight():
        return SharedWeight(False).eval(), (3, 16, 16)

    def aliased_module():
        return SharedWeight(True).eval(), (3, 16, 16)

    class OtherProducts(nn.Module):  # ops the export names like convs and matmuls
        def __init__(self):
            super().__init__()
            torch.manual_seed(32)
            self.conv, self.up = nn.Conv2d(3, 8, 3), nn.ConvTranspose2d(8, 8, 2, stride=2)
            self.line, self.fc = nn.Conv1d(8, 8, 3), nn.Linear(8, 6)

        def forward(self, x):
            y = self.up(torch.relu(self.conv(x))).flatten(2)
            h = self.line(y).mean(-1)
            return self.fc(h + (h @ h.t()).mean(1, keepdim=True))

    def other_products():
        return OtherProducts().eval(), (3, 16, 16)
""")


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return path


def _run(tmp_path, *args):
    dirs = ["--cache-dir", str(tmp_path / "cal"), "--reports-dir", str(tmp_path / "rep")]
    sizes = ["--batch-size", "2", "--calib-size", "4", "--eval-size", "8"]
    return main(["run", *dirs, *sizes, "--data", "synthetic", *args])


def _report(tmp_path):
    (folder,) = (tmp_path / "rep").iterdir()
    return json.loads((folder / "report.json").read_text())


@pytest.mark.parametrize("name", ["rescaling", "inplace_first"])
def test_c22_every_runner_sees_the_same_input(tmp_path, capsys, models, name):
    """PyTorch runs first; a forward that writes to its input must not change what TVM
    reads: TVM FP32 agrees with PyTorch on every image (it had agreed on none)."""
    code = _run(tmp_path, "--model", f"{models}:{name}")
    err = capsys.readouterr().err
    assert code in (0, 1), err
    assert "writes to its input tensor in place" in err
    results = _report(tmp_path)["results"]
    assert results["tvm_fp32"]["metrics"]["top1_agreement"] == 1.0
    assert results["tvm_fp32"]["metrics"]["sqnr_db"] > 60


def test_c22_torch_runner_leaves_the_caller_batch_alone():
    module = torch.nn.Sequential(torch.nn.ReLU(inplace=True), torch.nn.Flatten()).eval()
    x = np.linspace(-1, 1, 2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2)
    before = x.copy()
    runner = TorchRunner(module, 2, (3, 2, 2))
    out = runner.infer(x)
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(out, np.maximum(before, 0).reshape(2, -1))
    runner.timed_call(x)()
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("name", ["linear_keyword", "both_keywords"])
def test_c23_layers_called_with_keywords_get_gptq(tmp_path, capsys, models, name):
    """``self.fc(input=y)`` (and a conv so called) is a plain call: the default run (GPTQ
    rounding) completes and rounds both layers by GPTQ (it had stopped with exit 3)."""
    code = _run(tmp_path, "--model", f"{models}:{name}")
    assert code in (0, 1), capsys.readouterr().err
    rounding = _report(tmp_path)["calibration"]["weight_rounding"]
    assert rounding.startswith("gptq") and "2 of 2 layers" in rounding


def test_c23_direct_forward_call_keeps_nearest_rounding_naming_the_layer(tmp_path, capsys, models):
    """``self.fc.forward(y)`` skips module hooks, so fake quantization cannot quantize that
    layer: the run completes with nearest rounding and a warning naming ``fc`` and why."""
    code = _run(tmp_path, "--model", f"{models}:direct_forward")
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    warning = [line for line in (out.out + out.err).splitlines() if "GPTQ" in line]
    assert any("layers fc:" in line and "without calling the module" in line for line in warning)
    assert _report(tmp_path)["calibration"]["weight_rounding"].startswith("nearest")


@pytest.mark.parametrize("name", ["convnext_block", "convnext_square"])
def test_c24_bias_correction_of_linears_over_channels_last(tmp_path, capsys, models, name):
    """A Linear's output channels are its last axis at any rank: ``--bias-correction`` runs
    (it had stopped on a (12,) shift against (32,), or, with H equal to the channel count,
    corrected the wrong axis silently)."""
    code = _run(tmp_path, "--model", f"{models}:{name}", "--bias-correction")
    assert code in (0, 1), capsys.readouterr().err
    report = _report(tmp_path)
    assert report["calibration"]["bias_correction"].startswith("on")
    int8 = {row["name"] for row in report["layers"] if row["dtype"] != "float32"}
    assert {"up", "down"} <= int8, report["layers"]


def test_c24_corrected_linear_output_means_equal_fp32_per_last_axis_channel():
    """After bias correction, a Linear over (N, H, W, C) with H == C has the FP32 output's
    mean in every output channel (its last axis), recomputed here with numpy."""
    from helpers import quantize_tiny

    from qbench.quantize.bias import bias_shifts
    from qbench.quantize.fakequant import fake_layers, quantized

    class _Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(3)
            self.norm, self.fc = torch.nn.LayerNorm(5), torch.nn.Linear(5, 4)

        def forward(self, x):
            return self.fc(self.norm(x.permute(0, 2, 3, 1))).permute(0, 3, 1, 2)

    model = _Head().eval()
    x = np.random.default_rng(2).standard_normal((4, 5, 4, 4)).astype(np.float32)
    q = quantize_tiny(model, [x], calib_mode="max", per_channel=False)
    fakes = fake_layers(model, q.layers, q.plans)
    xt = torch.from_numpy(x)
    bias_shifts(model, fakes, xt)
    with torch.no_grad(), quantized(model, fakes, {0}) as (run, seen):
        run(xt)
        corrected = seen["fc"][1].numpy()
    assert [layer.name for layer in q.layers] == ["fc"]
    fp32 = model.fc(model.norm(xt.permute(0, 2, 3, 1))).detach().numpy()
    assert corrected.shape == (4, 4, 4, 4) and fakes[0].shift.shape == (4,)
    np.testing.assert_allclose(corrected.mean(axis=(0, 1, 2)), fp32.mean(axis=(0, 1, 2)), atol=1e-5)


@pytest.mark.parametrize("name", ["instance_norm", "batch_norm_no_stats"])
def test_c25_batch_statistics_by_design_run_and_match(tmp_path, capsys, models, name):
    """An eval-mode model whose norm uses the batch's statistics by design is not a model
    left in training mode: it runs, and TVM FP32 matches PyTorch (it had exited 2 with
    "call model.eval()")."""
    code = _run(tmp_path, "--model", f"{models}:{name}")
    assert code in (0, 1), capsys.readouterr().err
    fp32 = _report(tmp_path)["results"]["tvm_fp32"]["metrics"]
    assert fp32["top1_agreement"] == 1.0 and fp32["sqnr_db"] > 60


@pytest.mark.parametrize("name", ["two_branches", "skip_around_batchnorm"])
def test_c26_conv_with_two_consumers_keeps_names_gptq_and_numbers(tmp_path, capsys, models, name):
    """The BatchNorm of a conv whose output another branch reads too is not folded into a
    second copy of the conv: one conv layer, both layers under their PyTorch names, GPTQ on
    both (it had duplicated the conv, named the layers layer0..2 and skipped GPTQ for the
    whole model with a wrong reason), and TVM FP32 still matches PyTorch."""
    code = _run(tmp_path, "--model", f"{models}:{name}")
    assert code in (0, 1), capsys.readouterr().err
    report = _report(tmp_path)
    assert [row["name"] for row in report["layers"]] == ["conv", "fc"]
    rounding = report["calibration"]["weight_rounding"]
    assert rounding.startswith("gptq") and "2 of 2 layers" in rounding
    fp32 = report["results"]["tvm_fp32"]["metrics"]
    assert fp32["top1_agreement"] == 1.0 and fp32["sqnr_db"] > 60


def _calls_counted_by_pytorch(path, name):
    """{module paths sharing one weight: calls} of every nn.Conv2d/nn.Linear, counted here
    with forward hooks."""
    spec = importlib.util.spec_from_file_location("case_models", path)
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    model, shape = getattr(source, name)()
    paths, calls = {}, {}
    for module_path, sub in model.named_modules(remove_duplicate=False):
        if isinstance(sub, torch.nn.Conv2d | torch.nn.Linear):
            paths.setdefault(id(sub.weight), set()).add(module_path)
    for sub in {id(m): m for m in model.modules()}.values():
        if isinstance(sub, torch.nn.Conv2d | torch.nn.Linear):
            sub.register_forward_hook(
                lambda m, a, o: calls.update({id(m.weight): calls.get(id(m.weight), 0) + 1})
            )
    with torch.no_grad():
        model(torch.zeros((2, *shape)))
    return {frozenset(paths[key]): n for key, n in calls.items()}


@pytest.mark.parametrize(
    "name",
    [
        "rescaling",
        "linear_keyword",
        "convnext_block",
        "instance_norm",
        "two_branches",
        "skip_around_batchnorm",
        "shared",
        "permuted_linear",
        "shared_weight",
        "aliased_module",
        "other_products",
    ],
)
def test_every_conv_and_linear_call_is_in_the_layer_table(tmp_path, capsys, models, name):
    """The invariant: each nn.Conv2d/nn.Linear call the model makes is one row of the layer
    table under its module path (a second call as ``<path>#2``), INT8 or FP32 with its
    reason, and the console's "layers built in INT8: N of M" counts every one."""
    code = _run(tmp_path, "--model", f"{models}:{name}", "--weight-rounding", "nearest")
    out = capsys.readouterr().out
    assert code in (0, 1), out
    rows = _report(tmp_path)["layers"]
    expected = _calls_counted_by_pytorch(models, name)
    counted = dict.fromkeys(expected, 0)
    for row in rows:
        (group,) = [g for g in expected if row["name"].split("#")[0] in g]
        counted[group] += int(row["reason"].split()[0]) if row["index"] is None else 1
        assert row["dtype"] != "float32" or row["reason"], row
    assert counted == expected
    int8 = sum(row["dtype"] != "float32" for row in rows)
    assert f"layers built in INT8: {int8} of {len(rows)}" in out


def test_a_module_called_twice_keeps_its_name_and_says_why_gptq_is_off(tmp_path, capsys, models):
    code = _run(tmp_path, "--model", f"{models}:shared")
    captured = capsys.readouterr()
    assert code in (0, 1), captured.err
    report = _report(tmp_path)
    assert [row["name"] for row in report["layers"]] == ["stem", "conv", "conv#2", "fc"]
    assert "read by more than one layer" in captured.out + captured.err
    assert report["calibration"]["weight_rounding"].startswith("nearest")


def test_other_products_leave_every_layer_its_name(tmp_path, capsys, models):
    """A Conv1d, a ConvTranspose2d and a product of two activations are convolutions and
    matmuls in the export but no quantizable layer: the conv and the Linear keep their
    names and get GPTQ (every name had been dropped, and GPTQ skipped for a wrong reason)."""
    code = _run(tmp_path, "--model", f"{models}:other_products")
    assert code in (0, 1), capsys.readouterr().err
    report = _report(tmp_path)
    assert [row["name"] for row in report["layers"]][:2] == ["conv", "fc"]
    assert report["calibration"]["weight_rounding"].startswith("gptq")
