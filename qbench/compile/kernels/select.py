"""One kernel-selection step for llvm CPUs, FP32 and INT8 alike.

``KERNELS`` is the registry: each entry names the op patterns it computes
(``patterns.CONV2D`` ...), the precision, the LLVM CPU features it needs (all of them) and its
emitter. Every layer of a graph (``patterns.float_layer``, ``patterns.integer_layer``) gets the
first entry that takes its pattern (and the layer, where the entry ``accepts`` only some) and
whose features the target has; a layer no entry takes
keeps TVM's op and gets a default schedule. The INT8 graph that reaches this step is the
plain, target-neutral integer graph of ``quantize.rewrite``; a new CPU class or op is one
entry here.
"""

import dataclasses
import functools
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...quantize.pairs import pairs_fit
from . import emit_fp32, emit_int8
from .activation import activated_layer
from .layout import MAX_MERGED, PACKINGS, merged_groups
from .patterns import (
    CONV2D,
    DEPTHWISE,
    GROUPED,
    MATMUL,
    MAX_POOL,
    float_layer,
    integer_layer,
    requantized_layer,
)
from .wide import widened

KERNEL_PATHS = "qbench_kernel_paths"  # module attr: layers by precision, op and kernel path
DEFAULT = "default"  # the path of a layer no kernel takes


@dataclass(frozen=True)
class Kernel:
    """One registry entry.

    Attributes:
        path: its name in reports (``avx2``, ``depthwise``, ...).
        precision: ``"int8"`` (integer layers), ``"float32"``, or ``"uint8"`` (max pooling
            of a uint8 tensor).
        ops: the op patterns it computes.
        features: LLVM CPU features it needs, all of them (e.g. ``("avx512vnni",)``).
        emit: ``emit(bb, layer) -> relax.Expr``, the expression replacing the layer, or None
            for a kernel that takes requantized layers only (``emit_u8``).
        cpu_class: the CPU class the kernel stands for in reports (INT8 GEMM kernels only).
        emit_u8: ``emit_u8(bb, chain) -> relax.Expr`` for a ``patterns.RequantizedLayer``:
            the layer and its chain to the next quantize as one kernel storing uint8, or
            None when the kernel has no such form.
        appends: whether FuseOps can append the elementwise ops after ``emit``'s kernel to
            it (a TE kernel with an ``op_pattern``). A kernel that cannot (``amx``, a
            PrimFunc) takes by ``emit`` only layers whose output only ``UNFUSED_READERS``
            read, so no bias or activation becomes a pass of its own.
    """

    path: str
    precision: str
    ops: tuple
    features: tuple
    emit: Callable
    cpu_class: str = ""
    emit_u8: Callable = None
    accepts: Callable = None  # layer -> bool, where the kernel takes only some layers
    appends: bool = True


# Relax ops that read a tensor without FuseOps appending them to the kernel writing it
UNFUSED_READERS = frozenset(
    ("relax.concat", "relax.nn.avg_pool2d", "relax.nn.max_pool2d", "relax.nn.adaptive_avg_pool2d")
)


def _pairs_fit(layer):
    """Whether every pair of ``layer``'s int8 weights fits ``vpmaddubsw``'s int16 sums
    (``quantize.pairs``): 7-bit weights (``QuantConfig.reduce_range``) always do, 8-bit ones
    with ``QuantConfig.fit_pairs`` or by chance."""
    return pairs_fit(layer.weight)


