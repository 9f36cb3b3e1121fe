"""Shared test plumbing: quantize a tiny PyTorch model through qbench's own stages, and
compile each test module once per session (``compiled``)."""

import json
from dataclasses import dataclass

import numpy as np
import torch

from qbench.calibration.calibrate import calibrate_module
from qbench.compile import build, targets
from qbench.measure.runners import TVMRunner, observer_runner
from qbench.model import frontend, graph, zoo
from qbench.quantize import QuantConfig
from qbench.quantize.plan import make_plans
from qbench.quantize.rewrite import rewrite

LLVM = targets.Llvm.host(2)  # this CPU, as `--target llvm`
# this CPU's triple and cores without its own feature additions (an AMX host's mattr): the
# base of targets that name a CPU class by its mcpu
CPU = {key: value for key, value in LLVM.items() if key != "mattr"}
SAPPHIRE_RAPIDS = {**CPU, "mtriple": "x86_64-linux-gnu", "mcpu": "sapphirerapids"}
AVX2 = {**CPU, "mtriple": "x86_64-linux-gnu", "mcpu": "haswell"}  # Intel and AMD run it


@dataclass
class Quantized:
    module: torch.nn.Module
    layers: list
    ranges: dict
    plans: list
    fp32_mod: object
    int8_mod: object

    def run(self, which, x):
        mod = self.fp32_mod if which == "fp32" else self.int8_mod
        runner = TVMRunner(loaded_vm(mod), targets.device_for(LLVM), len(x), x.shape[1:], which)
        return runner.infer(np.ascontiguousarray(x, np.float32))


_COMPILED = {}  # (structural hash, target, hand_kernels) -> [(module, executable)]


class SqueezeExcite(torch.nn.Module):
    """mobilenet_v3's block: 1x1 expand of ``inputs`` to ``channels`` + hardswish, a
    ``kernel`` x ``kernel`` depthwise with ``stride`` + hardswish, then a squeeze-excitation
    scale (pool, 1x1 to 8 + ReLU, 1x1 + hardsigmoid) multiplied into the depthwise output
    (the scale first, as torchvision writes it), a 1x1 project to ``outputs``."""

    def __init__(self, inputs, channels, kernel=3, stride=1, outputs=8):
        super().__init__()
        self.expand = torch.nn.Conv2d(inputs, channels, 1)
        self.dw = torch.nn.Conv2d(channels, channels, kernel, stride, kernel // 2, groups=channels)
        self.fc1, self.fc2 = torch.nn.Conv2d(channels, 8, 1), torch.nn.Conv2d(8, channels, 1)
        self.project = torch.nn.Conv2d(channels, outputs, 1)

    def forward(self, x):
        hardswish = torch.nn.functional.hardswish
        y = hardswish(self.dw(hardswish(self.expand(x))))
        pooled = torch.nn.functional.adaptive_avg_pool2d(y, 1)
        scale = torch.nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(pooled))))
        return self.project(scale * y)


def compiled(mod, target=None, hand_kernels=True):
    """``build.compile(mod, target, hand_kernels=hand_kernels)`` (no tuning database), done
    once per test session: a module equal to one compiled before for the same target
    (``tvm_ffi.structural_equal``, which compares the constants' values too; looked up by
    ``tvm_ffi.structural_hash``) gets that executable. Tests that quantize the same seeded
    model, or run one graph on several paths against the same plain reference, compile it
    once. ``target``: a target dict, ``LLVM`` by default."""
    import tvm_ffi

    target = LLVM if target is None else target
    key = (tvm_ffi.structural_hash(mod), json.dumps(target, sort_keys=True), hand_kernels)
    entries = _COMPILED.setdefault(key, [])
    for known, executable in entries:
        if tvm_ffi.structural_equal(known, mod):
            return executable
    executable = build.compile(mod, target, hand_kernels=hand_kernels)
    entries.append((mod, executable))
    return executable


def loaded_vm(mod, target=None):
    """A ``relax.VirtualMachine`` of ``compiled(mod, target)`` on the target's device (what
    ``build.build(mod, target).vm`` gives, the compile shared)."""
    from tvm import relax

    target = LLVM if target is None else target
    return relax.VirtualMachine(compiled(mod, target), targets.device_for(target))


