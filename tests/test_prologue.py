"""A concat and per-channel FP32 ops read inside the input quantize (``kernels/prologue``):
bit for bit against numpy, and densenet's pattern on the host kernels as on TVM's own ops."""

import numpy as np
import pytest
import torch

from qbench.compile.kernels.input_quantize import out_shape, quantize_pack_pad
from qbench.compile.kernels.prologue import Prologue

LLVM = {"kind": "llvm"}
WIDTHS = (8, 4, 5)  # parts' channels: boundaries at 8 and 12, 17 channels in all


def _prologue_and_numpy(rng):
    """A ``Prologue`` over three parts (subtract, divide, multiply by a power of two, add,
    clip to [0, 6]) and numpy's float32 reference of x: each op rounded as IEEE float32
    rounds it (the products are exact, so an FMA would give the same values)."""
    from tvm import relax

    parts = tuple(
        relax.Var(f"p{i}", relax.TensorType((2, w, 5, 7), "float32")) for i, w in enumerate(WIDTHS)
    )
    channels = sum(WIDTHS)
    constants = (
        rng.standard_normal(channels).astype(np.float32),
        rng.uniform(0.5, 2.0, channels).astype(np.float32),
        2.0 ** rng.integers(-2, 3, channels).astype(np.float32),
        rng.standard_normal(channels).astype(np.float32),
    )
    ops = (
        ("relax.subtract", 0),
        ("relax.divide", 1),
        ("relax.multiply", 2),
        ("relax.add", 3),
        ("min", 6.0),
        ("max", 0.0),
    )

    def reference(values):
        x = np.concatenate(values, axis=1)
        k = [c.reshape(1, -1, 1, 1) for c in constants]
        x = (x - k[0]) / k[1] * k[2] + k[3]
        return np.maximum(np.minimum(x, np.float32(6.0)), np.float32(0.0))

    return Prologue(parts, ops, constants), reference


def _quantized_numpy(x, scale, zero_point, padding, block, dtype):
    n, c, h, w = x.shape
    top, left, bottom, right = padding
    q = np.clip(np.round(x / np.float32(scale)) + zero_point, 0, 255)
    chunks = -(-c // block)
    full = np.full((n, chunks * block, h + top + bottom, w + left + right), zero_point)
    full[:, :c, top : top + h, left : left + w] = q
    return full.reshape(n, chunks, block, *full.shape[2:]).transpose(0, 1, 3, 4, 2).astype(dtype)


@pytest.mark.parametrize(
    "padding, packed",
    [((0, 0, 0, 0), (4, "uint8")), ((1, 2, 1, 0), (4, "uint8")), ((0, 0, 0, 0), (2, "int16"))],
)
def test_the_kernel_computes_the_concat_and_ops_as_numpy(padding, packed):
    """Unpadded (a channel's plane read as one row) and padded outputs, VNNI's blocks of 4
    and AVX2's int16 pairs; values past both clip bounds and on neither."""
    import tvm

    rng = np.random.default_rng(3)
    prologue, reference = _prologue_and_numpy(rng)
    values = [(rng.standard_normal((2, w, 5, 7)) * 4).astype(np.float32) for w in WIDTHS]
    shape, scale = (2, sum(WIDTHS), 5, 7), np.float32(0.0213)
    func = quantize_pack_pad(shape, scale, 9, padding, *packed, prologue=prologue)
    lib = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target(LLVM))
    out = tvm.runtime.tensor(np.zeros(out_shape(shape, padding, packed[0]), packed[1]))
    lib["main"](*map(tvm.runtime.tensor, [*values, *prologue.constants]), out)
    expected = _quantized_numpy(reference(values), scale, 9, padding, *packed)
    np.testing.assert_array_equal(out.numpy(), expected)


class _DenseBlock(torch.nn.Module):
    """densenet's pattern: each layer reads batch norm + ReLU of the concat of the features
    before it (a norm after a concat is not folded into a conv), its conv's FP32 output
    joining the concat; a transition norm, ReLU and 1x1 conv, a pool and a Linear."""

    def __init__(self, widths):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, widths[0], 3, padding=1)
        channels, self.norms, self.convs = widths[0], torch.nn.ModuleList(), torch.nn.ModuleList()
        for grow in widths[1:]:
            self.norms.append(torch.nn.BatchNorm2d(channels))
            self.convs.append(torch.nn.Conv2d(channels, grow, 3, padding=1))
            channels += grow
        self.norm = torch.nn.BatchNorm2d(channels)
        self.transition = torch.nn.Conv2d(channels, 8, 1)
        self.fc = torch.nn.Linear(8, 5)
        for norm in [*self.norms, self.norm]:  # trained-looking statistics, not 0 and 1
            norm.running_mean.uniform_(-0.5, 0.5)
            norm.running_var.uniform_(0.5, 2.0)
            norm.weight.data.uniform_(0.5, 1.5)
            norm.bias.data.uniform_(-0.2, 0.2)

    def forward(self, x):
        features = [self.stem(x)]
        for norm, conv in zip(self.norms, self.convs, strict=True):
            features.append(conv(torch.relu(norm(torch.cat(features, 1)))))
        x = self.transition(torch.relu(self.norm(torch.cat(features, 1))))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


