"""Per-layer error of the INT8 numerics, layer sensitivity, and greedy FP32 fallback.

The views follow the peers' tools: ONNX Runtime's ``qdq_loss_debug`` (per-tensor error of the
quantized model against the float one, as the error accumulates), AIMET's QuantAnalyzer
(each layer quantized alone; weights only (W8A32) and activations only (W32A8)), and NNCF's
``quantize_with_accuracy_control`` (rank layers by how much the model recovers when that
layer alone stays float; return the worst to float, greedily, until the target holds).
Everything runs on the PyTorch model with ``fakequant`` layers, whose arithmetic is the INT8
graph's (see that module).
"""

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from tqdm import tqdm

from ..core.progress import say
from ..measure.intervals import clopper_pearson
from ..measure.metrics import SINGLE, judged, output_kind
from ..quantize.bias import bias_shifts
from ..quantize.fakequant import quantized
from .energy import Energy


@dataclass
class LayerStats:
    """Error statistics of one quantized layer's output against FP32, over the images.

    Attributes:
        accumulated: every layer quantized (the INT8 graph), this layer's output.
        alone: only this layer quantized, fed its FP32 input.
        weights_only: W8A32: only this layer's weight quantized.
        activations_only: W32A8: only this layer's input quantized.
        clipped: elements of the FP32 input outside the calibrated range [lo, hi].
        elements: elements of the FP32 input seen.
        sensitivity: logits with every layer but this one quantized (None until measured).
        agree: images whose top-1 class with every layer but this one quantized matches FP32.
    """

    accumulated: Energy = field(default_factory=Energy)
    alone: Energy = field(default_factory=Energy)
    weights_only: Energy = field(default_factory=Energy)
    activations_only: Energy = field(default_factory=Energy)
    clipped: int = 0
    elements: int = 0
    sensitivity: Energy = None
    agree: int = 0

    @property
    def clip_fraction(self):
        """Fraction in [0, 1] of input values outside the calibrated range."""
        return self.clipped / self.elements if self.elements else 0.0


@dataclass
class Diagnosis:
    """The result of ``diagnose``: ``layers`` (name -> ``LayerStats``, graph order),
    ``logits`` (all layers quantized against FP32), ``agree`` and ``images`` (top-1 matches
    of that model with FP32, of how many)."""

    layers: dict
    logits: Energy
    agree: int
    images: int

    def ranking(self):
        """Layer names, most sensitive first: by the logits SQNR (dB) regained when that
        layer alone stays FP32, then by its top-1 matches regained."""
        base = self.logits.sqnr_db

        def gain(item):
            s = item[1]
            return (s.sensitivity.sqnr_db - base, s.agree)

        return [name for name, _ in sorted(self.layers.items(), key=gain, reverse=True)]


def diagnose(model, fakes, batches, sensitivity=True, ends_in=None):
    """Measure every quantized layer on ``batches``.

    Args:
        model: the FP32 PyTorch model (eval mode).
        fakes: its ``fakequant.FakeLayer`` list.
        batches: list of float32 tensors (N, C, H, W), preprocessed images.
        sensitivity: also run the model once per layer with that layer kept FP32.
        ends_in: the op computing the model's output (``model.graph.output_op``), which
            tells sigmoids apart (``measure.metrics.output_kind``).

    Returns:
        ``Diagnosis``.
    """
    stats = {f.name: LayerStats(sensitivity=Energy() if sensitivity else None) for f in fakes}
    logits, agree, images = Energy(), 0, 0
    every = {f.index for f in fakes}
    steps = len(batches) * (2 + (len(fakes) if sensitivity else 0))
    bar = tqdm(total=steps, desc="diagnose", unit="pass", leave=False, disable=None)
    started = time.perf_counter()
    with torch.no_grad():
        for i, x in enumerate(batches):
            if i == 1:
                _say_estimate(time.perf_counter() - started, len(batches), len(fakes), steps)
            with quantized(model, fakes, set()) as (run, seen):
                ref = run(x)
                fp32 = dict(seen)
            _layer_alone(fakes, fp32, stats)
            with quantized(model, fakes, every) as (run, seen):
                out = run(x)
                for f in fakes:
                    stats[f.name].accumulated.add(fp32[f.name][1], seen[f.name][1])
            logits.add(*_judged(ref, out, ends_in))
            agree += _agree(ref, out)
            images += len(x)
            bar.update(2)
            for f in fakes if sensitivity else ():
                out = _logits(model, x, fakes, every - {f.index})
                stats[f.name].sensitivity.add(*_judged(ref, out, ends_in))
                stats[f.name].agree += _agree(ref, out)
                bar.update(1)
    bar.close()
    return Diagnosis(stats, logits, agree, images)