def randn(*shape, seed=0):
    """Standard normal float32 of ``shape``, seeded."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def batchnorm_model():
    """C01's model: Conv2d(3, 8, 3, padding 1) -> BatchNorm2d(8) with running mean 2.0 and
    variance 9.0 -> ReLU, seeded (in training mode, as made)."""
    from torch import nn

    torch.manual_seed(0)
    bn = nn.BatchNorm2d(8)
    bn.running_mean.fill_(2.0)
    bn.running_var.fill_(9.0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), bn, nn.ReLU())


def run_tvm(executable, x):
    """Run ``main`` of a compiled LLVM ``executable`` on numpy ``x``; numpy output."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, tvm.cpu(0))
    return vm["main"](tvm.runtime.tensor(np.ascontiguousarray(x), tvm.cpu(0))).numpy()


def loaded(module, shape):
    """A ``LoadedModel`` around a tiny module, (C, H, W) ``shape``."""
    return zoo.LoadedModel("tiny", module.eval(), tuple(shape), zoo.Preprocess(), "test", "0")


def quantize_tiny(module, calib, config=None, **config_kwargs):
    """Import ``module``, calibrate on ``calib`` (list of float32 (N, C, H, W)), rewrite to
    the plain integer graph (its kernels are chosen when it is built for a target).

    The first conv is quantized too unless the config says otherwise.
    """
    config = config or QuantConfig(**{"skip_first": False, "calib_mode": "max", **config_kwargs})
    n, shape = calib[0].shape[0], calib[0].shape[1:]
    imported = frontend.import_model(loaded(module, shape), n)
    layers = graph.find_layers(imported.mod, imported.layer_names)
    batches = [(np.asarray(x, np.float32), n) for x in calib]
    observer = observer_runner(imported.mod, LLVM, shape, n)
    ranges = calibrate_module(
        observer, imported.mod, layers, batches, config.calib_mode, config.collector_params()
    )
    plans = make_plans(layers, ranges, config)
    int8 = rewrite(imported.mod, plans, config.simulate)
    return Quantized(module, layers, ranges, plans, imported.mod, int8)


