"""The AMX path: host features read from the CPU, the tile program (emulated on any CPU, on
tiles where the host has them), bit for bit against numpy, and whole graphs equal to the
VNNI path's."""

import dataclasses
import json

import numpy as np
import pytest
import torch
from helpers import (
    CPU,
    LLVM,
    SAPPHIRE_RAPIDS,
    bordered_blocks,
    compiled,
    exact_conv,
    pads,
    quantize_tiny,
    requantized_numpy,
    run_tvm,
    tiny_convnet,
)

from qbench.compile import build, features, targets
from qbench.compile.kernels import amx
from qbench.compile.kernels.select import cpu_class, kernel_paths
from qbench.core.errors import UserError

# /proc/cpuinfo flags of the Intel Xeon VM (CPUID family 6 model 167) that LLVM calls
# rocketlake, a model without clwb or AMX
XEON_AMX_FLAGS = frozenset(
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
    "sse sse2 ss ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology "
    "nonstop_tsc cpuid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic "
    "movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm abm "
    "3dnowprefetch cpuid_fault fsgsbase tsc_adjust bmi1 hle avx2 smep bmi2 erms invpcid rtm "
    "avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw "
    "avx512vl xsaveopt xsavec xgetbv1 xsaves avx_vnni avx512_bf16 arat avx512vbmi umip "
    "avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid "
    "cldemote movdiri movdir64b fsrm serialize tsxldtrk amx_bf16 avx512_fp16 amx_tile "
    "amx_int8 arch_capabilities".split()
)


def _needs_amx():
    if not features.amx_ready():
        pytest.skip("this CPU has no AMX tiles (or may not use them): emulated tiles only")


@pytest.fixture
def xeon_amx(monkeypatch):
    """This process as if on the Intel Xeon VM with AMX granted."""
    monkeypatch.setattr(features, "host_flags", lambda: XEON_AMX_FLAGS)
    monkeypatch.setattr(features, "amx_ready", lambda: True)
    monkeypatch.setattr(targets, "amx_ready", lambda: True)


def test_cpuinfo_flags_map_to_llvm_feature_names():
    have = features.llvm_features_of_flags({"pni", "lm", "sse4_2", "avx512_vnni", "amx_int8"})
    assert {"sse3", "64bit", "sse42", "crc32", "avx512vnni", "amxint8"} <= have


@pytest.mark.parametrize(
    "mcpu, missing",
    [
        ("skylake-avx512", []),  # refused as 'lacks clwb' when read from LLVM's rocketlake
        ("sapphirerapids", []),
        ("znver3", ["sse4a"]),  # LLVM emits SSE4A's extrq; clzero, mwaitx it never does
        ("znver5", ["avx512vp2intersect", "sse4a"]),
        ("graniterapids", ["amx-fp16"]),
    ],
)
def test_missing_features_are_read_from_the_cpu(xeon_amx, mcpu, missing):
    import tvm

    target = tvm.target.Target({**CPU, "mtriple": "x86_64-linux-gnu", "mcpu": mcpu})
    assert targets.Llvm._missing_features(target) == missing


def test_an_amd_target_on_an_intel_cpu_is_refused_naming_sse4a_and_the_way_out(xeon_amx):
    """Code for mcpu znver3 holds SSE4A's extrq (LLVM's byte shuffles), which an Intel CPU
    lacks: refused before any build, with the mattr that leaves it out (it had died of
    SIGILL in the evaluation); with that mattr the target is taken."""
    zen3 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver3"}
    with pytest.raises(UserError, match=r'lacks sse4a, .*"mattr": \["-sse4a"\]'):
        targets.parse_target(json.dumps(zen3), 2)
    assert targets.parse_target(json.dumps({**zen3, "mattr": ["-sse4a"]}), 2)


def test_a_refused_tile_permission_refuses_amx_targets_before_any_build(xeon_amx, monkeypatch):
    monkeypatch.setattr(features, "amx_ready", lambda: False)
    monkeypatch.setattr(targets, "amx_ready", lambda: False)
    assert features.host_lacks(["amx-int8", "avx512vnni"]) == ["amx-int8"]
    with pytest.raises(UserError, match="lacks amx-bf16, amx-int8, amx-tile"):
        targets.parse_target(json.dumps(SAPPHIRE_RAPIDS), 2)
    assert "mattr" not in targets.Llvm.host(2)  # the VNNI path


def test_the_host_target_carries_amx_when_granted(xeon_amx):
    """Where LLVM's model of the host's mcpu has no AMX (rocketlake, znver4, ...) the host
    target adds it; an emeraldrapids host has it already."""
    import tvm
    from tvm.target import codegen

    host = targets.Llvm.host(2)
    plain = {key: value for key, value in host.items() if key != "mattr"}
    modelled = codegen.llvm_get_cpu_features(tvm.target.Target(plain))
    assert ("mattr" in host) == ("amx-int8" not in modelled)
    assert cpu_class(host) == "AMX"


