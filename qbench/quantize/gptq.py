"""GPTQ weight rounding: int8 weights chosen for the least error of the layer's output.

Rounding each weight to its nearest int8 step minimises the weight's error, not the output's.
GPTQ (Frantar, Ashkboos, Hoefler and Alistarh, "GPTQ: Accurate Post-Training Quantization
for Generative Pre-trained Transformers", ICLR 2023; after Optimal Brain Quantization,
Frantar and Alistarh, NeurIPS 2022) rounds one input weight of every output channel at a
time and moves the channel's weights not yet rounded to cancel, in the least-squares sense
over the calibration inputs, the output error that rounding made. The inputs enter only
through H = sum over input patches p of p p^T (one (d, d) matrix per conv group, d =
I/groups * kH * kW), and the scales stay the nearest-rounding ones, so the result is on the
same int8 grid. Inputs go in order of decreasing H diagonal ("act order"), and H gets 1 % of
its mean diagonal added (dampening), both as in the paper's code.

qbench runs it in one PyTorch pass over the calibration images: each layer is rounded when
its conv is reached, on its input as the INT8 graph computes it (every earlier layer already
INT8 and every input quantized), so each layer also absorbs what earlier layers did.
"""

import logging
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from tqdm import tqdm

from ..core.errors import QBenchError
from .fakequant import module_weight, quantized
from .pairs import second_bounds
from .params import INT8_MAX, with_integers
from .plan import overflow_reason

log = logging.getLogger(__name__)
DAMP = 0.01  # fraction of the mean diagonal of H added to it
CHUNK = 8  # images unfolded at a time into input patches
BLOCK = 128  # columns rounded between two updates of the rest
MAX_INPUTS = 4608  # weights per output channel (d) up to which GPTQ rounds a layer (resnet's
# largest 3x3 conv); H takes d^2 memory and its factor d^3 time: larger layers keep nearest


def gptq_round(rows, scale, hessian, damp=DAMP, qmax=INT8_MAX, partner=None):
    """Round weight rows to int8 with GPTQ.

    Args:
        rows: float tensor (G, O, d): per conv group, O output channels of d weights.
        scale: float tensor (G, O), > 0: each channel's int8 step.
        hessian: float tensor (G, d, d): sum of p p^T over the group's input patches p.
        damp: fraction of the mean diagonal added to the diagonal, >= 0.
        qmax: the grid's largest |integer| (127; 63 for 7-bit weights).
        partner: None, or int64 tensor (d,): the column each column pairs with for AVX2's
            int16 sums (-1: none; ``pair_partners``). The later-rounded column of a pair is
            kept within ``pairs.second_bounds`` of the other, its error moved on as any.

    Returns:
        float32 tensor (G, O, d) of integers in [-qmax, qmax].
    """
    g, o, d = rows.shape
    h = hessian.double().clone()
    diag = torch.diagonal(h, dim1=1, dim2=2)
    mean = diag.mean(dim=1, keepdim=True)
    h /= torch.where(mean > 0, mean, 1.0)[:, :, None]  # GPTQ is unchanged by a scaled H
    dead = diag == 0  # inputs that were always 0: their weights round to nearest
    diag += damp * (mean > 0)  # the mean diagonal is 1 now
    diag[dead] = 1.0
    order = torch.argsort(diag, dim=1, descending=True, stable=True)
    w = torch.gather(rows.float(), 2, order[:, None, :].expand(g, o, d)).clone()
    h = torch.gather(h, 1, order[:, :, None].expand(g, d, d))
    h = torch.gather(h, 2, order[:, None, :].expand(g, d, d))
    back = torch.argsort(order, dim=1)
    if partner is not None:  # each column's partner's place in each group's order, or -1
        moved = torch.gather(back, 1, partner.clamp(min=0)[order])
        partner = torch.where(partner[order] >= 0, moved, -1)
    q = _rounded_blocks(w, scale.float(), _inverse_factor(h), qmax, partner)
    return torch.gather(q, 2, back[:, None, :].expand(g, o, d))


