"""Fake quantization of a PyTorch model's layers with the parameters of qbench's INT8 graph.

Each quantized layer of the plan (``quantize.plan.make_plans``) is the PyTorch module its
source name points to (``layer3.1.conv2``: an ``nn.Conv2d`` or ``nn.Linear``). Its input
is quantized and dequantized with the layer's calibrated uint8 scale and zero point,
``(clamp(round(x / scale) + zero_point, 0, 255) - zero_point) * scale``, and its weight
is replaced by the plan's int8 weight, dequantized and brought back to the module's units:
the Relax graph holds the BatchNorm-folded weight, g times the module's per output channel
(``fold_scale``), so the module's weight is the graph's divided by g. This is the INT8
graph's arithmetic, up to float rounding, whatever rounded the weight and whether its scales
are per channel or per tensor (the integer requantize, ``quantize.requantize``, differs
from it at that order only: one float32 multiplier instead of the divide by the output
scale, the bias added in output steps by the same FMA). Residual adds read their input as
quantized for the conv that read it, as the graph does (``_QuantizedResiduals``). Float
rounding is not nothing, though: PyTorch and TVM sum in different orders (and TVM folds
BatchNorm), so a value at a rounding boundary of the next quantize lands one int8 step
apart, and through a deep network such steps multiply. On
efficientnet_lite0 (218 sample photos, Zen 4) the fake-quantized logits and the TVM INT8
graph's were 32 dB apart (TVM's own integer ops and qbench's kernels 46 dB apart), while
each was 25.1-25.2 dB from FP32: the error statistics agree, but a near-tie image's top-1
class can differ.
"""

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ..core.errors import UserError
from .params import UINT8_MAX


@dataclass
class FakeLayer:
    """One quantized layer, as PyTorch runs it.

    Attributes:
        index, name: the layer's index and source name (``graph.Layer``).
        module: its ``nn.Conv2d`` or ``nn.Linear``.
        scale, zero_point: the input's uint8 parameters (float > 0, int in [0, 255]).
        lo, hi: the input values beyond which quantization clamps to 0 or 255 (half a step
            outside the grid's ends), in the input's units.
        weight_q: the dequantized int8 weight, float32, the module weight's shape.
        shift: float32 (C_out,) added to the quantized output (bias correction, see
            ``quantize.bias``), or None; in the units of this module's output.
        fold_scale: float64 (C_out,): the INT8 graph's output per unit of this module's
            output, per channel (the BatchNorm factor gamma / sqrt(var + eps) folded into
            the graph's weight; 1 without one).
        output: (scale, zero_point) of the layer's residual output (``LayerPlan.output``),
            or None.
        pool: (ordinal, scale, zero_point) of the global average pool the layer reads
            (``graph.GlobalPool``; its input's uint8 parameters, ``LayerPlan.pool``), or None.
    """

    index: int
    name: str
    module: torch.nn.Module
    scale: float
    zero_point: int
    lo: float
    hi: float
    weight_q: torch.Tensor
    fold_scale: np.ndarray
    shift: torch.Tensor = None
    output: tuple = None
    pool: tuple = None

    def quantize_input(self, x):
        """``x`` (any shape, float32) through the uint8 grid: quantized, then dequantized."""
        return _through_grid(x, self.scale, self.zero_point)

    def forward(self, x, weight_q=True, input_q=True):
        """The module's output for input ``x`` with the quantized weight and/or input, by
        the module's own ``forward`` (which may pad first, as efficientnet's "same" convs
        do). Call it outside ``quantized``, whose hooks would apply too."""
        weight = self.weight_q if weight_q else self.module.weight
        x = self.quantize_input(x) if input_q else x
        out = torch.func.functional_call(self.module, {"weight": weight}, (x,))
        return self.shifted(out) if weight_q and input_q else out

    @property
    def channel_axis(self):
        """The axis of output channels in the module's output: 1 for an ``nn.Conv2d``'s (N,
        C, H, W), -1 for an ``nn.Linear``'s (..., C) at any rank (case C24: a Linear over
        (N, H, W, C))."""
        return 1 if isinstance(self.module, torch.nn.Conv2d) else -1

    def shifted(self, out):
        """``out`` plus ``shift`` per output channel (``channel_axis``), if any."""
        if self.shift is None:
            return out
        if self.channel_axis == -1:
            return out + self.shift
        return out + self.shift.view(1, -1, *[1] * (out.dim() - 2))

    def channel_mean(self, out):
        """The mean of the module's output ``out`` per output channel, float32 (C,): over
        every axis but ``channel_axis``."""
        return (
            torch.movedim(out, self.channel_axis, -1)
            .reshape(-1, out.shape[self.channel_axis])
            .mean(dim=0)
        )


