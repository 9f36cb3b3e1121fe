"""The timing protocol: each runner timed as it runs alone, the samples paired by round.

Two runtimes in one process disturb each other: after a call, each runtime's idle workers
spin-wait for the next task and hold a core. Measured on a 2-core AMD EPYC Zen 3 (2 threads,
efficientnet_lite0, batch 1; the process' CPU time read while its main thread slept after a
call, docs/timing.md): PyTorch's OpenMP worker spins about 9 ms after each call, TVM's thread
pool 200-250 ms (300000 ``sched_yield``s, its
default ``TVM_THREAD_POOL_SPIN_COUNT``), and with plain round-robin calls TVM FP32, timed
right after PyTorch, read 1.6x its latency alone.

So each round calls every runner in turn (the order rotated by one place each round, so no
runner is always first), as one *block*:

1. settle: first, and whenever the previous block ran another runtime, wait until no other
   thread of this process uses CPU (its workers asleep; ``settle``);
2. one untimed lead-in call: the runner's own workers wake up and stay warm, its weights
   come back into cache, as in back-to-back calls of a deployed model;
3. one timed call (``time.perf_counter``), the round's sample.

Load on a shared machine still hits the runners of a round alike, so per-round ratios
cancel it (``speed``); the same idea as pyperf's and asv's side-by-side comparisons, applied
within one process. The runtimes keep their own defaults (TVM's spin count, libgomp's wait
policy): the figures are those of the runner as deployed, and ``settings()`` records them.
"""

import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

PROTOCOL = "settled blocks v1"  # changes with the protocol: part of a run's definition
MIN_REPEAT = 20  # the fewest timed rounds ``qbench run`` takes (``RunOptions.repeat``)
POLL_S = 0.0005  # how often ``settle`` reads the process' CPU time, s
# Other threads idle for this long: settled, s. Linux adds a thread running on another core
# to the process' CPU time only at a scheduler tick (seen: 3.7 ms steps every 4 ms, HZ 250),
# so the window spans 2.5 ticks of the slowest common kernel clock (HZ 100).
QUIET_S = 0.025
BUSY_FRACTION = 0.05  # other threads' CPU time per wall time above which they count as busy
MAX_SETTLE_S = 2.0  # ``settle`` gives up after this long, s
ENVIRONMENT = (  # the variables that set the runtimes' threads and waiting
    "TVM_NUM_THREADS",
    "TVM_THREAD_POOL_SPIN_COUNT",
    "OMP_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "GOMP_SPINCOUNT",
    "KMP_BLOCKTIME",
)


@dataclass(frozen=True)
class Timed:
    """Samples of one timing and how they were taken.

    Attributes:
        samples_ms: {runner name: latency of one batch per timed round, ms}; sample i of
            every runner comes from round i (paired by round).
        protocol: the protocol as the report records it (``record``).
    """

    samples_ms: dict
    protocol: dict


@dataclass(frozen=True)
class Rounds:
    """How many rounds a timing runs and how it settles between runtimes.

    Attributes:
        warmup: untimed rounds, >= 0.
        repeat: timed rounds, >= 1 (a run takes >= ``MIN_REPEAT``: ``RunOptions``).
        settle_fn: the settle step, a zero-argument callable returning (waited ms, settled).
    """

    warmup: int
    repeat: int
    settle_fn: Callable = None  # None: ``settle``

    def time(self, runners, x):
        """Time ``runners`` (``runners.Runner``s) on the full batch ``x`` by the protocol
        above.

        Args:
            runners: the runners; each has ``name``, ``runtime`` (runners of one runtime
                share its thread pool) and ``timed_call(x)``.
            x: float32 (N, C, H, W), N the runners' batch size.
        Returns:
            ``Timed``.
        """
        calls = {r.name: r.timed_call(x) for r in runners}
        runtimes = {r.name: r.runtime for r in runners}
        samples, waits = interleaved(
            calls, runtimes, self.warmup, self.repeat, self.settle_fn or settle
        )
        return Timed(samples, record(self.warmup, self.repeat, waits))


_replaced = None  # the ``Rounds`` every timing takes inside ``replaced_rounds``, or None


def rounds_for(warmup, repeat):
    """The ``Rounds`` a run with ``warmup`` and ``repeat`` rounds times with: those, or the
    ones a test put in place (``replaced_rounds``)."""
    return _replaced or Rounds(warmup, repeat)


@contextmanager
def replaced_rounds(rounds):
    """Tests' seam: every timing inside the ``with`` block (every thread) takes ``rounds``
    (fewer rounds, another settle step) whatever the run asked for; the report records the
    rounds really run."""
    global _replaced
    before, _replaced = _replaced, rounds
    try:
        yield rounds
    finally:
        _replaced = before


