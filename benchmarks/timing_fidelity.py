"""Does ``qbench run`` time each runner as it runs alone? Medians side by side, as ratios.

For each model and batch, one process builds PyTorch eager FP32, TVM FP32 and TVM INT8
exactly as ``qbench run`` does, then alternates, ``--repeats`` times, between

- alone: each runner called ``--alone`` times in a row (after ``--warmup`` untimed calls),
  the way a deployed model serves back-to-back requests, and
- in-run: ``qbench run``'s timing protocol (``timing.Rounds.time``, ``--warmup`` +
  ``--rounds`` rounds),

and prints each runner's median over the pooled samples of both, and in-run / alone (1.0:
the run reports the runner's real latency). Alternating the two spreads slow drifts of a
shared machine over both. Also printed: TVM INT8 / TVM FP32 from each, and the run's
NOISY mark. Time it on an idle machine and name its CPU beside the figures.

    python benchmarks/timing_fidelity.py --models resnet18,efficientnet_lite0,mobilenet_v2 \
        --batches 1,8
"""

import sys
import tempfile

import numpy as np
from latency import bench_options, grid_parser
from tabulate import tabulate

from qbench.compile import build, targets
from qbench.data import full_batches
from qbench.measure import speed, timing
from qbench.measure.runners import TorchRunner, TVMRunner, time_samples
from qbench.pipeline.prepare import graphs, prepare
from qbench.quantize import QuantConfig
from qbench.report.assemble import cpu_name


def qbench_runners(model_name, batch, args):
    """(the batch x, [PyTorch eager FP32, TVM FP32, TVM INT8]) built as ``qbench run`` builds
    them (nearest weight rounding: the rounding does not change the kernels timed)."""
    with tempfile.TemporaryDirectory() as tmp:
        nearest = QuantConfig(weight_rounding="nearest")
        p = prepare(bench_options(model_name, batch, args, tmp, quant=nearest))
        x, _ = next(full_batches(p.images, p.split.eval, p.model, batch))
    found = [TorchRunner(p.model.module, batch, p.model.input_shape)]
    device = targets.device_for(p.target)
    for name, mod in graphs(p):
        vm = build.build(mod, p.target, p.databases).vm
        found.append(TVMRunner(vm, device, batch, p.model.input_shape, name))
    return x, found


def measure(model_name, batch, args):
    """Rows of the table for one model and batch (see the module docstring)."""
    x, found = qbench_runners(model_name, batch, args)
    alone = {r.name: [] for r in found}
    in_run = {r.name: [] for r in found}
    noisy = []
    for _ in range(args.repeats):
        for r in found:
            timing.settle()  # no other runtime's workers spinning: truly alone
            alone[r.name] += time_samples(r.timed_call(x), args.warmup, args.alone)
        run = timing.Rounds(args.warmup, args.rounds).time(found, x)
        for name, samples in run.samples_ms.items():
            in_run[name] += samples
        noisy.append(speed.speed(run.samples_ms).noisy)
    rows = []
    for r in found:
        a, b = np.median(alone[r.name]), np.median(in_run[r.name])
        rows.append([model_name, batch, r.name, f"{a:.2f}", f"{b:.2f}", f"{b / a:.3f}"])
    ratio_alone = np.median(alone["tvm_int8"]) / np.median(alone["tvm_fp32"])
    ratio_run = np.median(speed.median_ratio(in_run["tvm_int8"], in_run["tvm_fp32"]))
    rows.append(
        [
            model_name,
            batch,
            "TVM INT8 / TVM FP32",
            f"{ratio_alone:.3f}",
            f"{ratio_run:.3f}",
            f"{ratio_run / ratio_alone:.3f}",
        ]
    )
    print(
        f"{model_name} batch {batch}: NOISY in {sum(noisy)} of {len(noisy)} runs",
        file=sys.stderr,
    )
    return rows


def main():
    p = grid_parser(__doc__)
    p.add_argument("--alone", type=int, default=40, help="consecutive timed calls per block")
    p.add_argument("--rounds", type=int, default=20, help="timed rounds per qbench protocol run")
    p.add_argument("--repeats", type=int, default=2, help="alone/in-run alternations")
    args = p.parse_args()
    print(f"CPU {cpu_name()}, {args.threads} threads", file=sys.stderr)
    rows = []
    for model_name in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            rows += measure(model_name, batch, args)
    heads = ["model", "batch", "runner", "alone median ms", "in-run median ms", "in-run / alone"]
    print(tabulate(rows, heads, tablefmt="github"))


if __name__ == "__main__":
    main()
