"""The integer requantize (``quantize.requantize``): hand-derived values, TVM against its
numpy reference bit for bit, and a whole chain of INT8 layers against numpy."""

import numpy as np
import pytest
import torch
from helpers import LLVM, compiled, quantize_tiny, run_tvm

from qbench.quantize import pooling
from qbench.quantize.requantize import Requantize, emit, integer_requantize, reference


def _requantize(correction, multiplier, bias=None, zero_point=0, bounds=(0, 255)):
    bias = np.zeros(len(multiplier)) if bias is None else bias
    return Requantize(
        np.asarray(correction, np.int64),
        np.asarray(multiplier, np.float32),
        np.asarray(bias, np.float32),
        zero_point,
        bounds,
    )


def test_reference_rounds_half_to_even_and_saturates():
    # acc * 0.5: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -1 -> 0 (clamped), 300 -> 255, 255.5 -> 256
    acc = np.array([1, 3, 5, -2, 600, 511, 510], np.int32).reshape(1, 1, 7)
    out = reference(acc, _requantize([0], [0.5]))
    assert out.reshape(-1).tolist() == [0, 2, 2, 0, 255, 255, 255]
    # zero point 3 and ReLU6-like bounds (3, 9): 2 + 3 = 5, 12 + 3 -> 9, -8 + 3 -> 3
    acc = np.array([4, 24, -16], np.int32).reshape(1, 1, 3)
    out = reference(acc, _requantize([0], [0.5], zero_point=3, bounds=(3, 9)))
    assert out.reshape(-1).tolist() == [5, 9, 3]
    # a bias of 0.25 steps: 0.5 + 0.25 -> 1, 2.5 + 0.25 -> 3, -0.5 + 0.25 -> 0
    acc = np.array([1, 5, -1], np.int32).reshape(1, 1, 3)
    out = reference(acc, _requantize([0], [0.5], [0.25], zero_point=1, bounds=(0, 255)))
    assert out.reshape(-1).tolist() == [2, 4, 1]


def test_activation_becomes_clamp_bounds_and_bias_output_steps():
    relu6 = integer_requantize([100], [0.01], [0.123], (0.0, 6.0), 0.05, 10)
    assert relu6.bounds == (10, 130)  # 10 + 0 / 0.05, 10 + 6 / 0.05
    assert relu6.correction.tolist() == [100]
    assert relu6.multiplier.tolist() == [np.float32(0.01 / 0.05)]
    assert relu6.bias.tolist() == [np.float32(0.123 / 0.05)]
    assert integer_requantize([0], [1.0], [0.0], (0.0, None), 0.1, 7).bounds == (7, 255)
    assert integer_requantize([0], [1.0], [0.0], None, 0.1, 7).bounds == (0, 255)
    # ReLU6 past the uint8 grid's end: 200 + 6 / 0.01 = 800 -> 255
    assert integer_requantize([0], [1.0], [0.0], (0.0, 6.0), 0.01, 200).bounds == (200, 255)


@pytest.mark.parametrize(
    "activation, bounds",
    [
        ((0.0, float("inf")), (7, 255)),  # x.clamp(min=0), hardtanh(x, 0, inf)
        ((float("-inf"), 0.5), (0, 12)),  # x.clamp(max=0.5): 7 + 0.5 / 0.1
        ((1.0, float("inf")), (17, 255)),  # x.clamp(min=1): 7 + 1 / 0.1
    ],
)
def test_a_one_sided_clamp_bounds_only_its_side(activation, bounds):
    """An infinite clamp bound is no bound (it had raised OverflowError: found by a tester
    with ``y.clamp(min=0)`` between two convs)."""
    assert integer_requantize([0], [1.0], [0.0], activation, 0.1, 7).bounds == bounds


def _requantize_module(shape, requantize):
    from tvm import relax

    bb = relax.BlockBuilder()
    acc = relax.Var("acc", relax.TensorType(shape, "int32"))
    with bb.function("main", [acc]):
        with bb.dataflow():
            out = bb.emit_output(emit(bb.emit, acc, requantize))
        bb.emit_func_output(out)
    return bb.get()


