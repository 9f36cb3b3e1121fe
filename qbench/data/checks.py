"""Checks an ``ImageSet`` passes before anything slow: decodable, distinct images, labels
the model's classes can hold, and the input shape its preprocessing gives."""

from ..core.errors import UserError
from .batches import transform
from .images import pixel_digest


def check_images(images, roles):
    """Decode every image a run takes once, so that a file that cannot be read stops the run
    before calibration rather than in the middle of the evaluation, and require their
    pixels to be distinct: a copy of a calibration image under another name would be
    evaluated on the ranges it set, and a repeated evaluation image counted twice.

    Args:
        roles: {role ("calibration", "evaluation", "held-out"): indices into ``images``}.

    Raises:
        UserError: names the first file that cannot be decoded and the cause, or the first
            two images with the same pixels and their roles.
    """
    seen = {}
    for role, indices in roles.items():
        for i in indices:
            digest = pixel_digest(images.loaders[i]())
            if digest in seen:
                j, first = seen[digest]
                raise UserError(
                    f"--data {images.name}: images {images.keys[j]} ({first}) and "
                    f"{images.keys[i]} ({role}) have the same pixels; valid: each image once "
                    "(remove the copy, or choose other images with --seed)"
                )
            seen[digest] = (i, role)


def check_labels(images, num_classes, model_name):
    """Require every label of the source to be a class index of the model, 0-based.

    Args:
        num_classes: K of the model's (N, K) logits.

    Raises:
        UserError: names the label, the image and the label source, and the valid range.
    """
    if images.labels is None:
        return
    bad = [
        (lab, key)
        for lab, key in zip(images.labels, images.keys, strict=True)
        if not 0 <= lab < num_classes
    ]
    if not bad:
        return
    label, key = bad[0]
    hint = ""
    if min(images.labels) == 1 and max(images.labels) == num_classes:
        hint = "; the labels look one-based: subtract 1"
    raise UserError(
        f"--data {images.name}: label {label} of image {key} (from {images.label_source}) is "
        f"not a class of model {model_name!r}, which has {num_classes} classes (valid labels: "
        f"0..{num_classes - 1}); {len(bad)} of {len(images.labels)} labels are out of "
        f"range{hint}"
    )


def check_input_shape(images, index, preprocess, input_shape):
    """Require the preprocessing to produce the model's (C, H, W) input from image ``index``.

    Raises:
        UserError: shows both shapes.
    """
    shape = tuple(transform(preprocess)(images.loaders[index]()).shape)
    if shape != tuple(input_shape):
        raise UserError(
            f"--data {images.name}: preprocessing {preprocess} gives images of shape {shape}, "
            f"the model takes {tuple(input_shape)}; pass --input-shape C H W"
        )
