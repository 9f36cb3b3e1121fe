"""``--fit-pairs``: 8-bit weights whose pairs fit AVX2's int16 sums, so that every layer of an
AVX2 CPU runs on ``vpmaddubsw``, exact."""

import numpy as np
import pytest
import torch
from helpers import LLVM, compiled, exact_conv, packed_conv_module, quantize_tiny, run_tvm
from test_reduce_range import HASWELL, ZEN4, _Block, _needs_avx2

from qbench.compile.kernels.select import kernel_paths
from qbench.core.errors import UserError
from qbench.quantize import QuantConfig
from qbench.quantize.gptq import gptq_round, pair_partners
from qbench.quantize.pairs import fitting_steps, pairs_fit
from qbench.quantize.params import quantize_weight


@pytest.mark.parametrize(
    "pair, fits",
    [  # 255 x 128 = 32640 fits int16, 255 x 129 = 32895 does not
        ((127, 1), True),
        ((127, 2), False),
        ((-127, -1), True),
        ((-127, -2), False),
        ((127, -127), True),  # each sign's part alone: 127
        ((64, 64), True),
        ((65, 64), False),
    ],
)
def test_a_pair_fits_when_each_signs_part_is_at_most_128(pair, fits):
    conv = np.array(pair, np.int8).reshape(1, 2, 1, 1)  # (O, I, kH, kW): pairs along I
    dense = np.array(pair, np.int8).reshape(2, 1)  # (K, M): pairs along K
    assert pairs_fit(conv) == fits and pairs_fit(dense) == fits


def test_an_odd_last_channel_pairs_with_zero_and_pairs_lie_along_the_input_channels():
    assert pairs_fit(np.array([[[[1]], [[1]], [[127]]]], np.int8))  # channel 3 pairs with 0
    across = np.array([[[[100]]], [[[100]]]], np.int8)  # (2, 1, 1, 1): two output channels
    assert pairs_fit(across)


def test_the_finest_fitting_grid_per_channel_by_hand():
    """Rows (1, .4): q = (s, round(.4 s)); s = 92 gives 92 + 37 = 129, s = 91 gives 91 + 36
    = 127: 91 steps. (1, 1): 2 s <= 128: 64. (1, -1): each sign alone, 127 fits. (1, 1)
    under one per-tensor scale with (1, -1): 64 for both."""
    rows = np.array([[1.0, 0.4], [1.0, 1.0], [1.0, -1.0]]).reshape(3, 2, 1, 1)
    amax = np.ones(3)
    assert fitting_steps(rows, amax, 127, 63).tolist() == [91, 64, 127]
    assert fitting_steps(rows, amax, 127, 63, together=True).tolist() == [64, 64, 64]
    q = quantize_weight(rows.astype(np.float32), 0, per_channel=True, fit_pairs=True)
    assert q.scale.tolist() == pytest.approx([1 / 91, 1 / 64, 1 / 127])
    assert q.q.reshape(3, 2).tolist() == [[91, 36], [64, 64], [127, -127]]


def test_pair_partners_by_hand():
    """Columns ordered (channel, tap): channel 2j's tap t pairs with channel 2j + 1's."""
    assert pair_partners(5, 1).tolist() == [1, 0, 3, 2, -1]
    assert pair_partners(6, 2).tolist() == [2, 3, 0, 1, -1, -1]


