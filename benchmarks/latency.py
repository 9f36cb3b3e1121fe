"""Latency of TVM FP32/INT8 builds side by side with PyTorch, as ratios to PyTorch eager FP32.

One process measures every runner on the same batch, the same thread count and the same
warm-up, by ``qbench run``'s timing protocol (``timing.Rounds.time``: runners interleaved
round by round, each timed call after a lead-in call, settled between runtimes), so its
figures and the run's can be compared and the ratios survive a noisy machine. TVM builds
apply whatever the tuning database holds for the target (see ``qbench tune``); the report
line says how many records. GMAC/s counts the conv2d/matmul multiply-accumulates of the
model; "of peak" divides it by this CPU's register-only peak, measured in the same run by
``alu_peak.py`` with as many processes as threads: FMA for FP32 runners, and for INT8
runners the sequence of qbench's INT8 kernels for this CPU class (PyTorch's FBGEMM may use
another: ``alu_peak.py`` prints them all); "not measured" where none applies. Each model and
batch prints the CPU, its class, the kernel path of every INT8 layer and the ratio TVM INT8
/ TVM FP32. ``--target`` builds the TVM runners for another CPU class this host can run
(``'{"kind": "llvm", "mcpu": "haswell"}'``: AVX2 code on any AVX2 host; PyTorch keeps its
own dispatch, so compare the TVM rows only, or hold it to AVX2 too with ``--torch-isa
avx2``: FBGEMM, oneDNN and ATen's dispatch read their instruction-set variables once, when
loaded, so the script runs itself again with them set); ``--reduce-range`` adds the INT8
build with 7-bit weights (``qbench run --reduce-range``), ``--fit-pairs`` the one whose
weight pairs fit int16 sums (``qbench run --fit-pairs``). The AVX2 class on an AVX-512 host,
both sides held to it:

    python benchmarks/latency.py --models resnet18,efficientnet_lite0,mobilenet_v2 --batches 1,8
    python benchmarks/latency.py --models resnet18 --target '{"kind": "llvm", "mcpu": "haswell"}' \
        --torch-isa avx2 --fit-pairs
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

import alu_peak
import numpy as np
from tabulate import tabulate

from qbench.compile import build, targets, tuning
from qbench.data import full_batches
from qbench.measure import timing
from qbench.measure.runners import TorchRunner, TVMRunner
from qbench.measure.torch_int8 import TITLES, NotAvailable, torch_int8_runners
from qbench.model import graph
from qbench.pipeline import RunOptions
from qbench.pipeline.prepare import graphs, prepare
from qbench.quantize import QuantConfig
from qbench.report.assemble import cpu_name
from qbench.report.lines import int8_kernels_line

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "imagenet-sample"


VARIANTS = {  # flag's field: the INT8 build it adds (``QuantConfig`` field set)
    "reduce_range": "TVM INT8 (reduce_range)",
    "fit_pairs": "TVM INT8 (fit_pairs)",
}


def runners(prepared, calib, variants=()):
    """(name, runner or the reason it is missing) for every runner of one model and batch;
    with ``variants`` ((field, its ``Prepared``) of ``VARIANTS``) their INT8 builds too."""
    import torch

    opts, model, target = prepared.opts, prepared.model, prepared.target
    n, shape = opts.batch_size, model.input_shape
    out = [("PyTorch eager FP32", TorchRunner(model.module, n, shape))]
    out.append(
        (
            "torch.compile FP32",
            TorchRunner(torch.compile(model.module), n, shape, "torch.compile FP32"),
        )
    )
    for r in torch_int8_runners(model.module, calib, n, shape):
        words = f"not available: {r.reason}" if isinstance(r, NotAvailable) else r
        out.append((TITLES[r.name], words))
    built = [
        ("TVM " + name.removeprefix("tvm_").upper(), name, mod) for name, mod in graphs(prepared)
    ]
    for field, variant in variants:
        built.append((VARIANTS[field], f"tvm_int8_{field}", dict(graphs(variant))["tvm_int8"]))
    for label, name, mod in built:
        vm = build.build(mod, target, prepared.databases).vm
        out.append((label, TVMRunner(vm, targets.device_for(target), n, shape, name)))
    return out, prepared.tuning


def bench_options(model_name, batch, args, tmp, **fields):
    """``RunOptions`` of one benchmark cell: 8 calibration images, one evaluation batch,
    ``args``' data and threads, caches and reports in ``tmp``; ``fields`` override."""
    return RunOptions(
        model=model_name,
        data=args.data,
        calib_size=8,
        eval_size=batch,
        batch_size=batch,
        threads=args.threads,
        target=getattr(args, "target", "llvm"),
        cache_dir=tmp,
        reports_dir=tmp,
        **fields,
    )


