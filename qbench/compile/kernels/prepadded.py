"""uint8 NCHW16c outputs written with a border of their zero point (pre-padded outputs:
``borders`` decides which), so that the kernels reading them take the border as their
padding and no pad kernel copies the tensor between them.

The AMX kernel writes its border itself (``fill_border`` per task). A TE kernel cannot
write a sub-region of a larger tensor, so ``with_border`` rewrites its PrimFunc: the
output parameter becomes the bordered tensor, the blocks write a strided view of its
interior (a ``DeclBuffer`` of the same data), and a parallel loop after them fills the
border. The view keeps the blocks, so the kernel's schedule (``schedules.HandKernels``)
applies as it did to the plain output.
"""

LANES = 16


def fill_border(out, index, border, zero_point):
    """TIR statements (in an ``IRBuilder`` frame) writing ``zero_point`` to the ``border``
    of ``out[b, o]`` for ``index`` (b, o): ``out`` (N, C/L, H, W, L) uint8 (L 16, or 64 for
    an AMX kernel's wide output), its first and last ``border`` rows whole, then the first
    and last ``border`` columns of the rows between them, L channels a vector."""
    from tvm.script.ir_builder import tirx as T

    b, o = index
    _, _, height, width, lanes = (int(v) for v in out.shape)
    zp = T.uint8(zero_point)
    with T.serial(border) as i, T.serial(width) as x, T.vectorized(lanes) as lane:
        T.buffer_store(out, zp, [b, o, i, x, lane])
        T.buffer_store(out, zp, [b, o, height - 1 - i, x, lane])
    with T.serial(height - 2 * border) as y, T.serial(border) as i:
        with T.vectorized(lanes) as lane:
            T.buffer_store(out, zp, [b, o, y + border, i, lane])
            T.buffer_store(out, zp, [b, o, y + border, width - 1 - i, lane])


def _border_fill(shape, border, zero_point):
    """(the bordered output parameter (N, C/16, H, W, 16) uint8, the statement filling its
    border: one parallel task per (image, channel block))."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    with IRBuilder() as builder:
        with T.prim_func():
            out = T.arg("out", T.buffer(shape, "uint8"))
            with T.parallel(shape[0] * shape[1]) as task:
                fill_border(out, (task // shape[1], task % shape[1]), border, zero_point)
    func = builder.get()
    return func.params[0], func.body


def with_border(func, border, zero_point):
    """``func``, a PrimFunc of ``te.create_prim_func`` whose last parameter is its uint8
    output (N, C/16, OH, OW, 16), writing that output inside a border of ``border`` pixels
    of ``zero_point``: its last parameter becomes (N, C/16, OH + 2 b, OW + 2 b, 16).

    Raises:
        ValueError: ``func``'s output is not a uint8 5-D tensor of 16-channel blocks.
    """
    import tvm
    import tvm_ffi
    from tvm import s_tir, tirx

    out = func.params[-1]
    shape = tuple(int(v) for v in out.shape)
    if out.dtype != "uint8" or len(shape) != 5 or shape[4] != LANES:
        raise ValueError(f"with_border: output {out.dtype}{list(shape)} is not uint8 NCHW16c")
    n, c, h, w, _ = shape
    bordered, fill = _border_fill((n, c, h + 2 * border, w + 2 * border, LANES), border, zero_point)
    row = (w + 2 * border) * LANES
    strides = (c * (h + 2 * border) * row, (h + 2 * border) * row, row, LANES, 1)
    data = tirx.buffer_data(bordered)
    view = tirx.decl_buffer(
        out.shape, "uint8", "interior", data, strides, elem_offset=border * (row + LANES)
    )
    body = tvm_ffi.structural_map(
        func.body, [(tvm.ir.Var, lambda var: view if var.same_as(out) else var)]
    )
    root = body.block
    stmts = tirx.SeqStmt([tirx.DeclBuffer(view, data=data), root.body, fill])
    block = s_tir.SBlock(
        root.iter_vars,
        root.reads,
        root.writes,
        root.name_hint,
        stmts,
        root.init,
        root.alloc_buffers,
        root.match_buffers,
        root.annotations,
    )
    realize = s_tir.SBlockRealize(body.iter_values, body.predicate, block)
    return tirx.PrimFunc([*func.params[:-1], bordered], realize, func.ret_type, func.attrs)
