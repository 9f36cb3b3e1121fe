"""Relax graph inspection: the quantizable layers of ``main`` and an observer module.

A quantizable layer is a ``relax.nn.conv2d`` (NCHW/OIHW, grouped and depthwise included)
or a ``relax.matmul`` whose second operand is a constant weight.
"""

from dataclasses import dataclass

import numpy as np

from ..core.errors import QBenchError, UnsupportedModelError

CONV2D = "relax.nn.conv2d"
MATMUL = "relax.matmul"


@dataclass
class Layer:
    """One quantizable layer.

    Attributes:
        index: position among the quantizable layers of ``main``, from 0.
        name: source name (PyTorch parameter prefix) or ``layer<index>``.
        op: ``"conv2d"`` or ``"matmul"``.
        weight: float32 weight; conv2d (O, I/groups, kH, kW), matmul (K, M).
        groups: conv2d groups (1 for matmul).
        pool: where the layer reads a global average pool's output (``GlobalPool``), that
            pool's ordinal among ``main``'s global average pools, else None.
        pooled_from: where the layer reads a max pooling of a tensor that another layer
            reads itself (``max_pool_readers``), that layer's index, else None.
    """

    index: int
    name: str
    op: str
    weight: np.ndarray
    groups: int
    pool: int = None
    pooled_from: int = None

    @property
    def channel_axis(self):
        """Axis of ``weight`` holding output channels: 0 for conv2d, -1 for matmul."""
        return 0 if self.op == "conv2d" else -1

    @property
    def out_channels(self):
        return self.weight.shape[self.channel_axis]

    @property
    def in_channels(self):
        w = self.weight
        return w.shape[1] * self.groups if self.op == "conv2d" else w.shape[0]


def main_block(mod):
    """The single dataflow block of ``mod["main"]``.

    Raises:
        QBenchError: ``main`` is not one dataflow block (e.g. control flow).
    """
    from tvm import relax

    body = mod["main"].body
    blocks = list(body.blocks)
    if len(blocks) != 1 or not isinstance(blocks[0], relax.DataflowBlock):
        raise QBenchError("Relax main: expected one dataflow block; control flow is not supported")
    return blocks[0]


def quantizable_call(value):
    """The op kind (``"conv2d"``/``"matmul"``) if ``value`` is a call with a constant weight."""
    import tvm
    from tvm import relax

    if not isinstance(value, relax.Call) or not hasattr(value.op, "name"):
        return None
    if value.op.name not in (CONV2D, MATMUL) or not isinstance(value.args[1], tvm.ir.expr.Constant):
        return None
    if value.op.name == CONV2D:
        attrs = value.attrs
        if attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW":
            return None
        return "conv2d"
    return "matmul" if len(value.args[1].ty.shape) == 2 else None


def find_layers(mod, names=None):
    """The quantizable layers of ``mod["main"]`` in binding order.

    Args:
        mod: the FP32 ``tvm.IRModule`` (constants folded).
        names: optional source names in the same order; used only when the count matches.
    """
    found = []
    for binding in main_block(mod).bindings:
        kind = quantizable_call(binding.value)
        if kind:
            _check_float32(binding.value, len(found), kind)
            groups = int(binding.value.attrs.groups) if kind == "conv2d" else 1
            weight = binding.value.args[1].value.numpy().astype(np.float32)
            found.append((kind, weight, groups))
    use_names = names is not None and len(names) == len(found) and all(names)
    for i, (kind, weight, _) in enumerate(found):
        _check_finite(weight, names[i] if use_names else f"layer{i}", kind)
    pools = {p.layer: p.ordinal for p in global_pools(mod) if p.layer is not None}
    pooled = max_pool_readers(mod)
    return [
        Layer(i, names[i] if use_names else f"layer{i}", kind, w, g, pools.get(i), pooled.get(i))
        for i, (kind, w, g) in enumerate(found)
    ]


def range_owner(layer, layers):
    """The layer whose calibrated input range quantizes ``layer``'s input: ``layer`` itself,
    or the layer it takes its parameters from (``Layer.pooled_from``); ``layers``: the
    ``Layer`` list, by index."""
    return layer if layer.pooled_from is None else layers[layer.pooled_from]


