"""A/A runs: does ``qbench compare`` flag an unchanged build? It must never.

Each pair runs ``qbench run`` twice on the same tiny model (``tests/fixtures/tiny_model.py``,
synthetic data, so the pair differs only in timing noise), then ``qbench compare B
--baseline A``. Every other pair runs under a bursty background load on one core (a child
process that alternates busy loops and sleeps of random lengths, seeded), started before A
and stopped after B, or started only for B (``--load``). Prints one line per pair (exit code,
rows judged a regression or improvement) and the count of pairs that flagged anything.

    python benchmarks/aa_compare.py --pairs 20
"""

import argparse
import json
import multiprocessing as mp
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
MODEL = f"{ROOT / 'tests' / 'fixtures' / 'tiny_model.py'}:build"


def bursty(seed, core):
    """Busy loops of 5-60 ms between sleeps of 5-120 ms, on ``core``, until killed."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    rng = random.Random(seed)
    while True:
        end = time.perf_counter() + rng.uniform(0.005, 0.06)
        while time.perf_counter() < end:
            pass
        time.sleep(rng.uniform(0.005, 0.12))


def run(folder, args):
    """``qbench run`` of the tiny model into ``folder``; the report's folder."""
    cmd = [
        sys.executable, "-m", "qbench.cli", "run", "--model", MODEL, "--data", "synthetic",
        "--calib-size", "2", "--eval-size", "2", "--reports-dir", str(folder),
        "--cache-dir", str(folder / "calibration"), "--repeat", str(args.repeat),
        "--min-int8-speedup", "0",
    ]  # fmt: skip
    subprocess.run(cmd, check=False, capture_output=True)
    (report,) = folder.glob("*/report.json")
    return report.parent


def compare(new, base, out):
    cmd = [sys.executable, "-m", "qbench.cli", "compare", str(new), "--baseline", str(base)]
    done = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True)
    rows = json.loads(out.read_text())["rows"]
    flagged = [
        f"{r['metric']} {r['runner']} {r['change']} p {r['p_value']:.3g}: {r['verdict']}"
        for r in rows
        if r["verdict"] in ("regression", "improvement")
    ]
    return done.returncode, flagged


def pair(i, tmp, args):
    loaded = i % 2 == 1
    load = None
    folders = []
    for side in ("A", "B"):
        if loaded and load is None and (args.load == "both" or side == "B"):
            load = mp.Process(target=bursty, args=(i, args.core), daemon=True)
            load.start()
        folder = tmp / f"{i}{side}"
        folder.mkdir()
        folders.append(run(folder, args))
    if load is not None:
        load.terminate()
    code, flagged = compare(folders[1], folders[0], tmp / f"{i}.json")
    return [i, "bursty" if loaded else "idle", code, "; ".join(flagged) or "none"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=20)
    p.add_argument("--repeat", type=int, default=20, help="qbench run --repeat")
    p.add_argument("--core", type=int, default=1, help="the core the bursty load runs on")
    p.add_argument("--load", choices=("both", "B"), default="B", help="which runs are loaded")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            rows.append(pair(i, Path(tmp), args))
            print(*rows[-1], sep=" | ", file=sys.stderr)
    print(tabulate(rows, ["pair", "load", "compare exit", "flagged rows"], tablefmt="github"))
    flagged = sum(r[3] != "none" or r[2] not in (0, 1) for r in rows)
    print(f"{flagged} of {len(rows)} A/A pairs flagged a change or did not compare (exit not 0/1)")


if __name__ == "__main__":
    main()
