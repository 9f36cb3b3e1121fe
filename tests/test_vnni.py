"""The VNNI path: intrinsic fix, weight packing, packed conv/dense exactness, assembly."""

import functools

import numpy as np
import pytest
import torch
from helpers import CPU, LLVM, compiled, exact_conv, packed_conv_module, quantize_tiny, run_tvm

from qbench.compile import build, features, lowering, tuning
from qbench.compile.features import has_feature
from qbench.compile.kernels import layout
from qbench.compile.kernels.conv2d import register_block
from qbench.compile.kernels.intrin import (
    _passes_word_operands,
    ensure_vnni_intrin,
    needs_fix,
    register_x86_intrinsics,
)
from qbench.compile.kernels.select import KERNEL_PATHS, kernel_paths, select_kernels


def test_stock_intrinsic_detected_and_replaced():
    import sys

    register_x86_intrinsics()  # TVM's x86 module alone, not every target's intrinsics
    x86 = sys.modules["tvm.s_tir.tensor_intrin.x86"]
    # TVM 0.27's own implementation passes the weight bytes as <16 x i32>.
    assert _passes_word_operands(x86.dot_product_16x4_u8i8i32_vnni)
    ensure_vnni_intrin()
    assert not needs_fix()


def test_conv_weight_packing_indices():
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (20, 6, 3, 2)).astype(np.int8)
    packed = layout.pack_conv_weight(w)
    assert packed.shape == (2, 2, 3, 2, 16, 4)
    for o, c, kh, kw in np.ndindex(w.shape):
        assert packed[o // 16, c // 4, kh, kw, o % 16, c % 4] == w[o, c, kh, kw]
    # padding lanes (o >= 20 or c >= 6) hold zeros
    assert not packed[1, :, :, :, 4:].any() and not packed[:, 1, :, :, :, 2:].any()


def test_register_block():
    assert [register_block(w) for w in (56, 28, 14, 7, 13, 1, 112)] == [14, 14, 14, 7, 13, 1, 14]
    # AVX2's limit of 6: divisors up to 6, or up to 8 where those leave fewer than 4 columns
    assert [register_block(w, 6) for w in (56, 28, 14, 7, 13, 1)] == [4, 4, 7, 7, 1, 1]


AARCH64 = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "num-cores": 2}
# per INT8 kernel path: the LLVM feature it needs, its instruction, a CPU of that class
PATHS = {
    "vnni": ("avx512vnni", "vpdpbusd", {**CPU, "mcpu": "znver5"}),
    "avxvnni": ("avxvnni", "{vex}\tvpdpbusd", {**CPU, "mcpu": "alderlake"}),
    "avx512bw": ("avx512bw", "vpmaddwd\t%zmm", {**CPU, "mcpu": "skylake-avx512"}),
    "avx2": ("avx2", "vpmaddwd\t%ymm", {**CPU, "mcpu": "haswell"}),
    "neon_dot": ("dotprod", "sdot\tv", {**AARCH64, "mcpu": "neoverse-n1"}),
}


def _class_target(path):
    """An llvm target of ``path``'s CPU class, whatever the host is (for compile checks)."""
    return PATHS[path][2]


def _runs_here(path):
    feature = PATHS[path][0]
    if LLVM["mtriple"].split("-")[0] != _class_target(path)["mtriple"].split("-")[0]:
        pytest.skip(f"{path} kernels are for another architecture: compile-checked only")
    if not has_feature(LLVM, feature) and features.host_lacks([feature]) != []:
        # by the CPU's own flags: LLVM's model of an Intel Xeon VM with AMX (rocketlake)
        # lacks the AVX-VNNI that its flags list
        pytest.skip(f"this CPU has no {feature}: {path} kernels are compile-checked only")


