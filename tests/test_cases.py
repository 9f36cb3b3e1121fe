"""The field cases of ../shared/cases/README.md, each with its expected behaviour."""

import numpy as np
import pytest
import torch
from helpers import LLVM, loaded, quantize_tiny, torch_out
from torch import nn

from qbench.compile import build, targets
from qbench.core.errors import UnsupportedModelError
from qbench.measure.runners import TVMRunner
from qbench.model import frontend, graph


def fp32_tvm(module, x):
    imported = frontend.import_model(loaded(module, x.shape[1:]), len(x))
    runner = TVMRunner(
        build.build(imported.mod, LLVM).vm, targets.device_for(LLVM), len(x), x.shape[1:], "fp32"
    )
    return runner.infer(x)


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def c01_model():
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(8)
    bn.running_mean.fill_(2.0)
    bn.running_var.fill_(9.0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), bn, nn.ReLU())


def test_c01_batchnorm_eval_matches_pytorch():
    model, x = c01_model().eval(), randn(2, 3, 8, 8)
    assert np.abs(fp32_tvm(model, x) - torch_out(model, x)).max() <= 1e-5


def test_c01_batchnorm_after_biased_conv_folds_into_the_weights():
    model = c01_model().eval()
    ops = graph.op_counts(frontend.import_model(loaded(model, (3, 8, 8)), 2).mod)
    assert "relax.nn.batch_norm" not in ops and "relax.multiply" not in ops
    assert ops["relax.nn.conv2d"] == 1


def test_c01_training_mode_is_refused_before_calibration():
    model = c01_model().train()
    lm = loaded(model, (3, 8, 8))
    model.train()  # ``loaded`` calls eval(); undo it as a user would have
    with pytest.raises(UnsupportedModelError, match="training mode"):
        frontend.import_model(lm, 2)


def test_c02a_adaptive_pool_head_fp32_and_int8():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10)
    ).eval()
    x = randn(1, 3, 16, 16)
    ref = torch_out(model, x)
    assert np.abs(fp32_tvm(model, x) - ref).max() <= 1e-6
    q = quantize_tiny(model, [randn(1, 3, 16, 16, seed=s) for s in range(8)] + [x])
    assert np.abs(q.run("int8", x) - ref).max() <= 0.05 * np.abs(ref).max()


def test_c02b_adaptive_pool_uneven_windows():
    model, x = nn.AdaptiveAvgPool2d((3, 3)).eval(), randn(2, 3, 10, 10)
    assert np.abs(fp32_tvm(model, x) - torch_out(model, x)).max() <= 1e-6


class Lgamma(nn.Module):
    def forward(self, x):
        return torch.lgamma(x.abs() + 1)


def test_c03_unsupported_op_named_with_tvm_version():
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


def test_c04_inplace_activations_and_relu6_clamp():
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


def c05_model():
    torch.manual_seed(5)
    bn = nn.BatchNorm2d(16)
    with torch.no_grad():
        bn.weight.copy_(torch.tensor(10 ** np.linspace(-2, 1, 16), dtype=torch.float32))
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), bn, nn.ReLU()).eval()


def per_channel_sqnr(ref, out):
    noise = ((ref - out) ** 2).sum(axis=(0, 2, 3))
    return 10 * np.log10((ref**2).sum(axis=(0, 2, 3)) / np.maximum(noise, 1e-30))


def test_c05_per_channel_keeps_every_channel_per_tensor_flags_collapse():
    model = c05_model()
    calib = [randn(8, 3, 16, 16, seed=s) for s in range(32)]
    x = randn(8, 3, 16, 16, seed=100)
    q = quantize_tiny(model, calib)
    sqnr = per_channel_sqnr(torch_out(model, x), q.run("int8", x))
    assert sqnr.min() >= 25.0
    per_tensor = quantize_tiny(model, calib, per_channel=False)
    collapsed = per_tensor.plans[0].weight.collapsed
    folded = per_tensor.layers[0].weight  # BatchNorm folded into the conv weights
    amax = np.abs(folded).reshape(16, -1).max(1)
    expected = np.flatnonzero(amax < 0.5 * amax.max() / 127)  # rounds to 0 at every weight
    assert collapsed == expected.tolist() and len(collapsed) > 0


