"""Ctrl-C while a command runs: counted, so that an error TVM raises in its place still
reads as an interruption (exit 130)."""

import signal
import threading


class InterruptCounter:
    """A SIGINT handler that counts Ctrl-C, then raises ``KeyboardInterrupt`` as Python's own
    does. TVM catches exceptions raised inside its callbacks and re-raises its own error
    kinds (seen: ``RuntimeError`` from ``compute_inline`` during a build), so ``main`` asks
    the counter whether an error came from a Ctrl-C (exit 130, not an internal error)."""

    def __init__(self):
        self.count = 0
        self.previous = None

    def __enter__(self):
        self.count = 0
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *_exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
            self.previous = None

    def _handle(self, _signum, _frame):
        self.count += 1
        raise KeyboardInterrupt


INTERRUPTS = InterruptCounter()