def test_tvm_requantize_is_the_numpy_reference_bit_for_bit():
    """Ties at half a step, saturation at 0 and 255, ReLU6 bounds, accumulators at the int32
    limits, multipliers above 1, per output channel."""
    rng = np.random.default_rng(0)
    channels = 4
    requantize = _requantize(
        [0, 7, -(2**20), 0],  # channel 2: acc - c past 2^31 is never produced below
        [0.5, 3.0, 2.0**-24, 1.0e-7],
        [0.0, 0.0, -60.0, 0.0],
        zero_point=128,
        bounds=(128, 200),
    )
    acc = rng.integers(-(2**12), 2**12, (2, channels, 5, 7)).astype(np.int32)
    acc[0, 0, 0, :4] = [1, 3, -1, -3]  # ties: 0.5, 1.5, -0.5, -1.5
    acc[0, 1, 0, :3] = [7, 8, 6]  # 0, 3, -3: the zero point, above it, below the clamp
    acc[0, 2, 0, :2] = [2**31 - 1 - 2**20, -(2**31)]  # the int32 ends, after the correction
    acc[0, 2, 1, :2] = [2**30 - 2**20, 2**30 + 2**23 - 2**20]  # 64 - 60, 64.5 - 60 -> 4
    acc[0, 3, 0, :2] = [2**31 - 1, -(2**31)]  # 214.7 and -214.7 steps: clamped to 200, 128
    module = _requantize_module(acc.shape, requantize)
    executable = compiled(module, LLVM)
    out = run_tvm(executable, acc)
    np.testing.assert_array_equal(out, reference(acc, requantize))
    assert out[0, 0, 0, :4].tolist() == [128, 130, 128, 128]  # 0.5 -> 0 and 1.5 -> 2; clamp
    assert out[0, 3, 0, :2].tolist() == [200, 128]
    assert out[0, 2, 1, :2].tolist() == [132, 132]


class _Chain(torch.nn.Module):
    """conv 3x3 + ReLU6 -> depthwise 3x3 (stride 2) + ReLU -> conv 1x1 (FP32 logits)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 20, 3, padding=1)
        self.dw = torch.nn.Conv2d(20, 20, 3, stride=2, padding=1, groups=20)
        self.head = torch.nn.Conv2d(20, 5, 1)

    def forward(self, x):
        x = torch.nn.functional.relu6(self.conv(x))
        return self.head(torch.relu(self.dw(x)))


def _quantize_input(x, act):
    q = np.round(x.astype(np.float32) / np.float32(act.scale)) + act.zero_point
    return np.clip(q, 0, 255)


def _exact_conv(q, w, zero_point, module, pad=None):
    """Exact conv of uint8 ``q`` padded with ``zero_point``: by ``pad`` (top, bottom, left,
    right), else by the module's own padding."""
    top, bottom, left, right = pad or (module.padding[0],) * 2 + (module.padding[1],) * 2
    widths = ((0, 0), (0, 0), (top, bottom), (left, right))
    q = np.pad(q, widths, constant_values=zero_point)
    return torch.nn.functional.conv2d(
        torch.from_numpy(q.astype(np.float64)),
        torch.from_numpy(w.astype(np.float64)),
        stride=module.stride,
        groups=module.groups,
    ).numpy()