def test_weight_packing_indices():
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (20, 20, 3, 5)).astype(np.int8)
    p = amx.plan((1, 2, 9, 9, 16), 20, (3, 5), (1, 1), (1, 1))
    assert (p.taps, p.groups, p.k_bytes) == (3, 2, 48)  # 5 taps: 2 rows of 3, one past KW
    packed = amx.pack_weight(w, p)
    assert packed.shape == (2, 2, 3, 2, 12, 16, 4)
    for o, c, kh, kw in np.ndindex(w.shape):
        g, t = divmod(kw, 3)
        q = t * 4 + c % 16 // 4
        assert packed[o // 16, c // 16, kh, g, q, o % 16, c % 4] == w[o, c, kh, kw]
    assert not packed[1, :, :, :, :, 4:].any()  # output channels 20..31
    assert not packed[:, :, :, 1, 8:].any()  # tap 5, past KW


def _accumulators(x, w, strides, dilation, tiles, target, pool=None, chunk=None):
    """The int32 accumulators (N, O, OH, OW) of the AMX kernel for uint8 ``x`` (N, C, H, W),
    spatially padded already, and int8 ``w`` (O, C, KH, KW), both packed as the emitter packs
    them (NCHW4c for up to 4 channels, else NCHW16c; the columns past the taps padded);
    with ``pool`` ((KH, KW), (SH, SW), (PH, PW)) max pooled by the kernel (``amx.pooled``),
    with ``chunk`` (input blocks, steps) accumulated in chunks (``amx.chunked``)."""
    import dataclasses

    import tvm

    n, c, h, width = x.shape
    block = 4 if c <= 4 else 16
    blocks = -(-c // block)
    data = np.zeros((n, blocks * block, h, width), np.uint8)
    data[:, :c] = x
    data = data.reshape(n, blocks, block, h, width).transpose(0, 1, 3, 4, 2)
    p = amx.plan(data.shape, w.shape[0], w.shape[2:], strides, dilation)
    extra = np.full((*data.shape[:3], amx.extra_columns(p), block), 77, np.uint8)
    data = np.ascontiguousarray(np.concatenate([data, extra], axis=3))
    p = dataclasses.replace(p, data=data.shape)
    p = p if pool is None else amx.pooled(p, pool)
    p = p if chunk is None else amx.chunked(p, *chunk)
    func = amx.conv(p, None, False, tiles)
    lib = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target(target))
    args = [data, amx.pack_weight(w, p), np.zeros(p.result, np.int32)]
    args = [tvm.runtime.tensor(a) for a in args]
    lib["main"](*args)
    out = args[-1].numpy().transpose(0, 1, 4, 2, 3).reshape(n, -1, *p.result[2:4])
    return out[:, : w.shape[0]]


SHAPES = [  # (N, C, O, H=W, K, stride, dilation): odd channels and sizes, as the models have
    (1, 3, 24, 13, 7, 2, 1),  # a stem: NCHW4c, 7 taps in a 28-byte row
    (2, 24, 40, 14, 3, 1, 1),
    (1, 40, 80, 7, 1, 1, 1),
    (1, 80, 96, 13, 3, 2, 1),
    (1, 96, 1000, 1, 1, 1, 1),  # a classifier as a 1x1 conv: 63 blocks of 16 outputs
    (1, 16, 24, 56, 3, 1, 1),  # 54 columns: 4 tiles, the last shifted back
    (1, 24, 16, 16, 5, 1, 1),  # 5 taps: 2 rows of 3, one past the kernel (padded columns)
    (1, 16, 32, 15, 3, 1, 2),  # dilated: one tap a row
]


def _operands(n, c, o, hw, k, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (n, c, hw, hw)).astype(np.uint8)
    return x, rng.integers(-128, 128, (o, c, k, k)).astype(np.int8)


@pytest.mark.parametrize("n, c, o, hw, k, stride, dilation", SHAPES)
def test_tile_program_is_exact_with_emulated_tiles(n, c, o, hw, k, stride, dilation):
    """On any CPU: the blocking and indexing, each tile operation as plain loops."""
    x, w = _operands(n, c, o, hw, k)
    strides, dilations = (stride, stride), (dilation, dilation)
    got = _accumulators(x, w, strides, dilations, amx.LoopTiles(), CPU)
    np.testing.assert_array_equal(got, exact_conv(x, w, strides, dilations))


@pytest.mark.parametrize("n, c, o, hw, k, stride, dilation", SHAPES)
def test_amx_kernel_is_exact(n, c, o, hw, k, stride, dilation):
    _needs_amx()
    x, w = _operands(n, c, o, hw, k)
    strides, dilations = (stride, stride), (dilation, dilation)
    got = _accumulators(x, w, strides, dilations, amx.AmxTiles(), SAPPHIRE_RAPIDS)
    np.testing.assert_array_equal(got, exact_conv(x, w, strides, dilations))


CHUNKED = [  # (N, C, O, H=W, K, stride, (input blocks a chunk, steps a task))
    (2, 64, 32, 9, 3, 1, (1, 3)),  # 4 chunks; 3 steps a task across the 2 images' 4
    (3, 48, 40, 13, 3, 2, (3, 4)),  # one chunk; strided, a step's 2 tiles on 2 lines
    (2, 64, 24, 7, 1, 1, (2, 1)),
]


@pytest.mark.parametrize("tiles", ["emulated", "amx"])
@pytest.mark.parametrize("n, c, o, hw, k, stride, chunk", CHUNKED)
def test_a_chunked_accumulation_is_exact(tiles, n, c, o, hw, k, stride, chunk):
    """The sums of each chunk of input blocks saved and resumed, tasks across images: bit for
    bit against numpy."""
    if tiles == "amx":
        _needs_amx()
    ops, target = (amx.LoopTiles(), CPU) if tiles == "emulated" else (amx.AmxTiles(), None)
    x, w = _operands(n, c, o, hw, k, seed=c)
    got = _accumulators(x, w, (stride,) * 2, (1, 1), ops, target or SAPPHIRE_RAPIDS, chunk=chunk)
    np.testing.assert_array_equal(got, exact_conv(x, w, (stride,) * 2, (1, 1)))


def _outermost(p):
    """Which of runs and groups is the outer loop of a chunked plan's parallel tasks: the
    one task 1 of 2 x 2 has not moved along."""
    group, run = amx._chunked_task(p, 1, 2, 2)
    return "runs" if (group, run) == (1, 0) else "groups"


def test_chunked_tasks_take_the_larger_of_the_batch_data_and_the_weights_outermost():
    """resnet18 at batch 8: a 128-channel 3x3 conv reads 921,600 bytes of data (8 x 2 x 30 x
    30 x 64) against 147,456 of weights (128 x 128 x 9): runs (images) outermost, so each
    thread reads the images it wrote; a 512-channel one 331,776 (8 x 8 x 9 x 9 x 64) against
    2,359,296: groups. The chunked cases above, checked bit for bit, take both orders."""
    stage2 = amx.plan((8, 2, 30, 30, 64), 128, (3, 3), (1, 1), (1, 1))
    stage4 = amx.plan((8, 8, 9, 9, 64), 512, (3, 3), (1, 1), (1, 1))
    assert (stage2.chunk, stage4.chunk) == (1, 1)
    assert (_outermost(stage2), _outermost(stage4)) == ("runs", "groups")
    orders = set()
    for n, c, o, hw, k, stride, chunk in CHUNKED:
        p = amx.plan((n, -(-c // 16), hw, hw, 16), o, (k, k), (stride,) * 2, (1, 1))
        orders.add(_outermost(amx.chunked(p, *chunk)))
    assert orders == {"runs", "groups"}


DEQUANTIZED = [  # (N, C, O, H=W, K, stride, chunk): float32 (N, O, OH, OW) outputs
    (2, 128, 32, 9, 3, 1, None),  # densenet's 3x3 convs: 128 -> 32, whole blocks
    (1, 48, 24, 13, 3, 2, None),  # channels ending inside a tile: stored lane by lane
    (2, 64, 48, 7, 1, 1, (1, 3)),  # chunked, tasks across images
    (1, 32, 32, 20, 3, 1, None),  # 20 columns: 2 tiles a row, the last shifted back
    (2, 16, 40, 1, 1, 1, None),  # rows of one pixel: one position a tile
    (1, 16, 24, 3, 3, 2, None),  # 1 column out of a stride-2 3x3 on 3x3
]


@pytest.mark.parametrize("tiles", ["emulated", "amx"])
@pytest.mark.parametrize("n, c, o, hw, k, stride, chunk", DEQUANTIZED)
def test_a_dequantized_output_is_the_float32_of_the_vnni_epilogue(
    tiles, n, c, o, hw, k, stride, chunk
):
    """``amx.dequantized``: float32(acc - correction) * multiplier in (N, C, OH, OW), bit for
    bit against numpy's float32 of the exact accumulators."""
    import tvm

    if tiles == "amx":
        _needs_amx()
    x, w = _operands(n, c, o, hw, k, seed=o)
    data = bordered_blocks(x, 0, 0, 16)
    p = amx.plan(data.shape, o, (k, k), (stride, stride), (1, 1))
    p = amx.dequantized(p if chunk is None else amx.chunked(p, *chunk), o)
    ops, target = (amx.LoopTiles(), CPU) if tiles == "emulated" else (amx.AmxTiles(), None)
    lib = tvm.compile(
        tvm.IRModule({"main": amx.conv(p, None, False, ops)}),
        target=tvm.target.Target(target or SAPPHIRE_RAPIDS),
    )
    rng = np.random.default_rng(o)
    width = p.out[1] * 16
    correction = rng.integers(-(2**20), 2**20, width).astype(np.int32)
    multiplier = rng.uniform(1e-5, 1e-3, width).astype(np.float32)
    args = [data, amx.pack_weight(w, p), correction, multiplier, np.zeros(p.stored, np.float32)]
    args = [tvm.runtime.tensor(a) for a in args]
    lib["main"](*args)
    acc = exact_conv(x, w, (stride, stride), (1, 1))
    shift = (acc - correction[:o, None, None]).astype(np.float32)
    np.testing.assert_array_equal(args[-1].numpy(), shift * multiplier[:o, None, None])


def test_a_dequantized_plan_refuses_a_pool_a_border_and_channels_past_its_own():
    p = amx.plan((1, 1, 9, 9, 16), 32, (3, 3), (1, 1), (1, 1))
    for bad in (dataclasses.replace(p, border=1), amx.pooled(p, ((3, 3), (2, 2), (1, 1)))):
        with pytest.raises(ValueError, match="amx.dequantized"):
            amx.dequantized(bad, 32)
    with pytest.raises(ValueError, match="33 of 32 channels"):
        amx.dequantized(p, 33)
    with pytest.raises(ValueError, match="takes no uint8 epilogue"):
        amx.conv(amx.dequantized(p, 32), (3, (0, 255), None), False, amx.LoopTiles())


def test_convs_of_large_weight_groups_are_chunked_and_pooled_ones_are_not():
    """A group of 2 x 16 outputs holding more than 32 KB of weights accumulates at most 18 KB
    of them at a time: 256 -> 256 3x3 on NCHW64c (72 KB: 1 block of 18 KB), on NCHW16c (4
    blocks of 4.5 KB), 128 -> 128 (36 KB: 1 block); 64 -> 64 (18 KB) is not chunked, nor is
    a conv whose kernel max pools."""
    wide = amx.plan((8, 4, 16, 16, 64), 256, (3, 3), (1, 1), (1, 1))
    assert (wide.chunk, wide.span) == (1, amx.SPAN)
    assert amx.plan((8, 16, 16, 16, 16), 256, (3, 3), (1, 1), (1, 1)).chunk == 4
    assert amx.plan((8, 2, 30, 30, 64), 128, (3, 3), (1, 1), (1, 1)).chunk == 1
    assert amx.plan((8, 1, 58, 58, 64), 64, (3, 3), (1, 1), (1, 1)).chunk == 0
    pooled = amx.pooled(wide, ((3, 3), (2, 2), (1, 1)))
    assert (pooled.chunk, pooled.span) == (0, 1)
    with pytest.raises(ValueError, match="3 of 4 input blocks"):
        amx.chunked(wide, 3, 4)
    with pytest.raises(ValueError, match="over 0 steps"):
        amx.chunked(wide, 1, 0)


def _folded_accumulators(x, w, padding, tiles, target):
    """The int32 accumulators (N, O, OH, OW) of the AMX kernel for a stride-2 conv of uint8
    ``x`` (N, C <= 4, H, W) padded by ``padding`` with 77, run over its space-to-depth fold
    (``amx.fold_plan``): the fold made by numpy's reshape, the weights folded by
    ``pack_weight``."""
    import tvm

    n, c = x.shape[:2]
    p, (top, left, bottom, right) = amx.fold_plan(x.shape, padding, w.shape[0], w.shape[2:])
    padded = np.full((n, 4, x.shape[2] + top + bottom, x.shape[3] + left + right), 77, np.uint8)
    padded[:, :c, top : top + x.shape[2], left : left + x.shape[3]] = x
    rows, cols = padded.shape[2] // 2, padded.shape[3] // 2
    split = padded.reshape(n, 4, rows, 2, cols, 2)  # (N, C, H', dy, W', dx)
    data = np.ascontiguousarray(split.transpose(0, 2, 4, 3, 5, 1).reshape(n, 1, rows, cols, 16))
    assert data.shape == p.data
    assert amx.extra_columns(p) == 0  # no tile row reads past the data (break-test find)
    lib = tvm.compile(tvm.IRModule({"main": amx.conv(p, None, False, tiles)}), target=target)
    args = [tvm.runtime.tensor(a) for a in (data, amx.pack_weight(w, p), np.zeros(p.out, np.int32))]
    lib["main"](*args)
    out = args[-1].numpy().transpose(0, 1, 4, 2, 3).reshape(n, -1, *p.out[2:4])
    return out[:, : w.shape[0]]


FOLDED = [  # (N, C, O, H, W, K, padding): stride-2 convs on at most 4 channels
    (1, 3, 24, 13, 13, 7, (3, 3, 3, 3)),  # resnet's stem at an odd size
    (2, 3, 32, 16, 15, 3, (1, 1, 1, 1)),  # mobilenet's 3x3 stem
    (1, 1, 16, 12, 11, 5, (0, 2, 1, 0)),  # grayscale, uneven padding, none on top
    (1, 4, 16, 9, 10, 4, (1, 0, 2, 3)),  # 4 channels, an even kernel
    (2, 3, 32, 17, 17, 4, (0, 0, 0, 0)),  # an even kernel on an odd size: 7 x 7 out, and
    # 9 folded rows hold the input where the conv reads 8 (break-test find)
    (1, 3, 16, 14, 14, 8, (1, 1, 1, 1)),  # 5 folded taps: 2 groups of 3, one past the kernel
]


@pytest.mark.parametrize("tiles", ["emulated", "amx"])
@pytest.mark.parametrize("n, c, o, h, w, k, padding", FOLDED)
def test_a_folded_stride_2_conv_is_exact(tiles, n, c, o, h, w, k, padding):
    """The folded conv against PyTorch's stride-2 conv of the padded input."""
    if tiles == "amx":
        _needs_amx()
    rng = np.random.default_rng(k)
    x = rng.integers(0, 256, (n, c, h, w)).astype(np.uint8)
    weight = rng.integers(-128, 128, (o, c, k, k)).astype(np.int8)
    ops, target = (amx.LoopTiles(), CPU) if tiles == "emulated" else (amx.AmxTiles(), None)
    got = _folded_accumulators(x, weight, padding, ops, target or SAPPHIRE_RAPIDS)
    top, left, bottom, right = padding
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=77)
    np.testing.assert_array_equal(got, exact_conv(padded, weight, (2, 2)))


POOLED = [  # (N, C, O, H=W, K, stride, pool (size, stride, padding)), H padded already
    (1, 3, 32, 29, 7, 2, (3, 2, 1)),  # resnet's stem and max pool: 12 x 12 -> 6 x 6
    (2, 16, 32, 20, 3, 1, (3, 2, 1)),  # 18 -> 9: the last window's row past the output
    (1, 16, 16, 41, 3, 1, (2, 2, 0)),  # 39 conv columns: 3 tiles, the last shifted back, alone
    (1, 24, 48, 13, 1, 1, (3, 1, 1)),  # stride 1: every pooled row adds one conv row
]


@pytest.mark.parametrize("tiles", ["emulated", "amx"])
@pytest.mark.parametrize("n, c, o, hw, k, stride, pool", POOLED)
def test_a_fused_max_pool_is_exact(tiles, n, c, o, hw, k, stride, pool):
    """The kernel's max pool of its int32 accumulators against PyTorch's max pool (padded
    with -inf) of the exact conv."""
    if tiles == "amx":
        _needs_amx()
    x, w = _operands(n, c, o, hw, k, seed=hw)
    size, pool_stride, padding = pool
    spec = ((size, size), (pool_stride, pool_stride), (padding, padding))
    ops, target = (amx.LoopTiles(), CPU) if tiles == "emulated" else (amx.AmxTiles(), None)
    got = _accumulators(x, w, (stride, stride), (1, 1), ops, target or SAPPHIRE_RAPIDS, spec)
    conv = torch.from_numpy(exact_conv(x, w, (stride, stride)))
    expected = torch.nn.functional.max_pool2d(conv, size, pool_stride, padding).numpy()
    np.testing.assert_array_equal(got, expected)


def test_a_pool_padded_or_strided_past_its_window_is_refused():
    p = amx.plan((1, 1, 9, 9, 16), 16, (3, 3), (1, 1), (1, 1))
    with pytest.raises(ValueError, match="pads or strides past its window"):
        amx.pooled(p, ((2, 2), (3, 3), (0, 0)))


def test_only_stride_2_convs_on_at_most_4_channels_fold_and_from_batch_2():
    assert amx.fold_of(3, (2, 2), (1, 1), batch=2) == 2
    assert amx.fold_of(5, (2, 2), (1, 1), batch=2) == 1  # 2 x 2 x 5 channels pass 16
    assert amx.fold_of(3, (1, 1), (1, 1), batch=2) == 1
    assert amx.fold_of(3, (2, 2), (2, 2), batch=2) == 1  # dilated
    assert amx.fold_of(3, (2, 2), (1, 1), batch=1) == 1  # measured slower at batch 1


@pytest.mark.parametrize("weight", [-128, 127])
@pytest.mark.parametrize("tiles", ["emulated", "amx"])
def test_worst_case_operands_reach_the_int32_limits_exactly(tiles, weight):
    """All 255 against all -128 (or +127) over 7296 channels x 9 taps: by hand,
    255 * -128 * 65664 = -2,143,395,840, within 0.2 % of the int32 limit."""
    if tiles == "amx":
        _needs_amx()
    x = np.full((1, 7296, 3, 3), 255, np.uint8)
    w = np.full((16, 7296, 3, 3), weight, np.int8)
    ops, target = (amx.LoopTiles(), CPU) if tiles == "emulated" else (amx.AmxTiles(), None)
    got = _accumulators(x, w, (1, 1), (1, 1), ops, target or SAPPHIRE_RAPIDS)
    assert got.shape == (1, 16, 1, 1)
    assert (got == 255 * weight * 7296 * 9).all()


AMX_PATHS = {  # the two 1x1 convs at 6x6 (41K and 35K MACs) are too small to pay: VNNI
    "int8 conv2d amx": 6,
    "int8 conv2d vnni": 2,
    "int8 conv2d depthwise": 1,
    "int8 matmul vnni": 1,
    "uint8 max_pool2d amx": 1,  # the stem's kernel pools its accumulators
}


@pytest.fixture(scope="module")
def tiny_net():
    return tiny_convnet()


def quantized_input_shape(mod, target):
    """The shape of the tensor ``quantize_pack_pad`` writes in ``mod`` with ``target``'s
    kernels."""
    from qbench.compile.kernels.select import select_kernels

    main = select_kernels(mod, target)["main"]
    bindings = [b for block in main.body.blocks for b in block.bindings]
    (written,) = [b.var for b in bindings if "quantize_pack_pad" in str(b.value)]
    return tuple(int(v) for v in written.ty.shape)


def test_an_amx_target_compiles_to_tdpbusd_on_any_host(tiny_net):
    q, _ = tiny_net
    assert kernel_paths(q.int8_mod, SAPPHIRE_RAPIDS) == AMX_PATHS
    # the stem (7x7, stride 2, pad 3 on 45 x 45: 23 x 23 out) reads its input folded: a
    # 4x4 conv over 23 + 4 - 1 = 26 folded rows and columns of 2 x 2 x 4 channels
    assert quantized_input_shape(q.int8_mod, SAPPHIRE_RAPIDS) == (2, 1, 26, 26, 16)
    assembly = build.assembly(compiled(q.int8_mod, SAPPHIRE_RAPIDS))
    assert assembly.count("tdpbusd") >= 6 and "ldtilecfg" in assembly


def test_int8_logits_are_equal_on_the_amx_and_vnni_paths(tiny_net):
    """The integers are the VNNI path's: so are the logits, bit for bit, and TVM's own
    integer ops' (the plain graph)."""
    _needs_amx()
    q, x = tiny_net
    on_amx = run_tvm(compiled(q.int8_mod, SAPPHIRE_RAPIDS), x)
    vnni = {**CPU, "mcpu": "icelake-server"}
    assert kernel_paths(q.int8_mod, vnni)["int8 conv2d vnni"] == 8
    np.testing.assert_array_equal(on_amx, run_tvm(compiled(q.int8_mod, vnni), x))
    plain = compiled(q.int8_mod, LLVM, hand_kernels=False)
    np.testing.assert_array_equal(on_amx, run_tvm(plain, x))


@pytest.fixture(scope="module")
def dense_block():
    """densenet's shape: a stem whose FP32 output a ReLU reads, a layer (BN, ReLU, 1x1, BN,
    ReLU, 3x3 with no bias) whose output a concat alone reads, a transition (BN, ReLU, 1x1,
    average pool) and a head; (``helpers.Quantized``, an input)."""
    from torch import nn

    def bn_relu(c):
        return nn.BatchNorm2d(c), nn.ReLU()

    class Dense(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1), *bn_relu(32))
            self.layer = nn.Sequential(*bn_relu(32), nn.Conv2d(32, 64, 1, bias=False))
            self.layer.extend([*bn_relu(64), nn.Conv2d(64, 24, 3, 1, 1, bias=False)])
            self.trans = nn.Sequential(*bn_relu(56), nn.Conv2d(56, 32, 1, bias=False))
            self.trans.append(nn.AvgPool2d(2))
            self.head = nn.Sequential(nn.Conv2d(32, 32, 3, 1, 1), nn.ReLU())
            self.head.extend([nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)])

        def forward(self, x):
            x = self.stem(x)
            return self.head(self.trans(torch.cat([x, self.layer(x)], 1)))

    torch.manual_seed(0)
    net = Dense().eval()
    for bn in (m for m in net.modules() if isinstance(m, nn.BatchNorm2d)):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.bias.data.uniform_(-0.3, 0.3)
    rng = np.random.default_rng(0)
    calib = [rng.standard_normal((2, 3, 32, 32)).astype(np.float32) for _ in range(2)]
    return quantize_tiny(net, calib), rng.standard_normal((2, 3, 32, 32)).astype(np.float32)


def test_a_conv_that_concats_and_pools_alone_read_runs_on_amx_in_float32(dense_block):
    """The layer's 3x3 and the transition's 1x1 store FP32 on AMX; the stem, whose output
    its bias and ReLU read, stays on VNNI (FuseOps appends them there)."""
    q, _ = dense_block
    paths = {"int8 conv2d amx": 4, "int8 conv2d vnni": 1, "int8 matmul vnni": 1}
    assert kernel_paths(q.int8_mod, SAPPHIRE_RAPIDS) == paths
    assembly = build.assembly(compiled(q.int8_mod, SAPPHIRE_RAPIDS))
    assert assembly.count("tdpbusd") >= 4


def test_only_outputs_that_concats_and_pools_alone_read_are_read_alone():
    """By hand: a read by concat and avg_pool2d only counts; a ReLU, a bound tuple or the
    function's output among the reads does not."""
    from tvm import relax
    from tvm.relax import op

    from qbench.compile.kernels.select import _read_alone
    from qbench.model.graph import use_counts

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 4, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a, b, c, d = (bb.emit(op.multiply(x, x)) for _ in range(4))
            joined = bb.emit(op.concat([a, b], axis=1))
            pooled = bb.emit(op.nn.avg_pool2d(b, (2, 2)))
            act = bb.emit(op.nn.relu(c))
            pair = bb.emit(relax.Tuple([d, act]))
            out = bb.emit_output(relax.Tuple([joined, pooled, pair, d]))
        bb.emit_func_output(out)
    func = bb.get()["main"]
    var2val = relax.analysis.get_var2val(func)
    alone = _read_alone(var2val, use_counts(func))
    found = [var for var, call in var2val.items() if call in alone]
    assert len(found) == 2 and found[0].same_as(a) and found[1].same_as(b)


@pytest.mark.parametrize("target", [SAPPHIRE_RAPIDS, {**CPU, "mcpu": "icelake-server"}])
def test_a_float32_output_conv_reads_the_border_of_the_uint8_kernel_before(dense_block, target):
    """The layer's 1x1 writes its uint8 output with a border of its zero point, which the
    3x3 after it (an FP32 output) takes as its padding: no pad kernel is left."""
    q, _ = dense_block
    assert pads(q.int8_mod, target) == []


def test_float32_outputs_give_the_plain_logits_on_this_cpu_and_vnni(dense_block):
    """This CPU's kernels (AMX on an AMX host) against TVM's own integer ops; on an AMX
    host, the VNNI path's too."""
    q, x = dense_block
    host = run_tvm(compiled(q.int8_mod, LLVM), x)
    np.testing.assert_array_equal(host, run_tvm(compiled(q.int8_mod, LLVM, hand_kernels=False), x))
    _needs_amx()
    vnni = {**CPU, "mcpu": "icelake-server"}
    np.testing.assert_array_equal(run_tvm(compiled(q.int8_mod, vnni), x), host)


@pytest.fixture(scope="module")
def stem_without_relu():
    """A stem whose uint8 output holds values below its zero point, a max pool, a 3x3 conv;
    (``helpers.Quantized``, an input)."""
    from torch import nn

    torch.manual_seed(1)
    net = nn.Sequential(
        *(nn.Conv2d(3, 16, 7, 2, 3), nn.MaxPool2d(3, 2, 1), nn.Conv2d(16, 16, 3, 1, 1)),
        *(nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)),
    ).eval()
    with torch.no_grad():
        net[0].bias.fill_(-1.0)  # most of the stem's outputs negative: below the zero point
    rng = np.random.default_rng(1)
    calib = [rng.standard_normal((2, 3, 45, 45)).astype(np.float32) for _ in range(2)]
    return quantize_tiny(net, calib), rng.standard_normal((2, 3, 45, 45)).astype(np.float32)


