"""cuda builds without a GPU: ``qbench build`` for ``sm_90`` compiles FP32 and INT8, and the
INT8 kernels call ``dp4a`` (uint8 x int8 dot products of four), found in the generated code
(slow: nvcc compiles for a minute). The CUDA C is compiled by nvcc (the machine's, or PyPI's
nvidia-cuda-nvcc). A run on cuda where no GPU is names ``--target llvm``."""

import json
import shutil

import pytest
from test_rpc import MODELS

from qbench.cli.main import main

SM90 = json.dumps({"kind": "cuda", "arch": "sm_90"})
needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None, reason="needs nvcc on PATH to compile CUDA kernels"
)


def _build(tmp_path, model, *args):
    folders = ["--reports-dir", str(tmp_path / "rep"), "--cache-dir", str(tmp_path / "cal")]
    target = ["--target", SM90, "--tuning-db", str(tmp_path / "db")]
    assert main(["build", "--model", model, *target, *args, *folders]) == 0
    (folder,) = (tmp_path / "rep").glob("*-cuda-build")
    return json.loads((folder / "build.json").read_text()), folder


@needs_nvcc
@pytest.mark.slow  # nvcc compiles both graphs: a minute
def test_a_cuda_int8_build_calls_dp4a_without_a_gpu(tmp_path):
    (tmp_path / "tiny.py").write_text(MODELS)
    tiny = ["--data", "synthetic", "--calib-size", "4", "--batch-size", "4"]
    record, folder = _build(tmp_path, f"{tmp_path / 'tiny.py'}:build", *tiny)
    assert record["target"]["arch"] == "sm_90"
    assert record["graphs"]["tvm_int8"]["int8_instructions"].get("dp4a", 0) > 0
    assert record["graphs"]["tvm_fp32"]["int8_instructions"] == {}
    assert record["graphs"]["tvm_int8"]["elf_machine"] == "x86-64"  # host code + cubin
    assert (folder / "tvm_int8.so").stat().st_size == record["graphs"]["tvm_int8"]["bytes"]


@needs_nvcc
@pytest.mark.slow
def test_efficientnet_lite0_builds_for_sm_90_with_dp4a_kernels(tmp_path):
    record, _ = _build(tmp_path, "efficientnet_lite0", "--calib-size", "8", "--batch-size", "8")
    int8 = record["graphs"]["tvm_int8"]
    assert record["layers_int8"] == record["layers"] == 50
    assert int8["int8_instructions"]["dp4a"] >= 23  # one call or more per pointwise conv


@needs_nvcc
def test_a_cuda_arch_that_is_no_compute_capability_exits_2(tmp_path, capsys):
    target = json.dumps({"kind": "cuda", "arch": "sm_xx"})
    args = ["build", "--model", "efficientnet_lite0", "--target", target]
    assert main([*args, "--reports-dir", str(tmp_path / "rep")]) == 2
    assert "arch 'sm_xx' is no NVIDIA compute capability" in capsys.readouterr().err
    assert not (tmp_path / "rep").exists()


def test_cuda_without_a_gpu_names_the_alternative():
    """A run on ``--target cuda`` where no GPU is found names ``--target llvm`` (issue 20:
    what a new user met)."""
    import tvm

    from qbench.compile.targets import parse_target
    from qbench.core.errors import UserError

    if tvm.cuda(0).exist:
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(UserError) as err:
        parse_target("cuda", 2)
    assert "--target llvm" in str(err.value)