def _layer_numpy(q, plan, module, out_act=None, activation=None, pad=None, residual=None):
    """One integer layer in numpy: exact int conv, then the integer requantize to
    ``out_act``'s uint8 (``quantize.requantize``'s algorithm, written anew; the graph holds
    scales as float32), adding ``residual`` (uint8 values, their ``ActivationParams``) when
    given; or (the last layer) FP32 rescale and bias."""
    w = plan.weight.q
    acc = _exact_conv(q, w, plan.act.zero_point, module, pad).astype(np.int64)
    c = plan.act.zero_point * w.astype(np.int64).sum(axis=(1, 2, 3))
    r = np.float32(plan.act.scale * plan.weight.scale.astype(np.float64))
    r = np.broadcast_to(r, (w.shape[0],))
    bias = module.bias.detach().numpy().astype(np.float64)
    if out_act is None:
        y = (acc - c.reshape(1, -1, 1, 1)).astype(np.float32) * r.reshape(1, -1, 1, 1)
        return y + bias.astype(np.float32).reshape(1, -1, 1, 1)
    s_out = np.float64(np.float32(out_act.scale))
    m = (r.astype(np.float64) / s_out).astype(np.float32).reshape(1, -1, 1, 1)
    d = (bias / s_out).astype(np.float32).reshape(1, -1, 1, 1)
    v = (acc - c.reshape(1, -1, 1, 1)).astype(np.float32).astype(np.float64) * m + d
    v = v.astype(np.float32)  # one rounding: the FMA
    if residual is not None:
        q_res, act_res = residual
        k = np.float32(np.float64(np.float32(act_res.scale)) / s_out)
        term = (q_res.astype(np.int32) - act_res.zero_point).astype(np.float32)
        v = (term.astype(np.float64) * np.float64(k) + v).astype(np.float32)  # a second FMA
    v = np.round(v)
    lo, hi = activation or (None, None)
    q_lo = 0 if lo is None else max(0, out_act.zero_point + round(lo / s_out))
    q_hi = 255 if hi is None else min(255, out_act.zero_point + round(hi / s_out))
    return np.clip(v + np.float32(out_act.zero_point), q_lo, q_hi)


@pytest.mark.parametrize("hand_kernels", [True, False])
def test_int8_chain_equals_numpy_integer_pipeline(hand_kernels):
    """Every uint8 tensor between the layers and the logits, recomputed in numpy from the
    plan's scales, zero points and int8 weights, on qbench's kernels for this CPU and on
    TVM's own integer ops. The integer stages are exact; the FP32 logits, rescale and bias,
    may differ by the rounding of one product (LLVM fuses the multiply and add into an FMA),
    far below what one uint8 step of the head's input moves them (at least its rescale)."""
    net = _Chain().eval()
    q, x = _integer_graph(net, 1, 10, rounds=2)
    assert all(plan.quantized for plan in q.plans)
    conv, dw, head = q.plans
    q0 = _quantize_input(x, conv.act)
    q1 = _layer_numpy(q0, conv, net.conv, dw.act, (0.0, 6.0))
    q2 = _layer_numpy(q1, dw, net.dw, head.act, (0.0, None))
    expected = _layer_numpy(q2, head, net.head)
    executable = compiled(q.int8_mod, LLVM, hand_kernels=hand_kernels)
    one_step = float(np.min(head.act.scale * head.weight.scale))
    assert one_step > 10 * 2e-7
    np.testing.assert_allclose(run_tvm(executable, x), expected, rtol=0, atol=2e-7)


class _SamePadded(torch.nn.Module):
    """efficientnet's "same" convs: each input padded in forward, with F.pad, then convs
    without padding (symmetric for the 3x3 conv, (0, 1, 0, 1) for the stride-2 depthwise)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3)
        self.dw = torch.nn.Conv2d(16, 16, 3, stride=2, groups=16)
        self.head = torch.nn.Conv2d(16, 5, 1)

    def forward(self, x):
        x = torch.nn.functional.relu6(self.conv(torch.nn.functional.pad(x, (1, 1, 1, 1))))
        x = torch.relu(self.dw(torch.nn.functional.pad(x, (0, 1, 0, 1))))
        return self.head(x)


def test_zero_padding_in_forward_is_padding_of_the_uint8_tensor():
    """quantize(pad(x, 0)) is pad(quantize(x), zero point): the same values, and the layer
    before the pad requantizes in integer; logits as the numpy integer pipeline's."""
    net = _SamePadded().eval()
    q, x = _integer_graph(net, 4, 10, rounds=2)
    conv, dw, head = q.plans
    q0 = _quantize_input(x, conv.act)
    q1 = _layer_numpy(q0, conv, net.conv, dw.act, (0.0, 6.0), pad=(1, 1, 1, 1))
    q2 = _layer_numpy(q1, dw, net.dw, head.act, (0.0, None), pad=(0, 1, 0, 1))
    expected = _layer_numpy(q2, head, net.head)
    _assert_logits_on_both_builds(q, x, expected)


