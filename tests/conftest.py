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
