"""The diagnosis' steps on plain inputs: per-layer INT8 error and sensitivity on the
calibration images, the FP32 fallback's search for the layers to keep in FP32, their report
records and plots (``pipeline.diagnose`` runs them on a prepared run)."""

import re

from ..core.progress import stage
from ..core.words import plural
from ..measure.intervals import clopper_pearson, images_needed
from ..report.diagnosis import TOP, DiagnosisReport, FallbackRecord, FallbackStep
from .analysis import MIN_GAIN_DB, as_rows, diagnose, fallback
from .plots import histogram_png, input_histograms


def diagnosis_report(model, fakes, batches, calibration, quant, ranked, ends_in=None):
    """Diagnose every INT8 layer on the calibration images (``analysis.diagnose``).

    Args:
        model: the ``zoo.LoadedModel`` (its PyTorch module in eval mode).
        fakes: ``fakequant.fake_layers`` of the INT8 layers.
        batches: the calibration images as ``analysis.to_batches`` gives them.
        calibration: the run's ``CalibrationInfo``; quant: the ``QuantConfig`` as built.
        ranked: the output ranks classes (K > 1): a single logit has no top-1 agreement.
        ends_in: the op computing the output (``model.graph.output_op``).
    Returns:
        the ``report.diagnosis.DiagnosisReport``, without ``fallback``, ``plots`` and
        ``wall_s`` (``pipeline.diagnose`` adds them).
    """
    with stage("diagnose") as st:
        diagnosis = diagnose(model.module, fakes, batches, ends_in=ends_in)
        st.note = f"{len(fakes)} INT8 layers on {diagnosis.images} calibration images"
    return DiagnosisReport(
        model=model.name,
        calibration=calibration,
        config=quant.to_dict(),
        images=diagnosis.images,
        int8_layers=len(fakes),
        logits_sqnr_db=diagnosis.logits.sqnr_db,
        top1_agreement=diagnosis.agree / diagnosis.images if ranked else None,
        layers=tuple(as_rows(diagnosis)),
        ranking=tuple(diagnosis.ranking()),
    )


def fallback_search(module, fakes, held_out, ranking, accuracy_target, bias_x, ends_in=None):
    """The FP32 fallback (``analysis.fallback``) judged on the ``held_out`` batches
    (``analysis.to_batches``): an ``analysis.Fallback``; ``ends_in``: as
    ``diagnosis_report``."""
    with stage("FP32 fallback") as st:
        fb = fallback(module, fakes, held_out, ranking, accuracy_target, bias_x, ends_in=ends_in)
        st.note = f"{plural(len(fb.kept), 'layer')} kept in FP32 ({fb.stop})"
    return fb


def plots(module, fakes, batches, report):
    """{file name: PNG bytes} of the input histograms of the most sensitive layers of the
    ``DiagnosisReport`` ``report``."""
    with stage("plots") as st:
        pngs = _plots(module, fakes, batches, report)
        st.note = f"input histograms of the {len(pngs)} most sensitive layers"
    return pngs


def _plots(module, fakes, batches, report):
    """{file name: PNG bytes} of the input histogram of each of the ``TOP`` most sensitive
    layers (``hist-<rank>-<layer>.png``)."""
    names = report.ranking[:TOP]
    hists = input_histograms(module, fakes, batches, names)
    by_name = {f.name: f for f in fakes}
    clipped = {r["layer"]: r["clipped_fraction"] for r in report.layers}
    pngs = {}
    for rank, name in enumerate(names, 1):
        f = by_name[name]
        png = histogram_png(name, *hists[name], f.lo, f.hi, clipped[name])
        pngs[f"hist-{rank}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.png"] = png
    return pngs


def fallback_record(fb, accuracy_target, held_out_images):
    """The report's ``FallbackRecord`` of an ``analysis.Fallback``: the target, the held-out
    images, whether it was reached and why it stopped, the layers kept, and the path: one
    ``FallbackStep`` per ``analysis.Step`` with its top-1 agreement, counts and 95 %
    Clopper-Pearson interval, logits SQNR (dB) and ``latency_ms`` (None here;
    ``pipeline.diagnose`` times the TVM INT8 build of each accepted step, ms, one batch, and
    fills ``latency_ms`` of the record: the all-INT8 and chosen builds')."""
    steps = tuple(
        FallbackStep(
            layer=s.layer,
            accepted=s.accepted,
            top1_agreement=s.agreement,
            top1_agreement_count=s.agree,
            top1_agreement_total=s.images,
            top1_agreement_ci95=tuple(round(v, 6) for v in clopper_pearson(s.agree, s.images)),
            logits_sqnr_db=s.sqnr_db,
        )
        for s in fb.steps
    )
    return FallbackRecord(
        target=accuracy_target,
        held_out_images=held_out_images,
        needed_images=images_needed(accuracy_target),
        min_gain_db=MIN_GAIN_DB,
        reached=fb.reached,
        stop=fb.stop,
        kept_fp32=tuple(fb.kept),
        steps=steps,
    )