def measure(model_name, batch, args):
    with tempfile.TemporaryDirectory() as tmp:
        extra = {"warmup": args.warmup, "repeat": args.repeat, "tuning_db": args.tuning_db}
        p = prepare(bench_options(model_name, batch, args, tmp, quant=QuantConfig(), **extra))
        calib = [x for x, _ in full_batches(p.images, p.split.calib, p.model, batch)]
        x, _ = next(full_batches(p.images, p.split.eval, p.model, batch))
        macs = graph.gemm_macs(p.imported.mod)
        variants = [
            (field, prepare(bench_options(model_name, batch, args, tmp, quant=quant, **extra)))
            for field, quant in _variants(args)
        ]
        found, tuned = runners(p, calib, variants)
    rows, eager, medians = [], None, {}
    fp32_peak, int8_peak = alu_peak.class_peaks(p.int8_kernels.cpu_class, args.peaks)
    timed = timing.Rounds(args.warmup, args.repeat).time(
        [r for _, r in found if not isinstance(r, str)], x
    )
    for name, runner in found:
        if isinstance(runner, str):
            rows.append([model_name, batch, name, runner, "", "", ""])
            continue
        median = medians[name] = float(np.median(timed.samples_ms[runner.name]))
        eager = eager or median
        gmacs = macs / (median / 1e3) / 1e9
        peak = int8_peak if "INT8" in name else fp32_peak
        if name in VARIANTS.values():  # vpmaddubsw's sequence, whatever the class
            peak = args.peaks.get("pmaddubsw_ymm")
        rows.append(
            [
                model_name,
                batch,
                name,
                f"{median:.2f}",
                f"{median / eager:.3f}",
                f"{gmacs:.1f}",
                f"{100 * gmacs / peak:.1f} %" if peak else "not measured",
            ]
        )
    print(
        f"{model_name} batch {batch}: CPU {cpu_name()}, {int8_kernels_line(p.int8_kernels)}"
        f"; TVM INT8 / TVM FP32 = {medians['TVM INT8'] / medians['TVM FP32']:.3f}",
        file=sys.stderr,
    )
    for field, variant in variants:
        line = int8_kernels_line(variant.int8_kernels)
        ratio = medians[VARIANTS[field]] / medians["TVM FP32"]
        print(
            f"{model_name} batch {batch}: {field} build: {line}; {VARIANTS[field]} / TVM FP32"
            f" = {ratio:.3f}",
            file=sys.stderr,
        )
    print(f"{model_name} batch {batch}: timing {timing.describe(timed.protocol)}", file=sys.stderr)
    print(
        f"{model_name} batch {batch}: {macs / 1e9:.3f} GMAC per batch, tuning: {tuned.source} "
        f"({tuned.records} user records, {tuned.pretuned_records} pre-tuned)",
        file=sys.stderr,
    )
    return rows


def _variants(args):
    """(field, ``QuantConfig`` with it set) of each ``VARIANTS`` flag given."""
    return [(f, QuantConfig(**{f: True})) for f in VARIANTS if getattr(args, f, False)]


def grid_parser(doc):
    """An argument parser with the options every latency benchmark shares: the models,
    batches, data, threads and warm-up rounds."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--models", default="resnet18,efficientnet_lite0,mobilenet_v2")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--data", default=str(SAMPLE) if SAMPLE.is_dir() else None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=3)
    return p


TORCH_ISA = {  # instruction set -> the variables that hold PyTorch's kernels to it
    "avx2": {
        "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2",
    },
}


def hold_torch(isa):
    """Run this script again with PyTorch held to ``isa`` (a ``TORCH_ISA`` key), unless its
    variables are set already; returns them as one line."""
    wanted = TORCH_ISA[isa]
    if any(os.environ.get(k) != v for k, v in wanted.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **wanted})
    return " ".join(f"{k}={v}" for k, v in wanted.items())


def main():
    p = grid_parser(__doc__)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--tuning-db", default=str(tuning.default_root()))
    p.add_argument("--target", default="llvm", help="as qbench run's --target")
    p.add_argument("--reduce-range", action="store_true", help="add the 7-bit-weight INT8 build")
    p.add_argument("--fit-pairs", action="store_true", help="add the fitted-pairs INT8 build")
    p.add_argument("--torch-isa", choices=sorted(TORCH_ISA), help="hold PyTorch to this ISA")
    args = p.parse_args()
    if args.torch_isa:
        print(f"PyTorch held to {args.torch_isa}: {hold_torch(args.torch_isa)}")
    try:
        args.peaks = alu_peak.measure(args.threads)
    except RuntimeError as e:
        print(f"{e}: the 'of peak' column says not measured", file=sys.stderr)
        args.peaks = {}
    rows = []
    for model_name in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            rows += measure(model_name, batch, args)
    heads = ["model", "batch", "runner", "median ms", "ratio to eager", "GMAC/s", "of peak"]
    print(tabulate(rows, heads, tablefmt="github"))


if __name__ == "__main__":
    main()
