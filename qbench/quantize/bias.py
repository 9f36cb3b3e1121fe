"""Empirical bias correction: remove the mean shift INT8 adds to each layer's output.

Quantization errors are not zero-mean per output channel (a channel's rounded weights sum to
a slightly different value; clipping cuts one tail), so each INT8 layer shifts its output's
mean, and the shifts add up through the network. Following Finkelstein et al., "Fighting
Quantization Bias With Bias" (2019), and the empirical bias correction of Nagel et al.,
"Data-Free Quantization Through Weight Equalization and Bias Correction" (ICCV 2019), the
shift is measured on the calibration images: per output channel, the mean of the FP32 layer
output minus the mean of the INT8 layer output, with every earlier layer already INT8 and
corrected; the difference is added to the INT8 layer's output. In the integer graph it is
folded into the int32 zero-point correction (rounded to the accumulator's step, the rescale
s_x * s_w), so it costs no operation.
"""

from dataclasses import replace

import torch


def bias_shifts(model, fakes, x, active=None):
    """Measure each quantized layer's per-channel output shift and set it on its
    ``FakeLayer`` (``shift``).

    Args:
        model: the FP32 PyTorch model (eval mode).
        fakes: its ``quantize.fakequant.FakeLayer`` list (graph order).
        x: the calibration images, float32 tensor (N, C, H, W), all in one batch, so that each
            layer's shift is known before any later layer sees the data.
        active: indices of the layers in INT8 (default: all of ``fakes``); the others run
            FP32 and keep their ``shift``.

    Returns:
        dict layer name -> float64 array (C_out,): FP32 mean minus INT8 mean, in the INT8
        graph's units (the module's, times the folded BatchNorm factor ``fold_scale``).
    """
    from .fakequant import quantized

    with torch.no_grad():
        with quantized(model, fakes, set()) as (run, seen):
            run(x)
            means = {f.name: f.channel_mean(seen[f.name][1]) for f in fakes if f.name in seen}
        every = {f.index for f in fakes} if active is None else active
        with quantized(model, fakes, every, measure=means) as (run, _):
            run(x)
    return {f.name: f.shift.numpy() * f.fold_scale for f in fakes if f.index in every}


def corrected(plans, layers, shifts):
    """``plans`` with each quantized layer's ``bias_shift`` set from ``shifts`` (by name)."""
    return [
        replace(plan, bias_shift=shifts[layer.name]) if plan.quantized else plan
        for plan, layer in zip(plans, layers, strict=True)
    ]