def test_a_max_pool_keeps_its_padding_where_a_border_could_win_the_max(stem_without_relu):
    """Without a ReLU the stem's uint8 holds values below its zero point: a border of the
    zero point could beat them in a window's max, so the (VNNI) stem writes no border and
    the pool pads its input with 0. The AMX stem pools its accumulators itself: no pad."""
    q, _ = stem_without_relu
    vnni = {**CPU, "mcpu": "icelake-server"}
    assert pads(q.int8_mod, vnni) == [(2, 1, 23, 23, 16)]  # the stem's, before the pool
    assert pads(q.int8_mod, SAPPHIRE_RAPIDS) == []
    assert kernel_paths(q.int8_mod, SAPPHIRE_RAPIDS)["uint8 max_pool2d amx"] == 1


def test_a_stem_pooling_values_below_its_zero_point_is_exact_on_amx(stem_without_relu):
    """The AMX stem's fused pool, windows past the output included, against TVM's own
    integer ops: the logits bit for bit."""
    _needs_amx()
    q, x = stem_without_relu
    on_amx = run_tvm(compiled(q.int8_mod, SAPPHIRE_RAPIDS), x)
    plain = compiled(q.int8_mod, LLVM, hand_kernels=False)
    np.testing.assert_array_equal(on_amx, run_tvm(plain, x))


