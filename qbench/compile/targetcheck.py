"""The whole-target check: every key and value of a target dict, before any work.

LLVM ignores what it does not know with a warning (``'+avx512_vnni' is not a recognized
feature for this target (ignoring feature)``) and builds on without it; TVM passes an
unknown triple on to LLVM, which may crash the process. So ``targets.Llvm.check`` asks this
module first, and each refusal is a ``UserError`` (exit 2) that names the key, the value
and the closest valid spelling:

- keys: only those whose values qbench checks (``LLVM_KEYS``, ``CUDA_KEYS``);
- ``mtriple``: ARCH-[VENDOR-]OS[-ENV], ARCH one LLVM builds CPU code for, OS one a device
  loads shared libraries on (``check_triple``); checked before LLVM sees it;
- ``mattr``: a list of ``+feature`` / ``-feature`` entries, each feature one LLVM knows for
  the triple's architecture (``check_mattr``);
- the triple of a remote device against the target's (``check_device_triple``).

LLVM's feature names come from TVM's own LLVM queries, nothing is compiled: the features
of each CPU LLVM models for the architecture (``llvm_get_cpu_archlist``,
``llvm_get_cpu_features``), and for a name none of them has, whether a target that
enables it has it (LLVM drops a name it does not know).
"""

import contextlib
import difflib
import functools
import os
import platform
import re
import shutil
import sys

from ..core.errors import UserError
from .features import cpuinfo_alias, normal

# the llvm keys whose values qbench checks, each with what it must be
LLVM_KEYS = {
    "kind": "llvm",
    "mtriple": "a target triple such as x86_64-linux-gnu",
    "mcpu": "a CPU name LLVM knows for the triple",
    "mattr": 'a list of "+feature" / "-feature" strings',
    "num-cores": "a whole number >= 1",
    "opt-level": "0, 1, 2 or 3",
    "vector-width": "a power of two from 64 to 2048 (bits)",
    "mfloat-abi": '"soft" or "hard"',
    **{
        key: "true or false"
        for key in (
            "fast-math",
            "fast-math-nnan",
            "fast-math-ninf",
            "fast-math-nsz",
            "fast-math-arcp",
            "fast-math-contract",
            "fast-math-reassoc",
        )
    },
}
CUDA_INT_KEYS = (
    "max_threads_per_block",
    "max_num_threads",
    "max_shared_memory_per_block",
    "thread_warp_size",
    "registers_per_block",
    "l2_cache_size_bytes",
)
CUDA_KEYS = ("kind", "arch", *CUDA_INT_KEYS)

# triples a device runs, named where a triple is refused (each one Debian has a
# ``gcc-<triple>`` cross compiler for, which links its libraries: ``remote.export``)
TRIPLE_EXAMPLES = (
    "x86_64-linux-gnu",
    "aarch64-linux-gnu",
    "arm-linux-gnueabihf",
    "riscv64-linux-gnu",
)
# the operating systems a device loads a shared library on (a triple's OS component starts
# with one: darwin23, android21, macosx14)
DEVICE_OSES = ("linux", "android", "darwin", "macos", "ios", "windows", "freebsd")
# LLVM's spellings of an architecture other than its target name (llvm::Triple::parseArch)
_ARCH_ALIASES = (
    (r"amd64|x86_64h", "x86_64"),
    (r"i[3-7]86", "i386"),
    (r"arm64e?", "aarch64"),
    (r"armv\d[\w.]*|xscale", "arm"),
    (r"armebv\d[\w.]*", "armeb"),
    (r"thumbv\d[\w.]*", "thumb"),
    (r"ppc64le", "powerpc64le"),
    (r"ppc64", "powerpc64"),
    (r"ppc(32)?", "powerpc"),
    (r"ppc(32)?le", "powerpcle"),
)
# one triple per CPU family whose feature names a refusal compares a foreign feature with
# ("+neon" on x86_64: a feature of aarch64 and arm)
_FAMILY_TRIPLES = {
    "x86_64": "x86_64-linux-gnu",
    "aarch64": "aarch64-linux-gnu",
    "arm": "armv7a-linux-gnueabihf",
    "riscv64": "riscv64-linux-gnu",
}
_TRIPLE = re.compile(r"[a-z0-9_.]+(-[a-z0-9_.]*){1,3}")
_FEATURE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_NOT_FEATURES = ("help", "cpuhelp")  # LLVM prints its tables for these


