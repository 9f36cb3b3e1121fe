"""The aarch64 ``sdot`` kernel, run: cross-compiled, linked with ``native/call_kernel.c``
(Debian's gcc-aarch64-linux-gnu) and executed under Debian's qemu-user, checked bit for bit
against PyTorch's float64 conv of the same integers."""

import shutil
import subprocess

import numpy as np
import pytest
from helpers import exact_conv

from qbench.compile.kernels import layout
from qbench.compile.kernels.conv2d import requantized_conv

TOOLS = ("qemu-aarch64", "aarch64-linux-gnu-gcc")
pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in TOOLS),
    reason="needs Debian's qemu-user and gcc-aarch64-linux-gnu (.ci/run installs them)",
)
TARGET = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "neoverse-n1"}
PACKING = layout.PACKINGS["neon_dot"]
DTYPE_CODES = {"i": 0, "u": 1, "f": 2}  # DLPack type codes by numpy kind


def _kernel_object(arrays, strides, dilation, path):
    """Compile the packed conv with its requantize epilogue, scheduled as qbench schedules it
    for ``TARGET``, to an aarch64 object file at ``path``."""
    import tvm
    from tvm import te
    from tvm.s_tir import dlight

    from qbench.compile.kernels.schedules import HandKernels

    inputs = [te.placeholder(a.shape, str(a.dtype), name=f"a{i}") for i, a in enumerate(arrays)]
    out = requantized_conv(*inputs, strides, dilation, False, PACKING.op_name)
    func = te.create_prim_func([*inputs, out]).with_attr("global_symbol", "kernel")
    with tvm.target.Target(TARGET):
        mod = dlight.ApplyDefaultSchedule(HandKernels())(tvm.IRModule({"kernel": func}))
    tvm.tirx.build(mod, tvm.target.Target(TARGET)).write_to_file(str(path))
    return [int(d) for d in out.shape]


def _spec(path, shape, dtype):
    """A tensor argument of ``native/call_kernel.c``: FILE:CODE:BITS:D0xD1x..."""
    dtype = np.dtype(dtype)
    return f"{path}:{DTYPE_CODES[dtype.kind]}:{8 * dtype.itemsize}:{'x'.join(map(str, shape))}"


def run_under_qemu(tmp_path, x, w, strides=(1, 1), dilation=(1, 1)):
    """x: uint8 (N, C, H, W) (C a multiple of 4), w: int8 (O, C, KH, KW). Returns the kernel's
    float32 output with correction and rescale set so that it is sum(x * w)."""
    from tvm_ffi import libinfo

    n, c, h, width = x.shape
    data = (x.astype(np.int16) - PACKING.offset).astype(np.int8)
    data = np.ascontiguousarray(data.reshape(n, c // 4, 4, h, width).transpose(0, 1, 3, 4, 2))
    weight = layout.pack_conv_weight(w, PACKING.block, PACKING.weight_dtype)
    correction = (-PACKING.offset * w.astype(np.int64).sum(axis=(1, 2, 3))).astype(np.int32)
    arrays = [data, weight, correction, np.ones(w.shape[0], np.float32)]
    shape = _kernel_object(arrays, strides, dilation, tmp_path / "kernel.o")
    source = __file__.rsplit("/", 1)[0] + "/native/call_kernel.c"
    exe = tmp_path / "call_kernel"
    include = libinfo.find_include_path()
    cmd = ["aarch64-linux-gnu-gcc", "-static", "-I", include, source, tmp_path / "kernel.o"]
    subprocess.run([*map(str, cmd), "-o", str(exe), "-lm"], check=True)
    specs = []
    for i, a in enumerate(arrays):
        a.tofile(tmp_path / f"in{i}.bin")
        specs.append(_spec(tmp_path / f"in{i}.bin", a.shape, a.dtype))
    out = tmp_path / "out.bin"
    done = subprocess.run(
        ["qemu-aarch64", str(exe), _spec(out, shape, np.float32), *specs],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return np.fromfile(out, np.float32).reshape(shape)


@pytest.mark.parametrize(
    "strides, dilation", [((1, 1), (1, 1)), ((2, 2), (1, 1)), ((1, 1), (2, 2))]
)
def test_sdot_conv_is_exact_under_qemu(tmp_path, strides, dilation):
    rng = np.random.default_rng(4)
    x = rng.integers(0, 256, (1, 8, 11, 11)).astype(np.uint8)
    w = rng.integers(-128, 128, (20, 8, 3, 3)).astype(np.int8)
    got = run_under_qemu(tmp_path, x, w, strides, dilation)
    np.testing.assert_array_equal(got, exact_conv(x, w, strides, dilation))


@pytest.mark.parametrize("weight", [-128, 127])
def test_sdot_worst_case_operands_are_exact_under_qemu(tmp_path, weight):
    """All 255 (int8 127 after the offset) against all -128 (or +127)."""
    x = np.full((1, 16, 5, 5), 255, np.uint8)
    w = np.full((16, 16, 3, 3), weight, np.int8)
    got = run_under_qemu(tmp_path, x, w)
    assert got.flat[0] == 255 * weight * 16 * 9  # by hand: 144 products per output
    np.testing.assert_array_equal(got, exact_conv(x, w, (1, 1), (1, 1)))
