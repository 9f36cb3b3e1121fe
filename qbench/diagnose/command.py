"""``qbench diagnose``: prepare a run, diagnose its INT8 layers, optionally pick an FP32
fallback, and write the diagnosis report."""

import time
from dataclasses import replace

from .. import build, targets
from ..compare import latency_stats
from ..data import holdout
from ..pipeline import full_batches, prepare
from ..progress import stage
from ..quantize.plan import make_plans
from ..quantize.rewrite import rewrite
from ..runners import TVMRunner
from .analysis import as_rows, diagnose, fallback, to_batches
from .fakequant import fake_layers


def run_diagnose(opts, accuracy_target=None, holdout_size=64):
    """Calibrate and plan as ``qbench run`` does, then diagnose every INT8 layer on the
    calibration images; the fallback is judged on ``holdout_size`` held-out images. Neither
    touches the evaluation images, which stay unbiased for a ``qbench run`` with the same
    data, sizes and seed.

    Args:
        opts: ``pipeline.RunOptions``.
        accuracy_target: top-1 agreement with FP32 to reach by keeping layers in FP32, a
            fraction in [0, 1], or None for no fallback.
        holdout_size: images for the fallback (``data.holdout``).

    Returns:
        dict: the diagnosis report (``report.write_diagnosis`` writes it).
    Raises:
        UserError: bad input, or a layer without a PyTorch module (see ``fake_layers``).
    """
    started = time.time()
    ctx = prepare(opts)
    model = ctx["model"]
    module = model.module.eval()
    fakes = fake_layers(module, ctx["layers"], ctx["plans"], opts.quant.per_channel)
    indices = ctx["split"].calib
    with stage("diagnose") as st:
        batches = to_batches(ctx["images"], indices, model.preprocess, opts.batch_size)
        diagnosis = diagnose(module, fakes, batches)
        st.note = f"{len(fakes)} INT8 layers on {len(indices)} calibration images"
    report = {
        "model": model.name,
        "calibration": ctx["calibration"],
        "config": opts.quant.to_dict(),
        "images": diagnosis.images,
        "int8_layers": len(fakes),
        "logits_sqnr_db": diagnosis.logits.sqnr_db,
        "top1_agreement": diagnosis.agree / diagnosis.images,
        "layers": as_rows(diagnosis),
        "ranking": diagnosis.ranking(),
    }
    if accuracy_target is not None:
        held = holdout(ctx["images"], ctx["split"], holdout_size, opts.seed)
        with stage("FP32 fallback") as st:
            held_out = to_batches(ctx["images"], held, model.preprocess, opts.batch_size)
            fb = fallback(module, fakes, held_out, diagnosis.ranking(), accuracy_target)
            st.note = f"{len(fb.kept)} layers kept in FP32" + ("" if fb.reached else " (missed)")
        report["fallback"] = {
            "target": accuracy_target,
            "held_out_images": len(held),
            "reached": fb.reached,
            "kept_fp32": fb.kept,
            "steps": [
                {"kept": k, "top1_agreement": a, "logits_sqnr_db": s} for k, a, s in fb.steps
            ],
        }
        with stage("latency cost") as st:
            report["fallback"]["latency_ms"] = latency_cost(ctx, fb.kept)
            st.note = "TVM INT8 with and without the FP32 layers"
    report["wall_s"] = time.time() - started
    return report


def latency_cost(ctx, kept):
    """Median latency (ms, one batch of ``batch_size``) of the TVM INT8 build with every
    layer in INT8 and with the layers ``kept`` in FP32, timed alternately (one run of each
    in turn) so that load on the machine hits both alike.

    Returns:
        dict: ``all_int8`` and ``with_fallback``, ms.
    """
    opts, target = ctx["opts"], ctx["target"]
    quant = replace(opts.quant, skip_layers=tuple(opts.quant.skip_layers) + tuple(kept))
    plans = make_plans(ctx["layers"], ctx["ranges"], quant)
    mods = {"all_int8": ctx["int8_mod"], "with_fallback": rewrite(ctx["imported"].mod, plans)}
    shape, n = ctx["model"].input_shape, opts.batch_size
    x, _ = next(full_batches(ctx["images"], ctx["split"].calib[:n], ctx["model"], n))
    calls = {
        name: TVMRunner(
            build.build(mod, target, ctx["databases"]), targets.device_for(target), n, shape, name
        ).timed_call(x)
        for name, mod in mods.items()
    }
    samples = {name: [] for name in calls}
    for _ in range(opts.warmup):
        for call in calls.values():
            call()
    for _ in range(opts.repeat):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: latency_stats(s)["median_ms"] for name, s in samples.items()}
