"""Interleaved timing against synthetic runners on a fake clock: exact and fast."""

import os
import types

import numpy as np
import pytest

from qbench import runners, timing

BASE_MS = {"pytorch_fp32": 20.0, "tvm_fp32": 10.0, "tvm_int8": 6.0}  # unloaded latencies
TRUE_RATIO = BASE_MS["tvm_int8"] / BASE_MS["tvm_fp32"]  # 0.6
SLOWDOWN = 3.0
REPEAT = 30


class Machine:
    """A fake clock (ms) and a load that makes every call ``SLOWDOWN`` times slower during
    the middle third of all the calls a timing makes, whichever runner is called."""

    def __init__(self, calls_total):
        self.now_ms, self.calls, self.calls_total, self.order = 0.0, 0, calls_total, []

    def perf_counter(self):
        return self.now_ms / 1e3

    def runner(self, name):
        def call():
            loaded = self.calls_total / 3 <= self.calls < 2 * self.calls_total / 3
            self.now_ms += BASE_MS[name] * (SLOWDOWN if loaded else 1.0)
            self.calls += 1
            self.order.append(name)

        return call


@pytest.fixture
def machine(monkeypatch):
    m = Machine(calls_total=len(BASE_MS) * REPEAT)
    clock = types.SimpleNamespace(perf_counter=m.perf_counter)
    monkeypatch.setattr(timing, "time", clock)
    monkeypatch.setattr(runners, "time", clock)
    return m


def _ratio(samples):
    return np.median(samples["tvm_int8"]) / np.median(samples["tvm_fp32"])


def test_interleaved_ratio_survives_load_that_sequential_timing_does_not(machine):
    calls = {name: machine.runner(name) for name in BASE_MS}
    samples = timing.interleaved(calls, warmup=0, repeat=REPEAT)
    assert _ratio(samples) == pytest.approx(TRUE_RATIO, rel=0.10)
    # rounds 10-19 (calls 30-59 of 90) ran loaded, for every runner alike: pairs stay paired
    for name, base in BASE_MS.items():
        loaded = [i for i, ms in enumerate(samples[name]) if ms == pytest.approx(3 * base)]
        assert loaded == list(range(10, 20)), name


def test_sequential_timing_of_the_same_load_gets_the_ratio_wrong(machine):
    """The approach interleaving replaced: runner after runner (``runners.time_samples``).
    The load's third of the calls is exactly TVM FP32's turn: FP32 looks 3x slower."""
    samples = {name: runners.time_samples(machine.runner(name), 0, REPEAT) for name in BASE_MS}
    assert _ratio(samples) == pytest.approx(TRUE_RATIO / SLOWDOWN)  # 0.2, not 0.6
    assert abs(_ratio(samples) / TRUE_RATIO - 1) > 0.10


def test_each_round_starts_with_the_next_runner_and_warmup_is_untimed(machine):
    calls = {name: machine.runner(name) for name in BASE_MS}
    samples = timing.interleaved(calls, warmup=2, repeat=4)
    names = list(BASE_MS)
    rounds = [machine.order[i : i + 3] for i in range(0, len(machine.order), 3)]
    assert len(rounds) == 6  # 2 warm-up + 4 timed rounds, each calling every runner once
    for i, called in enumerate(rounds):
        assert called == names[i % 3 :] + names[: i % 3]
    assert {name: len(s) for name, s in samples.items()} == dict.fromkeys(names, 4)


def test_tvm_workers_stop_spinning_unless_the_environment_says_otherwise(monkeypatch):
    """Spinning TVM workers take the cores from the runner timed next in a round."""
    from qbench import build

    monkeypatch.delenv("TVM_THREAD_POOL_SPIN_COUNT", raising=False)
    monkeypatch.setenv("TVM_NUM_THREADS", "2")
    build.set_threads(2)
    assert os.environ["TVM_THREAD_POOL_SPIN_COUNT"] == "0"
    monkeypatch.setenv("TVM_THREAD_POOL_SPIN_COUNT", "1000")
    build.set_threads(2)
    assert os.environ["TVM_THREAD_POOL_SPIN_COUNT"] == "1000"