def max_pool_readers(mod):
    """{index of a layer that reads a max pooling (one or a chain, NCHW) of a tensor: index
    of the first layer that reads that tensor itself}, for ``mod["main"]``'s layers.

    Such a layer takes the other's input parameters (``range_owner``). A max pool commutes
    with a quantize of the same parameters exactly, so the tensor is quantized once and
    pooled in uint8, as PyTorch's quantized ``max_pool2d`` keeps its input's scale and zero
    point. With parameters of its own (googlenet's pool branch reads a max pool of the
    concat the other three branches read) the tensor would be quantized twice, and the
    layers that compute it could not requantize their outputs to uint8.
    """
    bindings = main_block(mod).bindings
    values = {b.var: b.value for b in bindings}
    inputs = [b.value.args[0] for b in bindings if quantizable_call(b.value)]
    readers = {}
    for index, x in enumerate(inputs):
        readers.setdefault(x, index)
    found = {}
    for index, x in enumerate(inputs):
        source = _max_pooled(x, values)
        while source is not None and source not in readers:
            source = _max_pooled(source, values)
        if source is not None:
            found[index] = readers[source]
    for index, owner in found.items():  # a pool of a pool reader's input: its owner's
        while owner in found:
            owner = found[owner]
        found[index] = owner
    return found


def _max_pooled(var, values):
    """The var ``var`` max-pools (an NCHW float32 ``max_pool2d``), else None."""
    from tvm import relax

    value = bound_value(var, values.get)
    if not isinstance(value, relax.Call) or getattr(value.op, "name", "") != "relax.nn.max_pool2d":
        return None
    attrs, data = value.attrs, value.args[0]
    if attrs.layout != "NCHW" or attrs.out_layout != "NCHW" or data.ty.dtype != "float32":
        return None
    return data if isinstance(data, relax.Var) else None


def bound_value(var, lookup):
    """The value bound to ``var`` (``lookup``: a var's bound value or None, such as
    ``BlockBuilder.lookup_binding``), read through ``(a, b, ...)[i]`` of a tuple built in the
    graph (the importer returns a max pooling as (values, indices)[0], a batch norm as
    (y, mean, var)[0]); None where nothing is bound."""
    from tvm import relax

    value = lookup(var) if isinstance(var, relax.Var) else None
    while isinstance(value, relax.TupleGetItem):
        fields = lookup(value.tuple_value) if isinstance(value.tuple_value, relax.Var) else None
        if not isinstance(fields, relax.Tuple):
            return None
        value = fields.fields[value.index]
        value = lookup(value) if isinstance(value, relax.Var) else value
    return value


def channel_concat(value, lookup):
    """The expressions ``value`` concatenates along the channels of a 4-D (N, C, H, W)
    tensor (its tuple read through ``lookup``, as in ``bound_value``), else None."""
    from tvm import relax

    if not isinstance(value, relax.Call) or getattr(value.op, "name", "") != "relax.concat":
        return None
    if value.ty.ndim != 4 or int(value.attrs.axis) % 4 != 1:
        return None
    fields = value.args[0]
    if isinstance(fields, relax.Var):
        fields = lookup(fields)
    return list(fields.fields) if isinstance(fields, relax.Tuple) else None


def unaccounted_calls(calls, layers):
    """The weighted module calls of the model (``nn.Linear``, convolutions) that no layer of
    the graph stands for: [(module path, calls missing, op)], in the model's module order.
    A Conv1d or ConvTranspose2d is one (qbench quantizes conv2d and matmul only); so is a
    Linear the export turned into another op pattern (a batched matmul on a broadcast
    weight, for a Linear on a permuted tensor). Such calls stay FP32 and the layer table
    must still count them. ``calls``: ``frontend.Imported.layer_calls``, (module paths of
    one weight, calls, op) (None: nothing to check); a layer counts for its weight under any
    of those paths. Where the graph's layers have no source names (``layer<i>``), conv2d
    and matmul calls are compared in total per op, under the name ``(unnamed)``."""
    if not calls:
        return []
    if layers and all(layer.name == f"layer{layer.index}" for layer in layers):
        found = [(paths[0], n, op) for paths, n, op in calls if op not in ("conv2d", "matmul")]
        for kind in ("conv2d", "matmul"):
            missing = sum(n for _, n, op in calls if op == kind)
            missing -= sum(layer.op == kind for layer in layers)
            found += [("(unnamed)", missing, kind)] if missing > 0 else []
        return found
    counted = {}
    for layer in layers:
        base = layer.name.split("#")[0]
        counted[base] = counted.get(base, 0) + 1
    found = []
    for paths, n, op in calls:
        missing = n - sum(counted.get(path, 0) for path in paths)
        if missing > 0:
            found.append((paths[0], missing, op))
    return found


