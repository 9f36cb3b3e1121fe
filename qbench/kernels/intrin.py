"""The AVX-512 VNNI dot-product intrinsic ``dot_16x4_vnni``, mended for LLVM 22.

``vpdpbusd`` computes, for each of 16 int32 lanes, ``C[i] += sum_k uint8(A[k]) * int8(B[i, k])``
over 4 bytes: the 16x4 tensor intrinsic of TVM's x86 schedules. TVM 0.27 registers it calling
``llvm.x86.avx512.vpdpbusd.512`` with three ``<16 x i32>`` operands. LLVM 22 (the one the 0.27
wheel ships) declares the last two as ``<64 x i8>``, so every call fails LLVM's verifier and
MetaSchedule silently keeps only untensorized candidates. ``ensure_vnni_intrin`` re-registers the
intrinsic under the same name with byte-vector operands when, and only when, the registered one
still passes 32-bit operands to an LLVM of version 22 or later.
"""

import importlib.util
import sys
from pathlib import Path

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

VNNI_INTRIN = "dot_16x4_vnni"
LLVM_BYTE_OPERANDS_SINCE = 22


def _dot_desc(lanes, depth, a_dtype, b_dtype):
    """The TIR a dot-product intrinsic computes: for ``lanes`` int32 lanes,
    ``C[i] += sum_k int32(A[k]) * int32(B[i, k])`` over ``depth`` elements."""

    @T.prim_func(s_tir=True)
    def desc(
        A: T.Buffer((depth,), a_dtype, offset_factor=1),
        B: T.Buffer((lanes, depth), b_dtype, offset_factor=1),
        C: T.Buffer((lanes,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:depth], B[0:lanes, 0:depth])
            T.writes(C[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, depth):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")

    return desc


@T.prim_func(s_tir=True)
def _dot_16x4_vnni_bytes(
    A: T.Buffer((4,), "uint8", offset_factor=1),
    B: T.Buffer((16, 4), "int8", offset_factor=1),
    C: T.Buffer((16,), "int32", offset_factor=1),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        a_word = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
        a_bytes = T.reinterpret(T.broadcast(a_word, 16), dtype="int8x64")
        C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
            C.vload([0], dtype="int32x16"),
            a_bytes,
            B.vload([0, 0], dtype="int8x64"),
            dtype="int32x16",
        )


def _passes_word_operands(impl):
    """True when ``impl`` reinterprets the int8 weight bytes as ``<16 x i32>`` for the call,
    as TVM 0.27's registration does (read from its TVMScript: TIR has no Python visitor)."""
    return 'T.reinterpret("int32x16"' in impl.script()


def register_x86_intrinsics():
    """Register TVM's own x86 tensor intrinsics, and only those (idempotent).

    ``import tvm.s_tir.tensor_intrin`` registers every target's, CUDA's among them: about 500
    TVMScript functions, each of which walks ``inspect.stack()``. That took 52 s in a fresh
    process and 74 s after ``import torch`` (AMD EPYC Zen 3, TVM 0.27), once per process, and
    it was most of a small model's ``qbench run``. The x86 module alone takes 0.2 s; it is
    loaded under its own name, so a later import of the package reuses it.
    """
    name = "tvm.s_tir.tensor_intrin.x86"
    if name in sys.modules:
        return
    import tvm.s_tir

    path = Path(tvm.s_tir.__file__).parent / "tensor_intrin" / "x86.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


def skip_tensor_intrin_package():
    """Make ``import tvm.s_tir.tensor_intrin`` a no-op in this process: an empty package
    (with the real ``__path__``, so a submodule can still be imported by name).

    For MetaSchedule's builder workers (``LocalBuilder(initializer=...)``): TVM 0.27's build
    function imports that package in every fresh worker, which costs 30-74 s (see
    ``register_x86_intrinsics``) against the builder's 30 s timeout, so every trial failed.
    The modules a worker builds are already scheduled and tensorized: it looks no intrinsic up.
    """
    import types

    import tvm.s_tir

    name = "tvm.s_tir.tensor_intrin"
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [str(Path(tvm.s_tir.__file__).parent / "tensor_intrin")]
        sys.modules[name] = package


def needs_fix():
    """Whether the registered ``dot_16x4_vnni`` is the one LLVM >= 22 rejects."""
    from tvm.target import codegen

    register_x86_intrinsics()

    if codegen.llvm_version_major() < LLVM_BYTE_OPERANDS_SINCE:
        return False
    return _passes_word_operands(TensorIntrin.get(VNNI_INTRIN).impl)


def ensure_vnni_intrin():
    """Make ``dot_16x4_vnni`` usable in this process (idempotent; call before scheduling or
    tuning INT8 kernels).

    Returns:
        True when the intrinsic was re-registered with byte operands, False when TVM's own
        registration is already usable.
    """
    if not needs_fix():
        return False
    desc = _dot_desc(16, 4, "uint8", "int8")
    TensorIntrin.register(VNNI_INTRIN, desc, _dot_16x4_vnni_bytes, override=True)
    return True


AVX2_INTRIN = "dot_16x2_i16_avx2"


@T.prim_func(s_tir=True)
def _dot_16x2_i16_avx2(
    A: T.Buffer((2,), "int16", offset_factor=1),
    B: T.Buffer((16, 2), "int16", offset_factor=1),
    C: T.Buffer((16,), "int32", offset_factor=1),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:2], B[0:16, 0:2])
        T.writes(C[0:16])
        pair = T.reinterpret(A.vload([0], "int16x2"), dtype="int32")
        a = T.reinterpret(T.broadcast(pair, 8), dtype="int16x16")
        C[T.ramp(T.int32(0), 1, 8)] = C.vload([0], dtype="int32x8") + T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx2.pmadd.wd"),
            a,
            B.vload([0, 0], dtype="int16x16"),
            dtype="int32x8",
        )
        C[T.ramp(T.int32(8), 1, 8)] = C.vload([8], dtype="int32x8") + T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx2.pmadd.wd"),
            a,
            B.vload([8, 0], dtype="int16x16"),
            dtype="int32x8",
        )


def ensure_avx2_intrin():
    """Register ``dot_16x2_i16_avx2`` (idempotent): for 16 int32 lanes, ``C[i] += A[0] * B[i, 0]
    + A[1] * B[i, 1]`` with int16 operands, as two ``vpmaddwd`` (AVX2) and two ``vpaddd``. The
    pair sums of int16 products are exact in int32 (|255 * 127 * 2| is far below 2^31), unlike
    ``vpmaddubsw``'s saturating int16 pair sums of uint8 x int8 bytes."""
    try:
        TensorIntrin.get(AVX2_INTRIN)
    except ValueError:  # "TensorIntrin ... is not registered"
        desc = _dot_desc(16, 2, "int16", "int16")
        TensorIntrin.register(AVX2_INTRIN, desc, _dot_16x2_i16_avx2)