@pytest.mark.parametrize("padding, border", [(1, 0), (1, 1), (0, 2)])
def test_max_pool_nchw16c_with_an_output_border_is_exact(padding, border):
    """On any CPU: 3x3 stride-2 pooling of a padded NCHW16c tensor, its output written with
    a border of 7 around it, against numpy."""
    import tvm
    from tvm import te

    from qbench.compile.kernels.depthwise import max_pool_nchw16c

    rng = np.random.default_rng(padding + border)
    x = rng.integers(0, 256, (2, 2, 11 + 2 * padding, 11 + 2 * padding, 16)).astype(np.uint8)
    data = te.placeholder(x.shape, "uint8")
    out = max_pool_nchw16c(data, (3, 3), (2, 2), (1, 1), (border, 7))
    lib = tvm.compile(te.create_prim_func([data, out]), target=tvm.target.Target(LLVM))
    got = tvm.runtime.tensor(np.zeros([int(v) for v in out.shape], np.uint8))
    lib(tvm.runtime.tensor(x), got)
    side = (x.shape[2] - 3) // 2 + 1
    windows = [
        x[:, :, i : i + 2 * side : 2, j : j + 2 * side : 2] for i in range(3) for j in range(3)
    ]
    pooled = np.max(windows, axis=0)
    expected = np.pad(
        pooled, ((0, 0), (0, 0), (border,) * 2, (border,) * 2, (0, 0)), constant_values=7
    )
    np.testing.assert_array_equal(got.numpy(), expected)


