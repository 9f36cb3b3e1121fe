"""The INT8 rewrite on tiny seeded models, against PyTorch and against the simulated graph;
the layers it keeps in FP32 (an int32 accumulator that could overflow: C14)."""

import numpy as np
import pytest
import torch
from helpers import integer_gemm_kernels, quantize_tiny, randn, torch_out
from torch import nn

from qbench.quantize import QuantConfig
from qbench.quantize.plan import INT32_MAX, accumulator_bound, overflow_reason


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(4, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.a(x))
        return torch.relu(y + self.b(y))


class Concat(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = (
            nn.Conv2d(4, 4, 1),
            nn.Conv2d(4, 6, 3, padding=1),
            nn.Conv2d(10, 5, 1),
        )

    def forward(self, x):
        return self.c(torch.cat([torch.relu(self.a(x)), self.b(x)], dim=1))


def _models():
    torch.manual_seed(0)
    return {
        "conv": (
            nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3)),
            (4, 10, 10),
        ),
        "depthwise": (
            nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.ReLU6(), nn.Conv2d(8, 4, 1)),
            (8, 9, 9),
        ),
        "grouped_strided": (
            nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=4)),
            (8, 12, 12),
        ),
        "linear": (
            nn.Sequential(nn.Flatten(), nn.Linear(48, 32), nn.ReLU(), nn.Linear(32, 10)),
            (3, 4, 4),
        ),
        "residual": (Residual(), (4, 8, 8)),
        "concat": (Concat(), (4, 8, 8)),
        "pooling": (
            nn.Sequential(
                nn.Conv2d(3, 8, 3),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(8, 8, 1),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(8, 5),
            ),
            (3, 12, 12),
        ),
    }


MODELS = _models()


def _data(shape, n=4, batches=4, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, *shape)).astype(np.float32) for _ in range(batches)]


def _rel_err(a, ref):
    return np.abs(a - ref).max() / np.abs(ref).max()


@pytest.mark.parametrize("name", list(MODELS))
def test_int8_close_to_pytorch_and_simulation(name):
    module, shape = MODELS[name]
    calib = _data(shape)
    x = _data(shape, seed=99, batches=1)[0]
    ref = torch_out(module, x)
    q = quantize_tiny(module, calib)
    int8 = q.run("int8", x)
    assert all(p.quantized for p in q.plans)
    assert _rel_err(int8, ref) < 0.05  # 8-bit: about 1 % of the range per layer
    sim = quantize_tiny(module, calib, simulate=True)
    assert np.abs(sim.run("int8", x) - int8).max() <= 1e-3 * np.abs(ref).max()


def test_built_int8_module_computes_in_integers_and_simulation_does_not():
    module, shape = MODELS["linear"]
    calib = _data(shape)
    assert len(integer_gemm_kernels(quantize_tiny(module, calib).int8_mod)) == 2
    assert integer_gemm_kernels(quantize_tiny(module, calib, simulate=True).int8_mod) == []
    conv, cshape = MODELS["depthwise"]
    assert len(integer_gemm_kernels(quantize_tiny(conv, _data(cshape)).int8_mod)) == 2


def test_first_conv_quantized_by_default_kept_on_request_and_skip_by_name():
    module, shape = MODELS["conv"]
    q = quantize_tiny(module, _data(shape), QuantConfig(calib_mode="max"))
    assert [p.quantized for p in q.plans] == [True, True]
    q = quantize_tiny(module, _data(shape), QuantConfig(calib_mode="max", skip_first=True))
    assert [p.quantized for p in q.plans] == [False, True]
    assert "first conv" in q.plans[0].reason
    q = quantize_tiny(module, _data(shape), QuantConfig(calib_mode="max", skip_layers=("2",)))
    assert [p.quantized for p in q.plans] == [True, False]


def test_unknown_skip_layer_is_a_user_error():
    from qbench.core.errors import UserError

    module, shape = MODELS["conv"]
    with pytest.raises(UserError, match="no such layer"):
        quantize_tiny(module, _data(shape), QuantConfig(calib_mode="max", skip_layers=(7,)))