def test_gptq_keeps_every_pair_fitting_and_its_error_between_8_and_7_bits():
    """Random normal weights (a pair past the limit in most channels) rounded by GPTQ on
    random inputs: every pair fits, and the output error (w - q s)^T H (w - q s) lies
    between unconstrained 8-bit weights' and 7-bit weights'."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    x = rng.standard_normal((500, 72))
    h = x.T @ x
    rows = torch.from_numpy(w.reshape(1, 16, 72))

    def error(weight, partner=None):
        scale = torch.from_numpy(weight.scale[None])
        q = gptq_round(rows, scale, torch.from_numpy(h)[None], qmax=weight.qmax, partner=partner)
        d = w.reshape(16, 72) - q[0].numpy() * weight.scale[:, None]
        return float(np.einsum("od,de,oe->", d, h, d)), q[0].numpy().reshape(w.shape)

    eight, q8 = error(quantize_weight(w, 0, True))
    fitted, qf = error(quantize_weight(w, 0, True, fit_pairs=True), pair_partners(72, 9))
    seven, _ = error(quantize_weight(w, 0, True, qmax=63))
    assert not pairs_fit(q8) and pairs_fit(qf)
    assert eight < fitted < seven


def test_fit_pairs_with_reduce_range_is_refused():
    with pytest.raises(UserError, match="--fit-pairs with --reduce-range"):
        QuantConfig(fit_pairs=True, reduce_range=True)


def test_the_definition_names_fit_pairs_only_when_set():
    """Runs stored before the option existed keep their definition digest: the field is
    left out at its default, and read back as it."""
    assert "fit_pairs" not in QuantConfig().to_dict()
    on = QuantConfig(fit_pairs=True)
    assert on.to_dict()["fit_pairs"] is True and QuantConfig.from_dict(on.to_dict()) == on
    assert QuantConfig.from_dict(QuantConfig().to_dict()) == QuantConfig()


@pytest.mark.parametrize("sign", [-1, 1])
def test_vpmaddubsw_kernel_is_exact_at_the_pair_limit_with_8_bit_weights(sign):
    """All 255 against pairs (127, 1) (or their negatives): each int16 pair sum is
    +-255 x 128 = +-32640; by hand 255 x 128 x 8 pairs x 9 taps per output."""
    _needs_avx2()
    x = np.full((1, 16, 5, 5), 255, np.uint8)
    w = np.tile(np.array([127, 1], np.int8), 8).reshape(1, 16, 1, 1) * sign
    w = np.broadcast_to(w, (16, 16, 3, 3)).astype(np.int8)
    module = packed_conv_module(x.shape, w, 0, (1, 1), (1, 1), "avx2_u8")
    got = run_tvm(compiled(module, HASWELL), x)
    assert got.flat[0] == sign * 255 * 128 * 8 * 9
    np.testing.assert_array_equal(got, exact_conv(x, w))


def _fitted(net, shape, seed, fit_pairs=True):
    calib = [np.random.default_rng(seed).standard_normal(shape).astype(np.float32)]
    return quantize_tiny(net, calib, fit_pairs=fit_pairs)


def test_fitted_pairs_take_the_vpmaddubsw_kernel_for_every_layer_with_the_same_logits():
    """PyTorch's uniform init puts a pair past the limit in most channels: with fitted
    pairs every layer takes ``avx2_u8`` on AVX2 (VNNI elsewhere), and the logits equal TVM's
    own integer graph's bit for bit."""
    torch.manual_seed(0)
    net = _Block().eval()
    q, unfitted = _fitted(net, (2, 3, 8, 8), 2), _fitted(net, (2, 3, 8, 8), 2, fit_pairs=False)
    assert all(pairs_fit(p.weight.q) for p in q.plans)
    assert not any(pairs_fit(p.weight.q) for p in unfitted.plans)
    assert kernel_paths(unfitted.int8_mod, HASWELL)["int8 conv2d avx2"] == 3
    assert kernel_paths(q.int8_mod, HASWELL) == {
        "int8 conv2d avx2_u8": 3,
        "int8 matmul avx2_u8": 1,
    }
    assert kernel_paths(q.int8_mod, ZEN4) == {"int8 conv2d vnni": 3, "int8 matmul vnni": 1}
    _needs_avx2()
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)
    plain = compiled(q.int8_mod, LLVM, hand_kernels=False)
    np.testing.assert_array_equal(run_tvm(compiled(q.int8_mod, HASWELL), x), run_tvm(plain, x))


def test_a_stem_whose_flat_row_pairs_would_saturate_reads_channel_blocks():
    """A 3-channel 7x7 stem read as flat pixel rows pairs channel 2 of one tap with channel
    0 of the next: weights +1, -1, +1 per channel fit as channel pairs (0, 1) but not as
    (2, 0) of flat rows, where inputs near 255 would saturate. The logits equal TVM's own
    integer graph's: the stem reads NCHW4c."""
    _needs_avx2()
    torch.manual_seed(1)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 7, stride=2, padding=3),
        *(torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()),
        torch.nn.Linear(8, 4),
    ).eval()
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([1.0, -1.0, 1.0])[None, :, None, None])
    q = _fitted(net, (2, 3, 19, 23), 4)
    assert kernel_paths(q.int8_mod, HASWELL)["int8 conv2d avx2_u8"] == 1
    x = 3 * np.abs(np.random.default_rng(5).standard_normal((2, 3, 19, 23))).astype(np.float32)
    plain = compiled(q.int8_mod, LLVM, hand_kernels=False)
    np.testing.assert_array_equal(run_tvm(compiled(q.int8_mod, HASWELL), x), run_tvm(plain, x))
