"""The dot-product tensor intrinsics of qbench's packed INT8 kernels, one per CPU class
(``ensure_intrin``), and TVM's AVX-512 VNNI ``dot_16x4_vnni``, mended for LLVM 22.

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


def _dot_impl(a_dtype, b_dtype, depth, intrinsic, lanes, accumulates):
    """The implementation of a 16-lane dot-product intrinsic (semantics: ``_dot_desc(16,
    depth, a_dtype, b_dtype)``): ``depth`` values of A, packed into one 32-bit word,
    broadcast against B, in calls to the LLVM ``intrinsic`` of ``lanes`` int32 lanes each.
    ``accumulates``: the intrinsic takes C and adds to it (``vpdpbusd``, ``sdot``); else C
    is added after (``vpmaddwd``). Operands are passed as LLVM 22 declares them: bytes for
    the quad intrinsics, int16 for the pair ones; int8 weights B of a pair intrinsic are
    sign-extended to int16 as they are loaded (``vpmovsxbw``), so they stay int8 in memory."""
    calls, elem = 16 // lanes, "int8" if depth == 4 else "int16"

    @T.prim_func(s_tir=True)
    def impl(
        A: T.Buffer((depth,), a_dtype, offset_factor=1),
        B: T.Buffer((16, depth), b_dtype, offset_factor=1),
        C: T.Buffer((16,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:depth], B[0:16, 0:depth])
            T.writes(C[0:16])
            word = T.reinterpret(A.vload([0], f"{a_dtype}x{depth}"), dtype="int32")
            a = T.reinterpret(T.broadcast(word, lanes), dtype=f"{elem}x{lanes * depth}")
            for i in T.unroll(calls):
                acc = C.vload([i * lanes], dtype=f"int32x{lanes}")
                b = T.Cast(
                    f"{elem}x{lanes * depth}",
                    B.vload([i * lanes, 0], dtype=f"{b_dtype}x{lanes * depth}"),
                )
                if accumulates:
                    C[T.ramp(i * lanes, 1, lanes)] = T.call_llvm_pure_intrin(
                        T.llvm_lookup_intrinsic_id(intrinsic), acc, a, b, dtype=f"int32x{lanes}"
                    )
                else:
                    C[T.ramp(i * lanes, 1, lanes)] = acc + T.call_llvm_pure_intrin(
                        T.llvm_lookup_intrinsic_id(intrinsic), a, b, dtype=f"int32x{lanes}"
                    )

    return impl


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
    impl = _dot_impl("uint8", "int8", 4, "llvm.x86.avx512.vpdpbusd.512", 16, True)
    TensorIntrin.register(VNNI_INTRIN, _dot_desc(16, 4, "uint8", "int8"), impl, override=True)
    return True


AVX2_INTRIN = "dot_16x2_i16_avx2"
AVX2_U8_INTRIN = "dot_16x4_u8s7_avx2"


AVX512BW_INTRIN = "dot_16x2_i16_avx512bw"
AVXVNNI_INTRIN = "dot_16x4_avxvnni"
SDOT_INTRIN = "dot_16x4_i8_sdot"


# name -> ``_dot_impl`` arguments, registered on demand
_PACKED_INTRINSICS = {
    AVX2_INTRIN: ("int16", "int8", 2, "llvm.x86.avx2.pmadd.wd", 8, False),
    AVX512BW_INTRIN: ("int16", "int8", 2, "llvm.x86.avx512.pmaddw.d.512", 16, False),
    AVXVNNI_INTRIN: ("uint8", "int8", 4, "llvm.x86.avx512.vpdpbusd.256", 8, True),
    SDOT_INTRIN: ("int8", "int8", 4, "llvm.aarch64.neon.sdot.v4i32.v16i8", 4, True),
}


def _maddubs_impl():
    """The implementation of ``AVX2_U8_INTRIN`` (semantics: ``_dot_desc(16, 4, "uint8",
    "int8")``): 4 uint8 of A broadcast against 16x4 int8 weights B, per 8 output channels
    one ``vpmaddubsw`` (int16 sums of byte pairs, saturating), one ``vpmaddwd`` against ones
    (int32 sums of the pairs: quads) and one ``vpaddd``. Exact only for weights in [-63, 63]
    (|2 x 255 x 63| < 32767): ``kernels.select`` gives it no other layer."""
    madd_bytes, madd_words = "llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd"

    @T.prim_func(s_tir=True)
    def impl(
        A: T.Buffer((4,), "uint8", offset_factor=1),
        B: T.Buffer((16, 4), "int8", offset_factor=1),
        C: T.Buffer((16,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            word = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
            a = T.reinterpret(T.broadcast(word, 8), dtype="int8x32")
            ones = T.broadcast(T.int16(1), 16)
            for i in T.unroll(2):
                acc = C.vload([i * 8], dtype="int32x8")
                b = B.vload([i * 8, 0], dtype="int8x32")
                pairs = T.call_llvm_pure_intrin(
                    T.llvm_lookup_intrinsic_id(madd_bytes), a, b, dtype="int16x16"
                )
                C[T.ramp(i * 8, 1, 8)] = acc + T.call_llvm_pure_intrin(
                    T.llvm_lookup_intrinsic_id(madd_words), pairs, ones, dtype="int32x8"
                )

    return impl


def ensure_intrin(name):
    """Register the 16-lane dot-product intrinsic ``name`` (idempotent; call before
    scheduling with it). ``VNNI_INTRIN`` is TVM's own, mended by ``ensure_vnni_intrin``;
    the others are qbench's, each exact in int32:

    - ``AVX2_INTRIN``: int16 pairs of activations against int8 weights widened on load, two
      ``vpmaddwd`` (ymm) and two ``vpaddd``. The int16 pair sums of 8-bit values are exact,
      unlike ``vpmaddubsw``'s saturating ones;
    - ``AVX512BW_INTRIN``: the same pairs, one ``vpmaddwd`` (zmm);
    - ``AVX2_U8_INTRIN``: uint8 x 7-bit int8 quads, ``vpmaddubsw`` + ``vpmaddwd`` (FBGEMM's
      AVX2 kernel, ``_maddubs_impl``), for weights in [-63, 63] only;
    - ``AVXVNNI_INTRIN``: uint8 x int8 quads, two 256-bit ``vpdpbusd`` (AVX-VNNI);
    - ``SDOT_INTRIN``: int8 x int8 quads, four ``sdot`` (aarch64 dot-product extension).
    """
    if name == VNNI_INTRIN:
        ensure_vnni_intrin()
        return
    try:
        TensorIntrin.get(name)
    except ValueError:  # "TensorIntrin ... is not registered"
        if name == AVX2_U8_INTRIN:
            TensorIntrin.register(name, _dot_desc(16, 4, "uint8", "int8"), _maddubs_impl())
            return
        a_dtype, b_dtype, depth, *call = _PACKED_INTRINSICS[name]
        impl = _dot_impl(a_dtype, b_dtype, depth, *call)
        TensorIntrin.register(name, _dot_desc(16, depth, a_dtype, b_dtype), impl)
