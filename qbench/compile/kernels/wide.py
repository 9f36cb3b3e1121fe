"""Which AMX kernels store their uint8 output in 64-channel blocks (NCHW64c, ``amx.WIDE``)
in place of NCHW16c.

An AMX conv's A tile row is one output pixel's taps. On NCHW16c data a 3x3 conv takes 3
taps of 16 channels, 48 bytes, at steps of 16 bytes, so half of its rows cross a cache
line; on NCHW64c data it takes one tap of 64 channels, a whole aligned 64-byte row, and a
quarter fewer ``tdpbusd``. The 3x3 convs of resnet18 ran 0.78-0.96x the time reading
NCHW64c (Intel Xeon VM with AMX, 2 threads, batch 1 and 8; docs/measurements.md).

A chain's output is wide when its kernel is AMX, its channels are a multiple of 64, and
every read of it is by an AMX kernel, as the conv's input or as the residual input of its
epilogue: those read either block. Any other reader (a depthwise or VNNI kernel, a pool, the
graph's output) keeps NCHW16c, so nothing reads a layout it does not expect; the readers
that take only NCHW16c find no wide tensor behind an unpack (``emit_common.blocked_behind``).
"""

import dataclasses
from collections import Counter

from .amx import LANES, WIDE

BLOCKS = (LANES, WIDE)  # the channel blocks an AMX kernel reads


def widened(chains, fused, var2val, uses, path_of):
    """``chains`` and ``fused`` with ``block`` set to ``WIDE`` on each AMX chain whose output
    goes wide (module docstring).

    Args:
        chains: {last call: ``patterns.RequantizedLayer``} of the uint8 kernels, the fused
            ones included.
        fused: {max pool call: the chain whose AMX kernel computes the pool too}; such a
            kernel's output is the pool's.
        var2val: the function's {var: bound value}.
        uses: ``model.graph.use_counts`` of the function: {var: reads}.
        path_of: chain -> the path of the kernel that takes it (``select.KERNELS``).

    Returns:
        (chains, fused), the same keys, the wide chains replaced.
    """
    var_of = {call: var for var, call in var2val.items()}
    amx_reads = Counter()
    for chain in filter(lambda c: path_of(c) == "amx", chains.values()):
        amx_reads[chain.layer.x_q] += 1
        if chain.residual is not None:
            amx_reads[chain.residual[0]] += 1
    output = {chain.call: var_of.get(pool) for pool, chain in fused.items()}

    def wide(call, chain):
        var = output.get(call, var_of.get(call))
        channels = int(chain.layer.weight.shape[0])
        by_amx = var is not None and 0 < amx_reads[var] == uses[var]
        return path_of(chain) == "amx" and channels % WIDE == 0 and by_amx

    def replaced(call, chain):
        return dataclasses.replace(chain, block=WIDE) if wide(call, chain) else chain

    widened_chains = {call: replaced(call, chain) for call, chain in chains.items()}
    return widened_chains, {pool: widened_chains[c.call] for pool, c in fused.items()}
