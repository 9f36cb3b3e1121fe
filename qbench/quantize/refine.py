"""Refining the nearest-rounded INT8 plans on calibration images: GPTQ weight rounding
(``quantize.gptq``), then empirical bias correction (``quantize.bias``), each as the
``QuantConfig`` asks. Both run the PyTorch model with fake-quantized layers
(``quantize.fakequant``), so a model without a module per layer keeps its plans, with a
warning."""

from .. import data
from ..core.errors import QBenchError, UserError
from ..core.progress import say

CALIB_IMAGES = 64  # calibration images the refinements measure on, in one batch


def refine(plans, layers, quant, model, batch_size, calib_x):
    """(plans, info): ``plans`` refined as ``quant`` asks, and the report's
    ``{"weight_rounding": ..., "bias_correction": ...}`` (``"gptq (32 images)"``,
    ``"on (32 images)"``, ``"nearest"``, ``"off"``, or why a step was skipped).

    Args:
        plans: ``quantize.rewrite.LayerPlan`` list from ``quantize.plan.make_plans``.
        layers: the ``graph.Layer`` list the plans stand for, in graph order.
        quant: the ``QuantConfig`` asked for.
        model: the ``zoo.LoadedModel`` (its PyTorch module and (C, H, W) input shape).
        batch_size: images per batch of the run (N).
        calib_x: a zero-argument callable giving the calibration images the refinements
            measure on (``calib_images``); called only when a refinement runs.
    """
    from .bias import bias_shifts, corrected
    from .fakequant import check_modules, fake_layers
    from .gptq import gptq_weights

    module = model.module
    info = {"weight_rounding": quant.weight_rounding, "bias_correction": "off"}
    if quant.weight_rounding == "nearest" and not quant.bias_correction:
        return plans, info
    try:
        reasons = [plan.reason for plan in plans]
        check_modules(module, layers, reasons, model.input_shape, batch_size)
        fakes = fake_layers(module, layers, plans)
    except UserError as e:
        say(f"WARNING: GPTQ rounding and bias correction skipped (nearest rounding kept): {e}")
        skipped = f"skipped for every layer: {str(e).split(';')[0]}"
        if quant.weight_rounding == "gptq":
            info["weight_rounding"] = f"nearest (GPTQ {skipped})"
        if quant.bias_correction:
            info["bias_correction"] = skipped
        return plans, info
    x = calib_x()
    if quant.weight_rounding == "gptq":
        try:
            plans, rounded = gptq_weights(module, fakes, layers, plans, x)
            info["weight_rounding"] = f"gptq ({len(x)} images, {rounded} of {len(fakes)} layers)"
        except QBenchError as e:
            say(f"WARNING: GPTQ rounding failed, nearest rounding kept: {e}")
            info["weight_rounding"] = "nearest (GPTQ failed: see the warning)"
        fakes = fake_layers(module, layers, plans)
    if quant.bias_correction:
        plans = corrected(plans, layers, bias_shifts(module, fakes, x))
        info["bias_correction"] = f"on ({len(x)} images)"
    return plans, info


def calib_images(images, indices, preprocess):
    """The first ``CALIB_IMAGES`` of ``indices`` (calibration images) of the image source
    ``images``, preprocessed (``zoo.Preprocess``), in one float32 tensor (N, C, H, W): what
    the refinements measure on."""
    import torch

    indices = indices[:CALIB_IMAGES]
    (x, _), *_ = data.batches(images, indices, preprocess, len(indices))
    return torch.from_numpy(x)
