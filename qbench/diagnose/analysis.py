"""Per-layer error of the INT8 numerics, layer sensitivity, and greedy FP32 fallback.

The views follow the peers' tools: ONNX Runtime's ``qdq_loss_debug`` (per-tensor error of the
quantized model against the float one, as the error accumulates), AIMET's QuantAnalyzer
(each layer quantized alone; weights only (W8A32) and activations only (W32A8)), and NNCF's
``quantize_with_accuracy_control`` (rank layers by how much the model recovers when that
layer alone stays float; return the worst to float, greedily, until the target holds).
Everything runs on the PyTorch model with ``fakequant`` layers, whose arithmetic is the INT8
graph's (see that module).
"""

from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from ..quantize.bias import bias_shifts
from .energy import Energy
from .fakequant import quantized


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


def diagnose(model, fakes, batches, sensitivity=True):
    """Measure every quantized layer on ``batches``.

    Args:
        model: the FP32 PyTorch model (eval mode).
        fakes: its ``fakequant.FakeLayer`` list.
        batches: list of float32 tensors (N, C, H, W), preprocessed images.
        sensitivity: also run the model once per layer with that layer kept FP32.

    Returns:
        ``Diagnosis``.
    """
    stats = {f.name: LayerStats(sensitivity=Energy() if sensitivity else None) for f in fakes}
    logits, agree, images = Energy(), 0, 0
    every = {f.index for f in fakes}
    steps = len(batches) * (2 + (len(fakes) if sensitivity else 0))
    bar = tqdm(total=steps, desc="diagnose", unit="pass", leave=False, disable=None)
    with torch.no_grad():
        for x in batches:
            with quantized(model, fakes, set()) as (run, seen):
                ref = run(x)
                fp32 = dict(seen)
            _layer_alone(fakes, fp32, stats)
            with quantized(model, fakes, every) as (run, seen):
                out = run(x)
                for f in fakes:
                    stats[f.name].accumulated.add(fp32[f.name][1], seen[f.name][1])
            logits.add(ref, out)
            agree += _agree(ref, out)
            images += len(x)
            bar.update(2)
            for f in fakes if sensitivity else ():
                out = _logits(model, x, fakes, every - {f.index})
                stats[f.name].sensitivity.add(ref, out)
                stats[f.name].agree += _agree(ref, out)
                bar.update(1)
    bar.close()
    return Diagnosis(stats, logits, agree, images)


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


def _agree(ref, out):
    return int((ref.argmax(1) == out.argmax(1)).sum())


@dataclass
class Fallback:
    """The result of ``fallback``: ``kept`` (layer names kept FP32, in the order chosen),
    ``steps`` ((layers kept FP32, top-1 agreement in [0, 1], logits SQNR dB) after each
    choice, the first with none kept) and ``reached`` (the target held)."""

    kept: list
    steps: list
    reached: bool


def fallback(model, fakes, batches, ranking, target, bias_x=None):
    """Keep layers in FP32, most sensitive first, until the top-1 agreement with FP32 on
    ``batches`` reaches ``target`` (a fraction in [0, 1]), or every layer is FP32.

    Args:
        model, fakes, batches: as ``diagnose``.
        ranking: layer names, most sensitive first (``Diagnosis.ranking``).
        target: the top-1 agreement to reach.
        bias_x: the images bias correction measures on (``quantize.bias``), or None when it
            is off; with them, every step re-measures the shifts of its INT8 layers, as the
            build with those layers in FP32 will. GPTQ weights are not rounded again at each
            step: the build with the chosen layers in FP32 rounds its own, so its agreement
            can differ from the last step's by near-tie images.

    Returns:
        ``Fallback``.
    """
    with torch.no_grad():
        refs = [model(x.clone()) for x in batches]  # a model may write to its input (C22)
    by_name = {f.name: f for f in fakes}
    kept, steps = [], []
    for step in range(len(ranking) + 1):
        active = {f.index for f in fakes} - {by_name[n].index for n in kept}
        if bias_x is not None:
            bias_shifts(model, fakes, bias_x, active)
        agreement, sqnr = _score(model, fakes, batches, refs, active)
        steps.append((len(kept), agreement, sqnr))
        if agreement >= target or step == len(ranking):
            break
        kept.append(ranking[step])
    return Fallback(kept, steps, steps[-1][1] >= target)


def _score(model, fakes, batches, refs, active):
    energy, agree = Energy(), 0
    with torch.no_grad():
        for x, ref in zip(batches, refs, strict=True):
            out = _logits(model, x, fakes, active)
            energy.add(ref, out)
            agree += _agree(ref, out)
    total = sum(len(x) for x in batches)
    return agree / total, energy.sqnr_db


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
    from ..data import batches

    chunks = batches(images, indices, preprocess, batch_size)
    return [torch.from_numpy(np.ascontiguousarray(x)) for x, _ in chunks]
