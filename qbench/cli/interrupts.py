"""Ctrl-C (SIGINT) or SIGTERM while a command runs: counted, so that an error TVM raises in
its place still reads as an interruption (exit 130)."""

import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)  # SIGTERM: timeout(1), CI cancels, docker stop


class InterruptCounter:
    """A handler of ``SIGNALS`` that counts them, then raises ``KeyboardInterrupt`` as
    Python's own SIGINT handler does, so that a stopped run unwinds alike (a sweep's summary
    says ``interrupted``; without it SIGTERM killed the process where it stood). TVM
    catches exceptions raised inside its callbacks and re-raises its own error kinds (seen:
    ``RuntimeError`` from ``compute_inline`` during a build), so ``main`` asks the counter
    whether an error came from an interruption (exit 130, not an internal error)."""

    def __init__(self):
        self.count = 0
        self.previous = {}

    def __enter__(self):
        self.count = 0
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def __exit__(self, *_exc):
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        self.previous = {}

    def _handle(self, _signum, _frame):
        self.count += 1
        raise KeyboardInterrupt


INTERRUPTS = InterruptCounter()