class _Fork(nn.Module):
    """One tensor read by two convs (resnet's block input feeds conv1 and the downsample)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.a = nn.Conv2d(8, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 8, 1)

    def forward(self, x):
        t = torch.relu(self.stem(x))
        return self.a(t) + self.b(t)


def test_layers_reading_one_tensor_share_its_quantize():
    from qbench.model import graph

    module = _Fork().eval()
    calib, x = _data((3, 8, 8)), _data((3, 8, 8), seed=7, batches=1)[0]
    q = quantize_tiny(module, calib)
    assert q.plans[1].act == q.plans[2].act  # the same tensor, so the same range
    # one quantize of the input; the shared tensor is requantized once, in integer from the
    # stem's accumulator (not once per reading layer); b's output, which the add reads as
    # a residual output (graph.ResidualOutput), once more
    counts = graph.op_counts(q.int8_mod)
    assert counts["relax.quantize"] == 1 and counts["relax.round"] == 2
    assert q.plans[2].output is not None and q.plans[1].output is None
    assert _rel_err(q.run("int8", x), torch_out(module, x)) < 0.05


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


def test_concatenated_branches_of_different_scales_are_not_clipped():
    """C08: cat of a branch in [0, 0.5] and one in [-8, 8]: neither is clipped by the other's
    scale (FP32-vs-INT8 cosine similarity above 0.99)."""
    model, x = TwoBranches().eval(), randn(1, 4, 8, 8)
    with torch.no_grad():
        a = torch.relu(model.a(torch.from_numpy(x)))
        b = model.b(torch.from_numpy(x))
    assert a.max() < 0.6 and b.abs().max() > 4  # the shape the case describes
    q = quantize_tiny(model, [randn(1, 4, 8, 8, seed=s) for s in range(8)] + [x])
    ref, out = torch_out(model, x).ravel(), q.run("int8", x).ravel()
    assert ref @ out / (np.linalg.norm(ref) * np.linalg.norm(out)) > 0.99


def test_squeeze_excitation_error_stays_within_output_scales():
    """C09 (b): a squeeze-and-excitation block (pool, 1x1 convs, Hardsigmoid, multiply with its
    input): INT8 error at most 1.5 output scales."""

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


def test_a_dot_product_that_could_overflow_int32_stays_fp32_and_matches():
    """C14: Linear(76800, 4) on white images, weights near +max: 255 x 127 x 76800 is past
    int32, so the layer stays FP32 saying why, and matches PyTorch."""
    torch.manual_seed(14)
    model = nn.Sequential(nn.Flatten(), nn.Linear(76800, 4)).eval()
    with torch.no_grad():
        model[1].weight.uniform_(0.95, 1.0)  # every weight near +max: q = 121..127
    white = np.full((1, 3, 160, 160), 2.2, np.float32)  # a white image after normalisation
    q = quantize_tiny(model, [white, white * 0.5])
    assert 255 * 127 * 76800 > INT32_MAX  # the case's arithmetic, by hand: 2.49e9
    assert not q.plans[0].quantized and "int32 accumulator could overflow" in q.plans[0].reason
    ref = torch_out(model, white)
    assert np.abs(q.run("int8", white) - ref).max() <= 1e-4 * np.abs(ref).max()


def test_the_accumulator_bound_is_255_times_the_channel_weight_sum():
    """C14: the int32 accumulator bound, by hand: 255 times a channel's sum of |w|; a column
    summing to INT32_MAX // 255 fits, one more does not."""
    conv = np.zeros((2, 4, 1, 1), np.int8)
    conv[1, :, 0, 0] = [127, -127, 127, -127]
    assert accumulator_bound(conv, 0) == 255 * 508
    # INT32_MAX // 255 = 8421504: a matmul column whose |w| sums to it fits, one more does not
    column = np.full((66312, 1), 127, np.int8)
    column[-1] = 8421504 - 127 * 66311
    assert accumulator_bound(column, -1) == 255 * 8421504 and overflow_reason(column, -1) == ""
    column[-1] += 1
    assert "2.15e+09" in overflow_reason(column, -1)
