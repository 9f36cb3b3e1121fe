"""Emitters that put one integer layer (``patterns.IntegerLayer``) on qbench's INT8 kernels.

Each returns the Relax expression that replaces the layer's chain: the layer's uint8 input
(the graph's quantize, shared with every layer reading the same tensor) is padded with its
zero point and packed for the kernel (``layout``), and the kernel applies the same
zero-point correction and rescale to its int32 tile as it writes the FP32 result, so the
output is bit-identical to the plain integer graph's. The ops after the kernel (bias,
activation, residual add, the next layer's quantize) are elementwise: FuseOps appends them
to the kernel, whose epilogue then stores uint8.
"""

import numpy as np

from .conv2d import OUT_ELEMWISE_FUSABLE
from .emit_common import blocked_behind, nchw16c_behind, padded_columns, padded_nchw16c


def _const(array, dtype):
    from tvm import relax

    return relax.const(np.asarray(array).astype(dtype), dtype)


def _padded(bb, x_q, padding, zero_point):
    """uint8 ``x_q`` (N, C, H, W) padded with ``zero_point``, the real 0;
    ``padding``: (top, left, bottom, right)."""
    from tvm.relax import op

    if not any(padding):
        return x_q
    top, left, bottom, right = padding
    width = [0, 0, 0, 0, top, bottom, left, right]
    return bb.emit(op.nn.pad(x_q, width, pad_value=float(zero_point)))


def _kernel_correction(layer, packing):
    """(O,) int64 correction of a packed kernel: it sums (x_q - packing.offset) * w, so its
    correction is the layer's, zero_point * sum(w), less offset * sum(w)."""
    sums = layer.weight.astype(np.int64).sum(axis=(1, 2, 3) if layer.attrs else 0)
    return layer.correction - packing.offset * sums


def _packed_conv_inputs(bb, layer, packing):
    """(packed data var, prepacked weight constant, strides, origin, kernel groups) of a
    conv layer for
    ``packing``: the NCHW16c tensor of the uint8 kernel that wrote its input where the
    packing reads it (``layout.Packing.reads_nchw16c``): as it is when its border is the
    conv's padding, from its border in (``origin``) when the conv has none, else padded in
    that layout; else the network input as flat pixel rows where they take fewer groups
    (``_flat_input``), else its uint8 input padded with the zero point and packed to
    NCHW[block]c. Measured in the model (resnet18, AMD Zen 5, 2 threads,
    ``benchmarks/kernel_times.py``): its 3x3 convs ran as fast on NCHW16c as on NCHW4c, and
    the unpack-pad-repack between them, one call per conv, had cost 2.4 of 27.6 ms at batch
    8 (the NCHW16c pad 0.2 ms). A grouped conv's weights are laid out for its kernel
    groups (``_grouped_weight``); it never reads flat rows."""
    from . import layout
    from .conv2d import OC_BLOCK

    zp, strides = int(layer.zero_point), tuple(int(s) for s in layer.attrs.strides)
    weight, groups = _grouped_weight(layer, packing)
    blocked, border = _blocked_input(bb, layer) if packing.reads_nchw16c else (None, 0)
    origin = 0
    if blocked is not None:
        origin = border if not any(layer.padding) else 0
        data = blocked if border else padded_nchw16c(bb, blocked, layer.padding, zp)
        multiple = OC_BLOCK
    else:
        flat = _flat_input(bb, layer, packing) if int(layer.attrs.groups) == 1 else None
        if flat is not None:
            return *flat, 0, 1
        multiple = None
        data = _quantized_input(bb, layer, tuple(layer.padding), _packed_data(packing))
    if data is None:
        x_q = _padded(bb, layer.x_q, layer.padding, zp)
        data = bb.emit(bb.call_te(layout.pack_nchw4c, x_q, zp, *_packed_data(packing)))
    multiple = multiple if groups == 1 else None  # a kernel group reads its own blocks
    weight = layout.pack_conv_weight(weight, packing.block, packing.weight_dtype, multiple)
    return data, _const(weight, weight.dtype.name), strides, origin, groups


