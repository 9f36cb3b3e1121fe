"""Relax emission helpers the FP32 and INT8 emitters share: padding a layer's input, and
finding the NCHW16c tensor a uint8 kernel wrote behind its unpack."""

from ...model.graph import channel_concat
from .depthwise import split_columns


def padded_columns(bb, x, padding, strides, pad_value):
    """``x`` padded by ``padding`` (top, left, bottom, right) with ``pad_value``, then split
    by columns when the column stride is > 1, as the depthwise and pooling taps read it
    (INT8 depthwise too). Returns (tensor, padded width)."""
    from tvm.relax import op

    top, left, bottom, right = (int(p) for p in padding)
    if top or left or bottom or right:
        pad_width = [0, 0, 0, 0, top, bottom, left, right]
        x = bb.emit(op.nn.pad(x, pad_width, pad_value=pad_value))
    width = int(x.ty.shape[3])
    if strides[1] > 1:
        x = bb.emit(bb.call_te(split_columns, x, strides[1]))
    return x, width


def padded_nchw16c(bb, data, padding, zero_point):
    """uint8 channel-blocked ``data`` (N, C/b, H, W, b) padded spatially with ``zero_point``;
    ``padding``: (top, left, bottom, right)."""
    from tvm.relax import op

    if not any(padding):
        return data
    top, left, bottom, right = padding
    width = [0, 0, 0, 0, top, bottom, left, right, 0, 0]
    return bb.emit(op.nn.pad(data, width, pad_value=float(zero_point)))


def blocked_behind(bb, x_q, blocks=(16,)):
    """(the uint8 channel-blocked tensor a uint8 kernel wrote, its border:
    ``amx.AmxPlan.border``) when ``x_q`` (N, C, H, W) is its unpack and its channels are in
    blocks of one of ``blocks`` (16: NCHW16c; an AMX reader also takes 64, ``kernels.wide``),
    or the concat of such tensors (``_blocked_concat``), else (None, 0)."""
    from tvm import relax

    value = bb.lookup_binding(x_q) if isinstance(x_q, relax.Var) else None
    if isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.concat":
        return _blocked_concat(bb, value, blocks)
    callee = value.args[0] if isinstance(value, relax.Call) and value.args else None
    if isinstance(callee, relax.GlobalVar) and callee.name_hint.startswith("unpack_nchw16c"):
        blocked = value.args[1].fields[0]
        if int(blocked.ty.shape[-1]) not in blocks:
            return None, 0
        border = (int(blocked.ty.shape[2]) - int(x_q.ty.shape[2])) // 2
        return blocked, border
    return None, 0


def _blocked_concat(bb, concat, blocks):
    """A channel concat of uint8 (N, C_i, H, W) unpacks (googlenet's inception outputs) as
    the concat of the blocked tensors behind them, emitted with ``bb`` (one block axis, so
    no unpack and repack between the uint8 kernels), with their common border; (None, 0)
    unless each part is whole blocks of one size, all with one border. Readers of one
    concat emit the same expression; the lowering's common-subexpression pass keeps one."""
    from tvm import relax

    fields = channel_concat(concat, bb.lookup_binding)
    if fields is None:
        return None, 0
    found = [(blocked_behind(bb, part, blocks), part) for part in fields]
    if any(blocked is None for (blocked, _), _ in found):
        return None, 0
    lanes = {int(blocked.ty.shape[-1]) for (blocked, _), _ in found}
    borders = {border for (_, border), _ in found}
    if len(lanes) != 1 or len(borders) != 1:
        return None, 0
    if any(int(part.ty.shape[1]) % next(iter(lanes)) for _, part in found):
        return None, 0
    parts = [blocked for (blocked, _), _ in found]
    return bb.emit(relax.op.concat(parts, axis=1)), borders.pop()


def nchw16c_behind(bb, x_q):
    """The uint8 NCHW16c tensor a uint8 kernel wrote, when ``x_q`` (N, C, H, W) is its
    unpack and it has no border, else None."""
    blocked, border = blocked_behind(bb, x_q)
    return blocked if not border else None
