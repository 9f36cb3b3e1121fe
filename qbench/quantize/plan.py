"""Per-layer decisions: which layers become INT8, with which parameters, and why not."""

from ..errors import UserError
from .params import activation_params, quantize_weight
from .rewrite import LayerPlan


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
        ranges: calibrated ``Range`` of each layer's input, by layer name.
        config: the ``QuantConfig``.
    """
    check_skip_layers(config.skip_layers, layers)
    first_conv = next((la.index for la in layers if la.op == "conv2d"), None)
    plans = []
    for layer in layers:
        reason = _skip_reason(layer, config, first_conv)
        if reason:
            plans.append(LayerPlan(reason=reason))
            continue
        r = ranges[layer.name]
        act = activation_params(r.lo, r.hi)
        weight = quantize_weight(layer.weight, layer.channel_axis, config.per_channel)
        plans.append(LayerPlan(act, weight))
    return plans


def _skip_reason(layer, config, first_conv):
    if layer.index in config.skip_layers or layer.name in config.skip_layers:
        return "skipped by --skip-layers"
    if config.skip_first and layer.index == first_conv:
        return "first conv kept in FP32 (--keep-first-fp32, as Relay's skip_conv_layers)"
    return ""
