"""Default CPU schedules (``qbench.compile.kernels.schedules``) of the kernels no hand
schedule covers."""

import numpy as np
import pytest
import torch
from helpers import quantize_tiny, torch_out
from torch import nn


class C21(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(21)
        self.c1, self.c2, self.fc = (
            nn.Conv2d(3, 1, 3, padding=1),
            nn.Conv2d(1, 2, 1),
            nn.Linear(1, 3),
        )

    def forward(self, x):
        y = self.c2(torch.relu(self.c1(x))).mean(dim=(2, 3))
        return self.fc(y.sum(dim=1, keepdim=True))


class ReductionLengths(nn.Module):
    """conv2d and matmul layers whose reductions have length 1, 2 and 3."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(22)
        self.k3, self.k1 = nn.Conv2d(3, 1, 1), nn.Conv2d(1, 2, 1)
        self.k2, self.dw = nn.Conv2d(2, 3, 1), nn.Conv2d(3, 3, 1, groups=3)
        self.fc3, self.fc1, self.fc2 = nn.Linear(3, 1), nn.Linear(1, 2), nn.Linear(2, 4)

    def forward(self, x):
        y = self.dw(self.k2(self.k1(self.k3(x)))).mean(dim=(2, 3))
        return self.fc2(self.fc1(self.fc3(y)))


@pytest.mark.parametrize("model", [C21, ReductionLengths])
def test_reductions_of_length_one_build_and_match(model):
    """C21: conv2d and matmul layers whose reductions have length one (and two, three) build,
    quantized, and match PyTorch in FP32 and INT8."""
    module = model().eval()
    calib = [np.random.default_rng(s).standard_normal((2, 3, 16, 16)).astype(np.float32)
             for s in range(4)]  # fmt: skip
    q = quantize_tiny(module, calib)
    assert all(p.quantized for p in q.plans)
    x = calib[0]
    ref = torch_out(module, x)
    assert np.abs(q.run("fp32", x) - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())
    assert np.abs(q.run("int8", x) - ref).max() <= 0.05 * np.abs(ref).max()


def _concat_relu(parts, batch):
    """A TIR concat of ``parts`` (1 + i % 3) x 16-channel 5x6 tensors along the channels,
    then ReLU, scheduled by ``CpuFallback`` for the host."""
    import tvm
    from helpers import LLVM
    from tvm import te, topi
    from tvm.s_tir import dlight

    from qbench.compile.kernels.schedules import CpuFallback

    ins = [te.placeholder((batch, 16 * (1 + i % 3), 5, 6), "float32", name=f"a{i}")
           for i in range(parts)]  # fmt: skip
    joined = topi.concatenate(ins, axis=1)
    out = te.compute(joined.shape, lambda *i: te.max(joined(*i), 0.0), name="out")
    mod = tvm.IRModule({"main": te.create_prim_func([*ins, out])})
    with tvm.target.Target(LLVM):
        return dlight.ApplyDefaultSchedule(CpuFallback())(mod), [t.shape for t in ins]


@pytest.mark.parametrize("parts, batch, loops", [(9, 1, 9), (12, 2, 12), (4, 1, 1)])
def test_a_concat_of_many_parts_runs_one_loop_nest_a_part(parts, batch, loops):
    """densenet's kind (concats of up to 60 parts, each element tested against every part):
    8 parts or more get one parallel loop nest a part, fewer stay one; the result is numpy's
    concatenate and ReLU."""
    import tvm
    from helpers import LLVM

    mod, shapes = _concat_relu(parts, batch)
    script = mod["main"].script()
    assert script.count("T.parallel(") == loops
    rng = np.random.default_rng(parts)
    xs = [rng.standard_normal([int(d) for d in s]).astype(np.float32) for s in shapes]
    want = np.maximum(np.concatenate(xs, axis=1), 0)
    got = tvm.runtime.tensor(np.zeros(want.shape, np.float32))
    tvm.compile(mod, target=tvm.target.Target(LLVM))["main"](
        *[tvm.runtime.tensor(x) for x in xs], got
    )
    np.testing.assert_array_equal(got.numpy(), want)


def _quantized_sum(shape, dtype):
    """A TIR kernel summing each (N, C)'s H x W values of x quantized to uint8 (x / 0.05
    rounded, + 3, clipped), in ``dtype``, scheduled by ``CpuFallback`` for the host."""
    import tvm
    from helpers import LLVM
    from tvm import te, tirx
    from tvm.s_tir import dlight

    from qbench.compile.kernels.schedules import CpuFallback

    n, c, h, w = shape
    x = te.placeholder(shape, "float32", "x")

    def quantized(*i):
        v = te.round(x(*i) / tirx.const(0.05, "float32")) + tirx.const(3.0, "float32")
        v = tirx.max(tirx.min(v, tirx.const(255.0, "float32")), tirx.const(0.0, "float32"))
        return v.astype("uint8").astype(dtype)

    q = te.compute(shape, quantized, name="q")
    rh, rw = te.reduce_axis((0, h), "rh"), te.reduce_axis((0, w), "rw")
    out = te.compute((n, c, 1, 1), lambda b, k, i, j: te.sum(q[b, k, rh, rw], axis=[rh, rw]))
    mod = tvm.IRModule({"main": te.create_prim_func([x, out])})
    with tvm.target.Target(LLVM):
        return dlight.ApplyDefaultSchedule(CpuFallback())(mod)


@pytest.mark.parametrize(
    "shape, dtype, lanes",
    [
        ((2, 5, 7, 7), "int32", 7),  # divisors of 49 up to 32: 7
        ((2, 3, 14, 14), "int32", 28),
        ((1, 4, 28, 28), "int32", 16),  # 784 = 16 x 49
        ((2, 3, 13, 1), "int32", None),  # 13 values: no lanes but all of them
        ((2, 3, 14, 14), "float32", None),  # float sums keep their order
    ],
)
def test_an_integer_sum_of_each_channel_runs_in_lanes(shape, dtype, lanes):
    """The integer global average pool's kind (the squeeze-excitation's quantize and int32
    sum in one kernel): split into ``lanes`` partial sums (``rfactor``) where the extent
    has a divisor for them, a plain reduction otherwise; numpy's sums either way."""
    import tvm
    from helpers import LLVM

    mod = _quantized_sum(shape, dtype)
    script = mod["main"].script()
    if lanes is None:
        assert "_rf" not in script
    else:
        assert f"T.sblock_alloc_buffer(({shape[0]}, {shape[1]}, 1, 1, {lanes})" in script
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32) * 4
    q = np.clip(np.round(x / np.float32(0.05)) + 3, 0, 255).astype(np.uint8).astype(dtype)
    want = q.sum(axis=(2, 3), keepdims=True, dtype=dtype)
    got = tvm.runtime.tensor(np.zeros(want.shape, dtype))
    tvm.compile(mod, target=tvm.target.Target(LLVM))["main"](tvm.runtime.tensor(x), got)
    np.testing.assert_array_equal(got.numpy(), want)