def _through_grid(x, scale, zero_point):
    q = torch.clamp(torch.round(x / scale) + zero_point, 0, UINT8_MAX)
    return (q - zero_point) * scale


def fake_layers(module, layers, plans):
    """The ``FakeLayer`` of every quantized layer of ``plans``, in graph order.

    Args:
        module: the FP32 PyTorch model (``nn.Module``), in eval mode.
        layers, plans: ``graph.Layer`` and ``quantize.rewrite.LayerPlan`` lists (same order).

    Raises:
        UserError: a quantized layer has no PyTorch module of its name (a functional conv or
            a model imported from a .pt2 file): diagnosis needs each layer's module.
    """
    out = []
    for layer, plan in zip(layers, plans, strict=True):
        if not plan.quantized:
            continue
        sub = _module(module, layer.name)
        fold = fold_scale(layer, sub.weight.detach().numpy())
        act = plan.act
        lo = (-0.5 - act.zero_point) * act.scale
        hi = (UINT8_MAX + 0.5 - act.zero_point) * act.scale
        weight_q = module_weight(layer, plan.weight.scale, plan.weight.q, fold)
        fake = FakeLayer(
            layer.index, layer.name, sub, act.scale, act.zero_point, lo, hi, weight_q, fold
        )
        if plan.output is not None:
            fake.output = (plan.output.scale, plan.output.zero_point)
        if plan.pool is not None and layer.pool is not None:
            fake.pool = (layer.pool, plan.pool.scale, plan.pool.zero_point)
        if plan.bias_shift is not None:  # graph units -> this module's units
            own = np.divide(plan.bias_shift, fold, out=np.zeros_like(fold), where=fold != 0)
            fake.shift = torch.from_numpy(own.astype(np.float32))
        out.append(fake)
    return out


def module_weight(layer, scale, q, fold):
    """The INT8 graph's dequantized weight in the PyTorch module's layout and units.

    Args:
        layer: the ``graph.Layer``.
        scale: float (C_out,) or (1,): the int8 step of each output channel (graph units).
        q: int8 weight in the graph's layout (conv2d (O, I, kH, kW), matmul (K, M)).
        fold: float64 (C_out,), ``fold_scale``: graph weight per unit of module weight.

    Returns:
        float32 tensor, the module weight's shape ((O, I, kH, kW), or (M, K) for a Linear);
        0 in channels whose ``fold`` is 0.
    """
    rows = np.moveaxis(np.asarray(q, np.float64), layer.channel_axis, 0)
    per_row = np.broadcast_to(np.asarray(scale, np.float64), (len(rows),))
    ratio = np.divide(per_row, fold, out=np.zeros_like(fold), where=fold != 0)
    return torch.from_numpy(
        (rows * ratio.reshape((-1,) + (1,) * (rows.ndim - 1))).astype(np.float32)
    )


def check_modules(module, layers, reasons, input_shape, batch_size):
    """Check, before anything slow, that every layer to run in INT8 (``reasons[i]`` empty:
    ``quantize.plan.fp32_reasons``) has the PyTorch module ``fake_layers`` needs, and that
    the module computes with its own weight and is called through its hooks
    (``unused_weights``).

    Args:
        input_shape: the model's (C, H, W).
        batch_size: a batch size the model runs with (the one it was exported with).

    Raises:
        UserError: modules called more than once, the first layer without a module,
            every layer whose forward the model calls directly, every layer whose module
            computes with a tensor made from its weight, or the model failing on a zero
            batch.
    """
    names = [layer.name for layer, reason in zip(layers, reasons, strict=True) if not reason]
    shared = sorted({la.name.split("#")[0] for la in layers if "#" in la.name})
    if shared:
        raise UserError(
            f"modules {', '.join(shared)}: their weight is read by more than one layer "
            f"(layers {shared[0]}, {shared[0]}#2, ...: a module called more than once, or "
            "a weight shared between modules); per-layer fake quantization (qbench "
            "diagnose, --accuracy-target, GPTQ rounding, bias correction) hooks one module "
            "and cannot tell its calls apart"
        )
    for name in names:
        _module(module, name)
    unused, unhooked = unused_weights(module, names, (batch_size, *input_shape))
    if unhooked:
        raise UserError(
            f"layers {', '.join(unhooked)}: the model uses their weight without calling the "
            "module (module.forward(x), or the weight in a functional op such as F.conv2d or "
            "F.linear, as nn.MultiheadAttention does), which skips the module hooks fake "
            "quantization (GPTQ rounding, bias correction, qbench diagnose) quantizes them "
            "with; call the module itself (module(x)), or keep them in FP32 with --skip-layers"
        )
    if unused:
        raise UserError(
            f"layers {', '.join(unused)}: their modules do not compute with their own weight "
            "(they flip, standardise or re-parametrise it in forward), so fake quantization "
            "(qbench diagnose, --accuracy-target, GPTQ rounding, bias correction), which "
            "replaces that weight, cannot model them; keep them in FP32 with --skip-layers"
        )