class _Pooled(torch.nn.Module):
    """resnet's stem: conv + ReLU, max pooling (3x3, stride 2, padding 1), then a conv."""

    def __init__(self, kernel=3, stride=2, padding=1, ceil_mode=False):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 20, 3, padding=1)
        self.pool = torch.nn.MaxPool2d(kernel, stride, padding, ceil_mode=ceil_mode)
        self.head = torch.nn.Conv2d(20, 5, 1)

    def forward(self, x):
        return self.head(self.pool(torch.relu(self.conv(x))))


def _max_pool_uint8(q, kernel, stride, padding, ceil_mode=False):
    """Max pooling of uint8 values ``q`` (N, C, H, W) by PyTorch's float64 max_pool2d (its
    padding and ceil-mode windows see only real values)."""
    values = torch.from_numpy(q.astype(np.float64))
    pooled = torch.nn.functional.max_pool2d(values, kernel, stride, padding, ceil_mode=ceil_mode)
    return pooled.numpy().astype(np.uint8)


@pytest.mark.parametrize(
    "pool, size",
    [
        ((3, 2, 1), 12),
        ((2, 2, 0), 12),
        ((3, 2, 0, True), 12),  # googlenet's: ceil mode adds a row and a column
        ((3, 2, 1, True), 12),
        ((2, 2, 1, True), 11),  # ceil mode's last window would start in the padding: dropped
    ],
)
def test_max_pooling_runs_on_the_uint8_tensor(pool, size):
    """quantize(max_pool(x)) is max_pool(quantize(x)) (rounding and clamping are monotone):
    the conv before the pool requantizes in integer; logits as the numpy integer
    pipeline's, on the host kernels and TVM's own ops, and with the pool on qbench's taps
    kernel (ceil mode included): on an AMX host, where the stem's AMX kernel takes the pool,
    the VNNI class's build runs the taps kernel."""
    from helpers import CPU

    from qbench.compile.features import has_feature
    from qbench.compile.kernels.select import kernel_paths

    net = _Pooled(*pool).eval()
    q, x = _integer_graph(net, 5, size, rounds=1)
    conv, head = q.plans
    q1 = _layer_numpy(_quantize_input(x, conv.act), conv, net.conv, head.act, (0.0, None))
    expected = _layer_numpy(_max_pool_uint8(q1, *pool), head, net.head)
    _assert_logits_on_both_builds(q, x, expected)
    taps = {**CPU, "mcpu": "icelake-server"} if has_feature(LLVM, "amx-tile") else LLVM
    assert kernel_paths(q.int8_mod, taps).get("uint8 max_pool2d taps") == 1
    logits = run_tvm(compiled(q.int8_mod, taps), x)
    np.testing.assert_allclose(logits, expected, rtol=2**-23, atol=2e-7)


class _Residual(torch.nn.Module):
    """A stem conv, then mobilenet_v2's block (1x1 expand + ReLU6, depthwise 3x3 + ReLU6,
    1x1 project, residual add of the block input), then a 1x1 head (FP32 logits)."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.expand = torch.nn.Conv2d(16, 32, 1)
        self.dw = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.project = torch.nn.Conv2d(32, 16, 1)
        self.head = torch.nn.Conv2d(16, 5, 1)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        y = torch.nn.functional.relu6(self.dw(torch.nn.functional.relu6(self.expand(x))))
        return self.head(x + self.project(y))


def test_residual_block_equals_numpy_integer_pipeline():
    """The project conv adds the block input's uint8 tensor in its integer requantize (a
    second FMA, k = s_x / s_out): logits as the numpy integer pipeline's, on the host
    kernels and TVM's own ops."""
    net = _Residual().eval()
    q, x = _integer_graph(net, 8, 10, rounds=4)
    stem, expand, dw, project, head = q.plans
    q1 = _layer_numpy(_quantize_input(x, stem.act), stem, net.stem, expand.act, (0.0, None))
    q2 = _layer_numpy(q1, expand, net.expand, dw.act, (0.0, 6.0))
    q3 = _layer_numpy(q2, dw, net.dw, project.act, (0.0, 6.0))
    q4 = _layer_numpy(q3, project, net.project, head.act, residual=(q1, expand.act))
    expected = _layer_numpy(q4, head, net.head)
    _assert_logits_on_both_builds(q, x, expected)


