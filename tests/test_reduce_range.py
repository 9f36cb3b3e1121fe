"""``--reduce-range``: 7-bit weights, and on AVX2 CPUs FBGEMM's ``vpmaddubsw`` kernel, exact."""

import numpy as np
import pytest
import torch
from helpers import LLVM, compiled, exact_conv, packed_conv_module, quantize_tiny, run_tvm

from qbench.compile import build
from qbench.compile.features import has_feature
from qbench.compile.kernels.select import kernel_paths, select_kernels
from qbench.quantize.gptq import gptq_round
from qbench.quantize.params import quantize_weight

# AVX2 code any AVX2 CPU runs, Intel or AMD (znver3 code holds AMD's SSE4A extrq)
HASWELL = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "haswell", "num-cores": 2}
ZEN4 = {**HASWELL, "mcpu": "znver4"}  # AVX-512 VNNI


def _needs_avx2():
    if LLVM["mtriple"].split("-")[0] != "x86_64" or not has_feature(LLVM, "avx2"):
        pytest.skip("this CPU has no AVX2: the vpmaddubsw kernel is compile-checked only")


def test_7_bit_weights_by_hand():
    """amax 0.64 over 63 steps: 0.63, -0.315 and 0.1 are 62.0, -31.0 and 9.8 steps."""
    w = np.array([[0.63, -0.315, 0.1, -0.64]], np.float32)
    q = quantize_weight(w, 0, per_channel=True, qmax=63)
    assert q.scale[0] == pytest.approx(0.64 / 63, rel=1e-6)
    assert q.q.tolist() == [[62, -31, 10, -63]] and q.qmax == 63


def test_gptq_keeps_7_bit_weights_in_range():
    """GPTQ moves rounding errors onto later columns, which may push them past the grid's
    end: they are clamped to [-63, 63], not to int8's [-127, 127]."""
    rng = np.random.default_rng(0)
    rows = torch.from_numpy(rng.standard_normal((1, 8, 32)).astype(np.float32))
    scale = torch.full((1, 8), float(rows.abs().max()) / 63 / 2)  # half the range fits
    q = gptq_round(rows, scale, torch.eye(32)[None], qmax=63)
    assert q.abs().max() == 63
    assert torch.equal(q, torch.round(q))


@pytest.mark.parametrize("weight", [-63, 63])
def test_vpmaddubsw_kernel_is_exact_at_the_int16_limit(weight):
    """All 255 against all +-63: each int16 pair sum is +-32130, the largest 7-bit weights
    allow (int16 ends at 32767); by hand 255 * w * 16 channels * 9 taps."""
    _needs_avx2()
    x = np.full((1, 16, 5, 5), 255, np.uint8)
    w = np.full((16, 16, 3, 3), weight, np.int8)
    module = packed_conv_module(x.shape, w, 0, (1, 1), (1, 1), "avx2_u8")
    got = run_tvm(compiled(module, HASWELL), x)
    assert got.flat[0] == 255 * weight * 16 * 9
    np.testing.assert_array_equal(got, exact_conv(x, w))


def test_vpmaddubsw_kernel_is_exact_on_random_operands():
    _needs_avx2()
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (2, 3, 15, 15)).astype(np.uint8)
    w = rng.integers(-63, 64, (20, 3, 3, 3)).astype(np.int8)
    module = packed_conv_module(x.shape, w, 7, (2, 2), (1, 1), "avx2_u8")
    np.testing.assert_array_equal(run_tvm(compiled(module, HASWELL), x), exact_conv(x, w, (2, 2)))


def test_vpmaddubsw_kernel_in_tiles_of_2_columns_by_32_channels_is_exact():
    """Rows of an even width and channels in pairs of 16 take tiles of 2 columns by 32
    channels (``YMM_PAIR_COLUMNS``): 8 output columns, 64 channels, both images."""
    from qbench.compile.kernels.conv2d import YMM_PAIR_COLUMNS

    _needs_avx2()
    assert YMM_PAIR_COLUMNS == 2
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (2, 8, 10, 10)).astype(np.uint8)
    w = rng.integers(-63, 64, (64, 8, 3, 3)).astype(np.int8)
    w[:, :, 0, 0] = 63  # every pair of the first tap at the int16 limit: 255 x 126
    module = packed_conv_module(x.shape, w, 5, (1, 1), (1, 1), "avx2_u8")
    np.testing.assert_array_equal(run_tvm(compiled(module, HASWELL), x), exact_conv(x, w))


