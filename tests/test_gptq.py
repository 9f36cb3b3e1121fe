"""GPTQ weight rounding (qbench.quantize.gptq): hand-derived cases, output error against
nearest rounding recomputed in numpy, the input H against a numpy im2col, the INT8 graph
built from GPTQ plans, and the layers it reaches through module hooks (keyword calls, a
direct forward() call: C23)."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fieldcases import layer_run, run_report
from helpers import quantize_tiny, torch_out
from torch import nn

from qbench.core.errors import QBenchError
from qbench.quantize.fakequant import fake_layers, quantized
from qbench.quantize.gptq import conv_hessian, gptq_round, gptq_weights, linear_hessian
from qbench.quantize.rewrite import rewrite


def _round(w, scale, h, damp=0.0):
    rows = torch.tensor(w, dtype=torch.float64)[None]
    s = torch.tensor(scale, dtype=torch.float64)[None]
    return gptq_round(rows, s, torch.tensor(h, dtype=torch.float64)[None], damp)[0].numpy()


def test_two_correlated_inputs_hand_derived():
    """Weights (0.4, 0.4) on step 1, inputs with correlation 0.9: rounding w0 to 0 leaves an
    error of 0.4 that OBQ moves onto w1 as 0.4 * 0.9 = 0.36, so w1 = 0.76 rounds to 1.
    On the input (1, 1) the output is 0.8: nearest gives 0 (error 0.8), GPTQ 1 (error 0.2)."""
    q = _round([[0.4, 0.4]], [1.0], [[1.0, 0.9], [0.9, 1.0]])
    assert q.tolist() == [[0.0, 1.0]]


def test_one_input_is_nearest_rounding_with_clamp():
    q = _round([[0.26, -1.74, 300.0]], [0.5], np.diag([1.0, 4.0, 2.0]))
    assert q.tolist() == [[1.0, -3.0, 127.0]]  # uncorrelated inputs: nothing to move


def _obq(w, scale, h):
    """Optimal Brain Quantization (Frantar and Alistarh 2022) in numpy, row by row, with the
    inverse of H over the weights not yet rounded computed afresh at every step, in GPTQ's
    order (decreasing diagonal of H)."""
    q = np.zeros_like(w)
    order = np.argsort(-np.diag(h), kind="stable")
    for r in range(len(w)):
        row, left = w[r].astype(np.float64).copy(), list(order)
        while left:
            i, rest = left[0], left[1:]
            inv = np.linalg.inv(h[np.ix_(left, left)])
            q[r, i] = np.clip(np.round(row[i] / scale[r]), -127, 127)
            row[rest] -= (row[i] - q[r, i] * scale[r]) / inv[0, 0] * inv[0, 1:]
            left = rest
    return q


def test_blocked_gptq_is_optimal_brain_quantization():
    """Past one block of 128 columns, the lazy-batch updates still give OBQ's integers."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2000, 3)) @ rng.standard_normal((3, 150))
    x += 0.3 * rng.standard_normal((2000, 150))
    h = x.T @ x
    h += 0.01 * np.diag(h).mean() * np.eye(150)  # GPTQ's dampening, applied by hand
    w = rng.standard_normal((4, 150))
    scale = np.abs(w).max(axis=1) / 127
    got = _round(w, scale, h, damp=0.0)
    expected = _obq(w, scale, h)
    assert (got != expected).mean() < 0.01  # float32 against float64: a rare tie may differ
    assert (got != _nearest(w, scale)).mean() > 0.03  # and it is not nearest rounding


def _nearest(w, scale):
    return np.clip(np.round(w / scale[:, None]), -127, 127)