def _inverse_factor(h):
    """The upper Cholesky factor U of H^-1 (H^-1 = U^T U), whose rows hold every update's
    coefficients (the paper's Algorithm 1), float32 (G, d, d). With J the order reversal and
    J H J = M M^T, U = J M^-1 J: one factorisation and one triangular inverse. float32, as
    the paper's code, and float64 where float32 finds H not positive definite."""
    flip = torch.arange(h.shape[-1] - 1, -1, -1)
    for dtype in (torch.float32, torch.float64):
        m, info = torch.linalg.cholesky_ex(h[:, flip][:, :, flip].to(dtype))
        if not info.any():
            break
    eye = torch.eye(h.shape[-1], dtype=m.dtype).expand_as(m)
    inv = torch.linalg.solve_triangular(m, eye, upper=False)
    return inv[:, flip][:, :, flip].float()


def _rounded_blocks(w, scale, u, qmax, partner):
    """GPTQ's loop over the columns of ``w`` (G, O, d), in blocks of ``BLOCK`` whose errors
    reach the later columns in one matrix product (the paper's lazy batch updates)."""
    q = torch.empty_like(w)
    threads = torch.get_num_threads()
    try:
        for start in range(0, w.shape[2], BLOCK):
            torch.set_num_threads(1)  # small ops: threads would only wait for each other
            end = min(start + BLOCK, w.shape[2])
            err = _round_block(w, scale, u, q, (start, end), (qmax, partner))
            torch.set_num_threads(threads)
            w[:, :, end:] -= err @ u[:, start:end, end:]
    finally:
        torch.set_num_threads(threads)
    return q


def _round_block(w, scale, u, q, columns, grid):
    """Round ``columns`` (start, end) of ``w`` into ``q`` on ``grid`` (qmax, partner: see
    ``_bounds``), each one's error moved onto the block's later columns; returns the scaled
    errors (G, O, end - start)."""
    start, end = columns
    block, err = w[:, :, start:end].clone(), torch.empty_like(w[:, :, start:end])
    ub = u[:, start:end, start:end]
    for i in range(end - start):
        col = block[:, :, i]
        low, high = _bounds(q, start + i, *grid)
        q[:, :, start + i] = torch.clamp(torch.round(col / scale), low, high)
        err[:, :, i] = (col - q[:, :, start + i] * scale) / ub[:, i, i][:, None]
        block[:, :, i + 1 :] -= err[:, :, i, None] * ub[:, None, i, i + 1 :]
    return err


def _bounds(q, column, qmax, partner):
    """The integers column ``column`` of ``q`` (G, O, d) may take: [-qmax, qmax], narrowed
    to ``pairs.second_bounds`` of its partner (``partner`` (G, d): its place in the order,
    or -1) where the partner is rounded already. Tensors (G, O), or numbers."""
    if partner is None:
        return -qmax, qmax
    place = partner[:, column]
    first = torch.gather(q, 2, place.clamp(min=0)[:, None, None].expand(-1, q.shape[1], 1))
    first = torch.where(((place >= 0) & (place < column))[:, None], first[:, :, 0], 0)
    low, high = second_bounds(first)
    return low.clamp(min=-qmax), high.clamp(max=qmax)


