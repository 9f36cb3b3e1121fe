"""One uint8 x int8 conv: qbench's packed INT8 kernel for this CPU (its path chosen as
``qbench run`` chooses it), with the FP32 epilogue of a layer before a pool or the logits
and with the integer requantize to uint8 of a layer between two INT8 layers, and on a CPU
with AMX tiles the AMX kernel (uint8 in and out, in the layout it has between two AMX layers
of a model: NCHW64c for these channels)
beside them, against PyTorch FP32 and PyTorch's quantized conv (x86 backend), same shape,
same threads, one process; plus the assembly check.

    python benchmarks/conv_int8.py [--channels 128] [--size 28] [--threads 2]

Prints the CPU, the kernel path, the median latency (ms), GMAC/s and the fraction of this
CPU's INT8 peak for the path's instruction sequence (measured now by ``alu_peak.py``), and
the path's instruction lines of the generated assembly (the proof that the kernel is
tensorized).
"""

import argparse

import alu_peak
import numpy as np
import torch
from tabulate import tabulate

from qbench.compile import build, targets
from qbench.compile.kernels import amx, layout, select
from qbench.compile.kernels.conv2d import requantized_conv, requantized_conv_u8
from qbench.measure.runners import time_samples
from qbench.report.assemble import cpu_name


def median_ms(fn, warmup=10, repeat=50):
    return float(np.median(time_samples(fn, warmup, repeat)))