@pytest.mark.parametrize("seed", range(5))
def test_output_error_on_correlated_inputs_is_below_nearest_rounding(seed):
    """Output error sum ((W - s q) x)^2 over the inputs, recomputed in numpy: GPTQ's is at
    most half of nearest rounding's on smooth (strongly correlated) inputs."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((400, 1))
    x = base + 0.1 * rng.standard_normal((400, 12))  # 12 inputs, correlation about 0.99
    w = rng.standard_normal((6, 12))
    scale = np.abs(w).max(axis=1) / 127
    h = x.T @ x
    q = _round(w, scale, h, damp=0.01)

    def error(q):
        return (((w - scale[:, None] * q) @ x.T) ** 2).sum()

    assert np.abs(q).max() <= 127 and np.array_equal(q, np.round(q))
    assert error(q) < 0.5 * error(_nearest(w, scale))


def _im2col_h(x, k, stride, pad, dilation, groups):
    """sum p p^T per group over the patches of x (N, C, H, W), by explicit loops."""
    x = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[1]), (pad[2], pad[3])))
    n, c, hh, ww = x.shape
    span = [dilation * (kk - 1) + 1 for kk in k]
    cg = c // groups
    out = np.zeros((groups, cg * k[0] * k[1], cg * k[0] * k[1]))
    for i in range(0, hh - span[0] + 1, stride):
        for j in range(0, ww - span[1] + 1, stride):
            patch = x[:, :, i : i + span[0] : dilation, j : j + span[1] : dilation]
            for g in range(groups):
                p = patch[:, g * cg : (g + 1) * cg].reshape(n, -1)
                out[g] += p.T @ p
    return out


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize(
    "k,stride,padding,dilation,groups,explicit",
    [
        ((3, 3), 1, 1, 1, 1, (1, 1, 1, 1)),
        ((3, 3), 2, 0, 1, 4, (0, 0, 0, 0)),  # depthwise, stride 2
        ((2, 2), 1, "same", 1, 2, (0, 1, 0, 1)),  # odd total: the extra cell on the right
        ((3, 3), 1, "same", 2, 1, (2, 2, 2, 2)),
        ((1, 3), 1, "valid", 1, 1, (0, 0, 0, 0)),
    ],
)
def test_conv_hessian_matches_im2col(k, stride, padding, dilation, groups, explicit):
    x = np.random.default_rng(0).standard_normal((3, 4, 7, 6))
    h = conv_hessian(
        torch.from_numpy(x).float(), k, (stride,) * 2, padding, (dilation,) * 2, groups
    )
    expected = _im2col_h(x.astype(np.float32), k, stride, explicit, dilation, groups)
    np.testing.assert_allclose(h.numpy(), expected, rtol=1e-5, atol=1e-4)
    # the patches F.conv2d multiplies: for one output channel per group, the energy of its
    # output is w^T H w
    w = torch.randn(
        groups, 4 // groups, *k, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    )
    y = F.conv2d(torch.from_numpy(x), w, None, stride, padding, dilation, groups)
    energy = (y**2).sum(dim=(0, 2, 3)).numpy()
    flat = w.reshape(groups, -1).numpy()
    np.testing.assert_allclose(energy, np.einsum("gi,gij,gj->g", flat, h.numpy(), flat), rtol=1e-4)


def test_linear_hessian_sums_over_every_row():
    x = np.random.default_rng(0).standard_normal((2, 3, 5))
    h = linear_hessian(torch.from_numpy(x))
    flat = x.reshape(-1, 5)
    np.testing.assert_allclose(h[0].numpy(), flat.T @ flat, rtol=1e-5, atol=1e-5)


class _PadInForward(nn.Conv2d):
    """A conv that pads inside its forward, as efficientnet's "same" convs do."""

    def forward(self, x):
        return super().forward(F.pad(x, (1, 1, 1, 1)))


def _model():
    torch.manual_seed(0)
    return nn.Sequential(
        _PadInForward(3, 8, 3),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * 6 * 6, 4),
    ).eval()


def _smooth_images(n, seed):
    """Images whose neighbouring pixels are strongly correlated (upsampled noise)."""
    rng = np.random.default_rng(seed)
    coarse = torch.from_numpy(rng.standard_normal((n, 3, 3, 3)).astype(np.float32))
    return F.interpolate(coarse, size=(6, 6), mode="bilinear").numpy()


def _sqnr(ref, out):
    return 10 * np.log10((ref**2).sum() / ((ref - out) ** 2).sum())


def test_int8_graph_with_gptq_weights_beats_nearest_and_matches_fake_quantization():
    model, calib = _model(), _smooth_images(32, 0)
    q = quantize_tiny(model, [calib[:16], calib[16:]])  # a graph of batch 16
    fakes = fake_layers(model, q.layers, q.plans)
    plans, rounded = gptq_weights(model, fakes, q.layers, q.plans, torch.from_numpy(calib))
    assert rounded == 3 and all(
        not np.array_equal(a.weight.q, b.weight.q) for a, b in zip(plans, q.plans, strict=True)
    )
    x = _smooth_images(16, 1)  # unseen images
    ref = torch_out(model, x)
    nearest = q.run("int8", x)
    q.int8_mod = rewrite(q.fp32_mod, plans)
    rounded = q.run("int8", x)
    assert _sqnr(ref, rounded) > _sqnr(ref, nearest) + 1.0
    fakes = fake_layers(model, q.layers, plans)  # diagnosis sees the graph's weights
    with torch.no_grad(), quantized(model, fakes, {f.index for f in fakes}) as (run, _):
        simulated = run(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(simulated, rounded, atol=1e-3 * np.abs(ref).max())


class _ScaledWeight(nn.Linear):
    """A Linear that computes with a new tensor made from its weight (as weight norm does)."""

    def forward(self, x):
        return F.linear(x, self.weight * 1.0, self.bias)


def test_a_layer_never_called_with_its_weight_is_an_error():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), _ScaledWeight(3 * 6 * 6, 4)).eval()
    calib = _smooth_images(8, 0)
    q = quantize_tiny(model, [calib])
    fakes = fake_layers(model, q.layers, q.plans)
    with pytest.raises(QBenchError, match="GPTQ: .*never called with its weight: 1"):
        gptq_weights(model, fakes, q.layers, q.plans, torch.from_numpy(calib))


