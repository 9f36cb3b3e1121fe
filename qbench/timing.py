"""Interleaved (round-robin) timing: one call of every runner per round, so that load on a
shared machine hits all runners alike and their ratios survive it.

Measuring runner after runner makes each runner's samples depend on the minute it was timed
in; interleaving pairs the samples by round instead (the same idea as pyperf's and asv's
comparisons of benchmarks run side by side, applied within one process).
"""

import time


def interleaved(calls, warmup, repeat):
    """Time every callable of ``calls`` round-robin.

    ``warmup`` untimed rounds, then ``repeat`` timed rounds; each round calls every runner
    once, in an order rotated by one place each round so no runner is always first (round i,
    counting the warm-up rounds from 0, starts with runner i mod n of ``calls``' order).
    Timed with ``time.perf_counter``.

    Args:
        calls: {runner name: zero-argument callable running one batch to completion}.
        warmup: untimed rounds, >= 0.
        repeat: timed rounds, >= 1.
    Returns:
        {runner name: list of ``repeat`` latencies, ms}; sample i of every runner comes from
        round i (the samples are paired by round).
    """
    names = list(calls)
    for i in range(warmup):
        for name in _rotated(names, i):
            calls[name]()
    samples = {name: [] for name in names}
    for i in range(repeat):
        for name in _rotated(names, warmup + i):
            start = time.perf_counter()
            calls[name]()
            samples[name].append((time.perf_counter() - start) * 1e3)
    return samples


def _rotated(names, i):
    """``names`` rotated left by ``i`` places (modulo their count)."""
    k = i % len(names)
    return names[k:] + names[:k]