def unused_weights(model, names, shape):
    """The modules among ``names`` whose forward does not hand their own ``weight`` tensor to
    ``F.conv2d``/``F.linear``, and those whose hooks never run (the model calls their
    ``forward`` directly), found in one pass of a zero batch of ``shape`` (N, C, H, W) with
    each weight swapped for a copy, as fake quantization swaps it.

    Returns:
        (unused, unhooked): lists of names, in the order of ``names``.
    Raises:
        UserError: the model fails on that batch (the error named).
    """
    copies = {name: model.get_submodule(name).weight.detach().clone() for name in names}
    seen, called = _WeightsSeen(), set()
    handles = [
        model.get_submodule(name).register_forward_pre_hook(lambda m, a, n=name: called.add(n))
        for name in names
    ]
    try:
        with torch.no_grad(), seen:
            weights = {f"{name}.weight": w for name, w in copies.items()}
            torch.func.functional_call(model, weights, (torch.zeros(*shape),))
    except Exception as e:  # noqa: BLE001  (a user's model may raise anything)
        raise UserError(
            f"the model failed on a zero batch {tuple(shape)} with its weights swapped, so "
            f"fake quantization cannot check its layers: {type(e).__name__}: {e}"
        ) from e
    finally:
        for handle in handles:
            handle.remove()
    unused = [name for name, w in copies.items() if id(w) not in seen.ids]
    return unused, [name for name in names if name not in called and name not in unused]


class _WeightsSeen(TorchFunctionMode):
    """Records the id of every weight tensor ``F.conv2d`` and ``F.linear`` are called with."""

    def __init__(self):
        super().__init__()
        self.ids = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (F.conv2d, F.linear):
            self.ids.add(id(kwargs.get("weight", args[1] if len(args) > 1 else None)))
        return func(*args, **kwargs)


def fold_scale(layer, module_weight):
    """Per output channel, the factor g with graph weight = g * module weight (least
    squares over the channel's weights): the folded BatchNorm's gamma / sqrt(var + eps), or 1.

    Args:
        layer: the ``graph.Layer`` (its weight as the INT8 graph holds it: conv2d (O, I, kH,
            kW), matmul (K, M)).
        module_weight: the module's weight, (O, ...) for both conv2d and Linear.

    Returns:
        float64 (C_out,); 0 where the module's channel is all zero.
    """
    graph_w = np.moveaxis(np.asarray(layer.weight, np.float64), layer.channel_axis, 0)
    own = np.asarray(module_weight, np.float64).reshape(len(graph_w), -1)
    graph_w = graph_w.reshape(len(graph_w), -1)
    norm = (own * own).sum(axis=1)
    return np.divide((graph_w * own).sum(axis=1), norm, out=np.zeros_like(norm), where=norm > 0)


def _module(model, name):
    try:
        sub = model.get_submodule(name)
    except AttributeError:
        sub = None
    if not isinstance(sub, torch.nn.Conv2d | torch.nn.Linear):
        raise UserError(
            f"layer {name!r} is not an nn.Conv2d or nn.Linear of the model; per-layer fake "
            "quantization (qbench diagnose, bias correction) needs each quantized layer's "
            "PyTorch module (registry models and FILE.py:FUNCTION models without functional "
            "convs have them, .pt2 files do not)"
        )
    return sub


@contextmanager
def quantized(model, fakes, active, measure=None):
    """Run ``model`` with the layers of ``fakes`` whose index is in ``active`` quantized
    (input and weight, plus their ``shift``), the others in FP32; each layer's conv runs
    once. With ``measure`` (name -> FP32 per-channel output mean), each active layer's
    ``shift`` is first set to that mean minus its quantized output's (``quantize.bias``).

    Yields:
        (run, seen): ``run(x)`` is the model's output for ``x`` (run on a copy: a model may
        write to its input); ``seen`` maps each layer's name to its (input, output) in the
        last run, float32 tensors (an active layer's input as quantized).
    """
    seen, handles = {}, []
    residuals = _QuantizedResiduals()
    pools = _QuantizedPools({f.pool[0]: f.pool[1:] for f in fakes if f.index in active and f.pool})
    weights = {f"{f.name}.weight": f.weight_q for f in fakes if f.index in active}
    for fake in fakes:
        if fake.index in active:
            hook = _quantize_first_arg(fake, residuals)
            handles.append(fake.module.register_forward_pre_hook(hook, with_kwargs=True))
        on = fake.index in active
        record = _record(seen, fake, on, measure)
        handles.append(fake.module.register_forward_hook(record, with_kwargs=True))
        if on and fake.output is not None:
            handles.append(fake.module.register_forward_hook(residuals.expect(fake.output)))

    def run(x):
        residuals.twins.clear()
        residuals.pending = None
        pools.count = 0
        with residuals, pools:
            return torch.func.functional_call(model, weights, (x.clone(),))  # C22

    try:
        yield run, seen
    finally:
        for h in handles:
            h.remove()


