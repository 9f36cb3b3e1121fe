"""Progress on stderr: one line per pipeline stage, in every mode, and tqdm bars on a terminal.

A stage line reads ``[qbench] calibration: 12.3 s (cache miss, kl_divergence, 6 images)`` and
is printed when the stage ends, whether stderr is a terminal or a log file. Bars (tqdm, with
``disable=None``) show only on a terminal and vanish when their loop ends.
"""

import logging
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass

log = logging.getLogger(__name__)

PREFIX = "[qbench]"
FALLBACK_SIZE = {"TQDM_NCOLS": 100, "TQDM_NROWS": 24}  # columns, lines


@dataclass
class Stage:
    """A running stage.

    Attributes:
        name: what the stage does, e.g. ``"build TVM INT8"``.
        note: a short detail the stage sets while it runs (``"cache hit"``), or "".
        seconds: elapsed wall time, s (set when the stage ends).
    """

    name: str
    note: str = ""
    seconds: float = 0.0

    def text(self):
        """The stage line without its prefix, e.g. ``import to Relax: 12.3 s (21 layers)``."""
        note = f" ({self.note})" if self.note else ""
        return f"{self.name}: {self.seconds:.1f} s{note}"


@contextmanager
def stage(name):
    """Time one stage and print its line to stderr when it ends without an error.

    With ``-v`` (logging at INFO) the start of the stage is logged too, so that a long stage
    is visible while it runs.

    Args:
        name: what the stage does, e.g. ``"load model"``.
    Yields:
        Stage: set its ``note`` to add a detail to the line.
    """
    log.info("%s ...", name)
    current = Stage(name)
    start = time.perf_counter()
    yield current
    current.seconds = time.perf_counter() - start
    say(current.text())


def say(text):
    """Print ``[qbench] TEXT`` to stderr at once (each line of a multi-line text prefixed)."""
    lines = text.splitlines() or [""]
    print("\n".join(f"{PREFIX} {line}" for line in lines), file=sys.stderr, flush=True)


def random_weights_warning(name):
    """The warning printed as soon as a registry model turns out to have random weights.

    Args:
        name: the registry name, e.g. ``"resnet18"``.
    Returns:
        str: several lines: what happened, what it means for this run, what to do.
    """
    return (
        f"WARNING: {name} runs on RANDOM weights: its pretrained weights could not be loaded "
        "(no network and not in the torch hub cache).\n"
        "  This run will FAIL sign-off whatever the quantization does (agreement on random "
        "logits says nothing about the trained model); its latency figures are still valid, "
        "so it goes on.\n"
        "  To sign off: pass --weights FILE (a state dict saved with torch.save), put the "
        "weights file into the torch hub cache, or use a model with offline weights such as "
        "efficientnet_lite0 (`qbench models` says which are available)."
    )


def give_bars_a_width(stream=None):
    """Make tqdm bars visible on a terminal that reports a zero size.

    A pseudo-terminal without a window size (``script -qc``, ``docker run -t``, CI log
    capture) reports 0 columns and 0 lines; tqdm then trims every bar to nothing and hides
    it as if below the screen. This sets tqdm's own settings ``TQDM_NCOLS`` and
    ``TQDM_NROWS`` to ``FALLBACK_SIZE`` in that case. tqdm reads them when it is first
    imported, so call this before importing anything that imports tqdm.

    Args:
        stream: the bars' stream (default: ``sys.stderr``).
    """
    stream = stream or sys.stderr
    try:
        size = os.get_terminal_size(stream.fileno()) if stream.isatty() else None
    except (OSError, ValueError, AttributeError):
        size = None
    if size is None:
        return
    for name, reported in (("TQDM_NCOLS", size.columns), ("TQDM_NROWS", size.lines)):
        if reported == 0:
            os.environ.setdefault(name, str(FALLBACK_SIZE[name]))
