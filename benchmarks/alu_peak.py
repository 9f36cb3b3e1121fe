"""Multiply-accumulate peaks of this CPU, GMAC/s, per instruction sequence, measured now.

Compiles ``alu_peak.c`` (register-only loops, no memory traffic) with the system C compiler
and runs it in ``--threads`` processes at once. Each row is what a kernel built from that
sequence could reach at best; ``vs FMA`` is its peak over the FP32 FMA peak of the same vector
width, and ``INT8/FP32 time bound`` its inverse: a compute-bound INT8 layer built from that
sequence cannot take less than that fraction of the FP32 layer's time.

    python benchmarks/alu_peak.py --threads 2
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tabulate import tabulate

SOURCE = Path(__file__).with_name("alu_peak.c")
# sequence -> (what it is, the FP32 sequence of the same vector width)
SEQUENCES = {
    "fma_ymm": ("FP32 FMA, 256-bit (AVX2)", "fma_ymm"),
    "pmaddwd_ymm": ("int16 pairs vpmaddwd+vpaddd, 256-bit: qbench avx2, exact", "fma_ymm"),
    "pmaddubsw_ymm": ("u8 x s8 vpmaddubsw+vpmaddwd+vpaddd: FBGEMM AVX2, reduce_range", "fma_ymm"),
    "vpdpbusd_ymm": ("u8 x s8 {vex} vpdpbusd, 256-bit: qbench avxvnni", "fma_ymm"),
    "fma_zmm": ("FP32 FMA, 512-bit (AVX-512)", "fma_zmm"),
    "pmaddwd_zmm": ("int16 pairs vpmaddwd+vpaddd, 512-bit: qbench avx512bw", "fma_zmm"),
    "vpdpbusd_zmm": ("u8 x s8 vpdpbusd, 512-bit: qbench vnni", "fma_zmm"),
    "tdpbusd_tile": ("u8 x s8 AMX tdpbusd, 16x16x64 tiles: qbench amx", "fma_zmm"),
}
# qbench CPU class -> (FP32 peak sequence, INT8 peak sequence)
CLASS_PEAKS = {
    "AVX2": ("fma_ymm", "pmaddwd_ymm"),
    "AVX-VNNI": ("fma_ymm", "vpdpbusd_ymm"),
    "AVX-512BW": ("fma_zmm", "pmaddwd_zmm"),
    "AVX-512 VNNI": ("fma_zmm", "vpdpbusd_zmm"),
    "AMX": ("fma_zmm", "tdpbusd_tile"),
}


def measure(threads):
    """GMAC/s of every sequence this CPU runs, summed over ``threads`` concurrent processes.

    Raises:
        RuntimeError: no C compiler (``cc``), or the program failed; the message says which.
    """
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise RuntimeError("alu_peak: no C compiler (cc or gcc) on PATH; peaks not measured")
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "alu_peak"
        subprocess.run([compiler, "-O2", str(SOURCE), "-o", str(exe)], check=True)
        procs = [subprocess.Popen([exe], stdout=subprocess.PIPE, text=True) for _ in range(threads)]
        outputs = [p.communicate()[0] for p in procs]
        if any(p.returncode for p in procs):
            raise RuntimeError(f"alu_peak: {exe.name} failed on this CPU")
    peaks = {}
    for out in outputs:
        for line in out.splitlines():
            name, macs = line.split()
            peaks[name] = peaks.get(name, 0.0) + float(macs) / 1e9
    return peaks


def class_peaks(cpu_class, peaks):
    """(FP32, INT8) peak GMAC/s of qbench's kernels for ``cpu_class``; None where unmeasured."""
    fp32, int8 = CLASS_PEAKS.get(cpu_class, (None, None))
    return peaks.get(fp32), peaks.get(int8)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2, help="concurrent processes (default 2)")
    args = p.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tvm.target import codegen

    from qbench.report.assemble import cpu_name

    peaks = measure(args.threads)
    rows = []
    for name, gmacs in peaks.items():
        what, fp32 = SEQUENCES[name]
        ratio = gmacs / peaks[fp32]
        rows.append([name, what, f"{gmacs:.1f}", f"{ratio:.2f}", f"{1 / ratio:.2f}"])
    mcpu = codegen.llvm_get_system_cpu()
    print(f"CPU {cpu_name()} (LLVM mcpu {mcpu}), {args.threads} processes at once")
    heads = ["sequence", "what", "GMAC/s", "vs FMA", "INT8/FP32 time bound"]
    print(tabulate(rows, heads, tablefmt="github"))


if __name__ == "__main__":
    main()
