"""Pre-padded outputs (``kernels.borders``, ``kernels.prepadded``): which uint8 kernels write
their output with a border of its zero point, and that the kernels reading and writing
borders give the integers of the plain graph."""

import numpy as np
import pytest
from helpers import (
    AVX2,
    CPU,
    LLVM,
    SAPPHIRE_RAPIDS,
    bordered_blocks,
    compiled,
    exact_conv,
    pads,
    requantized_numpy,
    run_tvm,
    tiny_convnet,
)

from qbench.compile.features import has_feature

VNNI = {**CPU, "mtriple": "x86_64-linux-gnu", "mcpu": "icelake-server"}


@pytest.fixture(scope="module")
def tiny_net():
    return tiny_convnet()


def test_every_reader_takes_a_border_on_amx_and_vnni(tiny_net):
    """On Sapphire Rapids every uint8 tensor between kernels is read by kernels that take a
    border as their padding (AMX and VNNI convs padded by 1, or unpadded and reading from 1
    pixel in; the depthwise conv; the residual epilogues; the max pool after the ReLU'd
    stem), so no pad kernel is left: gone are the network's input before the stem
    (input_quantize pads it as it quantizes it), the stem's output before the max pool, the
    max pool's output before Block(32), Block(32).a -> .b, Block(32) -> the strided conv,
    the VNNI 1x1 conv's output before Block(24).a, Block(24).a -> .b and Block(24) -> the
    depthwise conv."""
    q, _ = tiny_net
    assert pads(q.int8_mod, SAPPHIRE_RAPIDS) == []
    assert pads(q.int8_mod, VNNI) == []


def test_readers_that_pack_their_input_again_keep_their_pad_kernels(tiny_net):
    """On AVX2 a packed conv reads int16 pairs that it packs from the plain (N, C, H, W)
    tensor, padded by a pad kernel: the tensors before Block(32).a, .b, the strided conv,
    Block(24).a and .b keep theirs. The depthwise conv's input, read by it alone, has a
    border."""
    q, _ = tiny_net
    assert pads(q.int8_mod, AVX2) == [(2, 24, 6, 6)] * 2 + [(2, 32, 12, 12)] * 3


@pytest.mark.parametrize("target", [LLVM, AVX2], ids=["host", "avx2"])
def test_bordered_tensors_give_the_plain_graphs_logits(tiny_net, target):
    """The tiny net's INT8 logits with every border its kernels take equal, bit for bit,
    those of TVM's own integer ops (the plain graph)."""
    if target is AVX2 and not has_feature(LLVM, "avx2"):
        pytest.skip("this CPU has no AVX2: the AVX2 class is compile-checked elsewhere")
    q, x = tiny_net
    got = run_tvm(compiled(q.int8_mod, target), x)
    plain = compiled(q.int8_mod, LLVM, hand_kernels=False)
    np.testing.assert_array_equal(got, run_tvm(plain, x))


def _bordered_conv_module(data_shape, w, residual_shape, origin, epilogue):
    """A Relax module of one packed VNNI uint8 kernel (``conv2d.requantized_conv_u8``) that
    reads bordered NCHW16c data from ``origin`` pixels in and a residual with a border of 1,
    and writes its output with a border of 1 (``prepadded.with_border``)."""
    from tvm import relax
    from tvm.relax.utils import gen_call_tir_inputs

    from qbench.compile.kernels import layout
    from qbench.compile.kernels.conv2d import requantized_conv_u8
    from qbench.compile.kernels.prepadded import with_border

    packing = layout.PACKINGS["vnni"]
    weight = layout.pack_conv_weight(w, packing.block, packing.weight_dtype, 16)
    channels = w.shape[0]
    constants = [np.zeros(channels, np.int32), np.full(channels, 2.0**-6, np.float32)]
    constants = [relax.const(c) for c in (*constants, np.full(channels, 0.25, np.float32))]
    bb = relax.BlockBuilder()
    data = relax.Var("data", relax.TensorType(data_shape, "uint8"))
    residual = relax.Var("residual", relax.TensorType(residual_shape, "uint8"))
    with bb.function("main", [data, residual]):
        with bb.dataflow():
            func, args, _ = gen_call_tir_inputs(
                requantized_conv_u8,
                *(data, relax.const(weight), (*constants, residual), epilogue, (1, 1)),
                *((1, 1), packing.op_name, origin, 1),
            )
            func = with_border(func, 1, epilogue[0])
            out = relax.TensorType([int(v) for v in func.params[-1].shape], "uint8")
            out = bb.emit_output(relax.call_tir(bb.add_func(func, "kernel"), args, out))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("origin, kernel", [(0, 3), (1, 1)])
def test_a_packed_kernel_reads_and_writes_borders_exactly(origin, kernel):
    """A 3x3 conv reading a bordered tensor as its padding (origin 0) and a 1x1 conv reading
    it from its border in (origin 1), each adding a bordered residual and writing its output
    with a border of its zero point, on the VNNI kernel: bit for bit against numpy (PyTorch
    float64 conv), the border included; operands at their extremes (255 against -128 and
    127) in part of the tensor."""
    import tvm
    from tvm import relax

    rng = np.random.default_rng(origin)
    x = rng.integers(0, 256, (2, 32, 9, 9)).astype(np.uint8)
    w = rng.integers(-128, 128, (32, 32, kernel, kernel)).astype(np.int8)
    x[0, :, :4], w[:8], w[8:16] = 255, -128, 127
    residual = rng.integers(0, 256, (2, 32, 9, 9)).astype(np.uint8)
    zp_in, zp_out, bounds = 7, 11, (11, 250)
    data, res = bordered_blocks(x, 1, zp_in), bordered_blocks(residual, 1, 3)
    mod = _bordered_conv_module(data.shape, w, res.shape, origin, (zp_out, bounds, (0.5, 9)))
    if not has_feature(LLVM, "avx512vnni"):
        compiled(mod, VNNI)
        pytest.skip("this CPU has no AVX-512 VNNI: the kernel is compile-checked only")
    vm = relax.VirtualMachine(compiled(mod, LLVM), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(data), tvm.runtime.tensor(res)).numpy()
    read = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=zp_in) if origin == 0 else x
    expected = requantized_numpy(exact_conv(read, w), zp_out, bounds, residual)
    np.testing.assert_array_equal(got, bordered_blocks(expected, 1, zp_out))