class _Block(torch.nn.Module):
    """Three convs and a dense layer, uint8 between the convs."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 20, 3, padding=1)
        self.b = torch.nn.Conv2d(20, 20, 3, padding=1)
        self.c = torch.nn.Conv2d(20, 16, 1)
        self.fc = torch.nn.Linear(16 * 8 * 8, 10)

    def forward(self, x):
        x = torch.relu(self.c(torch.relu(self.b(torch.relu(self.a(x))))))
        return self.fc(x.flatten(1))


def _quantized(reduce_range):
    calib = [np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype(np.float32)]
    return quantize_tiny(_Block().eval(), calib, reduce_range=reduce_range)


def test_avx2_cpus_take_the_vpmaddubsw_kernel_for_7_bit_weights_only():
    q7, q8 = _quantized(True), _quantized(False)
    assert max(int(np.abs(p.weight.q).max()) for p in q7.plans) == 63
    assert kernel_paths(q7.int8_mod, HASWELL) == {
        "int8 conv2d avx2_u8": 3,
        "int8 matmul avx2_u8": 1,
    }
    assert kernel_paths(q8.int8_mod, HASWELL) == {"int8 conv2d avx2": 3, "int8 matmul avx2": 1}
    assert kernel_paths(q7.int8_mod, ZEN4) == {"int8 conv2d vnni": 3, "int8 matmul vnni": 1}


def test_7_bit_graph_on_vpmaddubsw_equals_plain_integer_graph():
    """Bit-identical logits to TVM's own integer ops; uint8 NCHW16c flows between the convs
    (one pack, of the model input), and the assembly holds vpmaddubsw, no AVX-512."""
    _needs_avx2()
    q = _quantized(True)
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)
    kernels = [gv.name_hint for gv in select_kernels(q.int8_mod, HASWELL).functions]
    packs = [name for name in kernels if "pack_nchw4c" in name or "quantize_pack" in name]
    assert packs == ["quantize_pack_pad"]  # the input's, fused with its quantize
    executable = compiled(q.int8_mod, HASWELL)
    assembly = build.assembly(executable)
    assert assembly.count("vpmaddubsw") > 0 and "zmm" not in assembly
    plain = compiled(q.int8_mod, LLVM, hand_kernels=False)
    np.testing.assert_array_equal(run_tvm(executable, x), run_tvm(plain, x))


@pytest.mark.parametrize("mcpu, warned", [("x86-64", True), ("haswell", False)])
def test_reduce_range_elsewhere_than_avx2_is_warned_and_named_in_the_report(
    tmp_path, capsys, mcpu, warned
):
    """Where the INT8 kernel is not the AVX2 one (here SSE2, no fast path), 7-bit weights
    buy no speed: the console says so; on an AVX2 CPU it does not. The report names the
    7-bit weights, per layer too."""
    import json

    from qbench.cli.main import main

    _needs_avx2()
    (tmp_path / "m.py").write_text(
        "from torch import nn\n"
        "def build():\n"
        "    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),\n"
        "                         nn.Linear(8, 4)).eval(), (3, 12, 12)\n"
    )
    args = ["run", "--model", f"{tmp_path / 'm.py'}:build", "--data", "synthetic"]
    args += ["--target", json.dumps({**HASWELL, "mcpu": mcpu}), "--reduce-range"]
    args += ["--calib-size", "2", "--eval-size", "2", "--weight-rounding", "nearest"]
    args += ["--cache-dir", str(tmp_path / "c"), "--reports-dir", str(tmp_path / "r")]
    assert main(args) in (0, 1)
    _, err = capsys.readouterr()
    assert ("WARNING: --reduce-range on a CPU of class no INT8 fast path" in err) == warned
    (folder,) = (tmp_path / "r").iterdir()
    report = json.loads((folder / "report.json").read_text())
    words = "int8 of 7-bit values ([-63, 63], --reduce-range)"
    assert words in report["precision"]["integer_ops"]
    dtypes = [layer["dtype"] for layer in report["layers"]]
    assert len(dtypes) == 2 and all(words in dtype for dtype in dtypes)
