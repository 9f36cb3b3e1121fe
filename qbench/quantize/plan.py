"""Per-layer decisions: which layers become INT8, with which parameters, and why not."""

import logging

import numpy as np

from ..core.errors import UserError
from ..model.graph import GlobalPool, ResidualOutput, range_owner
from .params import INT7_MAX, INT8_MAX, UINT8_MAX, activation_params, quantize_weight
from .rewrite import LayerPlan

log = logging.getLogger(__name__)
INT32_MAX = 2**31 - 1


def check_skip_layers(skip, layers):
    """Validate ``--skip-layers`` entries (indices or source names).

    Raises:
        UserError: an entry matches no layer; the message lists the valid ones.
    """
    names = {layer.name for layer in layers}
    bad = [s for s in skip if not (isinstance(s, int) and 0 <= s < len(layers)) and s not in names]
    if bad:
        raise UserError(
            f"--skip-layers {bad}: no such layer; valid: indices 0..{len(layers) - 1} or "
            f"names such as {', '.join(sorted(names)[:6])} (see the report's layer table)"
        )


def make_plans(layers, ranges, config):
    """One ``LayerPlan`` per layer.

    Args:
        layers: ``graph.Layer`` list in graph order.
        ranges: calibrated ``Range`` of each layer's input, by layer name, of each
            residual output (``graph.ResidualOutput.range_name``) and of each pooled input
            (``graph.GlobalPool.range_name``). A layer that reads a max pooling of another
            layer's input takes that layer's range (``graph.range_owner``).
        config: the ``QuantConfig``.
    """
    plans = []
    for layer, reason, weight in _decisions(layers, config):
        if reason:
            plans.append(LayerPlan(reason=reason))
            continue
        r = ranges[range_owner(layer, layers).name]
        output, pool = (
            _params(ranges.get(key(layer.name)))
            for key in (ResidualOutput.range_name, GlobalPool.range_name)
        )
        plans.append(LayerPlan(activation_params(r.lo, r.hi), weight, output=output, pool=pool))
    return plans


def _params(r):
    return None if r is None else activation_params(r.lo, r.hi)


def fp32_reasons(layers, config):
    """Per layer, why it stays FP32 ("" when it runs in INT8): ``--skip-layers``,
    ``--keep-first-fp32``, or an int32 accumulator that could overflow (``overflow_reason``,
    logged as a warning). Needs no calibration.

    Raises:
        UserError: a ``--skip-layers`` entry matches no layer.
    """
    return [reason for _, reason, _ in _decisions(layers, config)]


def _decisions(layers, config):
    """(layer, reason it stays FP32 or "", its ``QuantizedWeight`` or None) per layer."""
    check_skip_layers(config.skip_layers, layers)
    first_conv = next((la.index for la in layers if la.op == "conv2d"), None)
    out = []
    for layer in layers:
        reason, weight = _skip_reason(layer, config, first_conv), None
        if not reason:
            qmax = INT7_MAX if config.reduce_range else INT8_MAX
            weight = quantize_weight(
                layer.weight, layer.channel_axis, config.per_channel, qmax, config.fit_pairs
            )
            reason = overflow_reason(weight.q, layer.channel_axis)
            if reason:
                log.warning("layer %d %s: kept in FP32: %s", layer.index, layer.name, reason)
        out.append((layer, reason, weight))
    return out


def accumulator_bound(q, channel_axis):
    """The largest |int32 accumulator| any uint8 input can produce with int8 weights ``q``.

    Each output channel sums products (x_q - z_x) * w_q with |x_q - z_x| <= 255, so its
    accumulator stays within 255 * sum|w_q| over that channel's weights, before and after
    the zero-point correction; the bound is reached by an input at 0 or 255 everywhere.

    Args:
        q: int8 weights, conv2d (O, I, kH, kW) or matmul (K, M).
        channel_axis: axis of output channels (0 for conv2d, -1 for matmul).

    Returns:
        int: the bound over all output channels.
    """
    moved = np.moveaxis(np.asarray(q, np.int64), channel_axis, 0)
    return int(UINT8_MAX * np.abs(moved.reshape(moved.shape[0], -1)).sum(axis=1).max())


def overflow_reason(q, channel_axis):
    """Why an int32 accumulator could wrap for weights ``q`` (see ``accumulator_bound``), or
    "" when it cannot."""
    bound = accumulator_bound(q, channel_axis)
    if bound <= INT32_MAX:
        return ""
    return (
        f"int32 accumulator could overflow (255 x sum|w_q| = {bound:.3g} > 2^31 - 1 "
        "for some output channel)"
    )


def _skip_reason(layer, config, first_conv):
    if layer.index in config.skip_layers or layer.name in config.skip_layers:
        return "skipped by --skip-layers"
    if layer.name in config.fallback_layers:
        return "kept in FP32 by the --accuracy-target fallback"
    if config.skip_first and layer.index == first_conv:
        return "first conv kept in FP32 (--keep-first-fp32, as Relay's skip_conv_layers)"
    return ""
