"""Where a TVM build's time goes: every kernel of one model's FP32 or INT8 build, timed where
it runs, inside the model (the VM's instrument hook stamps each call), summed over its calls
in one inference (kernels of equal shapes are one function called several times), largest
first, then summed by kernel kind (the name without its numbering suffixes), with each kernel's
parameter shapes.

    python benchmarks/kernel_times.py --model mobilenet_v2 [--batch 1] [--graph tvm_int8]

The hook costs a few microseconds a call (the line "instrumented run" against "plain run"
says how much), so the sum is a little above the model's latency at batch 1. Prints the CPU
and the kernels by schedule source.
"""

import argparse
import re
import tempfile
import time

import latency
import numpy as np

from qbench.compile import build, targets
from qbench.data import full_batches
from qbench.pipeline.prepare import graphs, prepare
from qbench.quantize import QuantConfig
from qbench.report.assemble import cpu_name


def in_model_ms(vm, data, runs=10, warmup=3):
    """{kernel name: (ms per inference, calls per inference)} over ``runs`` calls of the
    VM's ``main`` on ``data``, each kernel call stamped by the VM's instrument hook, and the
    median ms of an instrumented and of a plain inference."""
    clock, started, totals = time.perf_counter, [0.0], {}

    def stamp(func, name, before_run, ret_value, *args):
        if before_run:
            started[0] = clock()
        else:
            spent = totals.setdefault(name, [0.0, 0])
            spent[0], spent[1] = spent[0] + clock() - started[0], spent[1] + 1
        return 0

    def median_ms():
        samples = []
        for _ in range(runs):
            t = clock()
            vm["main"](data)
            samples.append(clock() - t)
        return float(np.median(samples)) * 1e3

    for _ in range(warmup):
        vm["main"](data)
    plain = median_ms()
    vm.set_instrument(stamp)
    instrumented = median_ms()
    per_run = {k: (ms * 1e3 / runs, calls / runs) for k, (ms, calls) in totals.items()}
    return per_run, instrumented, plain


def _shapes(func):
    """A kernel's parameters as ``dtype[d0,d1,...]``, inputs then outputs."""
    return " ".join(
        f"{p.ty.dtype}[{','.join(str(int(s)) for s in p.ty.shape)}]" for p in func.params
    )


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
        x, _ = next(full_batches(p.images, p.split.eval, p.model, args.batch))
        mod = dict(graphs(p))[args.graph]
        lowered = build.lower(mod, p.target, p.databases)
        vm = build.build(mod, p.target, p.databases).vm
    import tvm

    device = targets.device_for(p.target)
    per_run, instrumented, plain = in_model_ms(vm, tvm.runtime.tensor(x, device))
    shapes = {
        gv.name_hint: _shapes(f)
        for gv, f in lowered.functions_items()
        if isinstance(f, tvm.tirx.PrimFunc)
    }
    rows = sorted(((ms, calls, name) for name, (ms, calls) in per_run.items()), reverse=True)
    print(
        f"{args.model} batch {args.batch} {args.graph}, CPU {cpu_name()} (mcpu "
        f"{p.target.get('mcpu')}), {args.threads} threads; kernels by schedule "
        f"{build.schedule_counts(lowered)}; instrumented run {instrumented:.3f} ms, plain "
        f"run {plain:.3f} ms"
    )
    for ms, calls, name in rows[: args.top]:
        print(f"{ms:8.3f} ms  {calls:4g} calls  {name}  {shapes.get(name, '(VM builtin)')}")
    groups, names = {}, {name for _, _, name in rows}
    for ms, calls, name in rows:
        group = groups.setdefault(kind_of(name, names), [0.0, 0.0])
        group[0], group[1] = group[0] + ms, group[1] + calls
    print(f"sum {sum(row[0] for row in rows):.3f} ms over {len(rows)} functions; by kind:")
    for kind, (ms, calls) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
        print(f"{ms:8.3f} ms {calls:5g} calls  {kind}")


def kind_of(name, names):
    """The kernel ``name`` without the number TVM appends to tell copies apart: digits after
    two letters before a ``_`` or the end (``fused_add3`` -> ``fused_add``), or trailing
    digits where the name without them is among ``names`` (``amx_conv2d2`` -> ``amx_conv2d``;
    ``amx_conv2d`` itself stays)."""
    kind = re.sub(r"(?<=[a-z]{2})\d+(?=_|$)", "", name)
    base = re.sub(r"\d+$", "", name)
    return base if kind == name and base in names else kind


if __name__ == "__main__":
    main()