def _run_target(path):
    """A target of ``path``'s CPU class that this host can run: the host itself when it is of
    that class, else the class's CPU when the host has every feature of it (a Zen 4 has
    AVX-512 VNNI but not Zen 5's AVX-VNNI, so code for znver5 would die of SIGILL here)."""
    import tvm

    from qbench.compile.kernels.select import cpu_class
    from qbench.compile.targets import Llvm

    _runs_here(path)
    target = _class_target(path)
    if cpu_class(LLVM) == cpu_class(target):
        return LLVM
    missing = Llvm._missing_features(tvm.target.Target(target))
    if missing:
        pytest.skip(
            f"this CPU lacks {', '.join(missing)} of mcpu {target['mcpu']}: compile-checked"
        )
    return target


CONV_SHAPES = [  # (c, o, hw, k, strides, dilation)
    (5, 64, 17, 3, (2, 2), (1, 1)),  # 8 columns, 64 channels: the 256-bit paths' 2 x 32 tiles
    (3, 20, 15, 3, (2, 2), (1, 1)),
    (16, 32, 13, 3, (1, 1), (2, 2)),
    (8, 32, 7, 1, (1, 1), (1, 1)),  # 7 columns, 32 channels: the VNNI path's 7 x 32 tiles
    (3, 64, 21, 7, (2, 2), (1, 1)),  # a stem: 7x7 taps, paired 16-channel tiles
]


def _host_path():
    """The INT8 conv path of ``PATHS`` this host's own runs take (None: none of them)."""
    from qbench.compile.kernels.select import int8_gemm_kernels

    return next((k.path for k in int8_gemm_kernels(LLVM) if k.path in PATHS), None)


def _conv_grid():
    """The path x shape grid: in the default suite every path on the first shape and every
    shape on the host's own path; the rest of the grid is marked slow."""
    host = _host_path()
    return [
        pytest.param(
            path, *shape, marks=() if i == 0 or path == host else pytest.mark.slow, id=f"{path}-{i}"
        )
        for path in PATHS
        for i, shape in enumerate(CONV_SHAPES)
    ]


@pytest.mark.parametrize("path,c,o,hw,k,strides,dilation", _conv_grid())
def test_packed_conv_is_exact(path, c, o, hw, k, strides, dilation):
    _runs_here(path)
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (2, c, hw, hw)).astype(np.uint8)
    w = rng.integers(-128, 128, (o, c, k, k)).astype(np.int8)
    module = packed_conv_module(x.shape, w, 7, strides, dilation, path)
    got = run_tvm(compiled(module, LLVM), x)
    np.testing.assert_array_equal(got, exact_conv(x, w, strides, dilation))


FLAT_SHAPES = [  # (c, kw, stride, width): flat pixel rows, groups of 4 elements (2 on avx2)
    (3, 7, 2, 21),  # resnet's stem: 21 bytes a row in 6 groups of 4
    (1, 5, 1, 13),  # a grayscale input, stride 1: 5 bytes in 2 groups
    (2, 3, 2, 9),  # 6 bytes in 2 groups, the last output reading 2 bytes past the row
]


