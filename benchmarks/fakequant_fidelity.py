"""How closely fake quantization (``qbench diagnose``, GPTQ, bias correction, the
``--accuracy-target`` fallback) describes the TVM INT8 graph that is built: both run on the
same batches of photos, and the logits are compared with PyTorch FP32 and with each other.

    python benchmarks/fakequant_fidelity.py [--model efficientnet_lite0] [--images 64]

Prints the SQNR of the TVM INT8 logits and of the fake-quantized logits against FP32 (dB),
the SQNR between the two, and how often their top-1 classes match. ``--no-residuals``
leaves residual adds unmodelled (their inputs FP32), to see what that modelling buys.
"""

import argparse
import tempfile

import latency
import numpy as np
import torch

import qbench.quantize.fakequant as fakequant
from qbench.compile import build
from qbench.data import full_batches
from qbench.pipeline.prepare import prepare
from qbench.quantize import QuantConfig
from qbench.report.assemble import cpu_name


def sqnr_db(ref, x):
    """10 log10(sum ref^2 / sum (ref - x)^2), dB."""
    return float(10 * np.log10((ref**2).sum() / ((ref - x) ** 2).sum()))


def logits(p, count):
    """(FP32, TVM INT8, fake-quantized) logits (N, K) of the first ``count`` photos."""
    import tvm

    vm = tvm.relax.VirtualMachine(build.compile(p.int8_mod, p.target), tvm.cpu(0))
    module = p.model.module
    fakes = fakequant.fake_layers(module, p.layers, p.plans)
    active = {f.index for f in fakes}
    out = ([], [], [])
    indices = list(range(min(count, len(p.images))))
    for x, n in full_batches(p.images, indices, p.model, p.opts.batch_size):
        with torch.no_grad(), fakequant.quantized(module, fakes, active) as (run, _):
            out[2].append(run(torch.from_numpy(x)).numpy()[:n])
            out[0].append(module(torch.from_numpy(x)).numpy()[:n])
        out[1].append(vm["main"](tvm.runtime.tensor(x)).numpy()[:n])
    return [np.concatenate(o) for o in out]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="efficientnet_lite0")
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--data", default=str(latency.SAMPLE))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-residuals", action="store_true")
    args = parser.parse_args()
    if args.no_residuals:
        fakequant._QuantizedResiduals._residual = staticmethod(lambda a, b: False)
    with tempfile.TemporaryDirectory() as tmp:
        opts = latency.bench_options(args.model, args.batch, args, tmp, quant=QuantConfig())
        ref, graph, fake = logits(prepare(opts), args.images)
    same = np.mean(graph.argmax(1) == fake.argmax(1)) * 100
    print(f"{args.model}, {len(ref)} photos, CPU {cpu_name()}")
    print(f"TVM INT8 vs FP32 {sqnr_db(ref, graph):.1f} dB; fake quantization vs FP32 ", end="")
    print(f"{sqnr_db(ref, fake):.1f} dB; fake vs TVM INT8 {sqnr_db(graph, fake):.1f} dB; ", end="")
    print(f"same top-1 {same:.1f} %")


if __name__ == "__main__":
    main()