class _BasicBlock(torch.nn.Module):
    """A stem conv, then resnet's basic block (3x3 conv + ReLU, 3x3 conv, residual add of
    the block input, ReLU), then a 1x1 head. 20 channels: the uint8 NCHW16c tensors
    between the 3x3 convs hold a partial second block. No ReLU after the stem, so the
    block input's zero point, its padding value, is not 0."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 20, 3, padding=1)
        self.conv1 = torch.nn.Conv2d(20, 20, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(20, 20, 3, padding=1)
        self.head = torch.nn.Conv2d(20, 5, 1)

    def forward(self, x):
        x = self.stem(x)
        return self.head(torch.relu(x + self.conv2(torch.relu(self.conv1(x)))))


def test_padded_3x3_convs_between_uint8_kernels_equal_numpy_integer_pipeline():
    """3x3 convs reading the uint8 tensor the conv before them wrote, padded with its zero
    point, and a residual add in the second one's requantize: logits as the numpy integer
    pipeline's, on the host kernels and TVM's own ops."""
    net = _BasicBlock().eval()
    q, x = _integer_graph(net, 9, 12, rounds=3)
    stem, conv1, conv2, head = q.plans
    assert conv1.act.zero_point > 0
    q1 = _layer_numpy(_quantize_input(x, stem.act), stem, net.stem, conv1.act)
    q2 = _layer_numpy(q1, conv1, net.conv1, conv2.act, (0.0, None))
    q3 = _layer_numpy(q2, conv2, net.conv2, head.act, (0.0, None), residual=(q1, conv1.act))
    expected = _layer_numpy(q3, head, net.head)
    _assert_logits_on_both_builds(q, x, expected)


class _Downsampling(torch.nn.Module):
    """A stem conv + ReLU, then resnet's basic block that downsamples (3x3 conv stride 2 +
    ReLU, 3x3 conv, plus a 1x1 stride-2 conv of the block input, ReLU), then a 1x1 head."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.conv1 = torch.nn.Conv2d(16, 24, 3, stride=2, padding=1)
        self.conv2 = torch.nn.Conv2d(24, 24, 3, padding=1)
        self.down = torch.nn.Conv2d(16, 24, 1, stride=2)
        self.head = torch.nn.Conv2d(24, 5, 1)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        out = self.conv2(torch.relu(self.conv1(x)))
        out += self.down(x)
        return self.head(torch.relu(out))


def test_downsample_branch_equals_numpy_integer_pipeline():
    """The down conv requantizes to its output's own uint8 grid, and the second conv adds
    that uint8 tensor in its integer requantize: logits as the numpy integer pipeline's,
    on the host kernels and TVM's own ops."""
    net = _Downsampling().eval()
    q, x = _integer_graph(net, 11, 12, rounds=4)
    stem, conv1, conv2, down, head = q.plans
    assert down.output is not None and down.output.zero_point > 0
    q1 = _layer_numpy(_quantize_input(x, stem.act), stem, net.stem, conv1.act, (0.0, None))
    q2 = _layer_numpy(q1, conv1, net.conv1, conv2.act, (0.0, None))
    q_down = _layer_numpy(q1, down, net.down, down.output)
    q3 = _layer_numpy(q2, conv2, net.conv2, head.act, (0.0, None), residual=(q_down, down.output))
    expected = _layer_numpy(q3, head, net.head)
    _assert_logits_on_both_builds(q, x, expected)


def _integer_graph(net, seed, size, rounds):
    """``net`` quantized on one calibration batch (2, 3, size, size) drawn from ``seed``,
    and an input batch of that shape. Asserts that only the model input is quantized from
    FP32 (uint8 from there on) and that ``rounds`` layers requantize in integer."""
    rng = np.random.default_rng(seed)
    q = quantize_tiny(net, [rng.standard_normal((2, 3, size, size)).astype(np.float32)])
    ops = q.int8_mod["main"].script()
    assert ops.count("R.quantize(") == 1 and ops.count("R.round(") == rounds
    return q, rng.standard_normal((2, 3, size, size)).astype(np.float32)