def check_keys(target, kind, text):
    """Refuse a key of ``target`` (a dict of ``kind``) whose value qbench does not check:
    a misspelt one (named with the closest valid key) or a TVM option qbench does not take.

    Raises:
        UserError: "not a valid <kind> target: ..." naming the key and the keys taken.
    """
    from tvm.target.target import TargetKind

    taken = tuple(LLVM_KEYS) if kind == "llvm" else CUDA_KEYS
    tvm_keys = set(TargetKind.options_from_name(kind))
    for key in target:
        if key in taken:
            continue
        if key in tvm_keys:
            why = f"{key!r} is a TVM option qbench does not take (it cannot check its value)"
        else:
            close = difflib.get_close_matches(str(key), taken, n=1, cutoff=0.5)
            why = f"unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
        raise UserError(
            f"--target {text}: not a valid {kind} target: {why}; keys qbench takes: "
            f"{', '.join(taken)}"
        )


def check_llvm_values(target, text):
    """Refuse an llvm dict value of the wrong type or range (``LLVM_KEYS``), before TVM or
    LLVM sees it; ``mattr`` and ``mtriple`` in shape only (``check_mattr``,
    ``check_triple`` check their names)."""

    def bad(key):
        raise UserError(
            f"--target {text}: not a valid llvm target: {key} {json_text(target[key])} must be "
            f"{LLVM_KEYS[key]}"
        )

    cores = target.get("num-cores", 1)
    if not _whole(cores) or cores < 1:
        raise UserError(f"--target {text}: num-cores must be a whole number >= 1")
    for key in ("mtriple", "mcpu", "mfloat-abi"):
        if key in target and not isinstance(target[key], str):
            bad(key)
    if target.get("mfloat-abi", "soft") not in ("soft", "hard"):
        bad("mfloat-abi")
    if "opt-level" in target and (not _whole(target["opt-level"]) or target["opt-level"] > 3):
        bad("opt-level")
    width = target.get("vector-width", 64)
    if not _whole(width) or width not in [2**n for n in range(6, 12)]:
        bad("vector-width")
    for key in LLVM_KEYS:
        if key.startswith("fast-math") and not isinstance(target.get(key, False), bool):
            bad(key)
    mattr = target.get("mattr", [])
    if not isinstance(mattr, list) or not all(isinstance(f, str) for f in mattr):
        hint = ""
        if isinstance(mattr, str):
            hint = f": {json_text([f.strip() for f in mattr.split(',') if f.strip()])}"
        raise UserError(
            f"--target {text}: not a valid llvm target: mattr {json_text(mattr)} must be a "
            f'list of "+feature" / "-feature" strings{hint}'
        )


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def json_text(value):
    import json

    return json.dumps(value)


def llvm_arch(arch):
    """LLVM's target name of a triple's architecture component (``arm64`` -> ``aarch64``,
    ``armv7a`` -> ``arm``), or None where this LLVM builds no code for it."""
    from tvm.target import codegen

    for pattern, name in _ARCH_ALIASES:
        if re.fullmatch(pattern, arch):
            arch = name
            break
    return arch if arch in set(codegen.llvm_get_targets()) else None


def triple_os(triple):
    """The operating system a triple names, one of ``DEVICE_OSES`` (``macos`` as
    ``darwin``; ``aarch64-linux-android``: ``android``, whose libraries link against
    another C library than Linux's), or None."""
    parts = triple.split("-")[1:]
    for name in ("android", *DEVICE_OSES):
        if any(part.startswith(name) for part in parts):
            return "darwin" if name == "macos" else name
    return None


