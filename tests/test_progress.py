"""Progress on stderr: stage lines in every mode, tqdm bars on a terminal (issue 8)."""

import os
import pty
import subprocess
import sys
from types import SimpleNamespace

import pytest

from qbench.core import progress


def test_stage_prints_its_name_time_and_note_when_done(capsys, monkeypatch):
    clock = iter([100.0, 112.34])
    monkeypatch.setattr(progress, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    with progress.stage("import to Relax") as st:
        assert capsys.readouterr().err == ""  # nothing before the stage ends
        st.note = "21 layers"
    assert capsys.readouterr().err == "[qbench] import to Relax: 12.3 s (21 layers)\n"


def test_a_failed_stage_prints_no_line(capsys):
    with pytest.raises(ValueError), progress.stage("calibration"):
        raise ValueError("bad")
    assert capsys.readouterr().err == ""


def test_say_prefixes_every_line(capsys):
    progress.say("one\n  two")
    assert capsys.readouterr().err == "[qbench] one\n[qbench]   two\n"


BAR_SCRIPT = """
import sys
from qbench.core.progress import give_bars_a_width
give_bars_a_width()
from tqdm import tqdm
for _ in tqdm(range(3), desc="calibrate (max)", unit="batch", disable=None, leave=False):
    pass
"""


def _run_in_pty(code):
    """Run ``code`` with stdout and stderr on a fresh pseudo-terminal (0 x 0 window, as under
    ``script -qc``); return everything it wrote."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("TQDM_NCOLS", "TQDM_NROWS")}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=60) == 0
    return b"".join(chunks).decode()


def test_bars_show_on_a_terminal_without_a_window_size():
    out = _run_in_pty(BAR_SCRIPT)
    assert "calibrate (max):   0%|" in out and "0/3" in out


def test_bars_stay_off_in_a_log():
    done = subprocess.run(
        [sys.executable, "-c", BAR_SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stderr == ""


def test_random_weights_warning_says_what_to_do():
    text = progress.random_weights_warning("resnet18")
    assert text.startswith("WARNING: resnet18 runs on RANDOM weights")
    assert "--weights FILE" in text and "efficientnet_lite0" in text
    assert "FAIL sign-off" in text
