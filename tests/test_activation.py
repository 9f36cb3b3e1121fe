"""A conv whose output an activation (hardswish) reads before the next quantize: the chain
matched as an ``activation.Activation`` and computed whole by the uint8 kernels (AMX, VNNI,
the depthwise kernel), bit for bit as TVM's own ops compute the graph."""

import functools
import math

import numpy as np
import pytest
import torch
from helpers import AVX2, CPU, LLVM, SAPPHIRE_RAPIDS, compiled, quantize_tiny, run_tvm

from qbench.compile import features
from qbench.compile.kernels.activation import X, activated_layer
from qbench.compile.kernels.select import select_kernels
from qbench.model.graph import use_counts

VNNI = {**CPU, "mcpu": "icelake-server"}
QUANT = "relax.quantize"


ACTIVATIONS = {
    "hardswish": torch.nn.functional.hardswish,  # mobilenet_v3
    "silu": torch.nn.functional.silu,  # efficientnet_b0
    "tanh": torch.tanh,
}


class _Block(torch.nn.Module):
    """mobilenet_v3's block without a squeeze-excitation: 1x1 expand + ``act``, 3x3
    depthwise + ``act``, a 3x3 conv + ``act``, a 1x1 project (its output the network's)."""

    def __init__(self, act):
        super().__init__()
        self.act = act
        self.expand = torch.nn.Conv2d(16, 40, 1)
        self.dw = torch.nn.Conv2d(40, 40, 3, padding=1, groups=40)
        self.conv = torch.nn.Conv2d(40, 24, 3, padding=1)
        self.project = torch.nn.Conv2d(24, 8, 1)

    def forward(self, x):
        return self.project(self.act(self.conv(self.act(self.dw(self.act(self.expand(x)))))))


@functools.cache
def _net(name):
    """(``helpers.Quantized`` of ``_Block(ACTIVATIONS[name])``, an input (2, 16, 13, 13)
    float32 twice the calibration's spread: values past the calibrated ranges reach the
    clips)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    calib = [rng.standard_normal((2, 16, 13, 13)).astype(np.float32) for _ in range(2)]
    q = quantize_tiny(_Block(ACTIVATIONS[name]).eval(), calib)
    return q, 2 * rng.standard_normal((2, 16, 13, 13)).astype(np.float32)


@pytest.fixture(scope="module")
def hardswish_net():
    return _net("hardswish")


def _quantizes(mod):
    """(function, var2val, [the quantize calls of an FP32 conv output])."""
    from tvm import relax

    func = mod["main"]
    var2val = relax.analysis.get_var2val(func)
    calls = [c for c in var2val.values() if getattr(getattr(c, "op", None), "name", "") == QUANT]
    return func, var2val, [c for c in calls if c.args[0] not in func.params]


def test_a_hardswish_before_a_quantize_is_matched_as_its_ops_in_the_graphs_order(hardswish_net):
    """Relax's import writes hardswish as x * clip(clip(x + 3, 0, inf), -inf, 6) / 6; a clip
    is min then max, as TOPI computes it. Three such chains (expand, depthwise, conv), each
    with the quantize's own scale and zero point."""
    q, _ = hardswish_net
    func, var2val, calls = _quantizes(q.int8_mod)
    assert len(calls) == 3
    clip6 = ("maximum", ("minimum", ("add", X, 3.0), math.inf), 0.0)
    expected = ("divide", ("multiply", X, ("maximum", ("minimum", clip6, 6.0), -math.inf)), 6.0)
    ops = [("relax.nn.conv2d", 1), ("relax.nn.conv2d", 40), ("relax.nn.conv2d", 1)]
    for call in calls:
        chain = activated_layer(call, var2val, use_counts(func))
        assert chain is not None and chain.activation.expr == expected
        assert chain.activation.scale == float(call.args[1].value.numpy())
        assert chain.zero_point == int(np.unique(call.args[2].value.numpy())[0])
        assert chain.bounds == (0, 255) and chain.residual is None
        groups = int(chain.layer.attrs.groups)
        assert ("relax.nn.conv2d", groups) in ops
        ops.remove(("relax.nn.conv2d", groups))