BORDERED = [  # (origin, kernel, (C, O), (input, output, residual) channels per block)
    (0, 3, (32, 32), (16, 16, 16)),  # a 3x3 conv taking the border as its padding
    (1, 1, (32, 32), (16, 16, 16)),  # a 1x1 conv reading from the border in
    (0, 3, (64, 128), (64, 64, 64)),  # wide: one 64-byte tap a tile row (``kernels.wide``)
    (0, 3, (64, 128), (16, 64, 16)),
    (0, 3, (64, 128), (64, 16, 64)),
]


@pytest.mark.parametrize("chunk", [None, (1, 3)])
@pytest.mark.parametrize("tiles", ["emulated", "amx"])
@pytest.mark.parametrize("origin, kernel, channels, blocks", BORDERED)
def test_bordered_input_output_and_residual_are_exact(
    tiles, origin, kernel, channels, blocks, chunk
):
    """A conv reading a bordered tensor, writing a border of its zero point and adding a
    bordered residual, each in NCHW16c or NCHW64c, with its accumulation whole or in chunks
    of one input block (``amx.chunked``, tasks of 3 steps across the 2 images): bit for bit
    against numpy, the border included."""
    import tvm

    if tiles == "amx":
        _needs_amx()
    (c, o), (data_block, out_block, residual_block) = channels, blocks
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (2, c, 9, 9)).astype(np.uint8)
    w = rng.integers(-128, 128, (o, c, kernel, kernel)).astype(np.int8)
    residual = rng.integers(0, 256, (2, o, 9, 9)).astype(np.uint8)
    zp_in, zp_out, bounds = 7, 11, (11, 250)
    data = bordered_blocks(x, 1, zp_in, data_block)
    p = amx.plan(data.shape, o, (kernel, kernel), (1, 1), (1, 1), origin=origin)
    assert p.k_bytes == min(kernel * data_block, 64)
    p = dataclasses.replace(p, border=1, residual_border=1)
    p = dataclasses.replace(p, out_block=out_block, residual_block=residual_block)
    p = p if chunk is None else amx.chunked(p, *chunk)
    ops, target = (amx.LoopTiles(), CPU) if tiles == "emulated" else (amx.AmxTiles(), None)
    func = amx.conv(p, (zp_out, bounds, (0.5, 9)), True, ops)
    lib = tvm.compile(
        tvm.IRModule({"main": func}), target=tvm.target.Target(target or SAPPHIRE_RAPIDS)
    )
    constants = [np.zeros(o, np.int32), np.full(o, 2.0**-6, np.float32)]
    constants.append(np.full(o, 0.25, np.float32))
    args = [data, amx.pack_weight(w, p), *constants]
    args.append(bordered_blocks(residual, 1, 0, residual_block))
    args = [tvm.runtime.tensor(a) for a in [*args, np.full(p.stored, 3, np.uint8)]]
    lib["main"](*args)
    read = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=zp_in) if origin == 0 else x
    expected = requantized_numpy(exact_conv(read, w), zp_out, bounds, residual)
    np.testing.assert_array_equal(args[-1].numpy(), bordered_blocks(expected, 1, zp_out, out_block))
