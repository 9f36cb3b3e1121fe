"""Which AMX layers write their uint8 output with a border of zero points (pre-padded
outputs), so that the AMX convs reading it take the border as their padding and no pad
kernel runs between them.

A 3x3 conv pads its input by 1 with the input's zero point; resnet18 at batch 8 spent 0.9 of
9.9 ms in 17 such pad kernels, each a copy of the tensor (Intel Xeon VM with AMX, 2 threads,
``benchmarks/kernel_times.py``). An AMX layer's output gets a border of 1 when every read of
it is by an AMX layer that can take it as it is: a conv padded by 1 on every side with the
same zero point, a conv without padding (it reads from 1 pixel in: ``amx.AmxPlan.origin``),
or the residual input of an AMX layer's epilogue. Any other reader (a pool, a depthwise or
VNNI conv, the graph's output) keeps the plain tensor, so nothing reads a border it does not
expect.
"""

import dataclasses
from collections import Counter

BORDER = 1


def _bordered_read(layer):
    """The zero point a conv ``layer`` needs in a border of ``BORDER`` around its input, None
    when it reads the input unpadded, False when it cannot read a bordered input."""
    padding, kw = tuple(layer.padding), layer.weight.shape[3]
    if padding == (0, 0, 0, 0):
        return None
    if padding == (BORDER,) * 4 and kw <= 3 and tuple(layer.attrs.dilation) == (1, 1):
        return int(layer.zero_point)
    return False


def with_borders(chains, var2val, uses, on_amx):
    """``chains`` ({call: ``patterns.RequantizedLayer``}) with ``border`` set to ``BORDER``
    on each AMX layer whose output every reader takes bordered (module docstring).

    Args:
        chains: the requantized layers that have a uint8 kernel, by their last call.
        var2val: the function's {var: bound value}.
        uses: ``model.graph.use_counts`` of the function: {var: reads}.
        on_amx: chain -> whether the AMX kernel takes it.
    """
    var_of = {call: var for var, call in var2val.items() if call in chains}
    reads, zero_points = Counter(), {}
    for chain in filter(on_amx, chains.values()):
        need = _bordered_read(chain.layer)
        if need is not False:
            reads[chain.layer.x_q] += 1
            if need is not None:
                zero_points.setdefault(chain.layer.x_q, set()).add(need)
        if chain.residual is not None:
            reads[chain.residual[0]] += 1

    def takes_border(call, chain):
        var = var_of.get(call)
        if var is None or not on_amx(chain) or not 0 < reads[var] == uses[var]:
            return False
        return zero_points.get(var, {chain.zero_point}) == {chain.zero_point}

    return {
        call: dataclasses.replace(chain, border=BORDER) if takes_border(call, chain) else chain
        for call, chain in chains.items()
    }
