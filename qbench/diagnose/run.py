"""The diagnosis of a prepared run: per-layer INT8 error and sensitivity on the calibration
images, and the FP32 fallback's search for the layers to keep in FP32."""

import re
import time
from dataclasses import replace

from ..compile import build, targets
from ..core.progress import stage
from ..data import full_batches
from ..measure import timing
from ..measure.intervals import clopper_pearson, images_needed
from ..measure.metrics import latency_stats
from ..measure.runners import TVMRunner
from ..model import frontend
from ..quantize.fakequant import fake_layers
from ..quantize.plan import make_plans
from ..quantize.refine import calib_images
from ..quantize.rewrite import rewrite
from ..report.diagnosis import TOP
from .analysis import MIN_GAIN_DB, as_rows, diagnose, fallback, to_batches
from .plots import histogram_png, input_histograms


def diagnose_prepared(prepared, accuracy_target=None, plots=True):
    """Diagnose every INT8 layer of a ``Prepared`` run (``pipeline.prepare``) on its
    calibration images; with ``accuracy_target`` (top-1 agreement with FP32 to reach by
    keeping layers in FP32, a fraction in [0, 1], or None), pick the FP32 fallback, judged on
    the run's held-out images. Neither touches the evaluation images, which stay unbiased for
    a ``qbench run`` with the same data, sizes and seed.

    Returns:
        (report, pngs): the diagnosis report dict and {file name: PNG bytes} of the input
        histograms of the most sensitive layers (``report.diagnosis.write_diagnosis`` writes
        both); without ``plots`` the PNGs are not made (``{}``).
    Raises:
        UserError: a layer without a PyTorch module (see ``fake_layers``).
    """
    started = time.time()
    opts, model = prepared.opts, prepared.model
    module = model.module  # in eval mode: the frontend checked it
    fakes = fake_layers(module, prepared.layers, prepared.plans)
    indices = prepared.split.calib
    with stage("diagnose") as st:
        batches = to_batches(prepared.images, indices, model.preprocess, opts.batch_size)
        diagnosis = diagnose(module, fakes, batches)
        st.note = f"{len(fakes)} INT8 layers on {len(indices)} calibration images"
    report = {
        "model": model.name,
        "calibration": prepared.calibration,
        "config": opts.quant.to_dict(),
        "images": diagnosis.images,
        "int8_layers": len(fakes),
        "logits_sqnr_db": diagnosis.logits.sqnr_db,
        "top1_agreement": diagnosis.agree / diagnosis.images if _ranked(prepared) else None,
        "layers": as_rows(diagnosis),
        "ranking": diagnosis.ranking(),
    }
    if accuracy_target is not None:
        held = prepared.holdout
        with stage("FP32 fallback") as st:
            held_out = to_batches(prepared.images, held, model.preprocess, opts.batch_size)
            fb = fallback(
                module, fakes, held_out, diagnosis.ranking(), accuracy_target, _bias_x(prepared)
            )
            st.note = f"{len(fb.kept)} layers kept in FP32 ({fb.stop})"
        report["fallback"] = fallback_record(prepared, fb, accuracy_target)
    pngs = {}
    if plots:
        with stage("plots") as st:
            pngs = _plots(module, fakes, batches, report)
            st.note = f"input histograms of the {len(pngs)} most sensitive layers"
    report["plots"] = list(pngs)
    report["wall_s"] = time.time() - started
    return report, pngs


def _plots(module, fakes, batches, report):
    """{file name: PNG bytes} of the input histogram of each of the ``TOP`` most sensitive
    layers (``hist-<rank>-<layer>.png``)."""
    names = report["ranking"][:TOP]
    hists = input_histograms(module, fakes, batches, names)
    by_name = {f.name: f for f in fakes}
    clipped = {r["layer"]: r["clipped_fraction"] for r in report["layers"]}
    pngs = {}
    for rank, name in enumerate(names, 1):
        f = by_name[name]
        png = histogram_png(name, *hists[name], f.lo, f.hi, clipped[name])
        pngs[f"hist-{rank}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.png"] = png
    return pngs


def _ranked(prepared):
    """Whether the model's output ranks classes (K > 1): a single logit has no top-1."""
    return frontend.num_classes(prepared.imported.mod) > 1


def fallback_record(prepared, fb, target):
    """The report's ``fallback``: the target, the held-out images, whether it was reached
    and why it stopped, the layers kept, and the path: one entry per ``analysis.Step`` with
    its top-1 agreement, counts and 95 % Clopper-Pearson interval, logits SQNR (dB) and,
    for each accepted step, the TVM INT8 build's median latency (ms, one batch) with that
    step's layers in FP32. ``latency_ms`` holds the all-INT8 and chosen builds' (None when
    no layer is kept: the INT8 graph is unchanged)."""
    steps = [
        {
            "layer": s.layer,
            "accepted": s.accepted,
            "top1_agreement": s.agreement,
            "top1_agreement_count": s.agree,
            "top1_agreement_total": s.images,
            "top1_agreement_ci95": [round(v, 6) for v in clopper_pearson(s.agree, s.images)],
            "logits_sqnr_db": s.sqnr_db,
            "latency_ms": None,
        }
        for s in fb.steps
    ]
    record = {
        "target": target,
        "held_out_images": len(prepared.holdout),
        "needed_images": images_needed(target),
        "min_gain_db": MIN_GAIN_DB,
        "reached": fb.reached,
        "stop": fb.stop,
        "kept_fp32": fb.kept,
        "steps": steps,
        "latency_ms": None,
    }
    if fb.kept:
        with stage("latency cost") as st:
            path = path_latency(prepared, fb.kept)
            for step, ms in zip(steps, path, strict=False):
                step["latency_ms"] = ms
            record["latency_ms"] = {"all_int8": path[0], "with_fallback": path[-1]}
            st.note = f"TVM INT8 with 0 to {len(fb.kept)} layers in FP32, interleaved"
    return record


def path_latency(prepared, kept):
    """Median latency (ms, one batch of ``batch_size``) of the TVM INT8 build with the
    first 0, 1, ..., ``len(kept)`` layers of ``kept`` in FP32, timed interleaved
    (``timing.Rounds.time``) so that load on the machine hits every build alike.

    Returns:
        list of ``len(kept) + 1`` floats, ms, the all-INT8 build first.
    """
    p = prepared
    opts, target = p.opts, p.target
    mods = {"kept 0": p.int8_mod}
    for n in range(1, len(kept) + 1):
        quant = replace(opts.quant, fallback_layers=tuple(kept[:n]))
        mods[f"kept {n}"] = rewrite(p.imported.mod, make_plans(p.layers, p.ranges, quant))
    shape, n = p.model.input_shape, opts.batch_size
    x, _ = next(full_batches(p.images, p.split.calib[:n], p.model, n))
    device = targets.device_for(target)
    found = [
        TVMRunner(build.build(mod, target, p.databases).vm, device, n, shape, name)
        for name, mod in mods.items()
    ]
    samples = timing.rounds_for(opts.warmup, opts.repeat).time(found, x).samples_ms
    return [latency_stats(samples[name])["median_ms"] for name in mods]


def _bias_x(prepared):
    """The images bias correction measured on, or None when the plans carry no shifts."""
    if not any(plan.bias_shift is not None for plan in prepared.plans):
        return None
    return calib_images(prepared)
