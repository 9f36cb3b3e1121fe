"""``qbench build``: compile the FP32 and INT8 graphs for a target without running them.

For a CPU or GPU the release is made for but that is not at hand (an Arm server, an
NVIDIA GPU on another machine): calibration runs here, on this CPU, and the two builds
are exported as deployable shared libraries (``export_library``, linked by the target's
cross compiler) with a record of what was built: target, kernel paths and schedules, each
library's size and ELF machine type. The folder ``<reports-dir>/<time>-<model>-<kind>-build``
appears whole or not at all (``atomic.write_folder``).
"""

import datetime as dt
import json
import logging
import platform
import re
import struct
import tempfile
from pathlib import Path

from tabulate import tabulate

from .. import __version__
from ..core.atomic import to_json, write_folder

log = logging.getLogger(__name__)
# ELF e_machine codes (System V ABI, elf.h) of the machines TVM builds for
ELF_MACHINES = {3: "x86", 62: "x86-64", 40: "ARM", 183: "AArch64", 243: "RISC-V"}


def build_artefacts(p):
    """Compile ``p``'s (a ``prepared.Prepared``) TVM FP32 and INT8 graphs for ``p.target``
    and export each. Returns ({file name: bytes}, the record: ``build.json``'s dict with
    its ``calibration`` a ``CalibrationInfo`` and its ``int8_kernels`` an ``Int8Kernels``;
    ``build_json`` gives the file's dict)."""
    import tvm
    from tvm import relax

    from ..compile.build import lower, schedule_counts
    from ..core.progress import stage
    from ..core.remote import export
    from .prepare import graphs

    triple = _triple(p.target)
    files, built = {}, {}
    for name, mod in graphs(p):
        with stage(f"build {name.upper().replace('_', ' ')}"):
            lowered = lower(mod, p.target, p.databases)
            executable = relax.build(lowered, tvm.target.Target(p.target))
        with tempfile.TemporaryDirectory(prefix="qbench-build-") as tmp:
            path = Path(tmp) / f"{name}.so"
            export(executable, path, triple)
            files[path.name] = path.read_bytes()
        built[name] = {
            "file": path.name,
            "bytes": len(files[path.name]),
            "elf_machine": elf_machine(files[path.name]),
            "kernels": schedule_counts(lowered),
            "int8_instructions": int8_instructions(executable),
        }
    return files, _record(p, triple, built)


def _triple(target):
    """The triple whose linker makes the library: the llvm target's ``mtriple``, else
    (cuda: the kernels ride in a host library) this machine's."""
    if target["kind"] == "llvm" and target.get("mtriple"):
        return str(target["mtriple"])
    return f"{platform.machine()}-linux-gnu"


def _record(p, triple, built):
    """The build's record (see ``build_artefacts``)."""
    return {
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "qbench": __version__,
        "model": p.model.name,
        "weights": p.model.weights,
        "target": p.target,
        "triple": triple,
        "calibration": p.calibration,
        "layers_int8": sum(plan.quantized for plan in p.plans),
        "layers": len(p.layers),
        "int8_kernels": p.int8_kernels,
        "graphs": built,
    }


def elf_machine(data):
    """The machine an ELF shared library (bytes) is built for (``AArch64``, ``x86-64``), from
    its header's ``e_machine`` field; ``not ELF`` for anything else."""
    if data[:4] != b"\x7fELF":
        return "not ELF"
    order = "<" if data[5] == 1 else ">"  # EI_DATA: 1 little-endian, 2 big-endian
    (code,) = struct.unpack_from(order + "H", data, 18)
    return ELF_MACHINES.get(code, f"e_machine {code}")


# instructions that multiply int8 and accumulate: Arm (sdot/udot/smmla), x86 (VNNI, AVX2
# pairs, AVX-512BW's vpmaddwd on int8 widened to int16) in CPU assembly; NVIDIA's dp4a
# and integer tensor-core mma, called in the kernels
INT8_INSTRUCTIONS = re.compile(
    r"\b(sdot|udot|smmla|ummla|usdot|tdpbusd|vpdpbusds?|vpmaddubsw|vpmaddwd|__dp4a"
    r"|mma_sync|mma\.sync[\w.]*s8[\w.]*)\b"
)


