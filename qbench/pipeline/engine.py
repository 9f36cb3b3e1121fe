"""``qbench run``: prepare, (diagnose and fall back,) tune, build, evaluate, time, sign off;
the report's ``RunResult``."""

import logging
import time
from dataclasses import replace

import numpy as np
from tqdm import tqdm

from .. import data
from ..core.progress import say, stage
from ..measure import speed, timing, torch_int8
from ..measure.metrics import (
    accuracy_metrics,
    compare_logits,
    input_ignoring,
    input_independent,
    latency_stats,
    output_kind,
    per_image,
)
from ..measure.results import Latency, RunnerResult
from ..measure.runners import TorchRunner
from ..model import frontend, graph
from ..signoff.checks import signoff
from .builds import timed, tvm_runner
from .diagnose import diagnosed
from .prepare import connect_device, graphs, prepare, tuning_databases
from .record import build_report
from .tune import tune_graphs

log = logging.getLogger(__name__)


def run(opts, attachments=None):
    """Execute the whole job and return its ``report.result.RunResult`` (``to_json()``:
    report.json).

    Args:
        opts: ``RunOptions``.
        attachments: a dict that receives the report's other files ({file name: bytes}:
            the diagnosis' input histogram PNGs with ``opts.diagnose``), or None.
    Raises:
        UserError: bad input, detected before any slow step where possible.
    """
    started = time.time()
    p = prepare(opts)
    if opts.accuracy_target is not None or opts.diagnose:
        p = diagnosed(p, attachments)
    if opts.tune:
        with stage("tuning"):
            fresh = tune_graphs(p, opts.trials, opts.time_budget_min, opts.tune_graphs)
        databases, tuning_info = tuning_databases(opts, p.target, fresh)
        p = replace(p, databases=databases, tuning=tuning_info, device=connect_device(opts))
    p, runners = _build_runners(p)
    unavailable = {}
    if opts.torch_int8:
        extra, unavailable = _torch_int8(p)
        runners += extra
    model = p.model
    with stage("evaluation") as st:
        indices = p.split.eval
        logits, labels = _evaluate(runners, p.images, indices, model, opts.batch_size)
        st.note = f"{len(indices)} images"
    with stage("timing") as st:
        measured = timed(p, runners, p.split.eval)
        st.note = timing.rounds(measured.protocol)
    latency = measured.samples_ms
    keys = [p.images.keys[i] for i in p.split.eval] if p.images.keys else None
    kind = output_kind(logits["pytorch_fp32"], graph.output_op(p.imported.mod))
    results = _results(runners, logits, labels, latency, opts.limits.near_tie_margin, kind, keys)
    speeds = speed.speed(latency)
    quantized = sum(plan.quantized for plan in p.plans)
    classes = frontend.num_classes(p.imported.mod)
    verdict = signoff(
        results,
        opts.limits,
        classes,
        model.random_weights,
        quantized,
        p.quant.simulate,
        speeds,
    )
    wall_s = time.time() - started
    return build_report(p, results, wall_s, speeds, verdict, measured.protocol, unavailable)


def _named(outcomes, keys):
    """``outcomes`` (``metrics.per_image``) with each flip's ``image`` key added."""
    for f in outcomes.get("flips", []):
        f["image"] = str(keys[f["index"]]) if keys else None
    return outcomes


def _build_runners(p):
    """Build TVM FP32 and TVM INT8. Returns (a new ``Prepared`` whose ``tuning.kernels``
    holds {graph name: {schedule source: kernel count}}, the runners: PyTorch FP32 eager,
    TVM FP32, TVM INT8)."""
    runners = [TorchRunner(p.model.module, p.opts.batch_size, p.model.input_shape)]
    kernels = {}
    for name, mod in graphs(p):
        with stage(f"build {name.upper().replace('_', ' ')}"):
            runner, kernels[name] = tvm_runner(p, mod, name)
        log.info("%s kernels by schedule: %s", name, kernels[name])
        runners.append(runner)
    return replace(p, tuning=replace(p.tuning, kernels=kernels)), runners


def _torch_int8(p):
    """PyTorch's own INT8 runners of ``p.opts.torch_int8``, calibrated on the run's
    calibration images (``measure.torch_int8``). Returns (the runners, {runner name: why
    it could not be built})."""
    flows = {"fx": torch_int8.FX, "pt2e": torch_int8.PT2E}
    names = [flows[f] for f in p.opts.torch_int8]
    model, n = p.model, p.opts.batch_size
    with stage("PyTorch INT8") as st:
        calib = [x for x, _ in data.full_batches(p.images, p.split.calib, model, n)]
        found = torch_int8.torch_int8_runners(model.module, calib, n, model.input_shape, names)
        runners = [r for r in found if not isinstance(r, torch_int8.NotAvailable)]
        unavailable = {r.name: r.reason for r in found if isinstance(r, torch_int8.NotAvailable)}
        st.note = ", ".join(
            [torch_int8.TITLES[r.name] for r in runners]
            + [f"{torch_int8.TITLES[k]} not available" for k in unavailable]
        )
    for name, why in unavailable.items():
        say(f"{torch_int8.TITLES[name]}: not available: {why}")
    return runners, unavailable


def _evaluate(runners, images, indices, model, batch_size):
    logits = {r.name: [] for r in runners}
    labels = []
    batches = data.batches(images, indices, model.preprocess, batch_size)
    total = -(-len(indices) // batch_size)
    for x, y in tqdm(
        batches, total=total, desc="evaluate", unit="batch", leave=False, disable=None
    ):
        for r in runners:
            logits[r.name].append(r.infer(x))
        if y is not None:
            labels.append(y)
    logits = {k: np.concatenate(v) for k, v in logits.items()}
    return logits, (np.concatenate(labels) if labels else None)


def _results(runners, logits, labels, latency, margin, kind, keys=None):
    """{runner name: ``RunnerResult``}: latency, metrics against PyTorch FP32's logits
    (``ref``) and per-image outcomes, flips split at the near-tie ``margin`` and named by
    the evaluated images' ``keys`` (their files), where the data has them. PyTorch FP32's
    metrics name what its output is (``kind``, ``output_kind``: logits, probabilities,
    percentages, log-probabilities, independent probabilities, a single value); the
    others' say the space their error was judged in (``judged_space``)."""
    ref = logits["pytorch_fp32"]
    results = {}
    for r in runners:
        if r.name == "pytorch_fp32":
            metrics = accuracy_metrics(ref, labels) if labels is not None else {}
            metrics["nonfinite_logits"] = int((~np.isfinite(ref)).sum())
            metrics["output_kind"] = kind
            metrics["input_independent"] = input_independent(ref)
            metrics["input_ignoring"] = input_ignoring(ref, kind)
        else:
            metrics = compare_logits(ref, logits[r.name], labels, margin, kind)
        results[r.name] = RunnerResult(
            name=r.name,
            latency=Latency(**latency_stats(latency[r.name])),
            samples_ms=tuple(latency[r.name]),
            metrics=metrics,
            per_image=_named(per_image(ref, logits[r.name], labels, margin, kind), keys),
            device=r.device_name,
        )
    return results
