"""The network input's quantize, pack and pad as one kernel (``kernels/input_quantize``):
bit for bit against numpy, on any CPU."""

import numpy as np
import pytest

from qbench.compile.kernels.input_quantize import out_shape, quantize_pack_pad

LLVM = {"kind": "llvm"}


def _numpy(x, scale, zero_point, padding, block, dtype, offset):
    """Quantize (round half to even, clip to uint8), shift by ``offset``, pad the channels
    to a multiple of ``block`` and the sides by ``padding`` with the zero point, block."""
    n, c, h, w = x.shape
    top, left, bottom, right = padding
    q = np.clip(np.round(x / np.float32(scale)) + zero_point, 0, 255).astype(np.int32)
    chunks = -(-c // block)
    full = np.full((n, chunks * block, h + top + bottom, w + left + right), zero_point, np.int32)
    full[:, :c, top : top + h, left : left + w] = q
    full = full.reshape(n, chunks, block, *full.shape[2:]).transpose(0, 1, 3, 4, 2)
    return (full - offset).astype(dtype)


def _folded(blocked, fold):
    """(N, chunks, H, W, block) -> (N, chunks, H / fold, W / fold, fold * fold * block),
    pixel (y, x) at (y // fold, x // fold), channels ((y % fold) * fold + x % fold) * block
    + c: space-to-depth by numpy's reshape."""
    n, chunks, h, w, block = blocked.shape
    split = blocked.reshape(n, chunks, h // fold, fold, w // fold, fold, block)
    return split.transpose(0, 1, 2, 4, 3, 5, 6).reshape(n, chunks, h // fold, w // fold, -1)


def _run(x, scale, zero_point, padding, packed, fold=1):
    import tvm

    func = quantize_pack_pad(x.shape, scale, zero_point, padding, *packed, fold=fold)
    lib = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target(LLVM))
    shape = out_shape(x.shape, padding, packed[0], fold=fold)
    out = tvm.runtime.tensor(np.zeros(shape, packed[1]))
    lib["main"](tvm.runtime.tensor(x), out)
    return out.numpy()


@pytest.mark.parametrize(
    "channels, padding, packed",
    [
        (3, (3, 3, 3, 5), (4, "uint8", 0)),  # the AMX stem: 3 channels, extra columns right
        (5, (1, 2, 0, 1), (4, "uint8", 0)),  # two blocks, the second 1 channel + 3 padded
        (20, (0, 0, 0, 0), (16, "uint8", 0)),  # no padding at all
        (3, (1, 1, 1, 1), (2, "int16", 0)),  # AVX2's int16 pairs
        (3, (2, 1, 2, 1), (4, "int8", 128)),  # Arm's sdot: the values shifted into int8
    ],
)
def test_quantize_pack_pad_is_exact(channels, padding, packed):
    """Values on the rounding halves (x / 0.25 = k + 0.5 exactly), past both clip limits,
    and plain random ones, with scale 0.25 and 0.0187."""
    rng = np.random.default_rng(channels)
    halves = (rng.integers(-700, 700, (2, channels, 7, 9)) + 0.5) * 0.25
    for scale, x in ((0.25, halves), (0.0187, rng.standard_normal((2, channels, 7, 9)) * 3)):
        x = x.astype(np.float32)
        got = _run(x, np.float32(scale), 77, padding, packed)
        np.testing.assert_array_equal(got, _numpy(x, scale, 77, padding, *packed))


@pytest.mark.parametrize("padding", [(4, 4, 3, 3), (0, 2, 1, 1), (2, 0, 3, 1)])
def test_the_folded_input_is_exact(padding):
    """Space-to-depth by 2 of the padded NCHW4c tensor: an odd width (the last column in a
    half-filled folded pixel) and padded rows above, below and beside the input."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 3, 7, 9)) * 3).astype(np.float32)
    got = _run(x, np.float32(0.0187), 77, padding, (4, "uint8", 0), fold=2)
    expected = _folded(_numpy(x, 0.0187, 77, padding, 4, "uint8", 0), 2)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    "size, padding, block",
    [((1, 1), (0, 0, 0, 0), 4), ((1, 1), (0, 0, 0, 0), 1), ((5, 1), (1, 0, 2, 0), 16)],
)
def test_rows_of_one_pixel_are_exact(size, padding, block):
    """A 1x1 image unpadded (its channel plane one pixel), with a block of 1, and a column
    of 5 rows padded above and below: rows of one pixel take scalars, not vectors."""
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((2, 5, *size)) * 3).astype(np.float32)
    packed = (block, "uint8", 0)
    got = _run(x, np.float32(0.0187), 77, padding, packed)
    np.testing.assert_array_equal(got, _numpy(x, 0.0187, 77, padding, *packed))


def test_a_folded_int16_input_is_exact():
    """int16 pairs folded by 2: a pixel's folded row is 2 x 2 channels of 2 bytes, 8 bytes."""
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((2, 3, 7, 9)) * 3).astype(np.float32)
    packed, padding = (2, "int16", 0), (3, 3, 2, 2)
    got = _run(x, np.float32(0.0187), 77, padding, packed, fold=2)
    np.testing.assert_array_equal(got, _folded(_numpy(x, 0.0187, 77, padding, *packed), 2))


@pytest.mark.parametrize("padding, block", [((3, 3, 3, 3), 4), ((4, 4, 3, 3), 16)])
def test_a_fold_the_padded_sizes_or_the_block_do_not_allow_is_refused(padding, block):
    """7 + 6 = 13 rows do not fold by 2; 2 x 16 channels are more than 8 bytes a unit, and
    so are 2 x 4 int16 channels."""
    with pytest.raises(ValueError, match="fold 2"):
        quantize_pack_pad((1, 3, 7, 9), np.float32(0.1), 0, padding, block, fold=2)
    with pytest.raises(ValueError, match="block 4 of int16"):
        quantize_pack_pad((1, 3, 7, 9), np.float32(0.1), 0, (4, 4, 3, 3), 4, "int16", fold=2)


def test_halves_round_to_even_and_limits_clip():
    """By hand: scale 0.5, zero point 10: 0.25 / 0.5 = 0.5 -> 0 -> 10; 0.75 -> 1.5 -> 2 -> 12;
    -0.25 -> -0.5 -> -0 -> 10; 200 -> 400 -> 255; -200 -> 0; the padded channels 10."""
    x = np.array([0.25, 0.75, -0.25, 200.0, -200.0], np.float32).reshape(1, 1, 1, 5)
    got = _run(x, np.float32(0.5), 10, (0, 0, 0, 0), (4, "uint8", 0))
    np.testing.assert_array_equal(got[0, 0, 0, :, 0], [10, 12, 10, 255, 0])
    assert (got[..., 1:] == 10).all()


def test_an_unpadded_first_conv_takes_the_kernel_with_the_same_logits():
    """A first conv without padding (its input's zero point is not 0) reads the input
    through ``quantize_pack_pad`` too, and the logits equal TVM's own integer graph's."""
    import torch
    from helpers import LLVM as HOST
    from helpers import compiled, quantize_tiny, run_tvm

    from qbench.compile.kernels.select import select_kernels

    torch.manual_seed(2)
    net = torch.nn.Sequential(
        *(torch.nn.Conv2d(3, 16, 3, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1)),
        *(torch.nn.Flatten(), torch.nn.Linear(16, 5)),
    ).eval()
    rng = np.random.default_rng(2)
    q = quantize_tiny(net, [rng.standard_normal((2, 3, 13, 17)).astype(np.float32)])
    names = [gv.name_hint for gv in select_kernels(q.int8_mod, HOST).functions]
    assert "quantize_pack_pad" in names
    x = rng.standard_normal((2, 3, 13, 17)).astype(np.float32)
    plain = compiled(q.int8_mod, HOST, hand_kernels=False)
    np.testing.assert_array_equal(run_tvm(compiled(q.int8_mod, HOST), x), run_tvm(plain, x))


@pytest.mark.parametrize(
    "channels, kernel, stride, padding",
    [(3, 7, 2, 3), (1, 5, 1, 2), (3, 5, 2, 0)],  # resnet's stem, a grayscale one, unpadded
)
def test_a_stem_on_few_channels_reads_flat_rows_with_the_same_logits(
    channels, kernel, stride, padding
):
    """A first conv whose kernel rows take fewer groups as flat pixel rows (C * KW elements)
    than as NCHW[block]c (KW * ceil(C / block) groups; each case is flat for blocks of 4,
    the VNNI paths', and of 2, the AVX2 and AVX-512BW ones) reads ``quantize_pack_pad``'s
    flat rows (a 4-D tensor), and the logits equal TVM's own integer graph's. On an AMX
    host the VNNI path is built: the AMX kernel reads NCHW4c (a ``tdpbusd`` costs the same
    for the 24 bytes of a flat row as for 7 taps of 4)."""
    import torch
    from helpers import CPU, compiled, quantize_tiny, run_tvm
    from helpers import LLVM as HOST

    from qbench.compile.features import has_feature
    from qbench.compile.kernels.select import select_kernels

    # the VNNI path on an AMX host: its class without the host's own mattr (+amx-tile)
    target = {**CPU, "mcpu": "icelake-server"} if has_feature(HOST, "amx-tile") else HOST
    torch.manual_seed(channels)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(channels, 24, kernel, stride=stride, padding=padding),
        *(torch.nn.ReLU(), torch.nn.Conv2d(24, 16, 3, padding=1), torch.nn.ReLU()),
        *(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 5)),
    ).eval()
    rng = np.random.default_rng(channels)
    shape = (2, channels, 19, 23)
    q = quantize_tiny(net, [rng.standard_normal(shape).astype(np.float32)])
    mod = select_kernels(q.int8_mod, target)
    if "quantize_pack_pad" not in [gv.name_hint for gv in mod.functions]:
        pytest.skip("this CPU's INT8 path packs no input (no VNNI or AVX2 kernels)")
    bindings = [b for block in mod["main"].body.blocks for b in block.bindings]
    (written,) = [b.var for b in bindings if "quantize_pack_pad" in str(b.value)]
    assert len(written.ty.shape) == 4  # flat rows, not (N, C/4, H, W, 4)
    x = rng.standard_normal(shape).astype(np.float32)
    plain = compiled(q.int8_mod, HOST, hand_kernels=False)
    np.testing.assert_array_equal(run_tvm(compiled(q.int8_mod, target), x), run_tvm(plain, x))