def _flat_rows(x_padded, kw, stride, block):
    """(N, C, H, W) -> (N, 1, H, W' * C): each pixel's channels side by side, with zero
    pixels right so the last output's groups stay in the row (``emit_int8._flat_input``)."""
    n, c, h, w = x_padded.shape
    out_w = (w - kw) // stride + 1
    groups = -(-kw * c // block)
    extra = -(-max(0, (out_w - 1) * stride * c + groups * block - w * c) // c)
    wide = np.zeros((n, c, h, w + extra), x_padded.dtype)
    wide[..., :w] = x_padded
    return np.ascontiguousarray(wide.transpose(0, 2, 3, 1)).reshape(n, 1, h, -1)


@pytest.mark.parametrize("path", ["vnni", "avxvnni", "avx512bw", "avx2"])
@pytest.mark.parametrize("c,kw,stride,width", FLAT_SHAPES)
def test_flat_row_conv_is_exact(path, c, kw, stride, width):
    """The conv over flat pixel rows (``conv2d.blocked_conv``, ``layout.pack_flat_weight``)
    equals PyTorch's float64 conv of the same integers; worst-case operands in one image
    (all 255 against weights of -128 in the first output channel)."""
    target = _run_target(path)
    packing = layout.PACKINGS[path]
    rng = np.random.default_rng(c)
    x = rng.integers(0, 256, (2, c, 11, width)).astype(np.uint8)
    w = rng.integers(-128, 128, (32, c, kw, kw)).astype(np.int8)
    x[1], w[0] = 255, -128
    flat = _flat_rows(x, kw, stride, packing.block).astype(packing.data_dtype)
    module = packed_conv_module(flat.shape, w, 0, (stride, stride), (1, 1), path, flat=True)
    got = run_tvm(compiled(module, target), flat)
    want = exact_conv(x, w, (stride, stride))
    assert want[1, 0].min() == 255 * -128 * c * kw * kw  # by hand
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("weight", [-128, 127])
def test_worst_case_operands_are_exact(path, weight):
    """All 255 against all -128 (or +127): every product and pair sum at its extreme, where
    ``vpmaddubsw``'s int16 pair sums would saturate (255 * -128 * 2 = -65280)."""
    _runs_here(path)
    x = np.full((1, 16, 5, 5), 255, np.uint8)
    w = np.full((16, 16, 3, 3), weight, np.int8)
    got = run_tvm(compiled(packed_conv_module(x.shape, w, 0, (1, 1), (1, 1), path), LLVM), x)
    assert got.flat[0] == 255 * weight * 16 * 9  # by hand: 144 products per output
    np.testing.assert_array_equal(got, exact_conv(x, w))


@pytest.mark.parametrize("path", list(PATHS))
def test_every_path_compiles_to_its_instruction(path):
    """Checked on any host: the kernel is compiled for a CPU of the path's class and its
    assembly must hold the path's instruction (a tensorize that LLVM rejected would leave
    scalar code)."""
    w = np.ones((16, 8, 3, 3), np.int8)
    module = packed_conv_module((1, 8, 9, 9), w, 0, (1, 1), (1, 1), path)
    assembly = build.assembly(compiled(module, _class_target(path)))
    assert assembly.count(PATHS[path][1]) >= 4


@functools.cache
def _tiny_int8_graph():
    """A quantized net with every INT8 layer kind: convs, depthwise (stride 2, dilated),
    dense. Returns (``helpers.Quantized``, an input); quantized once per session (read it,
    never change it)."""
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 24, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(24, 24, 5, stride=2, padding=2, groups=24),  # depthwise, stride 2
        torch.nn.Conv2d(24, 20, 3, padding=1),
        torch.nn.ReLU6(),
        torch.nn.Conv2d(20, 20, 3, padding=2, dilation=2, groups=20),  # depthwise, dilated
        torch.nn.Flatten(),
        torch.nn.Linear(20 * 8 * 8, 10),
    )
    calib = [np.random.default_rng(2).standard_normal((2, 3, 16, 16)).astype(np.float32)]
    x = np.random.default_rng(3).standard_normal((2, 3, 16, 16)).astype(np.float32)
    return quantize_tiny(net, calib), x


@pytest.mark.parametrize("path", list(PATHS))
def test_every_path_compiles_a_whole_int8_graph(path):
    """On any host: the graph's convs and dense layer take ``path`` on its CPU class, and the
    compiled graph holds the path's instruction."""
    q, _ = _tiny_int8_graph()
    target = _class_target(path)
    int8 = {"int8 conv2d depthwise": 2, f"int8 conv2d {path}": 2, f"int8 matmul {path}": 1}
    assert kernel_paths(q.int8_mod, target) == int8
    assert build.assembly(compiled(q.int8_mod, target)).count(PATHS[path][1]) > 0


@pytest.mark.parametrize("path", list(PATHS))
def test_cpu_kernels_graph_matches_plain_integer_graph(path):
    """Each path's conv/dense kernels and the depthwise kernel give bit-identical logits to
    TVM's own integer conv2d/matmul."""
    target = _run_target(path)
    q, x = _tiny_int8_graph()
    selected = select_kernels(q.int8_mod, target)
    kernels = [gv.name_hint for gv in selected.functions]
    assert sum(name.startswith("depthwise_conv2d") for name in kernels) == 2
    # both convs end in ReLU/ReLU6 then the next quantize: uint8 NCHW16c kernels; so does the
    # first depthwise (bias, quantize); the dilated one feeds a flatten and stays FP32
    assert sum(name.startswith("conv2d_packed_u8") for name in kernels) == 2
    assert sum(name.startswith("depthwise_conv2d_u8") for name in kernels) == 1
    int8 = {"int8 conv2d depthwise": 2, f"int8 conv2d {path}": 2, f"int8 matmul {path}": 1}
    assert {k: int(v) for k, v in selected.attrs[KERNEL_PATHS].items()} == int8
    assert kernel_paths(q.int8_mod, target) == int8
    executable = compiled(q.int8_mod, target)
    assert build.assembly(executable).count(PATHS[path][1]) > 0
    plain = compiled(q.int8_mod, LLVM, hand_kernels=False)  # TVM's own integer ops
    np.testing.assert_array_equal(run_tvm(executable, x), run_tvm(plain, x))


def test_cpu_without_a_fast_path_is_said_on_the_console(tmp_path, capsys):
    import json

    from qbench.cli.main import main

    (tmp_path / "m.py").write_text(
        "from torch import nn\n"
        "def build():\n"
        "    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),\n"
        "                         nn.Linear(8, 4)).eval(), (3, 12, 12)\n"
    )
    baseline = {**CPU, "mcpu": "x86-64"}  # SSE2 only: no AVX2, no VNNI
    args = ["run", "--model", f"{tmp_path / 'm.py'}:build", "--data", "synthetic"]
    args += ["--target", json.dumps(baseline), "--calib-size", "2", "--eval-size", "2"]
    args += ["--cache-dir", str(tmp_path / "c"), "--reports-dir", str(tmp_path / "r")]
    assert main(args) in (0, 1)
    out, err = capsys.readouterr()
    assert "(mcpu x86-64) has no INT8 fast path in qbench" in err
    assert "CPU class no INT8 fast path; INT8 layers by kernel: conv2d default 1" in out
    (folder,) = (tmp_path / "r").iterdir()
    report = json.loads((folder / "report.json").read_text())
    assert report["int8_kernels"]["paths"] == {"conv2d default": 1, "matmul default": 1}


@pytest.mark.parametrize(
    "target, path, cpu_class",
    [
        ({**CPU, "mcpu": "znver5"}, "vnni", "AVX-512 VNNI"),  # AMD Zen 5
        ({**CPU, "mcpu": "znver4"}, "vnni", "AVX-512 VNNI"),
        ({**CPU, "mcpu": "icelake-server"}, "vnni", "AVX-512 VNNI"),
        ({**CPU, "mcpu": "sapphirerapids"}, "vnni", "AMX"),  # convs on AMX, dense on VNNI
        ({**CPU, "mcpu": "alderlake"}, "avxvnni", "AVX-VNNI"),  # Intel client, no AVX-512
        ({**CPU, "mcpu": "skylake-avx512"}, "avx512bw", "AVX-512BW"),  # no VNNI
        ({**CPU, "mcpu": "znver3"}, "avx2", "AVX2"),
        ({**CPU, "mcpu": "haswell"}, "avx2", "AVX2"),
        ({**CPU, "mcpu": "x86-64"}, None, "no INT8 fast path"),  # SSE2 only, said so
        ({**AARCH64, "mcpu": "neoverse-n1"}, "neon_dot", "Arm dot product"),  # Graviton 2
        ({**AARCH64, "mcpu": "apple-m1"}, "neon_dot", "Arm dot product"),
        ({**AARCH64, "mcpu": "cortex-a53"}, None, "no INT8 fast path"),  # no dot product
    ],
)
def test_each_cpu_class_selects_a_path_that_compiles_to_its_instruction(target, path, cpu_class):
    from qbench.compile.kernels import select

    assert select.cpu_class(target) == cpu_class
    if path:
        w = np.ones((16, 8, 3, 3), np.int8)
        module = packed_conv_module((1, 8, 9, 9), w, 0, (1, 1), (1, 1), path)
        assert build.assembly(compiled(module, target)).count(PATHS[path][1]) >= 4


class _InvertedResidual(torch.nn.Module):
    """MobileNetV2's block: 1x1 expand, depthwise 3x3, 1x1 project, residual add."""

    def __init__(self, c):
        super().__init__()
        self.expand = torch.nn.Conv2d(c, 4 * c, 1)
        self.dw = torch.nn.Conv2d(4 * c, 4 * c, 3, padding=1, groups=4 * c)
        self.project = torch.nn.Conv2d(4 * c, c, 1)

    def forward(self, x):
        y = torch.nn.functional.relu6(self.dw(torch.nn.functional.relu6(self.expand(x))))
        return x + self.project(y)


def test_residual_blocks_keep_every_layer_on_a_hand_kernel():
    """FuseOps may put the residual branch's elementwise ops before the next block's conv in
    one kernel; the conv must still get its hand schedule (it had fallen to the default
    schedule: 4x slower on mobilenet_v2's blocks)."""
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        _InvertedResidual(16),
        _InvertedResidual(16),
        _InvertedResidual(16),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 10),
    )
    calib = [np.random.default_rng(5).standard_normal((2, 3, 12, 12)).astype(np.float32)]
    q = quantize_tiny(net, calib)
    hand_ops = ("conv2d_packed", "conv2d_nchwc_fp32", "depthwise_conv2d", "quantize_pack_pad")
    for mod in (q.fp32_mod, q.int8_mod):
        lowered = tuning.apply(mod, _class_target("avx2"), [])
        with_hand_op = {n for n in lowering.kernels(lowered) if any(op in n for op in hand_ops)}
        assert len(with_hand_op) >= 5  # identical blocks share kernels
        assert int(lowered.attrs[lowering.SCHEDULE_COUNTS]["hand"]) == len(with_hand_op)
    # the residual adds: every block adds its input's uint8 in the project conv's integer
    # requantize (uint8 kernels), the last one too: its output feeds the global average
    # pool, which runs in integer on its own calibrated uint8 grid
    assert sum(n.startswith("conv2d_packed_u8") for n in with_hand_op) >= 3
    assert not any("dequantize" in n for n in with_hand_op)
    # quantized from FP32: the model input alone
    assert q.int8_mod["main"].script().count("R.quantize(") == 1


@functools.cache
def _residual_int8_graph():
    """Two inverted residual blocks, quantized once per session: (``helpers.Quantized``, an
    input)."""
    torch.manual_seed(6)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 24, 3, padding=1),
        _InvertedResidual(24),
        _InvertedResidual(24),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(24, 10),
    )
    rng = np.random.default_rng(6)
    q = quantize_tiny(net, [rng.standard_normal((2, 3, 12, 12)).astype(np.float32)])
    return q, rng.standard_normal((2, 3, 12, 12)).astype(np.float32)


@pytest.mark.parametrize("path", list(PATHS))
def test_residual_blocks_on_kernels_match_plain_integer_graph(path):
    """The residual inputs the uint8 kernels add (as NCHW16c from the kernel before, or
    packed) give the plain integer graph's logits bit for bit."""
    target = _run_target(path)
    q, x = _residual_int8_graph()
    executable = compiled(q.int8_mod, target)
    plain = compiled(q.int8_mod, LLVM, hand_kernels=False)
    np.testing.assert_array_equal(run_tvm(executable, x), run_tvm(plain, x))
