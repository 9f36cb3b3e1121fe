"""Empirical bias correction (qbench.quantize.bias), measured in PyTorch, folded into the
INT8 graph's int32 correction, on each layer's output-channel axis (a Linear's last, C24)."""

import numpy as np
import pytest
import torch
from fieldcases import layer_run, run_report
from helpers import quantize_tiny
from torch import nn

from qbench.quantize.bias import bias_shifts, corrected
from qbench.quantize.fakequant import fake_layers
from qbench.quantize.rewrite import rewrite

STEP = 1 / 127  # the int8 step of a channel whose largest |w| is 1


def _model():
    """One 1x1 conv whose small weights (0.004, 0.51 of a step) all round up to one step:
    channel 0 gains 3 x (STEP - 0.004) per unit of input, channel 1 loses it."""
    conv = nn.Conv2d(4, 2, 1, bias=False)
    with torch.no_grad():
        conv.weight[0, :, 0, 0] = torch.tensor([1.0, 0.004, 0.004, 0.004])
        conv.weight[1, :, 0, 0] = torch.tensor([-1.0, -0.004, -0.004, -0.004])
    return nn.Sequential(conv).eval()


def _inputs():
    """Inputs on the uint8 grid of [0, 1] (no activation error): k / 255."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (8, 4, 5, 5)).astype(np.float32) / 255
    x[0, :, 0, 0] = 1.0  # the calibrated range is [0, 1]
    return x


def test_measured_shift_is_the_hand_derived_one_and_the_int8_graph_removes_it():
    model, x = _model(), _inputs()
    q = quantize_tiny(model, [x])
    fakes = fake_layers(model, q.layers, q.plans)
    shifts = bias_shifts(model, fakes, torch.from_numpy(x))
    gain = 3 * (STEP - 0.004) * x[:, 1:].mean()  # mean over images, pixels, inputs 1..3
    np.testing.assert_allclose(shifts["0"], [-gain, gain], rtol=1e-4)

    fp32 = q.run("fp32", x).mean(axis=(0, 2, 3))
    plain = q.run("int8", x).mean(axis=(0, 2, 3))
    np.testing.assert_allclose(fp32 - plain, [-gain, gain], rtol=1e-3)
    q.int8_mod = rewrite(q.fp32_mod, corrected(q.plans, q.layers, shifts))
    fixed = q.run("int8", x).mean(axis=(0, 2, 3))
    rescale = STEP / 255  # s_x * s_w: the int32 step the shift is rounded to
    assert np.abs(fixed - fp32).max() <= rescale / 2 + 1e-6
    assert gain > 100 * rescale  # the shift was large against that rounding


def test_every_quantized_layer_gets_a_shift_per_output_channel():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 6, 3), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 4 * 4, 5))
    x = np.random.default_rng(1).standard_normal((4, 3, 6, 6)).astype(np.float32)
    q = quantize_tiny(model.eval(), [x])
    fakes = fake_layers(model, q.layers, q.plans)
    shifts = bias_shifts(model, fakes, torch.from_numpy(x))
    assert {k: v.shape for k, v in shifts.items()} == {"0": (6,), "3": (5,)}
    plans = corrected(q.plans, q.layers, shifts)
    assert all(p.bias_shift is shifts[la.name] for p, la in zip(plans, q.layers, strict=True))
    with pytest.raises(KeyError):
        corrected(q.plans, q.layers, {})


def test_the_shift_of_a_conv_followed_by_batchnorm_is_in_the_folded_graph_units():
    """BatchNorm (factor 0.01 on channel 0, -3 on channel 1) is folded into the INT8 graph's
    conv: the shift measured on the PyTorch conv must be scaled by the same factor."""
    model = _model()
    bn = nn.BatchNorm2d(2).eval()
    with torch.no_grad():
        bn.running_mean.zero_()
        bn.running_var.fill_(1.0 - bn.eps)  # sqrt(var + eps) = 1
        bn.weight.copy_(torch.tensor([0.01, -3.0]))
        bn.bias.copy_(torch.tensor([0.5, 0.25]))
    model = nn.Sequential(model[0], bn).eval()
    x = _inputs()
    q = quantize_tiny(model, [x])
    fakes = fake_layers(model, q.layers, q.plans)
    np.testing.assert_allclose(fakes[0].fold_scale, [0.01, -3.0], rtol=1e-5)
    shifts = bias_shifts(model, fakes, torch.from_numpy(x))
    gain = 3 * (STEP - 0.004) * x[:, 1:].mean()
    np.testing.assert_allclose(shifts["0"], [-gain * 0.01, gain * -3.0], rtol=1e-3)
    fp32 = q.run("fp32", x).mean(axis=(0, 2, 3))
    q.int8_mod = rewrite(q.fp32_mod, corrected(q.plans, q.layers, shifts))
    fixed = q.run("int8", x).mean(axis=(0, 2, 3))
    steps = np.abs([0.01, -3.0]) * STEP / 255  # the folded rescale, per channel
    assert (np.abs(fixed - fp32) <= steps / 2 + 1e-5).all()


@pytest.mark.parametrize("name", ["convnext_block", "convnext_square"])
def test_bias_correction_of_linears_over_channels_last_runs(tmp_path, capsys, layer_models, name):
    """C24: A Linear's output channels are its last axis at any rank: ``--bias-correction``
    runs (it had stopped on a (12,) shift against (32,), or, with H equal to the channel
    count, corrected the wrong axis silently)."""
    code = layer_run(tmp_path, "--model", f"{layer_models}:{name}", "--bias-correction")
    assert code in (0, 1), capsys.readouterr().err
    report = run_report(tmp_path)
    assert report["calibration"]["bias_correction"].startswith("on")
    int8 = {row["name"] for row in report["layers"] if row["dtype"] != "float32"}
    assert {"up", "down"} <= int8, report["layers"]


def test_a_corrected_linear_output_mean_equals_fp32_per_last_axis_channel():
    """C24: After bias correction, a Linear over (N, H, W, C) with H == C has the FP32 output's
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
