"""qbench's FP32 CPU kernels (packed conv, dense, depthwise) against PyTorch."""

import numpy as np
import pytest
import torch
from helpers import CPU, LLVM, compiled, loaded, run_tvm, torch_out

from qbench.compile import build
from qbench.compile.features import has_feature
from qbench.compile.kernels.conv2d_fp32 import ic_block, pack_weight
from qbench.compile.kernels.select import KERNEL_PATHS, select_kernels
from qbench.model import frontend


class _Net(torch.nn.Module):
    """Every kernel kind: a 3-channel stem (one input block), stride, dilation, a residual
    add, depthwise at stride 1 and 2 (on 30x30 inputs the stride-2 one reads an odd padded
    width, 17), an output count that is no multiple of 16, dense, max pooling."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 32, 3, stride=2, padding=1)
        self.dw1 = torch.nn.Conv2d(32, 32, 5, padding=2, groups=32)
        self.conv = torch.nn.Conv2d(32, 32, 3, padding=2, dilation=2)
        self.dw2 = torch.nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32, bias=False)
        self.proj = torch.nn.Conv2d(32, 20, 1)
        self.fc = torch.nn.Linear(20 * 8 * 8, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.stem(x)), 3, 1, 1)
        x = x + torch.nn.functional.relu6(self.dw1(x))
        x = torch.relu(self.conv(x))
        x = self.proj(self.dw2(x))
        return self.fc(x.flatten(1))


def test_weight_packing_indices():
    w = np.random.default_rng(0).standard_normal((20, 8, 3, 2)).astype(np.float32)
    packed = pack_weight(w, 4)
    assert packed.shape == (2, 2, 3, 2, 4, 16)
    for o, c, kh, kw in np.ndindex(w.shape):
        assert packed[o // 16, c // 4, kh, kw, c % 4, o % 16] == w[o, c, kh, kw]
    assert not packed[1, ..., 4:].any()  # output channels 20..31 are padding
    assert [ic_block(c) for c in (3, 16, 24, 40, 96, 1280)] == [3, 16, 8, 8, 16, 16]


def test_fp32_kernels_match_pytorch():
    torch.manual_seed(0)
    net = _Net().eval()
    x = np.random.default_rng(1).standard_normal((2, 3, 30, 30)).astype(np.float32)
    mod = frontend.import_model(loaded(net, x.shape[1:]), len(x)).mod
    selected = select_kernels(mod, LLVM)
    assert dict(selected.attrs[KERNEL_PATHS]) == {
        "float32 conv2d depthwise": 2,
        "float32 conv2d packed": 3,
        "float32 matmul packed": 1,
        "float32 max_pool2d taps": 1,
    }
    kernels = [gv.name_hint for gv in selected.functions]
    assert sum(k.startswith("conv2d_nchwc_fp32") for k in kernels) == 4  # 3 convs + dense
    assert sum(k.startswith("depthwise_conv2d_fp32") for k in kernels) == 2
    assert sum(k.startswith("max_pool2d_taps") for k in kernels) == 1
    import tvm
    from tvm import relax

    lowered = build.lower(mod, LLVM)
    got = run_tvm(relax.build(lowered, tvm.target.Target(LLVM)), x)
    schedules = build.schedule_counts(lowered)
    # 3 convs, dense, 2 depthwise, max pool; packing and padding on default schedules
    assert schedules["hand"] == 7 and schedules["tuned"] == 0 and schedules["default"] > 0
    want = torch_out(net, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_guarded_block_picks_the_least_waste():
    from qbench.compile.kernels.conv2d import guarded_block

    # by hand: 7 -> 4+3 (1 wasted), 14 -> 5+5+4 (1), 28 -> 7x4 (0), 6 -> 6, 3 -> 3
    assert [guarded_block(w) for w in (7, 14, 28, 56, 6, 3, 1, 9)] == [4, 5, 4, 4, 6, 3, 1, 5]


def test_partial_register_tiles_match_pytorch():
    """AVX2's FP32 conv ends rows of 7 and 14 on a partial tile (4+3, 5+5+4): the guarded
    columns must be computed and written exactly once."""
    haswell = {**CPU, "mcpu": "haswell"}  # 16 ymm registers, whatever the host's class
    if not has_feature(LLVM, "avx2"):
        pytest.skip("this CPU has no AVX2: the haswell build cannot run here")
    torch.manual_seed(1)
    for size in (7, 14):
        net = torch.nn.Sequential(torch.nn.Conv2d(32, 48, 3, padding=1), torch.nn.ReLU()).eval()
        x = np.random.default_rng(size).standard_normal((1, 32, size, size)).astype(np.float32)
        mod = frontend.import_model(loaded(net, x.shape[1:]), 1).mod
        got = run_tvm(compiled(mod, haswell), x)
        want = torch_out(net, x)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