def pair_partners(d, taps):
    """Per column of weight rows ordered (input channel, kernel row, kernel column) with
    ``taps`` = kH x kW columns per channel (1 for matmul), the column of the same kernel
    position in the pair's other channel (``pairs``: channels 2j and 2j + 1), or -1 for an
    odd last channel: int64 tensor (d,)."""
    column = torch.arange(d)
    other = torch.bitwise_xor(column // taps, 1) * taps + column % taps
    return torch.where(other < d, other, -1)


def conv_hessian(x, kernel, stride, padding, dilation, groups):
    """H of a conv2d's input: per group, the sum of p p^T over every output position's patch.

    Args:
        x: the conv's input, float tensor (N, C, H, W), before its own padding.
        kernel: (kH, kW); stride, dilation: (int, int) or int; padding: (int, int), int,
            ``"valid"`` or ``"same"`` (as ``F.conv2d`` takes them); groups: int.

    Returns:
        float64 tensor (groups, d, d) (each chunk of images summed in float32), d = C / groups
        * kH * kW, ordered as ``F.unfold``
        orders a patch (channel, then kernel row, then kernel column), which is the order of
        the weight (O, C / groups, kH, kW) flattened.
    """
    x, padding = _explicit(x, kernel, dilation, padding)
    h = 0
    for chunk in torch.split(x, CHUNK):
        p = F.unfold(chunk, kernel, dilation=dilation, padding=padding, stride=stride)
        n, dim, positions = p.shape
        p = p.reshape(n, groups, dim // groups, positions).permute(1, 0, 3, 2)
        p = p.reshape(groups, n * positions, dim // groups).float()
        h = h + (p.transpose(1, 2) @ p).double()
    return h


def _explicit(x, kernel, dilation, padding):
    """(x, padding as ints): ``"same"`` becomes zero padding of x (left gets the smaller half
    when the total is odd, as ``F.conv2d`` pads), ``"valid"`` becomes 0."""
    if not isinstance(padding, str):
        return x, padding
    if padding == "valid":
        return x, 0
    dil = (dilation, dilation) if isinstance(dilation, int) else dilation
    total = [d * (k - 1) for d, k in zip(dil, kernel, strict=True)]
    x = F.pad(x, (total[1] // 2, total[1] - total[1] // 2, total[0] // 2, total[0] - total[0] // 2))
    return x, 0


def linear_hessian(x):
    """H of a linear layer's input x (..., K): float64 (1, K, K), the sum of x x^T over rows
    (accumulated in float32 per call, as the paper's code does)."""
    p = x.reshape(-1, x.shape[-1]).float()
    return (p.T @ p).double()[None]


class _Rounder(TorchFunctionMode):
    """Intercepts each fake layer's conv2d or linear call (recognised by its weight tensor),
    rounds that layer's weight with GPTQ on the call's input, and lets the call go on with it.
    A layer with more than ``MAX_INPUTS`` weights per output channel keeps its weight."""

    def __init__(self, fakes, layers, plans, bar):
        super().__init__()
        self.todo = {id(f.weight_q): (f, layers[f.index], plans[f.index]) for f in fakes}
        self.q, self.bar = {}, bar

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        weight = kwargs.get("weight", args[1] if len(args) > 1 else None)
        if func in (F.conv2d, F.linear) and id(weight) in self.todo:
            fake, layer, plan = self.todo.pop(id(weight))
            if weight[0].numel() > MAX_INPUTS:
                log.warning(
                    "layer %s: %d weights per output channel > %d: nearest rounding kept",
                    layer.name,
                    weight[0].numel(),
                    MAX_INPUTS,
                )
            else:
                self._round(fake, layer, plan, _hessian(func, args, kwargs))
            self.bar.update()
        return func(*args, **kwargs)

    def _round(self, fake, layer, plan, h):
        """Round ``layer`` by GPTQ on its input's H, or keep nearest rounding, with a
        warning, where H is not finite (inputs near 1e19 and beyond overflow its float32
        sums: GPTQ's rounding would be garbage)."""
        if not torch.isfinite(h).all():
            log.warning(
                "layer %s: its input's Hessian overflows float32 (inputs beyond about 1e19): "
                "nearest rounding kept",
                layer.name,
            )
            return
        self.q[layer.name] = q = _rounded(layer, plan, h)
        fake.weight_q.copy_(module_weight(layer, plan.weight.scale, q, fake.fold_scale))


def _hessian(func, args, kwargs):
    """H of the input of an intercepted ``F.conv2d`` or ``F.linear`` call."""
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
    call = {"stride": 1, "padding": 0, "dilation": 1, "groups": 1}
    call |= dict(zip(names, args, strict=False)) | kwargs
    if func is F.linear:
        return linear_hessian(call["input"])
    padding = call["padding"]
    return conv_hessian(
        call["input"],
        tuple(call["weight"].shape[2:]),
        _pair(call["stride"]),
        padding if isinstance(padding, str) else _pair(padding),
        _pair(call["dilation"]),
        call["groups"],
    )


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _rounded(layer, plan, h):
    """The layer's GPTQ int8 weight in the graph's layout (conv2d (O, I, kH, kW), matmul
    (K, M)), from its float graph weight, the plan's scales and H (G, d, d)."""
    w = np.moveaxis(np.asarray(layer.weight, np.float64), layer.channel_axis, 0)
    groups = h.shape[0]
    rows = torch.from_numpy(w.reshape(groups, len(w) // groups, -1).astype(np.float32))
    scale = np.broadcast_to(np.asarray(plan.weight.scale, np.float64), (len(w),))
    scale = torch.from_numpy(scale.reshape(groups, -1).astype(np.float32))
    taps = int(np.prod(w.shape[2:]))  # kH x kW; 1 for matmul
    partner = pair_partners(rows.shape[2], taps) if plan.weight.fit_pairs else None
    q = gptq_round(rows, scale, h, qmax=plan.weight.qmax, partner=partner)
    q = q.numpy().reshape(w.shape)
    return np.moveaxis(q, 0, layer.channel_axis).astype(np.int8)


def gptq_weights(model, fakes, layers, plans, x):
    """Round every quantized layer's weight with GPTQ, in one pass of ``x`` through the model
    with every layer of ``fakes`` quantized; each ``FakeLayer``'s ``weight_q`` is updated.

    Args:
        model: the FP32 PyTorch model (eval mode).
        fakes: its ``quantize.fakequant.FakeLayer`` list (graph order), built from ``plans``.
        layers, plans: ``graph.Layer`` and ``quantize.rewrite.LayerPlan`` lists.
        x: calibration images, float32 tensor (N, C, H, W), all in one batch.

    Returns:
        (plans, rounded): ``plans`` with each rounded layer's ``weight`` replaced, and how
        many were. A layer with more than ``MAX_INPUTS`` weights per output channel, or
        whose GPTQ weight could overflow the int32 accumulator (``plan.overflow_reason``,
        with a warning), keeps its nearest-rounded weight.

    Raises:
        QBenchError: a quantized layer's conv2d/linear was never called with its weight
            (its module computes with a tensor made from it, as weight normalisation does).
    """
    with tqdm(total=len(fakes), desc="GPTQ", unit="layer", leave=False, disable=None) as bar:
        rounder = _Rounder(fakes, layers, plans, bar)
        with torch.no_grad(), quantized(model, fakes, {f.index for f in fakes}) as (run, _):
            with rounder:
                run(x)
    if rounder.todo:
        missed = ", ".join(layer.name for _, layer, _ in rounder.todo.values())
        raise QBenchError(
            f"GPTQ: a layer's conv2d/linear was never called with its weight: {missed}"
        )
    out = [
        _with_q(layer, plan, rounder.q.get(layer.name))
        for layer, plan in zip(layers, plans, strict=True)
    ]
    return out, sum(a is not b for a, b in zip(out, plans, strict=True))


def _with_q(layer, plan, q):
    if q is None:
        return plan
    reason = overflow_reason(q, layer.channel_axis)
    if reason:
        log.warning("layer %s: nearest rounding kept, GPTQ's %s", layer.name, reason)
        return plan
    weight = plan.weight
    weight = with_integers(
        layer.weight, q, weight.scale, layer.channel_axis, weight.qmax, weight.fit_pairs
    )
    return replace(plan, weight=weight)