def _merges_few(layer, block):
    """Whether a grouped conv ``layer`` computes with ``layout.MAX_MERGED`` groups or fewer
    per kernel group on a packing of ``block``-channel inputs (``layout.merged_groups``)."""
    groups = int(layer.attrs.groups)
    out_channels, per_group = layer.weight.shape[:2]
    return merged_groups(groups, out_channels // groups, per_group, block) <= MAX_MERGED


def _int8_gemm(path, features, cpu_class, accepts=None):
    packing = PACKINGS[path]
    emit = functools.partial(emit_int8.packed, packing=packing)
    emit_u8 = functools.partial(emit_int8.packed_requantized, packing=packing)

    def takes(layer):
        grouped = layer.op != GROUPED or _merges_few(layer, packing.block)
        return grouped and (accepts is None or accepts(layer))

    ops = (CONV2D, GROUPED, MATMUL)
    return Kernel(path, "int8", ops, features, emit, cpu_class, emit_u8, takes)


AMX_MIN_MACS = 1 << 16  # per image. The test fixture's convs (32K and 55K MACs) ran 1.06x
# slower than FP32 on AMX (Intel Xeon VM, 2 threads: the kernel's per-call tile permission
# request and per-task tile configuration); VNNI takes such layers. Every conv of resnet18,
# mobilenet_v2 and efficientnet_lite0 has over 6M MACs.


def _amx_pays(layer):
    """Whether ``layer`` has ``AMX_MIN_MACS`` multiply-accumulates per image or more."""
    _, _, oh, ow = (int(v) for v in layer.call.ty.shape)
    return int(np.prod(layer.weight.shape)) * oh * ow >= AMX_MIN_MACS


KERNELS = (
    Kernel(
        "amx",
        "int8",
        (CONV2D,),
        ("amx-tile", "amx-int8"),
        emit_int8.amx_dequantized,
        "AMX",
        emit_int8.amx_requantized,
        _amx_pays,
        appends=False,
    ),
    _int8_gemm("vnni", ("avx512vnni",), "AVX-512 VNNI"),
    _int8_gemm("avxvnni", ("avxvnni",), "AVX-VNNI"),
    _int8_gemm("avx512bw", ("avx512bw",), "AVX-512BW"),
    _int8_gemm("avx2_u8", ("avx2",), "", _pairs_fit),  # --reduce-range, --fit-pairs
    _int8_gemm("avx2", ("avx2",), "AVX2"),
    _int8_gemm("neon_dot", ("dotprod",), "Arm dot product"),
    Kernel(
        "depthwise",
        "int8",
        (DEPTHWISE,),
        (),
        emit_int8.depthwise,
        emit_u8=emit_int8.depthwise_requantized,
    ),
    Kernel("packed", "float32", (CONV2D,), (), emit_fp32.conv),
    Kernel("packed", "float32", (MATMUL,), (), emit_fp32.dense),
    Kernel("depthwise", "float32", (DEPTHWISE,), (), emit_fp32.depthwise),
    Kernel("taps", "float32", (MAX_POOL,), (), emit_fp32.max_pool),
    Kernel("taps", "uint8", (MAX_POOL,), (), emit_fp32.max_pool),
)
NO_FAST_PATH = "no INT8 fast path"


def choose(layer, target, requantized=False, alone=False):
    """The first ``KERNELS`` entry for ``layer`` on the llvm ``target`` (dict), or None;
    ``requantized``: the layer ends a ``patterns.RequantizedLayer`` (a kernel without
    ``emit`` takes only those); ``alone``: only ``UNFUSED_READERS`` read the layer's output
    (a kernel that ``appends`` nothing takes only those, or requantized ones)."""
    from ..features import has_feature

    for kernel in KERNELS:
        if kernel.precision != layer.precision or layer.op not in kernel.ops:
            continue
        if not requantized and (kernel.emit is None or not (kernel.appends or alone)):
            continue
        if kernel.accepts is not None and not kernel.accepts(layer):
            continue
        if all(has_feature(target, f) for f in kernel.features):
            return kernel
    return None


def int8_gemm_kernels(target):
    """The INT8 conv/dense ``Kernel``s (one per CPU class) the llvm ``target`` (dict) can
    run, fastest first (on an AMX CPU: ``amx``, then ``vnni``, ...)."""
    from ..features import has_feature

    return [
        kernel
        for kernel in KERNELS
        if kernel.cpu_class and all(has_feature(target, f) for f in kernel.features)
    ]


def int8_gemm_kernel(target):
    """The INT8 conv/dense ``Kernel`` the llvm ``target`` (dict) runs, or None."""
    return next(iter(int8_gemm_kernels(target)), None)


def cpu_class(target):
    """The llvm ``target``'s CPU class as the INT8 conv kernels see it (``"AVX2"``, ...,
    or ``NO_FAST_PATH``)."""
    kernel = int8_gemm_kernel(target)
    return kernel.cpu_class if kernel else NO_FAST_PATH


def cpu_classes():
    """The CPU classes qbench has INT8 conv kernels for, fastest first."""
    return [kernel.cpu_class for kernel in KERNELS if kernel.cpu_class]


def _visit(mod, target, emit):
    """Walk every call of ``mod``'s Relax functions; a layer with a kernel is counted and,
    when ``emit``, replaced by it. Returns (module, Counter of ``_path_name``)."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from ...model.graph import use_counts

    paths = Counter()

    @mutator
    class _Selector(PyExprMutator):
        var2val, chains, absorbed, pool_borders, fused, alone = {}, {}, set(), {}, {}, set()

        def visit_call_(self, call):
            if call in self.chains:
                return self._requantized(self.chains[call])
            if call in self.fused:
                return self._pooled(self.fused[call], call)
            if call in self.absorbed:  # its chain's kernel computes it: left unused
                return self.visit_expr_post_order(call)
            border, alone = self.pool_borders.get(call), call in self.alone
            call = self.visit_expr_post_order(call)
            layer = float_layer(call) or integer_layer(call, self.var2val)
            if layer is None:
                return call
            if border is not None:
                layer = dataclasses.replace(layer, border=border)
            kernel = choose(layer, target, alone=alone) if layer.op else None
            paths[_path_name(layer, kernel)] += 1
            if kernel is None or not emit:
                return call
            if layer.precision == "int8":
                layer = _remapped(self, layer)
            return kernel.emit(self.builder_, layer)

        def _requantized(self, chain):
            kernel = choose(chain.layer, target, requantized=True)
            paths[_path_name(chain.layer, kernel)] += 1
            if not emit:
                return self.visit_expr_post_order(chain.call)
            layer, residual = _remapped(self, chain.layer), chain.residual
            if residual is not None:
                residual = (self.visit_expr(residual[0]), *residual[1:])
            chain = dataclasses.replace(chain, layer=layer, residual=residual)
            return kernel.emit_u8(self.builder_, chain)

        def _pooled(self, chain, call):
            """The AMX conv ``chain`` with the max pool ``call`` reading it, one kernel."""
            kernel = choose(chain.layer, target, requantized=True)
            pool = dataclasses.replace(float_layer(call), border=self.pool_borders.get(call))
            paths[_path_name(chain.layer, kernel)] += 1
            paths[_path_name(pool, kernel)] += 1
            if not emit:
                return self.visit_expr_post_order(call)
            chain = dataclasses.replace(chain, layer=_remapped(self, chain.layer))
            return emit_int8.amx_requantized(self.builder_, chain, pool)

    selector = _Selector(mod)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            selector.var2val, uses = relax.analysis.get_var2val(func), use_counts(func)
            selector.alone = _read_alone(selector.var2val, uses)
            chains, selector.pool_borders = _chains(selector.var2val, uses, target, selector.alone)
            found = (chains, selector.pool_borders)
            fused = _fused_pools(selector.var2val, uses, found, target)
            path_of = functools.partial(_path_of, target=target)
            chains, selector.fused = widened(chains, fused, selector.var2val, uses, path_of)
            fused = {chain.call for chain in selector.fused.values()}
            selector.chains = {c: chain for c, chain in chains.items() if c not in fused}
            selector.absorbed = {chain.layer.call for chain in chains.values()} | fused
            new = relax.analysis.remove_all_unused(selector.visit_expr(func))
            selector.builder_.update_func(gvar, new)
    return selector.builder_.get(), paths


def _read_alone(var2val, uses):
    """The bound calls of a function (``var2val``: its bindings; ``uses``:
    ``model.graph.use_counts`` of it) whose every read is an argument of an
    ``UNFUSED_READERS`` call (directly or in a tuple written in the call): a read by any other
    op, a bound tuple or the function's output does not count."""
    from collections import Counter

    from tvm import relax

    unfused = Counter()
    for value in var2val.values():
        if isinstance(value, relax.Call) and getattr(value.op, "name", "") in UNFUSED_READERS:
            for arg in value.args:
                fields = arg.fields if isinstance(arg, relax.Tuple) else (arg,)
                unfused.update(f for f in fields if isinstance(f, relax.Var))
    return {call for var, call in var2val.items() if 0 < unfused[var] == uses[var]}


def _chains(var2val, uses, target, alone):
    """({uint8 cast: ``RequantizedLayer``} of a function's integer requantizes whose
    layer's kernel has a uint8 form on ``target``, {max pool call: its output's border}),
    with the borders of ``borders.with_borders`` (``var2val``: the function's bindings;
    ``uses``: ``model.graph.use_counts`` of it; ``alone``: ``_read_alone`` of it), whose
    readers are the chains and the ungrouped and grouped convs outside them (FP32 outputs),
    with their kernels' paths."""
    from .borders import with_borders

    found = {}
    for call in var2val.values():
        chain = requantized_layer(call, var2val, uses) or activated_layer(call, var2val, uses)
        kernel = choose(chain.layer, target, True) if chain is not None else None
        if kernel is not None and kernel.emit_u8 is not None:
            found[call] = chain
    in_chains = {chain.layer.call for chain in found.values()}
    others = []
    for call in (c for c in var2val.values() if c not in in_chains):
        layer = integer_layer(call, var2val)
        if layer is not None and layer.op in (CONV2D, GROUPED):  # they read NCHW16c as is
            kernel = choose(layer, target, alone=call in alone)
            others += [(layer, kernel.path)] if kernel is not None else []

    path_of = functools.partial(_path_of, target=target)
    return with_borders(found, var2val, uses, path_of, others)


def _path_of(chain, target):
    """The path of the kernel that takes the ``RequantizedLayer`` ``chain`` on ``target``."""
    return choose(chain.layer, target, True).path


def _fused_pools(var2val, uses, found, target):
    """{max pool call: the ``RequantizedLayer`` it alone reads} for the uint8 max pools
    the AMX kernel of their input's chain computes with it (``amx.pooled``): a chain
    without a residual or activation whose multipliers are all >= 0 (the requantize is
    then monotone, so pooling the accumulators first gives the same uint8), a pool
    ``patterns.pool_spec`` takes that pads and strides within its window, and a border, if
    the pool writes one, of the chain's zero point. ``found``: ``_chains``' (chains, pool
    borders)."""
    from .amx import pool_fits
    from .borders import uint8_max_pool
    from .patterns import pool_spec

    chains, pool_borders = found
    var_of = {call: var for var, call in var2val.items()}
    by_var = {var_of.get(call): chain for call, chain in chains.items()}
    fused = {}
    for call in filter(uint8_max_pool, var2val.values()):
        chain, spec = by_var.get(call.args[0]), pool_spec(call)
        if chain is None or spec is None or uses[call.args[0]] != 1:
            continue
        if chain.residual or chain.activation:
            continue
        border = pool_borders.get(call)
        fits = pool_fits(spec) and (border is None or border[1] == chain.zero_point)
        monotone = (chain.layer.rescale >= 0).all()
        if fits and monotone and choose(chain.layer, target, True).path == "amx":
            fused[call] = chain
    return fused


def _remapped(mutator, layer):
    """``layer`` with its input read through ``mutator``'s variable renames."""
    return dataclasses.replace(layer, x_q=mutator.visit_expr(layer.x_q))


def _path_name(layer, kernel):
    """How reports name a layer's kernel: ``"int8 conv2d avx2"``, ``"float32 matmul default"``.
    Depthwise convs are conv2d layers."""
    return f"{layer.precision} {layer.kind} {kernel.path if kernel else DEFAULT}"


def select_kernels(mod, target):
    """``mod`` with every layer that a ``KERNELS`` entry takes on ``target`` replaced by that
    kernel. Returns a new ``tvm.IRModule`` whose ``KERNEL_PATHS`` attribute counts the layers
    by ``"<precision> <op> <path>"`` (``"int8 conv2d avx2": 20``)."""
    selected, paths = _visit(mod, target, emit=True)
    return selected.with_attr(KERNEL_PATHS, dict(sorted(paths.items())))


def kernel_paths(mod, target):
    """What ``select_kernels`` would choose, without building anything: {path name: layers}."""
    return dict(sorted(_visit(mod, target, emit=False)[1].items()))
