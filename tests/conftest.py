import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
IMAGENET_SAMPLE = SHARED / "data" / "imagenet-sample"


QUICK_ROUNDS = 3  # timed rounds of a test's run: enough for the speed statistics' bootstrap


def _no_settle():
    return 0.0, True


@pytest.fixture(autouse=True)
def quick_timing(request):
    """Every run a test starts times ``QUICK_ROUNDS`` rounds without warm-up or settling
    (``timing.replaced_rounds``): the suite checks what the runs compute and record, not how
    fast this shared machine is. A test marked ``real_timing`` times by the run's own
    protocol (``--warmup``, ``--repeat`` >= ``timing.MIN_REPEAT``, settled blocks)."""
    from qbench.measure import timing

    if request.node.get_closest_marker("real_timing"):
        yield
        return
    with timing.replaced_rounds(timing.Rounds(0, QUICK_ROUNDS, _no_settle)):
        yield


@pytest.fixture(scope="session", autouse=True)
def session_tuning_db(tmp_path_factory):
    """Runs that name no ``--tuning-db`` use a folder of the session's (``$QBENCH_TUNING_DB``,
    which subprocesses inherit), never the user's ``~/.cache/qbench/tuning``: a user's
    records would change the tests' builds."""
    patch = pytest.MonkeyPatch()
    patch.setenv("QBENCH_TUNING_DB", str(tmp_path_factory.mktemp("tuning-db")))
    yield
    patch.undo()


@pytest.fixture
def small_models(tmp_path):
    """``fieldcases.SMALL_MODELS`` (FACTOR 1.0) written as ``tmp_path / "models.py"``."""
    from fieldcases import SMALL_MODELS, write_models

    return write_models(tmp_path, SMALL_MODELS.replace("FACTOR", "1.0"))


@pytest.fixture
def layer_models(tmp_path):
    """``fieldcases.LAYER_MODELS`` written as ``tmp_path / "models.py"``."""
    from fieldcases import LAYER_MODELS, write_models

    return write_models(tmp_path, LAYER_MODELS)


@pytest.fixture
def imagenet_sample():
    if not IMAGENET_SAMPLE.is_dir():
        pytest.skip(
            f"{IMAGENET_SAMPLE} not present: these tests need the project's shared folder "
            "beside the checkout (../shared/data/imagenet-sample, 250 labelled ImageNet photos)"
        )
    return IMAGENET_SAMPLE


@pytest.fixture
def sigint_default():
    """SIGINT as an interactive Python process starts with it (``default_int_handler``),
    whatever this test process inherited (a background job starts with SIGINT ignored);
    restored afterwards."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


TINY_MODEL = Path(__file__).parent / "fixtures" / "tiny_model.py"
# ONE `qbench run` of the fixture model, shared by the tests that only read what a run gives
TINY_RUN_ARGS = (
    *("--model", f"{TINY_MODEL}:build", "--data", "synthetic", "--calib-size", "4"),
    *("--eval-size", "6", "--batch-size", "1", "--threads", "1"),
)


class TinyRun:
    """What ``tiny_run``'s ``qbench run`` gave: its exit ``code``, ``out`` and ``err`` (the
    console), and its report ``folder`` (``report.json``, ``report.md``, ``report.html``).
    Read it; never write into ``folder`` (every test of the session shares it)."""

    def __init__(self, code, out, err, folder):
        self.code, self.out, self.err, self.folder = code, out, err, folder

    @property
    def report(self):
        """report.json, parsed afresh for each caller (a test may change its copy)."""
        import json

        return json.loads((self.folder / "report.json").read_text())

    @property
    def markdown(self):
        return (self.folder / "report.md").read_text()

    @property
    def html(self):
        return (self.folder / "report.html").read_text()


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """``qbench run`` of tests/fixtures/tiny_model.py:build on ``--data synthetic``
    (``TINY_RUN_ARGS``: 4 calibration and 6 evaluation images, batch 1, one thread), run
    once per session into its own folder, for every test that only reads a run's outputs
    (report.json / report.md / report.html, exit code, console). Being session-scoped it
    is set up before the per-test ``quick_timing``, so it times by the run's own protocol
    (3 warm-up + 20 settled rounds). The process's thread settings (``--threads 1``) are
    put back afterwards."""
    import contextlib
    import io
    import os

    import torch

    from qbench.cli.main import main

    root = tmp_path_factory.mktemp("tiny_run")
    folders = ["--cache-dir", str(root / "cal"), "--reports-dir", str(root / "rep")]
    folders += ["--tuning-db", str(root / "db")]
    threads, env = torch.get_num_threads(), os.environ.get("TVM_NUM_THREADS")
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["run", *TINY_RUN_ARGS, *folders])
    finally:
        torch.set_num_threads(threads)
        if env is None:
            os.environ.pop("TVM_NUM_THREADS", None)
        else:
            os.environ["TVM_NUM_THREADS"] = env
    folders = list((root / "rep").iterdir()) if (root / "rep").is_dir() else []
    assert code in (0, 1) and len(folders) == 1, err.getvalue()
    return TinyRun(code, out.getvalue(), err.getvalue(), folders[0])
