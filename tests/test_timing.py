"""The timing protocol against synthetic runners on a fake clock (exact and fast), and
``settle`` against real threads that burn CPU."""

import hashlib
import os
import threading
import time
import types

import numpy as np
import pytest

from qbench.measure import runners, timing

BASE_MS = {"pytorch_fp32": 20.0, "tvm_fp32": 10.0, "tvm_int8": 6.0}  # unloaded latencies
RUNTIMES = {"pytorch_fp32": "pytorch", "tvm_fp32": "tvm", "tvm_int8": "tvm"}
TRUE_RATIO = BASE_MS["tvm_int8"] / BASE_MS["tvm_fp32"]  # 0.6
SLOWDOWN = 3.0
SPIN_PENALTY = 2.0  # a call while the other runtime's workers still spin
REPEAT = 30


class Machine:
    """A fake clock (ms) with two disturbances: a load that makes every call ``SLOWDOWN``
    times slower during the middle third of all the calls a timing makes, and the other
    runtime's spinning workers, which make a call ``SPIN_PENALTY`` times slower when the
    previous call was another runtime's and nothing settled in between."""

    def __init__(self, calls_total):
        self.now_ms, self.calls, self.calls_total, self.order = 0.0, 0, calls_total, []
        self.spinning, self.settles = None, 0

    def perf_counter(self):
        return self.now_ms / 1e3

    def settle(self):
        self.spinning, self.settles = None, self.settles + 1
        return 1.0, True

    def runner(self, name):
        def call():
            loaded = self.calls_total / 3 <= self.calls < 2 * self.calls_total / 3
            spun = self.spinning not in (None, RUNTIMES[name])
            factor = (SLOWDOWN if loaded else 1.0) * (SPIN_PENALTY if spun else 1.0)
            self.now_ms += BASE_MS[name] * factor
            self.calls += 1
            self.order.append(name)
            self.spinning = RUNTIMES[name]

        return call


@pytest.fixture
def machine(monkeypatch):
    m = Machine(calls_total=2 * len(BASE_MS) * REPEAT)  # a lead-in and a timed call each
    clock = types.SimpleNamespace(perf_counter=m.perf_counter)
    monkeypatch.setattr(timing, "time", clock)
    monkeypatch.setattr(runners, "time", clock)
    return m


def _ratio(samples):
    return np.median(samples["tvm_int8"]) / np.median(samples["tvm_fp32"])


def _timed(machine, warmup=0, repeat=REPEAT):
    calls = {name: machine.runner(name) for name in BASE_MS}
    return timing.interleaved(calls, RUNTIMES, warmup, repeat, machine.settle)


def test_each_runner_is_timed_at_its_own_speed_and_load_stays_paired(machine):
    samples, waits = _timed(machine)
    assert _ratio(samples) == pytest.approx(TRUE_RATIO)
    for name, base in BASE_MS.items():  # never the spin penalty, only the load's third
        rounded = [round(ms, 6) for ms in samples[name]]
        assert set(rounded) == {base, SLOWDOWN * base}, name
        loaded = [i for i, ms in enumerate(rounded) if ms == SLOWDOWN * base]
        assert loaded == list(range(10, 20)), name  # rounds 10-19 for every runner alike
    assert len(waits) == machine.settles


def test_plain_round_robin_of_the_same_machine_reads_the_spin_penalty(machine):
    """What the protocol replaced: one call per runner and round, nothing settled. TVM
    FP32 follows PyTorch in two rounds of three and reads up to 2x its latency."""
    samples = {name: [] for name in BASE_MS}
    for i in range(REPEAT):
        for name in timing._rotated(list(BASE_MS), i):
            start = machine.perf_counter()
            machine.runner(name)()
            samples[name].append((machine.perf_counter() - start) * 1e3)
    assert np.median(samples["tvm_fp32"]) > 1.5 * BASE_MS["tvm_fp32"]


def test_sequential_timing_of_the_same_load_gets_the_ratio_wrong(machine):
    """Runner after runner (``runners.time_samples``): the load falls on all of TVM INT8's
    calls and none of TVM FP32's, so the ratio moves although nothing changed."""
    samples = {name: runners.time_samples(machine.runner(name), 0, REPEAT) for name in BASE_MS}
    assert abs(_ratio(samples) / TRUE_RATIO - 1) > 0.10