def products_outside_modules(mod, unaccounted):
    """The FP32 products of ``main`` (``fp32_products``) that no module call of
    ``unaccounted`` (``unaccounted_calls``) stands for: (op, count) pairs, e.g. an einsum
    or ``F.conv1d`` on a parameter, or any such product of a model given as an exported
    program (no module calls known)."""
    from collections import Counter

    left = Counter(fp32_products(mod))
    for _, n, op in unaccounted:
        left[op] -= n
    return [(op, n) for op, n in left.items() if n > 0]


PRODUCTS = {  # Relax ops that multiply an activation by a weight
    f"relax.{name}"
    for name in (
        "matmul",
        "einsum",
        *(f"nn.conv{d}d{t}" for d in (1, 2, 3) for t in ("", "_transpose")),
    )
}


def fp32_products(mod):
    """The products of an activation and a constant weight in ``main`` that are no
    quantizable layer (a conv1d, a transposed or 3-D conv, a matmul on a batched weight, an
    einsum on a parameter): their op names (``conv1d``, ``matmul``, ...) in binding order.
    They run in FP32. A product of two activations (attention's q @ k) has no weight and is
    not listed."""
    import tvm
    from tvm import relax

    found = []
    for binding in main_block(mod).bindings:
        value = binding.value
        if not isinstance(value, relax.Call) or getattr(value.op, "name", None) not in PRODUCTS:
            continue
        operands = value.args[0].fields if value.op.name == "relax.einsum" else value.args
        if quantizable_call(value) is None and any(
            isinstance(a, tvm.ir.expr.Constant) for a in operands
        ):
            found.append(value.op.name.rsplit(".", 1)[1])
    return found


def _check_finite(weight, name, kind):
    """Refuse a layer whose weight holds NaN or infinity: no scale quantizes it, and every
    logit it reaches is no answer.

    Raises:
        UnsupportedModelError: names the layer, the op and the count of such values.
    """
    bad = int((~np.isfinite(weight)).sum())
    if bad:
        raise UnsupportedModelError(
            f"layer {name} ({kind}): {bad} of its {weight.size} weights are NaN or infinite; "
            "the model's weights are broken (a diverged training run, a bad conversion): "
            "fix them before quantizing"
        )


def _check_float32(call, index, kind):
    """Refuse a layer that computes in another dtype than float32 (a cast inside forward).

    Raises:
        UnsupportedModelError: names the layer index, the op and the dtypes.
    """
    dtypes = {str(call.args[0].ty.dtype), str(call.args[1].ty.dtype), str(call.ty.dtype)}
    if dtypes != {"float32"}:
        raise UnsupportedModelError(
            f"layer {index} ({kind}) computes in {', '.join(sorted(dtypes))}; only float32 "
            "layers can be calibrated and quantized yet: remove dtype casts from forward()"
        )


@dataclass(frozen=True)
class ResidualOutput:
    """A layer's output that a residual add reads and no layer does: the second operand of
    an add of two float32 (N, C, H, W) tensors, each a conv's output (its bias added or
    not) read by that add alone, as resnet's downsample branch (``out += identity``).
    ``quantize.rewrite`` quantizes it to uint8 with its own calibrated range, so both
    convs requantize in integer.

    Attributes:
        layer: the index of the conv that computes it.
        var: its Relax var in ``main``.
        add: the add, the Relax call bound in ``main``.
    """

    layer: int
    var: object
    add: object

    @staticmethod
    def range_name(layer_name):
        """The calibration range's key of a layer's residual output."""
        return f"{layer_name}:output"