def _assert_logits_on_both_builds(q, x, expected):
    """The INT8 graph's logits for ``x`` on qbench's kernels for this CPU and on TVM's own
    integer ops equal ``expected`` up to the rounding of one FMA in the FP32 logits (one
    unit in the last place: 2**-23 relative, 2e-7 near 0)."""
    for hand_kernels in (True, False):
        executable = compiled(q.int8_mod, LLVM, hand_kernels=hand_kernels)
        np.testing.assert_allclose(run_tvm(executable, x), expected, rtol=2**-23, atol=2e-7)


def _pool_module(shape, pool):
    from tvm import relax

    bb = relax.BlockBuilder()
    y_q = relax.Var("y_q", relax.TensorType(shape, "uint8"))
    with bb.function("main", [y_q]):
        with bb.dataflow():
            out = bb.emit_output(pooling.emit(bb.emit, y_q, pool))
        bb.emit_func_output(out)
    return bb.get()


def test_integer_pool_rounds_half_to_even_saturates_and_is_the_numpy_reference():
    """2x2 windows, input zero point 10, m = 0.5, output zero point 3: hand-derived sums
    minus 4 * 10 = 40, halved, rounded half to even, plus 3, clamped to [0, 255]; TVM's
    build bit for bit as ``pooling.reference``."""
    pool = pooling.IntegerPool(None, None, None, True, 4, 10, np.float32(0.5), 3)
    windows = [
        [10, 10, 10, 15],  # 45 - 40 = 5 -> 2.5 -> 2 -> 5
        [10, 10, 10, 17],  # 7 -> 3.5 -> 4 -> 7
        [10, 10, 10, 13],  # 3 -> 1.5 -> 2 -> 5
        [0, 0, 0, 0],  # -40 -> -20 -> -17 -> 0
        [255, 255, 255, 255],  # 980 -> 490 -> 493 -> 255
        [10, 10, 10, 10],  # 0 -> the output zero point, 3
    ]
    y_q = np.array(windows, np.uint8).reshape(1, 6, 2, 2)
    out = run_tvm(compiled(_pool_module(y_q.shape, pool), LLVM), y_q)
    assert out.reshape(-1).tolist() == [5, 7, 5, 0, 255, 3]
    rng = np.random.default_rng(3)
    y_q = rng.integers(0, 256, (2, 16, 7, 7)).astype(np.uint8)
    pool = pooling.IntegerPool(None, None, None, True, 49, 37, np.float32(0.0123), 100)
    out = run_tvm(compiled(_pool_module(y_q.shape, pool), LLVM), y_q)
    np.testing.assert_array_equal(out, pooling.reference(y_q, pool))


class _PooledHead(torch.nn.Module):
    """A stem conv, a 3x3 conv + ReLU, a global average pool, and a head that reads it: a
    Linear on the flattened pool (``adaptive_avg_pool2d``), or a 1x1 conv on the (N, C,
    1, 1) mean (a squeeze-excite conv)."""

    def __init__(self, linear):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.conv = torch.nn.Conv2d(16, 24, 3, padding=1)
        self.head = torch.nn.Linear(24, 5) if linear else torch.nn.Conv2d(24, 5, 1)

    def forward(self, x):
        y = torch.relu(self.conv(self.stem(x)))
        if isinstance(self.head, torch.nn.Linear):
            pooled = torch.nn.functional.adaptive_avg_pool2d(y, 1)
            return self.head(torch.flatten(pooled, 1))
        return self.head(y.mean((2, 3), keepdim=True))


def _pool_numpy(q, act, out_act):
    """The integer global average pool of uint8 ``q`` (N, C, H, W) with parameters ``act``
    to ``out_act``'s uint8, written anew: int sum, one float32 multiplier, ties to even."""
    count = q.shape[2] * q.shape[3]
    total = q.astype(np.int64).sum(axis=(2, 3), keepdims=True) - count * act.zero_point
    m = np.float32(
        np.float64(np.float32(act.scale)) / (count * np.float64(np.float32(out_act.scale)))
    )
    value = (total.astype(np.float32).astype(np.float64) * np.float64(m)).astype(np.float32)
    return np.clip(np.round(value) + out_act.zero_point, 0, 255)