def check_triple(triple, text):
    """Refuse an ``mtriple`` a device cannot load code of: not ARCH-[VENDOR-]OS[-ENV] in
    lower case, an architecture this LLVM has no CPU target for, or no operating system a
    device loads shared libraries on. Checked in Python before any LLVM call: TVM passes an
    unknown triple to LLVM, which crashes the process (``llvm_get_cpu_archlist``).

    Raises:
        UserError: naming the triple, what is wrong and valid examples.
    """
    from tvm.target import codegen

    examples = f"valid examples: {', '.join(TRIPLE_EXAMPLES)}"
    where = f"--target {text}: mtriple {triple!r}"
    if not _TRIPLE.fullmatch(triple):
        raise UserError(
            f"{where} is not a target triple ARCH-[VENDOR-]OS[-ENV] in lower case; {examples}"
        )
    arch = triple.split("-")[0]
    name = llvm_arch(arch)
    if name is None:
        arches = sorted(set(codegen.llvm_get_targets()) | {"amd64", "arm64", "armv7a", "i686"})
        close = difflib.get_close_matches(arch, arches, n=3, cutoff=0.6)
        hint = f" (closest: {', '.join(close)})" if close else ""
        raise UserError(f"{where}: LLVM knows no architecture {arch!r}{hint}; {examples}")
    with _quiet_stderr():  # TVM logs an error for a triple without a generic CPU (nvptx)
        is_cpu = codegen.llvm_is_valid_cpu("generic", triple)
    if not is_cpu:
        raise UserError(f"{where}: {arch} is not a CPU architecture; {examples}")
    if triple_os(triple) is None:
        raise UserError(
            f"{where} names no operating system a device loads libraries on "
            f"({', '.join(DEVICE_OSES)}); {examples}"
        )


def check_linker(triple, text):
    """Refuse a triple whose libraries this machine cannot link, as ``remote.export`` links
    them (``<triple>-gcc`` for another CPU), before the builds rather than after them."""
    if triple.startswith(platform.machine()) or shutil.which(f"{triple}-gcc"):
        return
    raise UserError(
        f"--target {text}: linking libraries for {triple} needs the cross compiler "
        f"{triple}-gcc on PATH (Debian: apt-get install gcc-{triple})"
    )


def check_cpu(cpu, triple, text):
    """Refuse an ``mcpu`` LLVM does not know for ``triple`` (already ``check_triple``'d),
    named by its architecture, with the closest CPU names LLVM knows, or all of them when
    none is close."""
    import tvm
    from tvm.target import codegen

    if codegen.llvm_is_valid_cpu(cpu, triple):
        return
    cpus = codegen.llvm_get_cpu_archlist(tvm.target.Target({"kind": "llvm", "mtriple": triple}))
    cpus = sorted(set(cpus))
    close = difflib.get_close_matches(cpu, cpus, n=3, cutoff=0.6)
    arch = triple.split("-")[0]
    known = f"closest: {', '.join(close)}" if close else f"valid: {', '.join(cpus)}"
    raise UserError(
        f"--target {text}: mcpu {cpu!r} unknown to LLVM for {arch}; this machine is "
        f"{codegen.llvm_get_system_cpu()!r}; {known}"
    )


def check_mattr(mattr, triple, text):
    """Refuse ``mattr`` entries LLVM would ignore or misread: no leading '+' (enable) or '-'
    (disable) (LLVM reads a bare name as a disable), more than one feature in an entry, a
    feature LLVM does not know for ``triple``'s architecture (named with its closest valid
    spellings, or the architectures that have it), one feature both enabled and disabled.
    All of them in one message.

    Raises:
        UserError: naming each bad entry.
    """
    problems, signs = [], {}
    for entry in mattr:
        sign, name = entry[:1], entry[1:]
        if sign not in ("+", "-"):
            problems.append(
                f"mattr entry {entry!r} must start with '+' (enable) or '-' (disable), e.g. "
                f"'+{entry.lstrip()}' (LLVM reads a bare name as a disable)"
            )
        elif "," in name:
            parts = [p.strip() for p in entry.split(",") if p.strip()]
            problems.append(f"mattr entry {entry!r} holds several features: {json_text(parts)}")
        elif not _FEATURE.fullmatch(name) or not llvm_knows(triple, name):
            problems.append(_unknown_feature(sign, name, triple))
        elif signs.setdefault(name, sign) != sign:
            problems.append(f"mattr both enables and disables {name!r}")
    if problems:
        raise UserError(f"--target {text}: {'; '.join(problems)}")