def residual_outputs(mod):
    """The ``ResidualOutput``s of ``mod["main"]``, in binding order."""
    bindings = main_block(mod).bindings
    uses = _reads(bindings)
    outputs, index, found = {}, 0, []  # var -> index of the conv whose output it is
    for b in bindings:
        kind, value = quantizable_call(b.value), b.value
        if kind:
            if kind == "conv2d":
                outputs[b.var] = index
            index += 1
        elif _bias_add(value) and value.args[0] in outputs and uses[value.args[0]] == 1:
            outputs[b.var] = outputs[value.args[0]]
        elif same_shape_add(value):
            first, second = value.args
            if not first.same_as(second) and all(
                arg in outputs and uses[arg] == 1 for arg in (first, second)
            ):
                found.append(ResidualOutput(outputs[second], second, value))
    return found


@dataclass(frozen=True)
class GlobalPool:
    """A global average pool of ``main``: a mean of a float32 (N, C, H, W) tensor over H and
    W (what ``torch.export`` makes of ``adaptive_avg_pool2d(x, 1)`` and ``x.mean((2, 3))``).
    Where its output, reshaped or not, is one quantized layer's input and read by nothing
    else (a classifier's Linear, a squeeze-excite conv), ``quantize.rewrite`` quantizes the
    pool's input with its own calibrated range and the pool runs in integer.

    Attributes:
        ordinal: its position among ``main``'s global average pools, from 0 (the order the
            model calls them: fake quantization matches PyTorch's pools to the graph's by it).
        var: the pooled (N, C, H, W) Relax var.
        mean: the mean, the Relax call bound in ``main``.
        layer: the index of the quantizable layer that reads its output, or None.
    """

    ordinal: int
    var: object
    mean: object
    layer: int = None

    @staticmethod
    def range_name(layer_name):
        """The calibration range's key of the pool input a layer reads through its pool."""
        return f"{layer_name}:pool_input"


def global_pools(mod):
    """The ``GlobalPool``s of ``mod["main"]``, in binding order."""
    bindings = main_block(mod).bindings
    uses = _reads(bindings)
    found, source, index = [], {}, 0  # source: var -> the pool whose output it carries
    for b in bindings:
        value, kind = b.value, quantizable_call(b.value)
        if kind:
            pool = source.get(value.args[0])
            if pool is not None and uses[value.args[0]] == 1:
                found[pool] = GlobalPool(pool, found[pool].var, found[pool].mean, index)
            index += 1
        elif _spatial_mean(value):
            source[b.var] = len(found)
            found.append(GlobalPool(len(found), value.args[0], value))
        elif _reshape(value) and value.args[0] in source and uses[value.args[0]] == 1:
            source[b.var] = source[value.args[0]]
    return found


def _reads(bindings):
    """{var: how many bindings read it}."""
    from collections import Counter

    from tvm import relax

    return Counter(var for b in bindings for var in relax.analysis.free_vars(b.value))


def _spatial_mean(value):
    """Whether ``value`` means a float32 (N, C, H, W) var over H and W."""
    from tvm import relax

    if not isinstance(value, relax.Call) or getattr(value.op, "name", "") != "relax.mean":
        return False
    data = value.args[0]
    ty = data.ty
    if not isinstance(data, relax.Var) or ty.dtype != "float32" or ty.ndim != 4:
        return False
    return averages_height_width(value)


def averages_height_width(mean):
    """Whether the ``relax.mean`` call ``mean`` of a 4-D tensor reduces exactly its axes 2
    and 3 (H and W of (N, C, H, W)); a mean over every axis (``axis`` None) does not."""
    axes = mean.attrs.axis
    return axes is not None and sorted(int(a) % 4 for a in axes) == [2, 3]


def _reshape(value):
    from tvm import relax

    return isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.reshape"


def _bias_add(value):
    """Whether ``value`` adds a constant to a var (a conv's bias, (1, C, 1, 1))."""
    import tvm
    from tvm import relax

    return (
        isinstance(value, relax.Call)
        and getattr(value.op, "name", "") == "relax.add"
        and isinstance(value.args[0], relax.Var)
        and isinstance(value.args[1], tvm.ir.expr.Constant)
    )


