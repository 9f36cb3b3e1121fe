"""Wide AMX outputs (``kernels.wide``): which AMX kernels store NCHW64c, and that a graph
whose tensors go wide gives the integers of the VNNI path and of the plain graph."""

import numpy as np
import pytest
import torch
from helpers import CPU, LLVM, SAPPHIRE_RAPIDS, compiled, quantize_tiny, run_tvm

from qbench.compile import features
from qbench.compile.kernels.select import kernel_paths, select_kernels


def _resnet_like():
    """A stem (7x7 stride 2, 3 -> 64) with its max pool, a residual block on 64 channels, a
    downsampling residual block to 128 (3x3 stride 2 and a 1x1 stride-2 shortcut), then a
    depthwise conv, an average pool and a dense layer; (``helpers.Quantized``, an input)."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self, c, out, stride):
            super().__init__()
            self.a = nn.Conv2d(c, out, 3, stride, 1)
            self.b = nn.Conv2d(out, out, 3, 1, 1)
            self.short = nn.Conv2d(c, out, 1, stride) if stride > 1 else nn.Identity()

        def forward(self, x):
            return torch.relu(self.short(x) + self.b(torch.relu(self.a(x))))

    torch.manual_seed(0)
    net = nn.Sequential(
        *(nn.Conv2d(3, 64, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1)),
        *(Block(64, 64, 1), Block(64, 128, 2)),
        *(nn.Conv2d(128, 128, 3, 1, 1, groups=128), nn.ReLU()),
        *(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10)),
    ).eval()
    rng = np.random.default_rng(0)
    calib = [rng.standard_normal((2, 3, 32, 32)).astype(np.float32) for _ in range(2)]
    return quantize_tiny(net, calib), rng.standard_normal((2, 3, 32, 32)).astype(np.float32)


@pytest.fixture(scope="module")
def resnet_like():
    return _resnet_like()


def _amx_outputs(mod, target):
    """The (channels, block) of every tensor an AMX kernel of ``mod`` stores on ``target``."""
    from tvm import relax

    main = select_kernels(mod, target)["main"]
    found = []
    for binding in (b for block in main.body.blocks for b in block.bindings):
        value = binding.value
        if isinstance(value, relax.Call) and value.args and "amx_conv2d" in str(value.args[0]):
            shape = [int(v) for v in binding.var.ty.shape]
            found.append((shape[1] * shape[4], shape[4]))
    return sorted(found)


def test_amx_outputs_go_wide_where_only_amx_kernels_read_them(resnet_like):
    """The stem's pooled 64 channels (read by the first block's conv and its residual add),
    the blocks' inner convs and the 1x1 shortcut (read as a residual) store 64-channel
    blocks; the second block's output, which the depthwise conv reads, stays NCHW16c."""
    q, _ = resnet_like
    assert kernel_paths(q.int8_mod, SAPPHIRE_RAPIDS)["int8 conv2d amx"] == 6
    wide_ones = [(64, 64)] * 3 + [(128, 64)] * 2
    assert _amx_outputs(q.int8_mod, SAPPHIRE_RAPIDS) == sorted([*wide_ones, (128, 16)])


def test_a_graph_with_wide_tensors_gives_the_vnni_and_plain_logits(resnet_like):
    """Bit for bit: the AMX path (wide tensors), the VNNI path (NCHW16c) and TVM's own
    integer ops on the plain graph."""
    if not features.amx_ready():
        pytest.skip("this CPU has no AMX tiles (or may not use them)")
    q, x = resnet_like
    on_amx = run_tvm(compiled(q.int8_mod, SAPPHIRE_RAPIDS), x)
    vnni = {**CPU, "mcpu": "icelake-server"}
    assert "int8 conv2d amx" not in kernel_paths(q.int8_mod, vnni)
    np.testing.assert_array_equal(on_amx, run_tvm(compiled(q.int8_mod, vnni), x))
    plain = compiled(q.int8_mod, LLVM, hand_kernels=False)
    np.testing.assert_array_equal(on_amx, run_tvm(plain, x))
