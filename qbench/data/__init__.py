"""Data: the images a run calibrates and evaluates on.

Takes a ``--data`` text (a folder, ``hf:NAME[:SPLIT]``, ``synthetic``, ``embedded``) and
gives an ``ImageSet`` (``sources.open_source``), its disjoint calibration / evaluation /
held-out ``Split`` (``splits``), the checks it passes before anything slow (``checks``), and
preprocessed (N, C, H, W) float32 batches (``batches``).

May import: core, model (the stages before it; ``tests/test_layering.py``)."""

from .batches import batches, full_batches, pad_batch, transform
from .checks import check_images, check_input_shape, check_labels
from .images import ImageSet, to_rgb
from .sources import open_source
from .splits import Split, holdout, split

__all__ = [
    "ImageSet",
    "Split",
    "batches",
    "check_images",
    "check_input_shape",
    "check_labels",
    "full_batches",
    "holdout",
    "open_source",
    "pad_batch",
    "split",
    "to_rgb",
    "transform",
]