def _quantize_first_arg(fake, residuals):
    def pre_hook(module, args, kwargs):
        x, replaced = _layer_input(args, kwargs)
        quantized_input = fake.quantize_input(x)
        if isinstance(module, torch.nn.Conv2d):
            residuals.twins[id(x)] = (x, quantized_input)
        return replaced(quantized_input)

    return pre_hook


def _layer_input(args, kwargs):
    """(the input tensor of an ``nn.Conv2d``/``nn.Linear`` call, a function giving the call's
    (args, kwargs) with that input replaced): positional, or the keyword ``input`` of their
    ``forward(self, input)`` (``self.fc(input=y)``, case C23)."""
    if args:
        return args[0], lambda x: ((x, *args[1:]), kwargs)
    return kwargs["input"], lambda x: (args, {**kwargs, "input": x})


_ADDS = (torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__)
_ADDS_IN_PLACE = (torch.Tensor.add_, torch.Tensor.__iadd__)


class _QuantizedResiduals(TorchFunctionMode):
    """The INT8 graph's residual adds (``quantize.rewrite``): an add of two float32 tensors
    of one 4-D shape reads, for an input that a quantized conv has read before, that
    conv's quantized input, as the graph reads its uint8 tensor dequantized. ``twins`` maps
    id(tensor) -> (tensor, its quantized copy), filled by the convs' pre-hooks in the
    order the model runs (the graph's order, which ``torch.export`` keeps). A layer with a
    residual output (``graph.ResidualOutput``, resnet's downsample conv) leaves its
    parameters ``pending``: the next residual add quantizes its second input, read by no
    conv, with them, as the graph quantizes that layer's output (``torch.export`` keeps
    the operands' order)."""

    def __init__(self):
        super().__init__()
        self.twins = {}
        self.pending = None

    def expect(self, output):
        """A forward hook that leaves ``output`` (scale, zero_point) pending."""

        def hook(module, args, out):
            self.pending = output

        return hook

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _ADDS + _ADDS_IN_PLACE and len(args) == 2 and self._residual(*args):
            first = args[0] if func in _ADDS_IN_PLACE else self._twin(args[0])
            second = self._twin(args[1])
            if second is args[1] and self.pending is not None:
                second = _through_grid(second, *self.pending)
            self.pending = None
            args = (first, second)
        return func(*args, **kwargs)

    @staticmethod
    def _residual(a, b):
        tensors = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
        return tensors and a.dim() == 4 and a.shape == b.shape and a.dtype == torch.float32

    def _twin(self, x):
        found = self.twins.get(id(x))
        return found[1] if found is not None and found[0] is x else x


class _QuantizedPools(TorchFunctionMode):
    """The INT8 graph's integer global average pools (``quantize.pooling``): the input of
    the k-th global average pool the model calls (``adaptive_avg_pool2d`` to 1 x 1, or a
    mean over H and W of an (N, C, H, W) tensor: what the graph's k-th ``graph.GlobalPool``
    was exported from) goes through the uint8 grid ``grids[k]`` (scale, zero_point) first,
    where the graph quantizes it."""

    def __init__(self, grids):
        super().__init__()
        self.grids = grids
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _global_pool(func, args, kwargs):
            grid = self.grids.get(self.count)
            self.count += 1
            if grid is not None:
                args = (_through_grid(args[0], *grid), *args[1:])
        return func(*args, **kwargs)


def _global_pool(func, args, kwargs):
    """Whether ``func(*args, **kwargs)`` averages a 4-D float32 tensor over H and W."""
    x = args[0] if args else None
    if not isinstance(x, torch.Tensor) or x.dim() != 4 or x.dtype != torch.float32:
        return False
    if func is F.adaptive_avg_pool2d:
        size = args[1] if len(args) > 1 else kwargs.get("output_size")
        return size in (1, (1, 1), [1, 1])
    if func in (torch.mean, torch.Tensor.mean):
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        dims = [dims] if isinstance(dims, int) else list(dims or [])
        return sorted(d % 4 for d in dims) == [2, 3]
    return False


def _record(seen, fake, active, measure):
    def hook(module, args, kwargs, output):
        if active and measure is not None:
            fake.shift = measure[fake.name] - fake.channel_mean(output)
        if active:
            output = fake.shifted(output)
        seen[fake.name] = (_layer_input(args, kwargs)[0], output)
        return output

    return hook