def int8_instructions(executable):
    """{mnemonic: count} of the int8 multiply-accumulate instructions (``INT8_INSTRUCTIONS``)
    in ``executable``'s generated code: CPU assembly, and the CUDA kernels' bodies (their
    calls of ``__dp4a``, counted as ``dp4a``; the helper definitions before the first kernel
    are not counted)."""
    counts = {}
    for module in _modules(executable.mod):
        for found in INT8_INSTRUCTIONS.findall(_source(module)):
            name = found.removeprefix("__")
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def _modules(module):
    yield module
    for child in module.imports:
        yield from _modules(child)


def _source(module):
    """The generated code of one module: assembly of a CPU library, the kernels of a cuda
    module (its CUDA C from the first ``__global__`` on: TVM keeps no PTX of it); "" for a
    module with neither (the VM's bytecode)."""
    try:
        if module.kind == "llvm":
            return module.inspect_source("asm")
        if module.kind == "cuda":
            text = module.inspect_source("")
            return text[max(0, text.find('extern "C" __global__')) :]
    except Exception:  # noqa: BLE001 - TVM raises its own error kinds for a missing format
        log.warning("no generated code readable from the %s module", module.kind)
    return ""


def build_json(record):
    """``build.json``'s dict of a build's record: its typed parts as their JSON."""
    return {k: v.to_json() if hasattr(v, "to_json") else v for k, v in record.items()}


def write_build(record, files, root):
    """Write the libraries, ``build.json`` and ``build.md`` into a new folder at once."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(record["model"]).name)
    out = Path(root) / f"{stamp}-{name}-{record['target']['kind']}-build"
    text = {"build.json": to_json(build_json(record)), "build.md": render_build(record)}
    return write_folder(out, files | text)


AMX_NOTE = (
    "AMX tiles: Linux gives a process the tile state only on request. The INT8 library's "
    "AMX kernels request it themselves on each call (`arch_prctl(ARCH_REQ_XCOMP_PERM = "
    "0x1023, XFEATURE_XTILEDATA = 18)`, i.e. `syscall(158, 0x1023, 18)`; per process, "
    "idempotent), so a deploying program or an RPC server needs no call of its own. It "
    "needs Linux 5.16 or later and a process allowed that call: where a sandbox blocks it, "
    "the first tile instruction dies of SIGILL; build for the CPU's VNNI class there "
    '(a target without `"mattr": ["+amx-tile", "+amx-int8"]` and an `mcpu` without AMX).'
)


def render_build(record):
    """``build.md``: what was built, for whom, and how."""
    rows = [
        [
            name,
            g["file"],
            f"{g['bytes'] / 1e6:.2f}",
            g["elf_machine"],
            " / ".join(str(g["kernels"].get(k, 0)) for k in ("hand", "tuned", "default"))
            if g["kernels"]
            else "-",  # counted on llvm only
            ", ".join(f"{k} {n}" for k, n in g["int8_instructions"].items()) or "none",
        ]
        for name, g in record["graphs"].items()
    ]
    heads = ["graph", "library", "size (MB)", "ELF machine", "kernels hand/tuned/default"]
    kernels, calibration = record["int8_kernels"], record["calibration"]
    paths = ", ".join(f"{k} {v}" for k, v in kernels.paths.items()) or "-"
    return (
        "\n\n".join(
            [
                f"# qbench build: {record['model']} for {record['target']['kind']} (not run)",
                f"- target `{json.dumps(record['target'], sort_keys=True)}`, linked for "
                f"{record['triple']}",
                f"- layers built in INT8: {record['layers_int8']} of {record['layers']}; CPU class "
                f"{kernels.cpu_class}; INT8 layers by kernel: {paths}",
                f"- calibration: {calibration.mode} on {calibration.images} images, on this "
                "machine",
                tabulate(rows, [*heads, "int8 instructions in the code"], tablefmt="github"),
                *([AMX_NOTE] if kernels.cpu_class == "AMX" else []),
                f"qbench {record['qbench']}, {record['created']}",
            ]
        )
        + "\n"
    )