def test_a_layer_past_the_input_limit_keeps_nearest_rounding(monkeypatch):
    """The classifier (8 * 6 * 6 = 288 weights per output) past a limit of 100 keeps its
    nearest-rounded weight; the convs (27 and 9 weights per output) are rounded."""
    import qbench.quantize.gptq as gptq

    monkeypatch.setattr(gptq, "MAX_INPUTS", 100)
    model, calib = _model(), _smooth_images(16, 0)
    q = quantize_tiny(model, [calib])
    fakes = fake_layers(model, q.layers, q.plans)
    plans, rounded = gptq_weights(model, fakes, q.layers, q.plans, torch.from_numpy(calib))
    assert rounded == 2 and plans[2] is q.plans[2]
    assert not np.array_equal(plans[0].weight.q, q.plans[0].weight.q)


def test_a_layer_whose_hessian_overflows_keeps_nearest_rounding(caplog):
    """Inputs near 1e21 (a conv's weights scaled 1e21) overflow the classifier's float32
    Hessian (sums beyond 1e42): it keeps its nearest-rounded weight, with a warning naming it
    (GPTQ on an infinite H had given it garbage: weight SQNR 0.0004 dB, agreement 0 %);
    the convs before it, whose inputs stay finite, are rounded."""
    model, calib = _model(), _smooth_images(16, 0)
    with torch.no_grad():
        model[2].weight.mul_(1e21)  # the depthwise conv's output, the classifier's input
    q = quantize_tiny(model, [calib])
    fakes = fake_layers(model, q.layers, q.plans)
    with caplog.at_level("WARNING"):
        plans, rounded = gptq_weights(model, fakes, q.layers, q.plans, torch.from_numpy(calib))
    assert rounded == 2 and plans[2] is q.plans[2]
    assert any("Hessian overflows float32" in r.getMessage() for r in caplog.records)


class _Flipped(nn.Conv2d):
    """Computes with its weight flipped: swapping the weight tensor does not reach the conv."""

    def forward(self, x):
        return F.conv2d(x, self.weight.flip(2, 3), self.bias, self.stride, self.padding)


def test_modules_that_transform_their_weight_are_found():
    from qbench.quantize.fakequant import unused_weights

    model = nn.Sequential(nn.Conv2d(3, 4, 3), _Flipped(4, 4, 3), nn.Flatten(), nn.Linear(16, 2))
    assert unused_weights(model.eval(), ["0", "1", "3"], (2, 3, 6, 6)) == (["1"], [])


class _KeywordWeight(nn.Conv2d):
    def forward(self, x):
        return F.conv2d(x, weight=self.weight, bias=self.bias, padding=1)


def test_a_weight_passed_by_keyword_is_rounded():
    torch.manual_seed(0)
    model = nn.Sequential(_KeywordWeight(3, 4, 3), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
    calib = _smooth_images(8, 0)
    q = quantize_tiny(model.eval(), [calib])
    fakes = fake_layers(model, q.layers, q.plans)
    _, rounded = gptq_weights(model, fakes, q.layers, q.plans, torch.from_numpy(calib))
    assert rounded == 2


SQUEEZE_HEAD = """
import torch
from torch import nn


class Head(nn.Module):
    def forward(self, x):
        return x.squeeze().flatten(1)  # fails on a batch of one image


def build():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), Head(), nn.Linear(4, 3))
    return model.eval(), (3, 8, 8)
"""


def test_a_model_that_needs_more_than_one_image_is_checked_on_its_batch(tmp_path):
    from qbench.cli.main import main

    path = tmp_path / "squeeze.py"
    path.write_text(SQUEEZE_HEAD)
    args = ["run", "--model", f"{path}:build", "--data", "synthetic", "--calib-size", "4"]
    args += ["--eval-size", "4", "--batch-size", "4", "--repeat", "20"]
    main([*args, "--reports-dir", str(tmp_path / "r"), "--cache-dir", str(tmp_path / "c")])
    report = json.loads(next((tmp_path / "r").glob("*/report.json")).read_text())
    assert report["calibration"]["weight_rounding"] == "gptq (4 images, 2 of 2 layers)"


@pytest.mark.parametrize("name", ["linear_keyword", "both_keywords"])
def test_layers_called_with_keywords_get_gptq(tmp_path, capsys, layer_models, name):
    """C23: ``self.fc(input=y)`` (and a conv so called) is a plain call: the default run (GPTQ
    rounding) completes and rounds both layers by GPTQ (it had stopped with exit 3)."""
    code = layer_run(tmp_path, "--model", f"{layer_models}:{name}")
    assert code in (0, 1), capsys.readouterr().err
    rounding = run_report(tmp_path)["calibration"]["weight_rounding"]
    assert rounding.startswith("gptq") and "2 of 2 layers" in rounding


def test_a_direct_forward_call_keeps_nearest_rounding_naming_the_layer(
    tmp_path, capsys, layer_models
):
    """C23: ``self.fc.forward(y)`` skips module hooks, so fake quantization cannot quantize
    that layer: the run completes with nearest rounding and a warning naming ``fc`` and why."""
    code = layer_run(tmp_path, "--model", f"{layer_models}:direct_forward")
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    warning = [line for line in (out.out + out.err).splitlines() if "GPTQ" in line]
    assert any("layers fc:" in line and "without calling the module" in line for line in warning)
    assert run_report(tmp_path)["calibration"]["weight_rounding"].startswith("nearest")