def _dense_numpy(q, plan, module):
    """A Linear head on uint8 ``q`` (N, K): exact int matmul, FP32 rescale and bias."""
    w = plan.weight.q.astype(np.int64)  # (K, M)
    acc = q.astype(np.int64) @ w - plan.act.zero_point * w.sum(axis=0)
    r = np.float32(plan.act.scale * plan.weight.scale.astype(np.float64))
    return acc.astype(np.float32) * r + module.bias.detach().numpy()


@pytest.mark.parametrize("linear", [True, False])
def test_global_pool_runs_in_integer_between_uint8_layers(linear):
    """The pool's input is quantized with its own calibrated range (the conv before it
    requantizes to it in integer), pooled in int32 and requantized to the head's input:
    no FP32 tensor between the model input's quantize and the logits; logits as the numpy
    integer pipeline's, on the host kernels and TVM's own ops."""
    net = _PooledHead(linear).eval()
    q, x = _integer_graph(net, 4, 9, rounds=3)
    assert "R.dequantize(" not in q.int8_mod["main"].script()
    stem, conv, head = q.plans
    assert head.pool is not None and q.layers[2].pool == 0
    q1 = _layer_numpy(_quantize_input(x, stem.act), stem, net.stem, conv.act)
    q2 = _layer_numpy(q1, conv, net.conv, head.pool, (0.0, None))
    pooled = _pool_numpy(q2, head.pool, head.act)
    if linear:
        expected = _dense_numpy(pooled.reshape(len(x), -1), head, net.head)
    else:
        expected = _layer_numpy(pooled, head, net.head)
    _assert_logits_on_both_builds(q, x, expected)


class _Mixed(torch.nn.Module):
    """A stem conv, mobilenet_v2's block (1x1 expand + ReLU6, depthwise 3x3 + ReLU6, 1x1
    project, residual add), two branches (1x1 and 3x3 conv, ReLU) concatenated along the
    channels, a global average pool and a Linear classifier."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.expand = torch.nn.Conv2d(16, 32, 1)
        self.dw = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.project = torch.nn.Conv2d(32, 16, 1)
        self.left = torch.nn.Conv2d(16, 8, 1)
        self.right = torch.nn.Conv2d(16, 12, 3, padding=1)
        self.fc = torch.nn.Linear(20, 6)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        y = torch.nn.functional.relu6(self.dw(torch.nn.functional.relu6(self.expand(x))))
        x = x + self.project(y)
        x = torch.cat([torch.relu(self.left(x)), torch.relu(self.right(x))], dim=1)
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def test_residual_depthwise_concat_and_pool_network_equals_numpy_integer_pipeline():
    """Every tensor from the model input's quantize to the logits is uint8: the concat
    joins the branches' uint8 tensors, each branch conv requantizing to the pool input's
    grid, and the pool runs in integer; logits as the numpy integer pipeline's, on the
    host kernels and TVM's own ops."""
    net = _Mixed().eval()
    q, x = _integer_graph(net, 6, 10, rounds=7)
    script = q.int8_mod["main"].script()
    assert "R.dequantize(" not in script and "R.concat(" in script
    stem, expand, dw, project, left, right, fc = q.plans
    q1 = _layer_numpy(_quantize_input(x, stem.act), stem, net.stem, expand.act, (0.0, None))
    q2 = _layer_numpy(q1, expand, net.expand, dw.act, (0.0, 6.0))
    q3 = _layer_numpy(q2, dw, net.dw, project.act, (0.0, 6.0))
    q4 = _layer_numpy(q3, project, net.project, left.act, residual=(q1, expand.act))
    branches = [
        _layer_numpy(q4, left, net.left, fc.pool, (0.0, None)),
        _layer_numpy(q4, right, net.right, fc.pool, (0.0, None)),
    ]
    pooled = _pool_numpy(np.concatenate(branches, axis=1), fc.pool, fc.act)
    expected = _dense_numpy(pooled.reshape(len(x), -1), fc, net.fc)
    _assert_logits_on_both_builds(q, x, expected)


