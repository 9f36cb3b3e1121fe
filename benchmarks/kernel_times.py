"""Where a TVM build's time goes: every lowered kernel of one model's FP32 or INT8 build,
timed alone (``time_evaluator`` on zero inputs of its shapes), largest first, then summed by
kernel kind (the name without its numbers).

    python benchmarks/kernel_times.py --model mobilenet_v2 [--batch 1] [--graph tvm_int8]

A kernel timed alone finds its inputs in cache and pays no VM dispatch, so the sum is below
the model's latency (``latency.py``); it says which kernels to work on, not how fast the
model runs. Prints the CPU and the kernels by schedule source.
"""

import argparse
import re
import tempfile

import latency
import numpy as np

from qbench import build
from qbench.pipeline import graphs, prepare
from qbench.quantize import QuantConfig
from qbench.report import cpu_name


def kernel_ms(func, target, number=20, repeat=5):
    """Median ms of one call of PrimFunc ``func`` compiled for ``target`` (dict) alone."""
    import tvm

    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target)
    dev = tvm.cpu(0)
    args = [
        tvm.runtime.tensor(np.zeros([int(s) for s in p.ty.shape], str(p.ty.dtype)), dev)
        for p in func.params
    ]
    timer = lib.mod.time_evaluator("main", dev, number=number, repeat=repeat)
    return float(np.median(timer(*args).results)) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenet_v2")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--graph", choices=("tvm_fp32", "tvm_int8"), default="tvm_int8")
    parser.add_argument("--data", default=str(latency.SAMPLE))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--top", type=int, default=12, help="kernels listed one by one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        opts = latency.bench_options(args.model, args.batch, args, tmp, quant=QuantConfig())
        p = prepare(opts)
        lowered = build.lower(dict(graphs(p))[args.graph], p.target, p.databases)
    import tvm

    rows = sorted(
        (
            (kernel_ms(f, tvm.target.Target(p.target)), gv.name_hint)
            for gv, f in lowered.functions_items()
            if isinstance(f, tvm.tirx.PrimFunc)
        ),
        reverse=True,
    )
    print(
        f"{args.model} batch {args.batch} {args.graph}, CPU {cpu_name()} (mcpu "
        f"{p.target.get('mcpu')}), {args.threads} threads; kernels by schedule "
        f"{build.schedule_counts(lowered)}"
    )
    for ms, name in rows[: args.top]:
        print(f"{ms:8.3f} ms  {name}")
    groups = {}
    for ms, name in rows:
        group = groups.setdefault(re.sub(r"\d+", "", name), [0.0, 0])
        group[0], group[1] = group[0] + ms, group[1] + 1
    print(f"sum {sum(ms for ms, _ in rows):.3f} ms over {len(rows)} kernels; by kind:")
    for kind, (ms, count) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
        print(f"{ms:8.3f} ms {count:3d}  {kind}")


if __name__ == "__main__":
    main()