def _unknown_feature(sign, name, triple):
    """The words of a refused feature: its closest valid spellings for ``triple``, else the
    CPU families that have it."""
    said = f"mattr feature {sign + name!r} is not a feature LLVM knows for {triple}"
    said += " (LLVM would ignore it and build without it)"
    close = closest_features(name, triple)
    if close:
        names = ", ".join(repr(sign + c) for c in close)
        return f"{said}; closest valid spelling{'s' if len(close) > 1 else ''}: {names}"
    arch = llvm_arch(triple.split("-")[0])
    families = [
        family
        for family, other in _FAMILY_TRIPLES.items()
        if family != arch and _spelt_in(name, arch_features(other))
    ]
    if families:
        return f"{said}; it is a feature of {' and '.join(families)} CPUs, not of {arch}"
    return f"{said}; no {arch} feature is spelt like it"


def _spelt_in(name, features):
    alias = cpuinfo_alias(name)
    return any(normal(f) in (normal(name), normal(alias or name)) for f in features)


def closest_features(name, triple):
    """LLVM's valid spellings closest to the feature ``name`` for ``triple``, best first
    (at most 3): the ``/proc/cpuinfo`` alias (``features.cpuinfo_alias``) and the names
    equal but for case, '_', '-' and '.' (``avx512_vnni`` -> ``avx512vnni``); else
    ``difflib.get_close_matches`` over the architecture's features."""
    known = sorted(arch_features(triple))
    exact = []
    candidates = [cpuinfo_alias(name)]
    candidates += [f for f in known if normal(f) == normal(name)]
    low = name.lower()
    candidates += [low, low.replace("_", "-"), low.replace("_", "."), low.replace("_", "")]
    for c in candidates:
        if c and c != name and c not in exact and llvm_knows(triple, c):
            exact.append(c)
    if exact:
        return exact[:3]
    return difflib.get_close_matches(low, known, n=3, cutoff=0.6)


@functools.lru_cache(maxsize=16)
def arch_features(triple):
    """Every feature of a CPU LLVM models for ``triple``'s architecture (a frozenset):
    the union of ``llvm_get_cpu_features`` over ``llvm_get_cpu_archlist``."""
    import tvm
    from tvm.target import codegen

    base = {"kind": "llvm", "mtriple": triple}
    names = set()
    for cpu in set(codegen.llvm_get_cpu_archlist(tvm.target.Target(base))):
        names |= set(codegen.llvm_get_cpu_features(tvm.target.Target({**base, "mcpu": cpu})))
    return frozenset(names)


@functools.lru_cache(maxsize=1024)
def llvm_knows(triple, name):
    """True when LLVM knows the feature ``name`` for ``triple``'s architecture: a CPU it
    models has it, or a target that enables it has it (LLVM drops an unknown name, with a
    warning on stderr that is not shown here). Builds a target, compiles nothing."""
    if name in arch_features(triple):
        return True
    if name in _NOT_FEATURES or not _FEATURE.fullmatch(name):
        return False
    import tvm
    from tvm.target import codegen

    with _quiet_stderr():
        target = tvm.target.Target({"kind": "llvm", "mtriple": triple, "mattr": ["+" + name]})
        return name in codegen.llvm_get_cpu_features(target)


@contextlib.contextmanager
def _quiet_stderr():
    """File descriptor 2 on /dev/null: LLVM's and TVM's own warnings go there, not Python's
    ``sys.stderr``."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def check_device_triple(device_triple, triple, device_name, text):
    """Refuse a target whose triple is not the remote device's: another CPU family
    (``llvm_arch``, ``arm64`` = ``aarch64``) or operating system (``triple_os``).

    Raises:
        UserError: naming the device, its triple and the target's.
    """
    mine = (llvm_arch(triple.split("-")[0]), triple_os(triple))
    theirs = (llvm_arch(device_triple.split("-")[0]), triple_os(device_triple))
    if mine != theirs:
        raise UserError(
            f"--target {text}: {device_name} runs {device_triple}, not {triple}; give "
            f"--target llvm (its own CPU) or an llvm dict with an mtriple of "
            f"{device_triple.split('-')[0]} on {theirs[1]}, e.g. {device_triple}"
        )
