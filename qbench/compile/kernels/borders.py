"""Which uint8 kernels write their NCHW16c output with a border of zero points (pre-padded
outputs, ``prepadded``), so that the kernels reading it take the border as their padding
and no pad kernel runs between them.

A 3x3 conv pads its input by 1 with the input's zero point; resnet18 at batch 8 spent 0.9 of
9.9 ms in 17 such pad kernels, each a copy of the tensor (Intel Xeon VM with AMX, 2 threads,
``benchmarks/kernel_times.py``), mobilenet_v2 2.5 of 18.1 ms (AMD Zen 4, VNNI, 2 threads),
most before its depthwise convs. A uint8 kernel's output (AMX, packed or depthwise) gets a
border of 1 when every read of it is by a kernel that can take it as it is, and at least
one of them pads: a conv padded by 1 on every side with the same zero point (AMX up to 3x3
taps; a packed kernel that reads NCHW16c, ``layout.Packing.reads_nchw16c``; depthwise), a
conv without padding (it reads from 1 pixel in: ``amx.AmxPlan.origin``,
``conv2d.blocked_conv``'s ``origin``; AMX or packed), or the residual input of a uint8
kernel's epilogue; the reading conv may store uint8 or FP32 (densenet's 3x3 convs, which a
concat reads). A uint8 max pool padded by 1 takes a border of the zero point in place
of its padding (of the dtype's lowest value) when every value of the tensor is at least the
zero point (a ReLU requantize: ``q_lo`` >= zero point), so the border never wins a window's
max; and writes its own output with a border when every reader of it takes one (resnet's
stem -> max pool -> first block). Any other reader (a packed kernel that packs its input
again, a kernel of TVM's default schedules, the graph's output) keeps the plain tensor, so
nothing reads a border it does not expect.
"""

import dataclasses
from collections import Counter

BORDER = 1


def _bordered_read(layer, path):
    """The zero point a conv ``layer`` on the kernel ``path`` (``select.KERNELS``) needs in a
    border of ``BORDER`` around its input, None when it reads the input unpadded from
    within the border, False when it cannot read a bordered input."""
    from .layout import PACKINGS

    padding, kw = tuple(layer.padding), layer.weight.shape[3]
    padded = padding == (BORDER,) * 4
    if path == "amx":
        fits = kw <= 3 and tuple(layer.attrs.dilation) == (1, 1)
    elif path == "depthwise":
        return int(layer.zero_point) if padded else False
    else:
        fits = path in PACKINGS and PACKINGS[path].reads_nchw16c
    if not fits:
        return False
    if padding == (0, 0, 0, 0):
        return None
    return int(layer.zero_point) if padded else False


def _pool_read(call):
    """Whether a uint8 max pool ``call`` can take a border of ``BORDER`` as its padding."""
    from .patterns import pool_padding

    return pool_padding(call) == (BORDER,) * 4


def with_borders(chains, var2val, uses, path_of, layers=()):
    """The borders of pre-padded outputs (module docstring).

    Args:
        chains: the requantized layers that have a uint8 kernel, by their last call
            ({call: ``patterns.RequantizedLayer``}).
        var2val: the function's {var: bound value}.
        uses: ``model.graph.use_counts`` of the function: {var: reads}.
        path_of: chain -> the path of the kernel that takes it (``select.KERNELS``).
        layers: (``patterns.IntegerLayer``, path of its kernel) of the integer layers outside
            the chains (FP32 outputs): readers as the chains' layers are.

    Returns:
        (``chains`` with ``border`` set to ``BORDER`` on each layer whose output every
        reader takes bordered, {uint8 max pool call: (``BORDER``, the border's value)} for
        the pools that write a bordered output).
    """
    var_of = {call: var for var, call in var2val.items()}
    pools = [call for call in var2val.values() if uint8_max_pool(call)]
    reads, zero_points, pooled = Counter(), {}, set()
    readers = [(chain.layer, path_of(chain)) for chain in chains.values()]
    for layer, path in [*readers, *layers]:
        need = _bordered_read(layer, path)
        if need is not False:
            reads[layer.x_q] += 1
            if need is not None:
                zero_points.setdefault(layer.x_q, set()).add(need)
    for chain in chains.values():
        if chain.residual is not None:
            reads[chain.residual[0]] += 1
    for pool in filter(_pool_read, pools):
        reads[pool.args[0]] += 1
        pooled.add(pool.args[0])

    def whole(var):
        return var is not None and 0 < reads[var] == uses[var]

    def chain_border(call, chain):
        var = var_of.get(call)
        if not whole(var) or (var not in zero_points and var not in pooled):
            return False  # a reader that cannot take it, or no reader that pads
        if var in pooled and chain.bounds[0] < chain.zero_point:
            return False  # a value below the zero point: the border could win a max
        return zero_points.get(var, {chain.zero_point}) == {chain.zero_point}

    def pool_border(pool):
        var, source = var_of.get(pool), pool.args[0]
        written = source in (var_of.get(c) for c in chains)  # its input is NCHW16c
        if not whole(var) or var in pooled or not written or len(zero_points.get(var, ())) != 1:
            return None
        return (BORDER, next(iter(zero_points[var])))

    bordered = {
        call: dataclasses.replace(chain, border=BORDER) if chain_border(call, chain) else chain
        for call, chain in chains.items()
    }
    pool_borders = {pool: pool_border(pool) for pool in pools}
    return bordered, {pool: b for pool, b in pool_borders.items() if b is not None}


def uint8_max_pool(call):
    """Whether ``call`` is a max pool of a uint8 tensor (``patterns.float_layer``)."""
    from .patterns import MAX_POOL, float_layer

    layer = float_layer(call)
    return layer is not None and layer.op == MAX_POOL and layer.precision == "uint8"