def _say_estimate(first_s, batches, layers, passes):
    """One progress line after the first batch: the work and the time it will take, s."""
    say(
        f"diagnose: {layers} INT8 layers on {batches} batches ({passes} model passes); the "
        f"first batch took {first_s:.1f} s, about {first_s * (batches - 1):.0f} s to go"
    )


def _layer_alone(fakes, fp32, stats):
    """Each layer quantized alone on its FP32 input: both sides, weights only, inputs only;
    and the input's elements outside the calibrated range."""
    for f in fakes:
        x, y = fp32[f.name]
        s = stats[f.name]
        s.alone.add(y, f.forward(x))
        s.weights_only.add(y, f.forward(x, input_q=False))
        s.activations_only.add(y, f.forward(x, weight_q=False))
        s.clipped += int(((x < f.lo) | (x > f.hi)).sum())
        s.elements += x.numel()


def _logits(model, x, fakes, active):
    with quantized(model, fakes, active) as (run, _):
        return run(x)


def _judged(ref, out, ends_in):
    """The model outputs ``ref`` and ``out`` (N, K) in the space the run's error is judged in
    (``measure.metrics.judged``: centred logits, whether the model ends in logits,
    probabilities, percentages or log-probabilities; a sigmoid's log-odds), so that the
    logits SQNR here is the report's; and whether to judge them about ``ref``'s mean over
    the images (a single value, ``judged_pair``: ``Energy.add``'s ``about_mean``)."""
    kind = output_kind(ref.detach().double().numpy(), ends_in)
    pair = [torch.from_numpy(judged(t.detach().double().numpy(), kind)) for t in (ref, out)]
    return (*pair, kind == SINGLE)


def _agree(ref, out):
    return int((ref.argmax(1) == out.argmax(1)).sum())


MIN_GAIN_DB = 0.5  # the smallest held-out logits SQNR gain a layer kept in FP32 must buy


@dataclass
class Step:
    """One step of the fallback's path: ``layer`` kept in FP32 on top of the steps before
    (None: the all-INT8 start), with the held-out top-1 matches ``agree`` of ``images``,
    the logits SQNR (dB; inf for identical logits) and, for a step that gained less than
    the minimum and was undone, ``accepted`` False."""

    layer: str | None
    agree: int
    images: int
    sqnr_db: float
    accepted: bool = True

    @property
    def agreement(self):
        """Top-1 agreement in [0, 1]."""
        return self.agree / self.images


@dataclass
class Fallback:
    """The result of ``fallback``: ``kept`` (layer names kept FP32, in the order chosen),
    ``steps`` (``Step``: the all-INT8 start, each layer kept, and last the step undone
    for too small a gain, if one was), ``reached`` (the target held on the held-out images,
    or their agreement's 95 % interval reaches it) and ``stop`` (why it stopped, in
    words)."""

    kept: list
    steps: list
    reached: bool
    stop: str


def fallback(
    model, fakes, batches, ranking, target, bias_x=None, min_gain_db=MIN_GAIN_DB, ends_in=None
):
    """Keep layers in FP32, most sensitive first, while each buys a measurable gain, until
    the top-1 agreement with FP32 on ``batches`` (the held-out images) reaches ``target``.

    The stopping rule is NNCF's accuracy-control loop (``quantize_with_accuracy_control``:
    return layers to float, most sensitive first) with a smooth measure beside the count:
    on a few dozen held-out images one flip is 1-2 % of agreement and follows float
    rounding on near-tie images, so a layer is kept only when it raises the held-out logits
    SQNR by at least ``min_gain_db``; the first layer that does not is undone and the
    search stops ("no measurable gain"). efficientnet_lite0 on the shared photos (64
    held-out): the first layer gained 1.7 dB, the second 0.07 dB for one near-tie image at
    +29 % latency (measured when this rule was set).

    Args:
        model, fakes, batches: as ``diagnose``.
        ranking: layer names, most sensitive first (``Diagnosis.ranking``).
        target: the top-1 agreement to reach, a fraction in [0, 1].
        bias_x: the images bias correction measures on (``quantize.bias``), or None when it
            is off; with them, every step re-measures the shifts of its INT8 layers, as the
            build with those layers in FP32 will. GPTQ weights are not rounded again at each
            step: the build with the chosen layers in FP32 rounds its own, so its agreement
            can differ from the last step's by near-tie images.
        min_gain_db: dB >= 0; 0 keeps adding layers until the target holds.
        ends_in: as ``diagnose``.

    Returns:
        ``Fallback``.
    """
    with torch.no_grad():
        refs = [model(x.clone()) for x in batches]  # a model may write to its input (C22)
    by_name = {f.name: f for f in fakes}
    every = {f.index for f in fakes}
    kept, steps = [], []
    for n, layer in enumerate([None, *ranking]):
        started = time.perf_counter()
        trial = kept + [layer] if layer else kept
        active = every - {by_name[n].index for n in trial}
        if bias_x is not None:
            bias_shifts(model, fakes, bias_x, active)
        step = Step(layer, *_score(model, fakes, batches, refs, active, ends_in))
        _say_step(n, step, len(ranking), time.perf_counter() - started)
        if steps and _gain(step, steps[-1]) < min_gain_db:
            gain = _gain(step, steps[-1])
            steps.append(replace(step, accepted=False))
            stop = f"no measurable gain: {layer} added {gain:.2f} dB (< {min_gain_db:g} dB)"
            return _unreached(kept, steps, target, stop)
        steps.append(step)
        kept = trial
        if step.agreement >= target:
            return Fallback(kept, steps, True, "target reached")
    return _unreached(kept, steps, target, "every layer tried")


