import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
IMAGENET_SAMPLE = SHARED / "data" / "imagenet-sample"


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