class _Inception(torch.nn.Module):
    """googlenet's pattern: two branches (ReLU) concatenated; one conv reads a chain of two
    max pools (3x3, stride 1, ceil mode) of the concat, another the concat itself, in that
    order; their FP32 outputs concatenated are the logits."""

    def __init__(self, right=8):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.left = torch.nn.Conv2d(8, 16, 1)
        self.right = torch.nn.Conv2d(8, right, 3, padding=1)
        self.pool = torch.nn.MaxPool2d(3, 1, 1, ceil_mode=True)
        self.pooled = torch.nn.Conv2d(16 + right, 4, 1)
        self.direct = torch.nn.Conv2d(16 + right, 6, 1)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        x = torch.cat([torch.relu(self.left(x)), torch.relu(self.right(x))], dim=1)
        return torch.cat([self.pooled(self.pool(self.pool(x))), self.direct(x)], dim=1)


@pytest.mark.parametrize("width", [8, 16])
def test_a_max_pool_of_a_tensor_other_layers_read_takes_their_parameters(width):
    """The conv reading the pooled concat takes the direct reader's parameters (the concat
    quantized once, pooled in uint8), so both branch convs requantize to uint8 in integer;
    logits as the numpy integer pipeline's, on the host kernels and TVM's own ops. With
    branches of whole 16-channel blocks, the uint8 kernels join their blocked outputs
    (``emit_common``) where they can read them."""
    net = _Inception(width).eval()
    q, x = _integer_graph(net, 7, 9, rounds=3)
    stem, left, right, pooled, direct = q.plans
    assert [layer.pooled_from for layer in q.layers] == [None, None, None, 4, None]
    assert pooled.act == direct.act
    q1 = _layer_numpy(_quantize_input(x, stem.act), stem, net.stem, left.act, (0.0, None))
    branches = [
        _layer_numpy(q1, left, net.left, direct.act, (0.0, None)),
        _layer_numpy(q1, right, net.right, direct.act, (0.0, None)),
    ]
    joined = np.concatenate(branches, axis=1)
    twice = _max_pool_uint8(_max_pool_uint8(joined, 3, 1, 1, True), 3, 1, 1, True)
    blocked = _blocked_concats(q.int8_mod)  # its two readers' copies made one
    assert len(blocked) <= 1 and (width == 16 or not blocked)
    expected = np.concatenate(
        [_layer_numpy(twice, pooled, net.pooled), _layer_numpy(joined, direct, net.direct)],
        axis=1,
    )
    _assert_logits_on_both_builds(q, x, expected)


def _blocked_concats(mod):
    """The uint8 NCHW16c concats of ``mod`` after kernel selection and the lowering's
    common-subexpression pass."""
    from tvm import relax

    from qbench.compile.kernels.select import select_kernels

    selected = relax.transform.EliminateCommonSubexpr()(select_kernels(mod, LLVM))
    lines = selected["main"].script().splitlines()
    return [line for line in lines if "R.concat(" in line and ', 16), dtype="uint8"' in line]


class _PooledTwice(torch.nn.Module):
    """One tensor read by a conv, by a conv through a max pool, and by a conv through that
    pool pooled again; their FP32 outputs concatenated are the logits."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.pool = torch.nn.MaxPool2d(3, 1, 1)
        self.direct, self.once, self.twice = (torch.nn.Conv2d(8, 4, 1) for _ in range(3))

    def forward(self, x):
        x = torch.nn.functional.relu(self.stem(x))
        once = self.pool(x)
        return torch.cat([self.direct(x), self.once(once), self.twice(self.pool(once))], 1)


def test_a_pool_of_a_pool_readers_input_takes_the_first_owners_parameters():
    """The conv reading the twice-pooled tensor takes the direct reader's parameters, not
    those of the once-pooled reader's own calibration (which that reader does not use):
    the tensor is quantized once; logits as on TVM's own ops."""
    net = _PooledTwice().eval()
    q, x = _integer_graph(net, 8, 9, rounds=1)
    assert [layer.pooled_from for layer in q.layers] == [None, None, 1, 1]
    executable = compiled(q.int8_mod, LLVM, hand_kernels=False)
    _assert_logits_on_both_builds(q, x, run_tvm(executable, x))