def test_a_chain_whose_values_another_op_reads_is_not_matched():
    """The biased conv output also read by a mean: the kernel could not drop it, so the chain
    stays with TVM's ops; the quantize of a network input is no layer's chain."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Conv2d(8, 8, 1), torch.nn.Conv2d(8, 4, 1)

        def forward(self, x):
            y = self.a(x)
            return self.b(torch.nn.functional.hardswish(y)) * y.mean()

    torch.manual_seed(1)
    calib = [np.random.default_rng(1).standard_normal((1, 8, 5, 5)).astype(np.float32)]
    q = quantize_tiny(Net().eval(), calib)
    func, var2val, calls = _quantizes(q.int8_mod)
    uses = use_counts(func)
    assert len(calls) == 1
    assert activated_layer(calls[0], var2val, uses) is None
    first = next(
        c for c in var2val.values() if getattr(getattr(c, "op", None), "name", "") == QUANT
    )
    assert first.args[0].same_as(func.params[0])
    assert activated_layer(first, var2val, uses) is None


@pytest.mark.parametrize("target", [SAPPHIRE_RAPIDS, VNNI], ids=["amx", "vnni"])
def test_every_hardswish_chain_becomes_a_uint8_kernel(hardswish_net, target):
    """No quantize of a conv's output is left to TVM: the expand and conv chains run on the
    target's uint8 conv kernel, the depthwise one on the uint8 depthwise kernel."""
    q, _ = hardswish_net
    selected = select_kernels(q.int8_mod, target)
    _, _, calls = _quantizes(selected)
    assert calls == []
    names = [gv.name_hint for gv, _ in selected.functions_items()]
    uint8_convs = "amx_conv2d" if target is SAPPHIRE_RAPIDS else "conv2d_packed_u8_vnni"
    assert sum(n.startswith(uint8_convs) for n in names) == 2
    assert sum(n.startswith("depthwise_conv2d_u8") for n in names) == 1


def test_a_silu_is_matched_as_a_sigmoid_times_its_input():
    """Relax's import writes SiLU as x * sigmoid(x)."""
    q, _ = _net("silu")
    func, var2val, calls = _quantizes(q.int8_mod)
    chains = [activated_layer(call, var2val, use_counts(func)) for call in calls]
    assert [chain.activation.expr for chain in chains] == [("multiply", X, ("sigmoid", X))] * 3


@pytest.mark.parametrize("name", ["hardswish", "silu"])
def test_activation_chains_give_the_plain_logits_on_each_cpu_class_this_cpu_runs(name):
    """This CPU's kernels, the AVX2 path's and (where this CPU runs it) the VNNI path's,
    against TVM's own ops on the same INT8 graph, bit for bit (tanh's ops: the float test
    below)."""
    q, x = _net(name)
    plain = run_tvm(compiled(q.int8_mod, LLVM, hand_kernels=False), x)
    np.testing.assert_array_equal(run_tvm(compiled(q.int8_mod, LLVM), x), plain)
    for target, feature in ((AVX2, "avx2"), (VNNI, "avx512vnni")):
        if features.has_feature(LLVM, feature):
            np.testing.assert_array_equal(run_tvm(compiled(q.int8_mod, target), x), plain)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_a_matched_activation_computes_torchs_op_as_tvm_imports_it_bit_for_bit(name):
    """The tree matched in the model, as the kernels compute it (``conv2d.activated``),
    against PyTorch's activation imported into Relax and built by TVM alone, on 2^18 float32
    values in [-12, 12] and the clips' edges: the same float32 bits (a reciprocal multiply
    in place of the divide by 6 differs in a fifth of them)."""
    import tvm
    from tvm import te
    from tvm.relax.frontend.torch import from_exported_program

    from qbench.compile.kernels.conv2d import activated

    q, _ = _net(name)
    func, var2val, calls = _quantizes(q.int8_mod)
    tree = activated_layer(calls[0], var2val, use_counts(func)).activation.expr
    edges = [-6.0, -3.0, -0.0, 0.0, 3.0, 6.0, np.nextafter(np.float32(3), np.float32(4))]
    v = np.concatenate([np.linspace(-12, 12, 1 << 18), edges]).astype(np.float32)

    class Act(torch.nn.Module):
        def forward(self, x):
            return ACTIVATIONS[name](x)

    exported = torch.export.export(Act(), (torch.from_numpy(v),))
    reference = tvm.relax.VirtualMachine(
        tvm.compile(from_exported_program(exported), target=tvm.target.Target(LLVM)), tvm.cpu()
    )
    expected = reference["main"](tvm.runtime.tensor(v))
    expected = (expected[0] if isinstance(expected, tvm.ir.Array) else expected).numpy()
    x = te.placeholder(v.shape, "float32", "x")
    out = te.compute(v.shape, lambda i: activated(tree, x[i]), name="activated")
    lib = tvm.compile(te.create_prim_func([x, out]), target=tvm.target.Target(LLVM))
    got = tvm.runtime.tensor(np.zeros_like(v))
    lib(tvm.runtime.tensor(v), got)
    np.testing.assert_array_equal(got.numpy().view(np.int32), expected.view(np.int32))