def test_rounds_rotate_blocks_of_a_lead_in_and_a_timed_call_settling_between_runtimes(
    machine,
):
    samples, waits = _timed(machine, warmup=2, repeat=4)
    names = list(BASE_MS)
    blocks = [machine.order[i : i + 2] for i in range(0, len(machine.order), 2)]
    assert all(a == b for a, b in blocks)  # lead-in and timed call of one runner
    rounds = [[b[0] for b in blocks[i : i + 3]] for i in range(0, len(blocks), 3)]
    assert len(rounds) == 6  # 2 warm-up + 4 timed rounds
    for i, called in enumerate(rounds):
        assert called == names[i % 3 :] + names[: i % 3]
    flat = [b[0] for b in blocks]
    switches = sum(RUNTIMES[a] != RUNTIMES[b] for a, b in zip(flat[:-1], flat[1:], strict=True))
    assert machine.settles == len(waits) == 1 + switches  # the first block settles too
    assert {name: len(s) for name, s in samples.items()} == dict.fromkeys(names, 4)


class BusyThread:
    """A fake clock (s) with another thread that uses a whole core until ``busy_until``;
    its CPU time shows only in whole scheduler ticks, as Linux reports another core's
    thread (``tick`` s)."""

    def __init__(self, busy_until, tick=0.004):
        self.now, self.busy_until, self.tick = 0.0, busy_until, tick

    def perf_counter(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds

    def other_cpu(self):
        used = min(self.now, self.busy_until)
        return used - used % self.tick


@pytest.fixture
def busy(monkeypatch):
    def make(busy_until):
        b = BusyThread(busy_until)
        clock = types.SimpleNamespace(perf_counter=b.perf_counter, sleep=b.sleep)
        monkeypatch.setattr(timing, "time", clock)
        monkeypatch.setattr(timing, "_other_threads_cpu", b.other_cpu)
        return b

    return make


def test_settle_waits_for_a_busy_thread_to_stop(busy):
    busy(0.150)
    waited_ms, settled = timing.settle()
    assert settled and 150 <= waited_ms <= 150 + 4 + 1000 * timing.QUIET_S + 1


def test_a_quiet_window_shorter_than_a_tick_would_settle_on_a_busy_thread(busy):
    """Why ``QUIET_S`` spans ticks: within one 4 ms tick the busy thread shows no CPU."""
    busy(10.0)
    assert timing.settle(quiet_s=0.003)[1]  # wrongly settled while the thread burns
    busy(10.0)
    assert not timing.settle(max_s=0.5)[1]


def test_settle_gives_up_after_its_limit_and_says_so(busy):
    busy(10.0)
    waited_ms, settled = timing.settle(max_s=0.1)
    assert not settled and 100 <= waited_ms <= 101


def test_the_cpu_reading_sees_another_threads_work():
    """``settle``'s reading, on a real thread hashing 100 MiB (the GIL released)."""
    before = timing._other_threads_cpu()
    data = bytes(1 << 20)
    worker = threading.Thread(target=lambda: [hashlib.sha256(data) for _ in range(100)])
    worker.start()
    worker.join()
    time.sleep(0.03)  # past the scheduler tick that credits its last CPU time
    assert timing._other_threads_cpu() - before >= 0.02  # about 0.06 s of SHA-256


def test_record_and_describe_give_rounds_settles_and_runtime_settings(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.delenv("TVM_THREAD_POOL_SPIN_COUNT", raising=False)
    rec = timing.record(3, 20, [(10.0, True), (250.0, True), (2000.0, False)])
    assert rec["settles"] == 3 and rec["unsettled"] == 1
    assert rec["settle_wait_ms"] == {"median": 250.0, "max": 2000.0}
    assert rec["settings"]["OMP_WAIT_POLICY"] == "PASSIVE"
    assert rec["settings"]["TVM_THREAD_POOL_SPIN_COUNT"] == "default"
    words = timing.describe(rec)
    assert "3 warm-up + 20 timed rounds" in words and "1 did not settle" in words
    assert "OMP_WAIT_POLICY=PASSIVE" in words


def test_set_threads_leaves_the_runtimes_wait_policies_as_deployed(monkeypatch):
    from qbench.compile import build

    monkeypatch.delenv("TVM_THREAD_POOL_SPIN_COUNT", raising=False)
    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    build.set_threads(2)
    assert os.environ["TVM_NUM_THREADS"] == "2"
    assert "TVM_THREAD_POOL_SPIN_COUNT" not in os.environ
