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
