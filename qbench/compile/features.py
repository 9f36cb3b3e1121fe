"""CPU features: what kernel selection and the kernels' tiling ask of a target, and what the
host CPU itself has (read from the CPU, not from LLVM's model of its ``mcpu`` name).

LLVM names a CPU it does not know by the nearest model it does: an Intel Xeon VM of CPUID
family 6 model 167 with AMX is ``rocketlake`` to it, a model without ``clwb`` or AMX. So the
host's features come from ``/proc/cpuinfo``'s flags (Linux), mapped to LLVM's feature names,
and AMX counts only once Linux grants the process the tile state (``amx_ready``).
"""

import functools
import json
import logging
import platform
import re
from pathlib import Path

log = logging.getLogger(__name__)

AMX_FEATURES = ("amx-tile", "amx-int8")
# arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): Linux gives a process the AMX tile
# state only on request (Documentation/arch/x86/xstate.rst); without it the first tile
# instruction is SIGILL
# (syscall number, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) on x86_64
TILE_PERMISSION = (158, 0x1023, 18)

# /proc/cpuinfo flag -> LLVM feature, where the names differ by more than '_', '-' and '.'
_CPUINFO_ALIASES = {
    "pni": "sse3",
    "lm": "64bit",
    "abm": "lzcnt",
    "3dnowprefetch": "prfchw",
    "lahf_lm": "sahf",
    "rdrand": "rdrnd",
    "pclmulqdq": "pclmul",
    "bmi1": "bmi",
    "sha_ni": "sha",
    "fpu": "x87",
    "ospke": "pku",
}
# aarch64 /proc/cpuinfo "Features" -> LLVM feature, where the names differ by more than '_',
# '-' and '.'; only to suggest the LLVM spelling of a mistyped ``mattr`` feature
# (``cpuinfo_alias``), the host's own flags are read through ``_CPUINFO_ALIASES``
_AARCH64_CPUINFO_ALIASES = {
    "asimd": "neon",
    "asimddp": "dotprod",
    "asimdhp": "fullfp16",
    "fphp": "fullfp16",
    "asimdrdm": "rdm",
    "atomics": "lse",
    "svei8mm": "i8mm",
    "svebf16": "bf16",
    "sha1": "sha2",
    "pmull": "aes",
    "lrcpc": "rcpc",
    "ilrcpc": "rcpc-immo",
    "dcpop": "ccpp",
    "dcpodp": "ccdp",
    "jscvt": "jsconv",
    "fcma": "complxnum",
    "flagm2": "altnzcv",
    "frint": "fptoint",
    "rng": "rand",
    "paca": "pauth",
    "pacg": "pauth",
    "sveaes": "sve-aes",
    "svebitperm": "sve2-bitperm",
    "svesha3": "sve2-sha3",
    "svesm4": "sve2-sm4",
    "crc32": "crc",
}
# LLVM features implied by others the CPU reports
_IMPLIED = {"sse4.2": ("crc32",), "avx512f": ("evex512",)}
# LLVM features of instructions that code generated from TIR never contains (system, cache
# and power management, TSX; branch-hint prefixes, which older CPUs ignore): a CPU lacking
# one still runs the code, so they do not make a target unfit for the host. Not AMD's SSE4A:
# LLVM emits its extrq for byte shuffles (a quantize-and-pack kernel for mcpu znver3), which
# dies of an illegal instruction on an Intel CPU
SYSTEM_FEATURES = frozenset(
    "clzero mwaitx monitorx rdpru wbnoinvd clwb clflushopt cldemote enqcmd uintr "
    "waitpkg ptwrite pconfig shstk ibt kl widekl hreset serialize tsxldtrk rtm movdiri "
    "movdir64b sgx invpcid prefetchi rdpid rdseed rdrnd xsave xsaveopt xsavec xsaves "
    "fsgsbase lwp pku branch-hint".split()
)