def _say_step(n, step, layers, seconds):
    """One progress line per fallback step: the layer tried, the held-out agreement and
    SQNR, and the time a step takes with the most steps left, s."""
    tried = f"{step.layer} in FP32" if step.layer else "every layer INT8"
    say(
        f"FP32 fallback step {n} of at most {layers}: {tried}: held-out top-1 agreement "
        f"{step.agree}/{step.images}, logits SQNR {step.sqnr_db:.2f} dB; {seconds:.1f} s a "
        f"step, at most {seconds * (layers - n):.0f} s to go"
    )


def _unreached(kept, steps, target, stop):
    """A search that stopped below ``target``: reached all the same when the held-out images
    cannot refute it (the 95 % Clopper-Pearson interval of the last kept step's agreement
    reaches the target), as one flip on a few dozen images cannot."""
    last = [s for s in steps if s.accepted][-1]
    low, high = clopper_pearson(last.agree, last.images)
    held = f"{last.agree}/{last.images}, 95 % CI {100 * low:.1f}-{100 * high:.1f} %"
    if high >= target:
        return Fallback(kept, steps, True, f"{stop}; held-out {held}: target not refuted")
    return Fallback(kept, steps, False, f"{stop}; held-out {held}: below the target")


def _gain(step, before):
    """The logits SQNR (dB) ``step`` gained over ``before``; identical logits are infinite."""
    if math.isinf(before.sqnr_db):
        return 0.0
    return step.sqnr_db - before.sqnr_db


def _score(model, fakes, batches, refs, active, ends_in):
    """(top-1 matches, images, logits SQNR dB or inf) of the model with ``active`` INT8."""
    energy, agree = Energy(), 0
    with torch.no_grad():
        for x, ref in zip(batches, refs, strict=True):
            out = _logits(model, x, fakes, active)
            energy.add(*_judged(ref, out, ends_in))
            agree += _agree(ref, out)
    return agree, sum(len(x) for x in batches), energy.sqnr_db


def as_rows(diagnosis):
    """One dict per layer (graph order): the report's per-layer figures, JSON-ready
    (dB, cosine in [-1, 1], max abs error in the output's units, fractions in [0, 1])."""
    rank = {name: i + 1 for i, name in enumerate(diagnosis.ranking())}
    base = diagnosis.logits.sqnr_db
    rows = []
    for name, s in diagnosis.layers.items():
        row = {
            "layer": name,
            "accumulated_sqnr_db": s.accumulated.sqnr_db,
            "accumulated_cosine": s.accumulated.cosine,
            "accumulated_max_abs_error": s.accumulated.max_abs,
            "alone_sqnr_db": s.alone.sqnr_db,
            "weights_only_sqnr_db": s.weights_only.sqnr_db,
            "activations_only_sqnr_db": s.activations_only.sqnr_db,
            "clipped_fraction": s.clip_fraction,
        }
        if s.sensitivity is not None:
            row["sensitivity_rank"] = rank[name]
            row["logits_sqnr_gain_db"] = s.sensitivity.sqnr_db - base
            row["top1_agreement_kept_fp32"] = s.agree / diagnosis.images
        rows.append(row)
    return rows


def to_batches(images, indices, preprocess, batch_size):
    """Preprocessed float32 tensors (N, C, H, W) of ``indices``, in batches."""
    from ..data.batches import batches

    chunks = batches(images, indices, preprocess, batch_size)
    return [torch.from_numpy(np.ascontiguousarray(x)) for x, _ in chunks]
