"""Cross-compiled Arm builds: ``qbench build`` for an aarch64 CPU with the dot-product
extension (the libraries' ELF machine and their ``sdot`` kernels), and the INT8 build run
on an aarch64 TVM RPC server under qemu-user through a tracker, its logits equal to this
machine's integer reference (TVM's own ops, no qbench kernels).

The aarch64 Python comes from ``tests/native/aarch64-python.sh`` (``.ci/run`` makes it and
sets ``QBENCH_AARCH64_PYTHON``)."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from rpcfarm import start_farm
from test_rpc import MODELS

from qbench import data
from qbench.cli.main import main
from qbench.compile import build, targets
from qbench.pipeline import RunOptions
from qbench.pipeline.artefacts import elf_machine
from qbench.pipeline.prepare import prepare

ARM = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "neoverse-n1", "num-cores": 1}
TINY = ["--data", "synthetic", "--calib-size", "4", "--batch-size", "4"]
CROSS = pytest.mark.skipif(
    shutil.which("aarch64-linux-gnu-gcc") is None,
    reason="needs Debian's gcc-aarch64-linux-gnu to link aarch64 libraries (.ci/run installs it)",
)
AARCH64_PYTHON = os.environ.get("QBENCH_AARCH64_PYTHON")


@pytest.fixture
def models(tmp_path):
    (tmp_path / "tiny.py").write_text(MODELS)
    return tmp_path / "tiny.py"


def test_elf_machine_reads_the_header():
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"  # 64-bit, little-endian
    header[18:20] = (183).to_bytes(2, "little")
    assert elf_machine(bytes(header)) == "AArch64"
    header[18:20] = (62).to_bytes(2, "little")
    assert elf_machine(bytes(header)) == "x86-64"
    assert elf_machine(b"MZ\x90\x00") == "not ELF"


@CROSS
def test_build_for_an_arm_server_writes_aarch64_libraries_with_sdot_kernels(tmp_path, models):
    folders = ["--reports-dir", str(tmp_path / "rep"), "--cache-dir", str(tmp_path / "cal")]
    target = ["--target", json.dumps(ARM), "--tuning-db", str(tmp_path / "db")]
    assert main(["build", "--model", f"{models}:build", *target, *TINY, *folders]) == 0
    (folder,) = (tmp_path / "rep").glob("*-build")
    record = json.loads((folder / "build.json").read_text())
    for name in ("tvm_fp32", "tvm_int8"):
        library = (folder / f"{name}.so").read_bytes()
        assert elf_machine(library) == record["graphs"][name]["elf_machine"] == "AArch64"
    assert record["graphs"]["tvm_int8"]["int8_instructions"]["sdot"] > 0
    assert "sdot" not in record["graphs"]["tvm_fp32"]["int8_instructions"]
    assert record["int8_kernels"]["cpu_class"] == "Arm dot product"
    assert "AArch64" in (folder / "build.md").read_text()


@pytest.mark.parametrize(
    "option",
    [["--rpc", "127.0.0.1:9"], ["--repeat", "50"], ["--min-sqnr", "20"], ["--trials", "4"]],
)
def test_build_refuses_an_option_it_does_not_use(tmp_path, models, capsys, option):
    """qbench build runs nothing: no device, no timing, no sign-off, no tuning budget."""
    args = ["build", "--model", f"{models}:build", *TINY, *option]
    with pytest.raises(SystemExit) as e:
        main([*args, "--reports-dir", str(tmp_path / "rep")])
    assert e.value.code == 2
    assert f"unrecognized arguments: {' '.join(option)}" in capsys.readouterr().err
    assert not (tmp_path / "rep").exists()


@CROSS
@pytest.mark.slow  # an RPC server under qemu-user: 49 s on the Intel Xeon VM
@pytest.mark.skipif(
    not AARCH64_PYTHON or not Path(AARCH64_PYTHON).exists() or not shutil.which("qemu-aarch64"),
    reason="needs QBENCH_AARCH64_PYTHON, an aarch64 Python with TVM under qemu-user "
    "(tests/native/aarch64-python.sh makes it; .ci/run does where it is root)",
)
def test_the_arm_int8_build_under_qemu_gives_the_integer_reference_logits(tmp_path, models):
    farm = start_farm()
    try:
        port = farm.add_server("aarch64", python=(AARCH64_PYTHON,), wait_s=300)
        opts = RunOptions(
            model=f"{models}:build",
            target=json.dumps(ARM),
            data="synthetic",
            calib_size=4,
            eval_size=8,
            batch_size=4,
            cache_dir=str(tmp_path / "cal"),
            reports_dir=str(tmp_path / "rep"),
            tuning_db=str(tmp_path / "db"),
            rpc_tracker=farm.tracker_addr,
            rpc_key="aarch64",
        )
        p = prepare(opts)
        assert p.device.name.startswith(f"rpc key aarch64, server 127.0.0.1:{port}, aarch64")
        assert p.int8_kernels.paths == {"conv2d neon_dot": 2, "matmul neon_dot": 1}
        arm = build.build(p.int8_mod, p.target, (), p.device, "int8")
        host = targets.Llvm.host(1)
        reference = build.compile(p.int8_mod, host, (), hand_kernels=False)
        x, _ = next(data.full_batches(p.images, p.split.eval, p.model, 4))
        got = arm.vm["main"](_tensor(x, p.device.tvm_device())).numpy()
        want = _run_here(reference, x)
    finally:
        farm.stop()
    np.testing.assert_array_equal(got, want)


def _tensor(x, device):
    import tvm

    return tvm.runtime.tensor(x, device)


def _run_here(executable, x):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x, tvm.cpu())).numpy()