def same_shape_add(value):
    """Whether ``value`` adds two float32 vars of one (N, C, H, W) shape."""
    from tvm import relax

    if not isinstance(value, relax.Call) or getattr(value.op, "name", "") != "relax.add":
        return False
    types = [arg.ty for arg in value.args]
    if not all(isinstance(arg, relax.Var) for arg in value.args):
        return False
    if not all(isinstance(t, relax.TensorType) and t.dtype == "float32" for t in types):
        return False
    shapes = [getattr(t, "shape", None) for t in types]
    if any(shape is None or len(shape) != 4 for shape in shapes):
        return False
    return [int(d) for d in shapes[0]] == [int(d) for d in shapes[1]]


def observer_module(mod):
    """A copy of ``mod`` whose ``main`` returns (output, input of layer 0, input of layer 1,
    ..., then each ``residual_outputs`` tensor, then the input of each ``global_pools``
    entry that a layer reads).

    Running it on calibration batches yields every quantizable layer's input activation,
    each residual output and each pooled input, in the exact Relax graph that will be
    quantized.
    """
    import tvm
    from tvm import relax

    func = mod["main"]
    block = main_block(mod)
    observed = [b.value.args[0] for b in block.bindings if quantizable_call(b.value)]
    observed += [found.var for found in residual_outputs(mod)]
    observed += [pool.var for pool in global_pools(mod) if pool.layer is not None]
    out = relax.Var("observed")
    bindings = [*block.bindings, relax.VarBinding(out, relax.Tuple([func.body.body, *observed]))]
    body = relax.BlockBuilder().normalize(relax.SeqExpr([relax.DataflowBlock(bindings)], out))
    return tvm.IRModule({"main": relax.Function(func.params, body, attrs=func.attrs)})


SHAPE_OPS = {"relax.reshape", "relax.squeeze", "relax.expand_dims", "relax.flatten"}


def output_op(mod):
    """The Relax op that computes ``main``'s output (``relax.sigmoid``, ``relax.nn.softmax``,
    ...), looking through ops that only reshape it, or None when the output is no call of
    the dataflow block. What a model's values are (``measure.metrics.output_kind``) cannot
    always be told from the values: logits that happen to lie in (0, 1] are no sigmoids."""
    from tvm import relax

    var2val = {b.var: b.value for b in main_block(mod).bindings}
    value = var2val.get(mod["main"].body.body)
    while isinstance(value, relax.Var) or (
        isinstance(value, relax.Call) and getattr(value.op, "name", None) in SHAPE_OPS
    ):
        value = var2val.get(value if isinstance(value, relax.Var) else value.args[0])
    return value.op.name if isinstance(value, relax.Call) and hasattr(value.op, "name") else None


def op_counts(mod):
    """Count of each Relax operator called in ``main``, by op name (e.g. ``relax.astype``)."""
    from collections import Counter

    from tvm import relax

    return Counter(
        b.value.op.name
        for b in main_block(mod).bindings
        if isinstance(b.value, relax.Call) and hasattr(b.value.op, "name")
    )


def gemm_macs(mod):
    """Multiply-accumulates of all quantizable conv2d/matmul layers of ``main``, per call.

    conv2d: N * C_out * H_out * W_out * (C_in / groups) * kH * kW; matmul: rows * K * M.
    """
    total = 0
    for b in main_block(mod).bindings:
        kind = quantizable_call(b.value)
        if not kind:
            continue
        out = [int(d) for d in b.var.ty.shape]
        weight = [int(d) for d in b.value.args[1].ty.shape]
        inner = weight[1] * weight[2] * weight[3] if kind == "conv2d" else weight[0]
        total += int(np.prod(out)) * inner
    return total


def use_counts(func):
    """{var: how many times it is read} over the bindings and output of Relax ``func``."""
    from collections import Counter

    from tvm import relax

    counts = Counter()

    def visit(expr):
        if isinstance(expr, relax.Var):
            counts[expr] += 1

    for block in func.body.blocks:
        for binding in block.bindings:
            relax.analysis.post_order_visit(binding.value, visit)
    relax.analysis.post_order_visit(func.body.body, visit)
    return counts