def interleaved(calls, runtimes, warmup, repeat, settle_fn=None):
    """Time every callable of ``calls`` in settled blocks, round-robin (module docstring).

    Round i (counting the warm-up rounds from 0) starts with runner i mod n of ``calls``'
    order.

    Args:
        calls: {runner name: zero-argument callable running one batch to completion}; one
            that returns a number has timed itself (a remote device's timer, ms), and that
            number is its sample.
        runtimes: {runner name: runtime name}; the first block, and each block whose
            runtime differs from the previous block's, settles first.
        warmup: untimed rounds, >= 0.
        repeat: timed rounds, >= 1.
        settle_fn: the settle step (default ``settle``), returning (waited ms, settled).
    Returns:
        ({runner name: ``repeat`` latencies, ms, paired by round}, [(waited ms, settled)
        of every settle]).
    """
    settle_fn = settle_fn or settle
    names, last, waits = list(calls), None, []
    samples = {name: [] for name in names}
    for i in range(warmup + repeat):
        for name in _rotated(names, i):
            if runtimes[name] != last:  # the first block too: work before may still spin
                waits.append(settle_fn())
            last = runtimes[name]
            calls[name]()  # lead-in
            start = time.perf_counter()
            own = calls[name]()  # a remote device's own timer, ms; else None
            if i >= warmup:
                samples[name].append((time.perf_counter() - start) * 1e3 if own is None else own)
    return samples, waits


def settle(quiet_s=QUIET_S, max_s=MAX_SETTLE_S):
    """Wait until the other threads of this process have used no CPU for ``quiet_s``.

    Reads ``time.process_time() - time.thread_time()`` (all threads but the caller's,
    CPU s) every ``POLL_S`` while sleeping; a poll in which they used more than
    ``BUSY_FRACTION`` of the wall time restarts the quiet period (see ``QUIET_S`` for its
    length). Other processes' load
    does not count, so a loaded machine settles as fast as an idle one.

    Returns:
        (waited ms, True when settled within ``max_s`` s).
    """
    start = last = time.perf_counter()
    quiet_since, cpu = start, _other_threads_cpu()
    while last - quiet_since < quiet_s:
        if last - start > max_s:
            return (last - start) * 1e3, False
        time.sleep(POLL_S)
        now, now_cpu = time.perf_counter(), _other_threads_cpu()
        if now_cpu - cpu > BUSY_FRACTION * (now - last):
            quiet_since = now
        last, cpu = now, now_cpu
    return (last - start) * 1e3, True


def _other_threads_cpu():
    return time.process_time() - time.thread_time()


def record(warmup, repeat, waits):
    """The report's record of a timing: the protocol, its rounds and the settle waits."""
    waited = [ms for ms, _ in waits]
    return {
        "protocol": PROTOCOL,
        "warmup_rounds": warmup,
        "timed_rounds": repeat,
        "lead_in_calls": 1,
        "settles": len(waits),
        "unsettled": sum(not ok for _, ok in waits),
        "settle_wait_ms": {
            "median": round(float(np.median(waited)), 2) if waited else 0.0,
            "max": round(max(waited), 2) if waited else 0.0,
        },
        "settings": settings(),
    }


def settings():
    """{variable: value or "default"} of ``ENVIRONMENT``, and PyTorch's thread count."""
    found = {name: os.environ.get(name, "default") for name in ENVIRONMENT}
    import torch

    found["torch.get_num_threads"] = torch.get_num_threads()
    return found


def describe(protocol):
    """A timing record (``record``) in words, for the reports."""
    waits = protocol["settle_wait_ms"]
    unsettled = f", {protocol['unsettled']} did not settle" if protocol["unsettled"] else ""
    env = ", ".join(f"{k}={v}" for k, v in protocol["settings"].items())
    return (
        f"{rounds(protocol)}; {protocol['settles']} settles "
        f"between runtimes (median {waits['median']:.1f} ms, max {waits['max']:.1f} ms"
        f"{unsettled}); {env}"
    )


def rounds(protocol):
    """The protocol's name and rounds in words (the run's timing stage line)."""
    return (
        f"{protocol['protocol']}: {protocol['warmup_rounds']} warm-up + "
        f"{protocol['timed_rounds']} timed rounds, runners interleaved, each timed call after "
        f"{protocol['lead_in_calls']} untimed lead-in call"
    )


def _rotated(names, i):
    """``names`` rotated left by ``i`` places (modulo their count)."""
    k = i % len(names)
    return names[k:] + names[:k]