def has_feature(target, feature):
    """True when ``target`` (a dict or ``tvm.target.Target``) is an llvm CPU with the LLVM
    ``feature`` (e.g. ``avx2``, ``avx512vnni``, ``amx-int8``, ``dotprod``)."""
    import tvm
    from tvm.target import codegen

    if not isinstance(target, tvm.target.Target):
        target = _tvm_target(json.dumps(target, sort_keys=True))
    if target.kind.name != "llvm":
        return False
    return bool(codegen.target_has_features(feature, target))


@functools.lru_cache(maxsize=64)
def _tvm_target(target_json):
    """The ``tvm.target.Target`` of a target dict's JSON (built once: kernel selection asks
    for features layer by layer)."""
    import tvm

    return tvm.target.Target(json.loads(target_json))


def _normal(name):
    return re.sub(r"[-_.]", "", name.lower())


def cpuinfo_alias(flag):
    """The LLVM feature a ``/proc/cpuinfo`` flag names under another word (x86 ``sha_ni`` ->
    ``sha``, aarch64 ``asimddp`` -> ``dotprod``), or None; spellings that differ only by
    '_', '-' and '.' (``avx512_vnni``, ``avx512vnni``) are not listed: compare them by
    ``normal``."""
    flag = flag.lower()
    return _CPUINFO_ALIASES.get(flag) or _AARCH64_CPUINFO_ALIASES.get(flag)


def normal(name):
    """A feature name as lower case without '-', '_' and '.': ``/proc/cpuinfo``'s and
    LLVM's spellings of one feature compare equal (``avx512_vnni``, ``avx512vnni``)."""
    return _normal(name)


def llvm_features_of_flags(flags):
    """The LLVM feature names (normalized: lower case without '-', '_', '.') of a set of
    ``/proc/cpuinfo`` ``flags``."""
    names = {_normal(_CPUINFO_ALIASES.get(flag, flag)) for flag in flags}
    for feature, implied in _IMPLIED.items():
        if _normal(feature) in names:
            names.update(_normal(f) for f in implied)
    return frozenset(names)


@functools.lru_cache(maxsize=1)
def host_flags():
    """The host CPU's ``/proc/cpuinfo`` flags (first processor), or None where there is no
    such file (then callers fall back to LLVM's model of the host's ``mcpu``)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    found = re.search(r"^(?:flags|Features)\s*:(.*)$", text, re.MULTILINE)
    return frozenset(found.group(1).split()) if found else None


def host_lacks(features):
    """The LLVM ``features`` (names) that the host CPU lacks, by its own flags; AMX features
    count as lacking when the process may not use the tiles (``amx_ready``). None when the
    host's flags cannot be read."""
    flags = host_flags()
    if flags is None:
        return None
    have = llvm_features_of_flags(flags)
    lacking = {f for f in features if _normal(f) not in have}
    if not amx_ready():
        lacking |= {f for f in features if f.startswith("amx-")}
    return sorted(lacking)


@functools.lru_cache(maxsize=1)
def amx_ready():
    """True when this CPU has AMX INT8 tiles (``amx_tile`` and ``amx_int8`` in its flags) and
    Linux granted this process the tile state. The request is made once per process (it is
    per process and inherited by fork); a refusal is logged as a warning that says why, and
    qbench then builds the VNNI path."""
    flags = host_flags() or frozenset()
    if not {"amx_tile", "amx_int8"} <= flags:
        return False
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return False
    import ctypes
    import os

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(*TILE_PERMISSION) == 0:
        return True
    reason = os.strerror(ctypes.get_errno())
    log.warning(
        "this CPU has AMX tiles, but Linux refused this process the tile state "
        "(arch_prctl ARCH_REQ_XCOMP_PERM: %s; a kernel before 5.16, or a sandbox that "
        "blocks arch_prctl): INT8 runs on the AVX-512 VNNI path",
        reason,
    )
    return False