def _grouped_weight(layer, packing):
    """(int8 (O, C', KH, KW) weights, kernel groups) of a conv layer: its own and 1 when
    ungrouped; a grouped conv's by ``layout.merged_groups`` groups per kernel group
    (``layout.expand_groups``)."""
    from . import layout

    groups = int(layer.attrs.groups)
    if groups == 1:
        return layer.weight, 1
    out_channels, per_group = layer.weight.shape[:2]
    merged = layout.merged_groups(groups, out_channels // groups, per_group, packing.block)
    return layout.expand_groups(layer.weight, groups, merged), groups // merged


def _blocked_input(bb, layer):
    """(the uint8 NCHW16c tensor a uint8 kernel wrote as ``layer``'s input, its border)
    where ``layer`` can read it: a border must be the layer's padding, or the layer
    unpadded; else (None, 0) (``borders`` grants no other border)."""
    blocked, border = blocked_behind(bb, layer.x_q)
    padding = tuple(int(p) for p in layer.padding)
    if border and padding not in ((border,) * 4, (0,) * 4):
        return None, 0
    return blocked, border


def _flat_input(bb, layer, packing):
    """(data var, weight constant, strides in elements) of a conv reading the network input
    as flat pixel rows (``conv2d.blocked_conv``), written by ``quantize_pack_pad``, when a
    kernel row of them takes fewer groups of ``packing.block`` than NCHW[block]c does (C not
    a multiple of the block: resnet's 7x7 stem on 3 channels, 6 groups of 4 bytes against
    7), the dilation is 1 and the layer reads the graph's quantize; else None. The right
    padding grows by the pixels the last output's groups read past the row (their weights
    are 0). Not for ``vpmaddubsw`` where a pair of the flat rows' weights (two taps or two
    channels of one group) would saturate its int16 sums: ``QuantConfig.fit_pairs`` fits
    the pairs of channels that NCHW[block]c holds."""
    from ...quantize.pairs import pairs_fit
    from . import layout
    from .conv2d import out_size

    channels, _, kw = layer.weight.shape[1:]
    groups = layout.flat_groups(kw, channels, packing.block)
    if tuple(int(d) for d in layer.attrs.dilation) != (1, 1):
        return None
    if groups >= kw * -(-channels // packing.block):
        return None
    weight = layout.pack_flat_weight(layer.weight, packing.block, packing.weight_dtype)
    if packing.instruction == "vpmaddubsw" and not pairs_fit(weight, axis=-1):
        return None
    top, left, bottom, right = (int(p) for p in layer.padding)
    sh, sw = (int(s) for s in layer.attrs.strides)
    width = int(layer.x_q.ty.shape[3]) + left + right
    last = (out_size(width, kw, sw, 1) - 1) * sw * channels + groups * packing.block
    right += -(-max(0, last - width * channels) // channels)
    packed = (channels, packing.data_dtype, packing.offset)
    data = _quantized_input(bb, layer, (top, left, bottom, right), packed, flat=True)
    if data is None:
        return None
    return data, _const(weight, weight.dtype.name), (sh, sw * channels)


def packed(bb, layer, packing):
    """An NCHW conv2d (ungrouped or grouped) or a 2-D matmul on the packed kernel of ``packing``
    (``layout.PACKINGS``)."""
    from . import layout

    if layer.attrs is None:  # matmul: the rows as one image row
        zp = int(layer.zero_point)
        data = bb.emit(bb.call_te(layout.pack_rows, layer.x_q, zp, *_packed_data(packing)))
        weight = layout.pack_dense_weight(layer.weight, packing.block, packing.weight_dtype)
        weight = _const(weight, weight.dtype.name)
        strides, dilation, rows, origin, groups = (1, 1), (1, 1), True, 0, 1
    else:
        data, weight, strides, origin, groups = _packed_conv_inputs(bb, layer, packing)
        dilation, rows = tuple(int(d) for d in layer.attrs.dilation), False
    correction = _const(_kernel_correction(layer, packing), "int32")
    args = [data, weight, correction, _const(layer.rescale, "float32")]
    return _requantized_conv(bb, args, (strides, dilation, rows, origin, groups), packing)


def _packed_data(packing):
    """The packing functions' (block, dtype, offset) arguments for ``packing``."""
    return packing.block, packing.data_dtype, packing.offset


def _requantized_conv(bb, args, geometry, packing):
    """The packed conv and its requantize as one kernel; ``geometry``: (strides, dilation,
    rows, origin, groups) of ``conv2d.requantized_conv``. ``op_pattern`` out-elementwise-fusable
    lets FuseOps append the elementwise ops that follow (bias, activation, residual add);
    ``kernels.schedules.HandKernels`` schedules the result as one tiled kernel."""
    from .conv2d import requantized_conv

    strides, dilation, rows, origin, groups = geometry
    return bb.call_te(
        requantized_conv,
        *args,
        strides,
        dilation,
        rows,
        packing.op_name,
        origin,
        groups,
        primfunc_name_hint="conv2d_packed_" + packing.op_name.rsplit("_", 1)[-1],
        primfunc_attrs={"op_pattern": OUT_ELEMWISE_FUSABLE},
    )


BLOCKED_DEPTHWISE_WIDTH = 16  # output columns from which NCHW rows fill vectors. On the
# Intel Xeon with AMX (2 threads, efficientnet_b0 at batch 8, SiLU appended) the NCHW16c
# taps took 0.63-0.85x the NCHW rows' time at 7x7 and 14x14 outputs, 1.13-1.31x at 28x28
# and up (the NCHW16c store scatters 16 channels a plane apart).


def depthwise(bb, layer):
    """A depthwise conv2d with its FP32 (N, C, OH, OW) output (any CPU): on
    ``depthwise.depthwise_conv_blocked``, its taps in uint8 NCHW16c (``_depthwise_nchw16c``),
    where C is a multiple of 16 and OW below ``BLOCKED_DEPTHWISE_WIDTH``, else on
    ``depthwise.depthwise_conv`` in NCHW."""
    from .conv2d import OC_BLOCK
    from .depthwise import depthwise_conv, depthwise_conv_blocked

    attrs = layer.attrs
    strides = tuple(int(s) for s in attrs.strides)
    out_width = int(layer.call.ty.shape[3])
    if layer.weight.shape[0] % OC_BLOCK == 0 and out_width < BLOCKED_DEPTHWISE_WIDTH:
        return bb.call_te(
            depthwise_conv_blocked,
            *_depthwise_nchw16c(bb, layer),
            _const(layer.correction, "int32"),
            _const(layer.rescale, "float32"),
            strides,
            tuple(int(d) for d in attrs.dilation),
            primfunc_name_hint="depthwise_conv2d",
            primfunc_attrs={"op_pattern": OUT_ELEMWISE_FUSABLE},
        )
    x_q, width = padded_columns(bb, layer.x_q, layer.padding, strides, float(layer.zero_point))
    return bb.call_te(
        depthwise_conv,
        x_q,
        _const(layer.weight, "int8"),
        _const(layer.correction, "int32"),
        _const(layer.rescale, "float32"),
        strides,
        tuple(int(d) for d in attrs.dilation),
        width,
        primfunc_name_hint="depthwise_conv2d",
        primfunc_attrs={"op_pattern": OUT_ELEMWISE_FUSABLE},
    )


def packed_requantized(bb, chain, packing):
    """A ``patterns.RequantizedLayer`` (a conv and its integer requantize to the next
    layers' uint8, a residual input included) on the packed kernel of ``packing`` as one
    kernel storing uint8 NCHW16c, 16 channels a vector, with the chain's ``border`` of its
    zero point around it (``prepadded``), then unpacked to the (N, C, OH, OW) uint8 tensor
    the graph's requantize gave (a uint8 kernel after it reads the NCHW16c tensor itself,
    so the unpack runs only for other readers). A residual input is read as the uint8
    kernel before wrote it (bordered or not), else packed."""
    from .conv2d import requantized_conv_u8

    layer = chain.layer
    data, weight, strides, origin, groups = _packed_conv_inputs(bb, layer, packing)
    constants = _blocked_constants(chain, _kernel_correction(layer, packing))
    residual, residual_border = None, 0
    if chain.residual is not None:
        t_q, k, z_t = chain.residual
        blocked, residual_border = _residual_input(bb, t_q, z_t)
        constants, residual = (*constants, blocked), (k, z_t)
    args = (
        data,
        weight,
        constants,
        (chain.zero_point, chain.bounds, residual, chain.activation),
        strides,
    )
    args += (tuple(int(d) for d in layer.attrs.dilation), packing.op_name, origin)
    name = "conv2d_packed_u8_" + packing.op_name.rsplit("_", 1)[-1]
    compute = (requantized_conv_u8, *args, residual_border, groups)
    return _uint8_kernel(bb, chain, compute, name)


def depthwise_requantized(bb, chain):
    """A depthwise ``patterns.RequantizedLayer`` in uint8 NCHW16c
    (``depthwise.depthwise_conv_u8``), with the chain's ``border`` around its output: it
    reads the NCHW16c tensor of the uint8 kernel before it (its border as its padding), or
    packs its input, and returns the unpacked (N, C, OH, OW) uint8 tensor."""
    from .conv2d import OC_BLOCK
    from .depthwise import depthwise_conv_u8

    layer, attrs = chain.layer, chain.layer.attrs
    data, weight = _depthwise_nchw16c(bb, layer)
    blocks = int(data.ty.shape[1])
    args = (data, weight, _blocked_constants(chain, layer.correction, blocks * OC_BLOCK))
    args += ((chain.zero_point, chain.bounds, None, chain.activation),)
    args += (tuple(int(s) for s in attrs.strides),)
    args += (tuple(int(d) for d in attrs.dilation),)
    return _uint8_kernel(bb, chain, (depthwise_conv_u8, *args), "depthwise_conv2d_u8")


def _depthwise_nchw16c(bb, layer):
    """(uint8 NCHW16c data, padded, int8 (C16, KH, KW, 16) weight constant) of a depthwise
    ``layer``: the data is the NCHW16c tensor of the uint8 kernel before it (its border as
    the padding), or packed and padded; weights of channels past the layer's are 0."""
    from . import layout
    from .conv2d import OC_BLOCK

    zp, channels = int(layer.zero_point), layer.weight.shape[0]
    blocked, border = _blocked_input(bb, layer)
    if not border:
        data = padded_nchw16c(bb, _nchw16c_of(bb, layer.x_q, zp), layer.padding, zp)
    elif any(layer.padding):
        data = blocked
    else:  # unpadded: the plain tensor, packed (``borders`` grants no such border)
        data = bb.emit(bb.call_te(layout.pack_nchw16c, layer.x_q, zp))
    blocks = int(data.ty.shape[1])
    weight = np.zeros((blocks * OC_BLOCK, *layer.weight.shape[2:]), np.int8)
    weight[:channels] = layer.weight[:, 0]
    weight = weight.reshape(blocks, OC_BLOCK, *weight.shape[1:]).transpose(0, 2, 3, 1)
    return data, _const(np.ascontiguousarray(weight), "int8")


def _uint8_kernel(bb, chain, compute, name):
    """Emit the TE ``compute`` (function, args...) of a uint8 NCHW16c kernel of ``chain``,
    its output with the chain's ``border`` (``prepadded.with_border``); return its unpack
    to (N, C, OH, OW). A bordered kernel is opaque to FuseOps (its output is a view)."""
    from tvm import relax
    from tvm.relax.utils import gen_call_tir_inputs

    from . import layout
    from .prepadded import with_border

    if not chain.border:
        attrs = {"op_pattern": OUT_ELEMWISE_FUSABLE}
        blocked = bb.emit(bb.call_te(*compute, primfunc_name_hint=name, primfunc_attrs=attrs))
    else:
        func, args, _ = gen_call_tir_inputs(*compute)
        func = with_border(func, chain.border, chain.zero_point)
        out = relax.TensorType([int(v) for v in func.params[-1].shape], "uint8")
        blocked = bb.emit(relax.call_tir(bb.add_func(func, name), args, out))
    channels = chain.layer.weight.shape[0]
    return bb.call_te(layout.unpack_nchw16c, blocked, channels, chain.border)


def _blocked_constants(chain, correction, width=None):
    """(correction int32, multiplier float32, bias float32) constants of a uint8 NCHW16c
    kernel, each of ``width`` (default: the channels rounded up to 16) entries, zero past
    the layer's channels (read by no layer)."""
    from .conv2d import OC_BLOCK

    width = width or -(-len(chain.layer.rescale) // OC_BLOCK) * OC_BLOCK
    values = ((correction, "int32"), (chain.layer.rescale, "float32"), (chain.bias, "float32"))
    return tuple(_padded_const(v, width, dtype) for v, dtype in values)


def _padded_const(values, width, dtype):
    """A Relax constant of ``width`` entries of ``dtype``: ``values``, then zeros."""
    out = np.zeros(width, dtype)
    out[: len(values)] = values
    return _const(out, dtype)


def _nchw16c_of(bb, x_q, zero_point):
    """uint8 ``x_q`` (N, C, H, W) in NCHW16c: the tensor a uint8 kernel wrote, when ``x_q``
    is its unpack, else ``x_q`` packed (padded channels holding ``zero_point``)."""
    from . import layout

    blocked = nchw16c_behind(bb, x_q)
    if blocked is None:
        blocked = bb.emit(bb.call_te(layout.pack_nchw16c, x_q, zero_point))
    return blocked


def _residual_input(bb, t_q, z_t, blocks=(16,)):
    """(the uint8 channel-blocked residual input ``t_q`` of a uint8 kernel, its border): as
    the uint8 kernel before wrote it (bordered or not) when in blocks of one of ``blocks``
    (``blocked_behind``), else packed to NCHW16c with ``z_t`` in its padded channels."""
    from . import layout

    blocked, border = blocked_behind(bb, t_q, blocks)
    if blocked is None:
        blocked = bb.emit(bb.call_te(layout.pack_nchw16c, t_q, z_t))
    return blocked, border


def amx_dequantized(bb, layer):
    """A conv ``patterns.IntegerLayer`` on the AMX kernel, storing its FP32 result (N, O, OH,
    OW) as the VNNI path's ``requantized_conv`` does, bit for bit (``amx.dequantized``). No
    op is appended to it (a PrimFunc: ``select.Kernel.appends``), so the selection gives it
    only layers that concats and pools alone read (densenet's 3x3 and transition convs).
    It reads its input as ``_amx_data`` gives it."""
    from tvm import relax

    from . import amx

    data, p = _amx_data(bb, layer)
    p = amx.dequantized(p, layer.weight.shape[0])
    width = p.out[1] * amx.LANES
    args = [data, _const(amx.pack_weight(layer.weight, p), "int8")]
    args += [_padded_const(layer.correction, width, "int32")]
    args += [_padded_const(layer.rescale, width, "float32")]
    func = amx.conv(p, None, False, amx.AmxTiles())
    kernel = bb.add_func(func.without_attr("global_symbol"), "amx_conv2d")
    return relax.call_tir(kernel, relax.Tuple(args), relax.TensorType(p.stored, "float32"))


def amx_requantized(bb, chain, pool=None):
    """A conv ``patterns.RequantizedLayer`` on the AMX kernel (``amx.conv``), storing
    uint8 in the chain's ``block`` (NCHW16c, or NCHW64c: ``kernels.wide``), with the chain's
    ``border`` of its zero point around it. It reads its input as ``_amx_data`` gives it, and
    a residual input as the uint8 kernel before wrote it (bordered or not, either block),
    else packed. With ``pool`` (the ``patterns.FloatLayer`` of the
    uint8 max pool that alone reads the chain's output, its multipliers all >= 0: the
    caller checks), the kernel max pools its accumulators (``amx.pooled``) and stores the
    pool's output with the pool's ``border``. Returns the unpacked (N, C, OH, OW) uint8
    tensor, as ``packed_requantized``."""
    import dataclasses

    from tvm import relax

    from . import amx, layout
    from .patterns import pool_spec
    from .wide import BLOCKS

    layer = chain.layer
    data, p = _amx_data(bb, layer)
    if pool is None:
        p = dataclasses.replace(p, border=chain.border, out_block=chain.block)
    else:
        border = pool.border[0] if pool.border else 0
        p = amx.pooled(p, pool_spec(pool.call))
        p = dataclasses.replace(p, border=border, out_block=chain.block)
    args = [data, _const(amx.pack_weight(layer.weight, p), "int8")]
    args += _blocked_constants(chain, layer.correction)
    residual = None
    if chain.residual is not None:
        t_q, k, z_t = chain.residual
        blocked, border = _residual_input(bb, t_q, z_t, BLOCKS)
        args.append(blocked)
        block = int(blocked.ty.shape[-1])
        p = dataclasses.replace(p, residual_border=border, residual_block=block)
        residual = (k, z_t)
    epilogue = (chain.zero_point, chain.bounds, residual, chain.activation)
    func = amx.conv(p, epilogue, residual is not None, amx.AmxTiles())
    name = "amx_conv2d" if pool is None else "amx_conv2d_max_pool"
    kernel = bb.add_func(func.without_attr("global_symbol"), name)
    out = relax.TensorType(p.stored, "uint8")
    blocked = bb.emit(relax.call_tir(kernel, relax.Tuple(args), out))
    return bb.call_te(layout.unpack_nchw16c, blocked, layer.weight.shape[0], p.border)


def _amx_data(bb, layer):
    """(uint8 data var, ``amx.AmxPlan``) of an AMX conv ``layer``. The bordered NCHW16c or
    NCHW64c (``kernels.wide``) tensor of the AMX layer before it is read as it is when its
    border is this conv's padding, or from its border in when this conv has none; a tensor
    without a border, padded in that layout. Another input is packed to NCHW4c when it has
    at most 4 channels (the stem: 7 taps of 4 channels in one tile row), else to NCHW16c,
    then padded; the graph's quantize of an FP32 tensor (the network's input) is quantized,
    packed and padded by one kernel (``_quantized_input``), folded space-to-depth for a
    stride-2 conv on at most 4 channels from batch 2 (``amx.fold_of``). The columns a tile
    row reads past the kernel's taps are padded with the zero point."""
    import dataclasses

    from . import amx, layout
    from .conv2d import OC_BLOCK
    from .wide import BLOCKS

    attrs, zp = layer.attrs, int(layer.zero_point)
    channels, inputs, kh, kw = layer.weight.shape
    conv = (channels, (kh, kw), tuple(int(s) for s in attrs.strides))
    conv += (tuple(int(d) for d in attrs.dilation),)
    padding = tuple(layer.padding)
    blocked, border = blocked_behind(bb, layer.x_q, BLOCKS)
    if border and padding in ((border,) * 4, (0,) * 4):
        shape = tuple(int(v) for v in blocked.ty.shape)
        p = amx.plan(shape, *conv, origin=0 if any(padding) else border)
        if not amx.extra_columns(p):
            return blocked, p
    if border:  # a read the border does not fit: the plain tensor, packed again
        blocked = None
    if blocked is None and amx.fold_of(inputs, *conv[2:], int(layer.x_q.ty.shape[0])) > 1:
        folded = _folded_input(bb, layer, channels, (kh, kw))
        if folded is not None:
            return folded
    block = amx.QUAD if inputs <= amx.QUAD else OC_BLOCK
    block = block if blocked is None else int(blocked.ty.shape[-1])
    n, _, h, w = (int(v) for v in layer.x_q.ty.shape)
    top, left, bottom, right = padding
    p = amx.plan((n, -(-inputs // block), h + top + bottom, w + left + right, block), *conv)
    padding = (top, left, bottom, right + amx.extra_columns(p))
    data = _quantized_input(bb, layer, padding, (block, "uint8", 0)) if blocked is None else None
    if data is None:
        if blocked is None:
            pack = layout.pack_nchw4c if block == amx.QUAD else layout.pack_nchw16c
            blocked = bb.emit(bb.call_te(pack, layer.x_q, zp))
        data = padded_nchw16c(bb, blocked, padding, zp)
    return data, dataclasses.replace(p, data=tuple(int(v) for v in data.ty.shape))


def _folded_input(bb, layer, channels, kernel):
    """(uint8 data var, ``amx.AmxPlan``) of a stride-2 AMX conv on at most 4 channels
    reading the graph's quantize of an FP32 tensor folded space-to-depth
    (``amx.fold_plan``); None for any other input."""
    from . import amx

    p, padding = amx.fold_plan(layer.x_q.ty.shape, tuple(layer.padding), channels, kernel)
    data = _quantized_input(bb, layer, padding, (amx.QUAD, "uint8", 0), fold=p.fold)
    return None if data is None else (data, p)


def _quantized_input(bb, layer, padding, packed, flat=False, fold=1):
    """The data var of a layer reading the graph's quantize of an FP32 tensor: the
    quantize, packing and padding (top, left, bottom, right) as one kernel
    (``input_quantize``); ``packed``: (block, dtype, offset), as ``_packed_data``; ``flat``:
    the kernel writes flat pixel rows, ``fold``: folded space-to-depth
    (``quantize_pack_pad``), the FP32 ops and concat that compute the tensor read in the
    kernel (``prologue``). None for
    any other input, or, where the layer pads, a quantize whose zero point is not its padding
    value (``layer.zero_point``; a layer without padding has 0 there: any value serves)."""
    from tvm import relax

    from .input_quantize import out_shape, quantize_pack_pad, quantize_source
    from .prologue import find_prologue

    source = quantize_source(bb, layer.x_q)
    if source is None or (any(layer.padding) and source[2] != int(layer.zero_point)):
        return None
    x, scale, zero_point = source
    prologue = find_prologue(bb, x, packed[0])
    func = quantize_pack_pad(
        x.ty.shape, scale, zero_point, padding, *packed, flat, fold, prologue=prologue
    )
    kernel = bb.add_func(func.without_attr("global_symbol"), "quantize_pack_pad")
    out = relax.TensorType(out_shape(x.ty.shape, padding, packed[0], flat, fold), packed[1])
    args = [x] if prologue is None else [*prologue.parts, *map(_operand, prologue.constants)]
    return bb.emit(relax.call_tir(kernel, relax.Tuple(args), out))


def _operand(k):
    """A prologue operand as a call's argument: a Relax constant of a numpy array, else the
    Relax var itself."""
    return _const(k, "float32") if isinstance(k, np.ndarray) else k
