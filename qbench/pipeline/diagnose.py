"""``qbench diagnose`` and ``run --diagnose`` / ``--accuracy-target``: the diagnosis of a
prepared run, the FP32 fallback, and the fallback's latency cost on the run's build path."""

import time
from dataclasses import replace

from ..core.progress import stage
from ..core.words import plural
from ..diagnose.analysis import to_batches
from ..diagnose.run import diagnosis_report, fallback_record, fallback_search, plots
from ..measure.metrics import latency_stats
from ..model import frontend, graph
from ..quantize.fakequant import fake_layers
from ..quantize.plan import make_plans
from ..quantize.refine import calib_images
from ..quantize.rewrite import rewrite
from ..report.diagnosis import FallbackLatency
from .builds import timed, tvm_runner
from .prepare import int8_rewrite, prepare


def run_diagnosis(opts):
    """``qbench diagnose``: prepare a run as ``qbench run`` does, then diagnose it.

    Args:
        opts: ``RunOptions``; ``accuracy_target`` asks for the fallback.
    Returns:
        (the ``DiagnosisReport`` with its ``wall_s`` from the start, {file name: PNG
        bytes}): see ``diagnosed_report``.
    """
    started = time.time()
    report, pngs = diagnosed_report(prepare(opts), opts.accuracy_target)
    return replace(report, wall_s=time.time() - started), pngs


def diagnosed_report(p, accuracy_target=None, with_plots=True):
    """Diagnose every INT8 layer of the ``Prepared`` run ``p`` on its calibration images;
    with ``accuracy_target`` (top-1 agreement with FP32 in [0, 1], or None) pick the FP32
    fallback, judged on the held-out images. Neither touches the evaluation images.

    Returns:
        (report, pngs): the ``report.diagnosis.DiagnosisReport`` (``fallback`` with the
        target) and {file name: PNG bytes} of the most sensitive layers' input histograms
        ({} without ``with_plots``).
    Raises:
        UserError: a layer without a PyTorch module (``fake_layers``).
    """
    started = time.time()
    model, n = p.model, p.opts.batch_size
    fakes = fake_layers(model.module, p.layers, p.plans)
    batches = to_batches(p.images, p.split.calib, model.preprocess, n)
    ranked = frontend.num_classes(p.imported.mod) > 1
    ends_in = graph.output_op(p.imported.mod)
    report = diagnosis_report(model, fakes, batches, p.calibration, p.quant, ranked, ends_in)
    if accuracy_target is not None:
        held_out = to_batches(p.images, p.holdout, model.preprocess, n)
        fb = fallback_search(
            model.module, fakes, held_out, report.ranking, accuracy_target, _bias_x(p), ends_in
        )
        record = _with_latency(p, fallback_record(fb, accuracy_target, len(p.holdout)))
        report = replace(report, fallback=record)
    pngs = plots(model.module, fakes, batches, report) if with_plots else {}
    return replace(report, plots=tuple(pngs), wall_s=time.time() - started), pngs


def diagnosed(p, attachments):
    """``run --diagnose`` / ``--accuracy-target``: ``p`` with its ``diagnosis`` and, when the
    fallback kept layers in FP32, its INT8 graph rebuilt with them (``p.quant``'s
    ``fallback_layers``). The input histograms go into ``attachments`` (a dict, or None to
    drop them)."""
    opts = p.opts
    diagnosis, pngs = diagnosed_report(p, opts.accuracy_target, with_plots=opts.diagnose)
    if attachments is not None:
        attachments.update(pngs)
    p = replace(p, diagnosis=diagnosis)
    kept = diagnosis.fallback.kept_fp32 if diagnosis.fallback is not None else ()
    if kept:
        with stage("INT8 rewrite with the fallback") as st:
            p, st.note = int8_rewrite(p, replace(opts.quant, fallback_layers=kept))
    return p


def _with_latency(p, record):
    """The ``FallbackRecord`` ``record`` with the TVM INT8 build's median latency (ms, one
    batch) for each accepted step's layers in FP32, timed interleaved on the run's
    build-and-time path (``builds``) so that load hits every build alike."""
    kept = record.kept_fp32
    if not kept:
        return record
    with stage("latency cost") as st:
        mods = {"kept 0": p.int8_mod}
        for n in range(1, len(kept) + 1):
            quant = replace(p.quant, fallback_layers=tuple(kept[:n]))
            mods[f"kept {n}"] = rewrite(p.imported.mod, make_plans(p.layers, p.ranges, quant))
        runners = [tvm_runner(p, mod, name)[0] for name, mod in mods.items()]
        samples = timed(p, runners, p.split.calib).samples_ms
        path = [latency_stats(samples[name])["median_ms"] for name in mods]
        st.note = f"TVM INT8 with 0 to {plural(len(kept), 'layer')} in FP32, interleaved"
    steps, built = [], iter(path)  # the accepted steps: the all-INT8 start, each layer kept
    for step in record.steps:
        steps.append(replace(step, latency_ms=next(built) if step.accepted else None))
    latency = FallbackLatency(all_int8=path[0], with_fallback=path[-1])
    return replace(record, steps=tuple(steps), latency_ms=latency)


def _bias_x(p):
    """The images bias correction measured on, or None when the plans carry no shifts."""
    if not any(plan.bias_shift is not None for plan in p.plans):
        return None
    return calib_images(p.images, p.split.calib, p.model.preprocess)