def tvm_conv(x, w, target, packing, uint8_out=False):
    """Compile pack -> packed conv with its epilogue for (N, C, H, W) uint8 ``x`` padded by 1
    and (O, C, 3, 3) int8 ``w``: the FP32 requantize to NCHW, or with ``uint8_out`` the
    integer requantize to uint8 NCHW16c that a conv between two INT8 layers runs (ReLU6
    bounds, a bias), reading ``x`` as the NCHW16c tensor a uint8 kernel wrote where the
    path reads that layout (no pack kernel then, as in a model); returns (executable, run
    function)."""
    import tvm
    from tvm import relax

    o, direct = w.shape[0], uint8_out and packing.reads_nchw16c
    if direct:
        n, c, h, wd = x.shape
        x = np.ascontiguousarray(x.reshape(n, c // 16, 16, h, wd).transpose(0, 1, 3, 4, 2))
    bb = relax.BlockBuilder()
    var = relax.Var("x", relax.TensorType(x.shape, "uint8"))
    with bb.function("main", [var]):
        with bb.dataflow():
            block, dtype, offset = packing.block, packing.data_dtype, packing.offset
            packed = var
            if not direct:
                packed = bb.emit(bb.call_te(layout.pack_nchw4c, var, 0, block, dtype, offset))
            w_packed = layout.pack_conv_weight(w, block, packing.weight_dtype)
            weight = relax.const(w_packed, w_packed.dtype.name)
            correction = relax.const(np.zeros(o, np.int32))
            rescale = relax.const(np.full(o, 0.01, np.float32))
            if uint8_out:
                bias = relax.const(np.full(o, 0.5, np.float32))
                epilogue = (3, (3, 200), None)
                args = packed, weight, (correction, rescale, bias), epilogue, (1, 1), (1, 1)
                conv = bb.call_te(requantized_conv_u8, *args, packing.op_name)
            else:
                args = packed, weight, correction, rescale, (1, 1), (1, 1), False, packing.op_name
                conv = bb.call_te(requantized_conv, *args)
            out = bb.emit_output(conv)
        bb.emit_func_output(out)
    executable = build.compile(bb.get(), target)
    vm = relax.VirtualMachine(executable, tvm.cpu(0))
    data = tvm.runtime.tensor(x, tvm.cpu(0))
    return executable, lambda: vm["main"](data)


def tvm_amx_conv(x, w, target):
    """Compile the AMX conv with the same uint8 epilogue as ``tvm_conv``'s ``uint8_out``
    for (N, C, H, W) uint8 ``x`` padded by 1 and (O, C, 3, 3) int8 ``w``, reading and
    writing the layout it has between two AMX layers of a model: NCHW64c where the channels
    are a multiple of 64 (``kernels.wide``), else NCHW16c; returns (executable, run
    function returning the uint8 output tensor)."""
    import dataclasses

    import tvm

    n, c, h, wd = x.shape
    o = w.shape[0]
    block = amx.WIDE if c % amx.WIDE == 0 and o % amx.WIDE == 0 else 16
    data = np.ascontiguousarray(x.reshape(n, c // block, block, h, wd).transpose(0, 1, 3, 4, 2))
    p = amx.plan(data.shape, o, (3, 3), (1, 1), (1, 1))
    p = dataclasses.replace(p, out_block=block)
    func = amx.conv(p, (3, (3, 200), None), False, amx.AmxTiles())
    executable = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target(target))
    args = [data, amx.pack_weight(w, p), np.zeros(o, np.int32), np.full(o, 0.01, np.float32)]
    args += [np.full(o, 0.5, np.float32), np.zeros(p.stored, np.uint8)]
    args = [tvm.runtime.tensor(a, tvm.cpu(0)) for a in args]
    main = executable["main"]  # looked up once: the lookup takes 13 us, a third of the conv

    def run():
        main(*args)
        return args[-1]

    return executable, run


def torch_quantized_conv(x_float, w_float, channels):
    from torch.ao.nn.quantized import Conv2d

    torch.backends.quantized.engine = "x86"
    conv = Conv2d(channels, channels, 3, padding=1)
    qw = torch.quantize_per_channel(
        w_float,
        torch.ones(channels) * 0.01,
        torch.zeros(channels, dtype=torch.long),
        0,
        torch.qint8,
    )
    conv.set_weight_bias(qw, None)
    qx = torch.quantize_per_tensor(x_float, 0.02, 128, torch.quint8)
    return lambda: conv(qx)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("--channels", type=int, default=128)
    p.add_argument("--size", type=int, default=28)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    build.set_threads(args.threads)
    target = targets.Llvm.host(args.threads)
    classes = select.int8_gemm_kernels(target)
    kernel = next((k for k in classes if k.path in layout.PACKINGS), None)
    if kernel is None:
        raise SystemExit(f"this CPU ({cpu_name()}) has no packed INT8 kernel in qbench")
    packing = layout.PACKINGS[kernel.path]
    peaks = alu_peak.measure(args.threads)
    _, int8_peak = alu_peak.class_peaks(kernel.cpu_class, peaks)
    _, amx_peak = alu_peak.class_peaks("AMX", peaks)
    c, s = args.channels, args.size
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (1, c, s + 2, s + 2)).astype(np.uint8)
    w = rng.integers(-127, 128, (c, c, 3, 3)).astype(np.int8)
    macs = c * c * 9 * s * s
    x_float = torch.randn(1, c, s, s)
    w_float = torch.randn(c, c, 3, 3)
    fp32 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False).eval()
    executable, tvm_run = tvm_conv(x, w, target, packing)
    _, tvm_u8_run = tvm_conv(x, w, target, packing, uint8_out=True)
    runners = [  # (name, run function, the peak its GMAC/s are a share of)
        ("PyTorch FP32 conv", lambda: fp32(x_float), int8_peak),
        ("PyTorch quantized conv (x86)", torch_quantized_conv(x_float, w_float, c), int8_peak),
        (f"qbench {kernel.path} conv, FP32 NCHW out (TVM, untuned)", tvm_run, int8_peak),
        (f"qbench {kernel.path} conv, uint8 NCHW16c out (TVM, untuned)", tvm_u8_run, int8_peak),
    ]
    amx_executable = None
    if classes[0].path == "amx":
        amx_executable, amx_run = tvm_amx_conv(x, w, target)
        blocks = "NCHW64c" if c % amx.WIDE == 0 else "NCHW16c"
        runners.append((f"qbench amx conv, uint8 {blocks} in and out (TVM)", amx_run, amx_peak))
    rows = []
    with torch.no_grad():
        for name, fn, peak in runners:
            ms = median_ms(fn)
            gmacs = macs / (ms / 1e3) / 1e9
            share = f"{100 * gmacs / peak:.0f} %" if peak else "not measured"
            rows.append([name, f"{ms:.3f}", f"{gmacs:.0f}", share])
    print(f"CPU {cpu_name()} ({classes[0].cpu_class}), kernel path {kernel.path}")
    print(f"conv 3x3 {c}->{c} at {s}x{s}, batch 1, {args.threads} threads, {macs / 1e6:.0f} M MACs")
    print(tabulate(rows, ["build", "median ms", "GMAC/s", "of INT8 peak"], tablefmt="github"))
    ins = packing.instruction
    lines = [ln.strip() for ln in build.assembly(executable).splitlines() if ins in ln]
    print(f"\nassembly: {len(lines)} {ins} instructions, e.g.")
    print("\n".join(lines[:4]))
    if amx_executable is not None:
        lines = [ln.strip() for ln in build.assembly(amx_executable).splitlines()]
        print(f"amx: {sum('tdpbusd' in ln for ln in lines)} tdpbusd instructions")


if __name__ == "__main__":
    main()
