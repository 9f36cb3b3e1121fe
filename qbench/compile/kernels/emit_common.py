"""Relax emission helpers the FP32 and INT8 emitters share: padding a layer's input, and
finding the NCHW16c tensor a uint8 kernel wrote behind its unpack."""

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
    else (None, 0)."""
    from tvm import relax

    value = bb.lookup_binding(x_q) if isinstance(x_q, relax.Var) else None
    callee = value.args[0] if isinstance(value, relax.Call) and value.args else None
    if isinstance(callee, relax.GlobalVar) and callee.name_hint.startswith("unpack_nchw16c"):
        blocked = value.args[1].fields[0]
        if int(blocked.ty.shape[-1]) not in blocks:
            return None, 0
        border = (int(blocked.ty.shape[2]) - int(x_q.ty.shape[2])) // 2
        return blocked, border
    return None, 0


def nchw16c_behind(bb, x_q):
    """The uint8 NCHW16c tensor a uint8 kernel wrote, when ``x_q`` (N, C, H, W) is its
    unpack and it has no border, else None."""
    blocked, border = blocked_behind(bb, x_q)
    return blocked if not border else None