@pytest.mark.parametrize("widths", [(16, 8, 8, 8), (16, 5, 8)])
def test_a_dense_block_reads_its_concats_in_the_quantize_with_the_same_logits(widths):
    """Each conv after a norm reads the norm and ReLU inside its input's quantize kernel
    (one input a part, then the norm's four constants). With parts of whole channel blocks
    the kernel reads the features themselves (no FP32 concat is left); with a part of 5
    channels (a block across two parts, on any CPU class) the transition's concat stays
    TVM's. Either way the logits equal those of TVM's own ops for the same INT8 graph (one
    unit in the last place: the final rescale's FMA)."""
    from helpers import LLVM as HOST
    from helpers import compiled, quantize_tiny, run_tvm

    from qbench.compile.kernels.select import select_kernels

    torch.manual_seed(4)
    net = _DenseBlock(widths).eval()
    rng = np.random.default_rng(4)
    q = quantize_tiny(net, [rng.standard_normal((2, 3, 9, 11)).astype(np.float32)])
    inputs = [n for n in _quantize_kernel_inputs(select_kernels(q.int8_mod, HOST)) if n > 1]
    if not inputs:
        pytest.skip("this CPU's INT8 path packs no input (no VNNI or AVX2 kernels)")
    last = len(widths) if all(w % 4 == 0 for w in widths[:-1]) else 1
    assert inputs == [4 + k for k in range(1, len(widths))] + [4 + last]
    x = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    plain = compiled(q.int8_mod, HOST, hand_kernels=False)
    np.testing.assert_allclose(
        run_tvm(compiled(q.int8_mod, HOST), x), run_tvm(plain, x), rtol=2**-23, atol=2e-7
    )


def _quantize_kernel_inputs(mod):
    """The number of inputs of each ``quantize_pack_pad`` call in ``mod``'s main."""
    return [len(shapes) for shapes in _quantize_kernel_args(mod)]


def _quantize_kernel_args(mod):
    """The shapes of the inputs of each ``quantize_pack_pad`` call in ``mod``'s main."""
    from tvm import relax

    calls = []
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            value = b.value
            if isinstance(value, relax.Call) and value.op.name == "relax.call_tir":
                if value.args[0].name_hint.startswith("quantize_pack_pad"):
                    fields = value.args[1].fields
                    calls.append([[int(d) for d in f.ty.shape] for f in fields])
    return calls


@pytest.mark.parametrize("batch", [1, 3])
def test_a_squeeze_excitation_scale_is_read_in_the_quantize_with_the_same_logits(batch):
    """The project conv's quantize kernel reads the depthwise output and the (N, C, 1, 1)
    scale the graph computed (one image's scale per image), in place of TVM writing their
    product in FP32; the logits equal TVM's own ops' for the same INT8 graph."""
    from helpers import LLVM as HOST
    from helpers import SqueezeExcite, compiled, quantize_tiny, run_tvm

    from qbench.compile.kernels.select import select_kernels

    torch.manual_seed(5)
    net = SqueezeExcite(3, 24, outputs=6).eval()
    rng = np.random.default_rng(5)
    shape = (batch, 3, 10, 9)
    q = quantize_tiny(net, [rng.standard_normal(shape).astype(np.float32)])
    calls = _quantize_kernel_args(select_kernels(q.int8_mod, HOST))
    if not calls:
        pytest.skip("this CPU's INT8 path packs no input (no VNNI or AVX2 kernels)")
    assert any([batch, 24, 1, 1] in shapes for shapes in calls)  # the scale, read in
    x = rng.standard_normal(shape).astype(np.float32)
    plain = compiled(q.int8_mod, HOST, hand_kernels=False)
    np.testing.assert_allclose(
        run_tvm(compiled(q.int8_mod, HOST), x), run_tvm(plain, x), rtol=2**-23, atol=2e-7
    )