class TwoBranches(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(8)
        self.a, self.b, self.c = nn.Conv2d(4, 4, 1), nn.Conv2d(4, 4, 1), nn.Conv2d(8, 4, 1)
        with torch.no_grad():
            self.a.weight.mul_(0.1)
            self.a.bias.zero_()
            self.b.weight.mul_(4.0)

    def forward(self, x):
        return self.c(torch.cat([torch.relu(self.a(x)), self.b(x)], dim=1))


def test_c08_concat_of_differently_scaled_branches():
    model, x = TwoBranches().eval(), randn(1, 4, 8, 8)
    with torch.no_grad():
        a = torch.relu(model.a(torch.from_numpy(x)))
        b = model.b(torch.from_numpy(x))
    assert a.max() < 0.6 and b.abs().max() > 4  # the shape the case describes
    q = quantize_tiny(model, [randn(1, 4, 8, 8, seed=s) for s in range(8)] + [x])
    ref, out = torch_out(model, x).ravel(), q.run("int8", x).ravel()
    assert ref @ out / (np.linalg.norm(ref) * np.linalg.norm(out)) > 0.99


def test_c09a_silu_output_range_is_used():
    torch.manual_seed(9)
    model = nn.Sequential(nn.SiLU(), nn.Conv2d(16, 8, 1)).eval()
    calib = [
        np.random.default_rng(s).uniform(-8, 8, (1, 16, 8, 8)).astype(np.float32) for s in range(4)
    ]
    q = quantize_tiny(model, calib)
    r = q.ranges[q.layers[0].name]
    x = np.concatenate(calib)
    silu = x / (1 + np.exp(-x))  # SiLU's own output, computed independently
    assert r.lo == pytest.approx(silu.min(), abs=1e-5) and r.lo > -0.3
    assert r.hi == pytest.approx(silu.max(), abs=1e-5)


def test_c12_nonfinite_calibration_batches_are_excluded():
    torch.manual_seed(12)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 1)).eval()
    calib = [randn(4, 3, 8, 8, seed=s) for s in range(4)]
    calib[1][0, 0, 0, 0] = np.nan
    calib[2][1, 2, 3, 3] = np.inf
    q = quantize_tiny(model, calib)
    first = q.ranges[q.layers[0].name]
    assert first.nonfinite == 2 and first.nonfinite_batches == [1, 2]
    for plan in q.plans:
        assert np.isfinite(plan.act.scale) and plan.act.scale > 0
    assert np.isfinite(q.run("int8", randn(4, 3, 8, 8, seed=50))).all()


def test_c13_all_zero_depthwise_channel_is_exact():
    torch.manual_seed(13)
    model = nn.Conv2d(8, 8, 3, groups=8).eval()
    with torch.no_grad():
        model.weight[3].zero_()
    x = randn(2, 8, 10, 10, seed=3)
    out = quantize_tiny(model, [randn(2, 8, 10, 10, seed=s) for s in range(4)]).run("int8", x)
    assert not np.isnan(out).any()
    assert np.all(out[:, 3] == model.bias[3].item())
    ref = torch_out(model, x)
    assert np.abs(out - ref).max() <= 0.05 * np.abs(ref).max()


def test_c09b_squeeze_excitation_error_within_output_scales():
    class SE(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(19)
            self.pool, self.act = nn.AdaptiveAvgPool2d(1), nn.Hardsigmoid()
            self.down, self.up = nn.Conv2d(16, 4, 1), nn.Conv2d(4, 16, 1)

        def forward(self, x):
            return x * self.act(self.up(torch.relu(self.down(self.pool(x)))))

    model = SE().eval()
    calib = [randn(2, 16, 8, 8, seed=s) for s in range(8)]
    x = randn(2, 16, 8, 8, seed=77)
    ref = torch_out(model, x)
    out = quantize_tiny(model, calib).run("int8", x)
    all_ref = np.concatenate([torch_out(model, c) for c in calib])
    output_scale = (all_ref.max() - min(all_ref.min(), 0)) / 255  # uint8 step of the output
    assert np.abs(out - ref).max() <= 1.5 * output_scale


def c10_model():
    torch.manual_seed(10)
    dw = nn.Conv2d(32, 32, 3, padding=1, groups=32)
    with torch.no_grad():
        dw.weight.mul_(
            torch.tensor(10 ** (-3 * np.arange(32) / 31), dtype=torch.float32).view(32, 1, 1, 1)
        )
    return nn.Sequential(
        dw, nn.BatchNorm2d(32), nn.ReLU(), nn.Conv2d(32, 10, 1), nn.AdaptiveAvgPool2d(1)
    ).eval()


def test_c10_depthwise_weights_spanning_decades():
    model = c10_model()
    calib = [randn(1, 32, 16, 16, seed=s) for s in range(16)]
    dw_only = model[:1]  # per-channel SQNR is measured at the depthwise output
    x = randn(1, 32, 16, 16, seed=200)
    q = quantize_tiny(dw_only, calib)
    assert per_channel_sqnr(torch_out(dw_only, x), q.run("int8", x)).min() >= 30.0
    per_tensor = quantize_tiny(model, calib, per_channel=False).plans[0].weight.collapsed
    w = (
        model[0].weight.detach().numpy()
        * (model[1].weight / torch.sqrt(model[1].running_var + model[1].eps))
        .detach()
        .numpy()[:, None, None, None]
    )
    amax = np.abs(w).reshape(32, -1).max(1)
    assert per_tensor == np.flatnonzero(amax < 0.5 * amax.max() / 127).tolist() and per_tensor


def test_c13_real_efficientnet_lite0_zero_channels_get_usable_scales():
    from qbench.model import zoo
    from qbench.quantize.params import quantize_weight

    model = zoo.load_model("efficientnet_lite0").module
    w = model._blocks[0]._depthwise_conv.weight.detach().numpy()
    zero = np.flatnonzero(np.abs(w).reshape(len(w), -1).max(1) == 0)
    assert zero.size >= 1  # the fault is really in the shipped weights
    qw = quantize_weight(w, 0, per_channel=True)
    assert np.all(np.isfinite(qw.scale)) and np.all(qw.scale > 0)
    assert (
        np.all(qw.q[zero] == 0)
        and np.isfinite(qw.q.astype(np.float32) * qw.scale[:, None, None, None]).all()
    )