def tiny_convnet():
    """Stem (7x7, 3 channels), max pool, a residual block, a strided 3x3, 1x1 convs, a
    depthwise conv and a dense layer; (``helpers.Quantized``, an input)."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.a, self.b = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)

        def forward(self, x):
            return torch.relu(x + self.b(torch.relu(self.a(x))))

    torch.manual_seed(0)
    net = nn.Sequential(
        *(nn.Conv2d(3, 32, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1), Block(32)),
        *(nn.Conv2d(32, 48, 3, 2, 1), nn.ReLU(), nn.Conv2d(48, 24, 1), nn.ReLU(), Block(24)),
        *(nn.Conv2d(24, 24, 3, 1, 1, groups=24), nn.ReLU(), nn.Conv2d(24, 40, 1), nn.ReLU()),
        *(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(40, 10)),
    ).eval()
    rng = np.random.default_rng(0)
    calib = [rng.standard_normal((2, 3, 45, 45)).astype(np.float32) for _ in range(2)]
    x = rng.standard_normal((2, 3, 45, 45)).astype(np.float32)
    return quantize_tiny(net, calib), x


def pads(mod, target):
    """The sorted input shapes of the pad kernels left in ``mod`` once ``target``'s kernels
    are selected."""
    from tvm import relax

    from qbench.compile.kernels.select import select_kernels

    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.nn.pad":
            found.append(tuple(int(v) for v in expr.args[0].ty.shape))

    for _, func in select_kernels(mod, target).functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return sorted(found)


def bordered_blocks(x, border, fill, block=16):
    """uint8 (N, C, H, W), C a multiple of ``block`` -> (N, C/block, H + 2b, W + 2b, block)
    with a border of ``fill`` (NCHW16c, or NCHW64c with ``block`` 64)."""
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (border, border), (border, border)), constant_values=fill)
    blocked = padded.reshape(n, c // block, block, h + 2 * border, w + 2 * border)
    return np.ascontiguousarray(blocked.transpose(0, 1, 3, 4, 2))


def requantized_numpy(acc, zero_point, bounds, residual=None, k=0.5, z_t=9):
    """The epilogue's arithmetic, exact here: multiplier 2**-6, biases in quarters and k 0.5
    make every product and sum exact in float32 (|acc| < 2**24), then round half to even."""
    v = acc.astype(np.float32) * np.float32(2.0**-6) + np.float32(0.25)
    if residual is not None:
        v = v + (residual.astype(np.float32) - z_t) * np.float32(k)
    return np.clip(np.round(v) + zero_point, *bounds).astype(np.uint8)


def shipped_database():
    """The shipped pre-tuned folder these tests read as a sample database (Zen 5's: it
    holds kept and rejected workloads)."""
    from qbench.compile import tuning

    (folder,) = tuning.PRETUNED_ROOT.glob("llvm-znver5-*")
    return folder


def exact_conv(x, w, strides=(1, 1), dilation=(1, 1)):
    """conv2d of integer arrays ``x`` (N, C, H, W) and ``w`` (O, C, KH, KW) in float64 by
    PyTorch: exact for sums below 2**53."""
    return torch.nn.functional.conv2d(
        torch.from_numpy(x.astype(np.float64)),
        torch.from_numpy(w.astype(np.float64)),
        stride=strides,
        dilation=dilation,
    ).numpy()


def torch_out(module, x):
    with torch.no_grad():
        return module(torch.from_numpy(np.asarray(x, np.float32))).numpy()


def integer_gemm_kernels(mod, target=None):
    """Names of the lowered kernels that compute conv2d/matmul with uint8 and int8 operands
    (or both widened to int16, the AVX2 kernel's) and an int32 accumulator: the proof that a
    build really computes in integers."""
    import re

    import tvm
    from tvm import relax

    target = tvm.target.Target(target or LLVM)
    with target:
        lowered = relax.get_default_pipeline(target)(mod)
    found = []
    for gvar, func in lowered.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        head, _, body = func.script().partition("T.func_attr")
        int32_acc = re.search(
            r'(conv2d\w*|matmul\w*) = T\.sblock_alloc_buffer\([^\n]*"int32"\)', body
        ) or re.search(r'(conv2d\w*|matmul\w*): T\.Buffer\([^\n]*"int32"\)', head)
        eight_bit = '"uint8")' in head and '"int8")' in head
        widened = head.count('"int16")') >= 2  # AVX2's vpmaddwd kernel: 8-bit values in int16
        if (eight_bit or widened) and int32_acc:
            found.append(str(gvar))
    return found


def packed_conv_module(shape, w, zp, strides, dilation, path, flat=False):
    """A Relax module computing the exact conv of uint8 ``x`` of ``shape`` (N, C, H, W) and
    int8 ``w`` (O, C, KH, KW) on the packed kernel of ``path`` (``layout.PACKINGS``), as
    float32 (the int32 sums, exact below 2**24). With ``flat``, ``x`` is already the
    kernel's flat pixel rows (N, 1, H, W' * C) of the packing's dtype, less its offset."""
    from tvm import relax

    from qbench.compile.kernels import layout
    from qbench.compile.kernels.conv2d import requantized_conv

    packing = layout.PACKINGS[path]
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, packing.data_dtype if flat else "uint8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            if flat:
                p, strides = x, (strides[0], strides[1] * w.shape[1])
                packed_w = layout.pack_flat_weight(w, packing.block, packing.weight_dtype)
            else:
                args = packing.block, packing.data_dtype, packing.offset
                p = bb.emit(bb.call_te(layout.pack_nchw4c, x, zp, *args))
                packed_w = layout.pack_conv_weight(w, packing.block, packing.weight_dtype)
            wc = relax.const(packed_w, packed_w.dtype.name)
            # correction -offset * sum(w) undoes the pack's offset (``zp`` only fills
            # padded channels, whose weights are 0); rescale 1: the float32 output is the
            # exact int32 sum of x * w (< 2**24)
            undo = -packing.offset * w.astype(np.int64).sum(axis=(1, 2, 3))
            zeros = relax.const(undo.astype(np.int32))
            ones = relax.const(np.ones(w.shape[0], np.float32))
            conv = bb.call_te(
                requantized_conv, p, wc, zeros, ones, strides, dilation, False, packing.op_name
            )
            out = bb.emit_output(conv)
        bb.emit_func_output(out)
    return bb.get()
