"""The apache-tvm-ffi pin: newer releases segfault in tvm.ir.save_json (see DESIGN.md)."""

import numpy as np


def test_save_json_round_trips_a_module():
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.add(x, relax.const(np.ones((2, 3), np.float32))))
        bb.emit_func_output(y)
    mod = bb.get()
    restored = tvm.ir.load_json(tvm.ir.save_json(mod))
    tvm.ir.assert_structural_equal(restored, mod)
