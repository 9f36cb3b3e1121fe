"""Preprocessed batches of an ``ImageSet``: (N, C, H, W) float32 arrays for the runners."""

import numpy as np


def batches(images, indices, preprocess, batch_size):
    """Yield preprocessed batches in index order.

    Yields:
        (x, labels): x float32 (N, C, H, W) normalised; labels int64 (N,) or None.
    """
    tf = transform(preprocess)
    for start in range(0, len(indices), batch_size):
        chunk = indices[start : start + batch_size]
        x = np.stack([tf(images.loaders[i]()).numpy() for i in chunk])
        labels = None if images.labels is None else np.array([images.labels[i] for i in chunk])
        yield x.astype(np.float32), labels


def transform(preprocess):
    """The torchvision transform for a ``zoo.Preprocess``: PIL RGB image -> (C, H, W) float32
    (C = 1 for a greyscale model: the picture's luminance)."""
    from torchvision import transforms as T

    grey = [T.Grayscale(1)] if preprocess.channels == 1 else []
    return T.Compose(
        [
            T.Resize(preprocess.resize, T.InterpolationMode(preprocess.interpolation)),
            T.CenterCrop(preprocess.crop),
            *grey,
            T.ToTensor(),
            T.Normalize(preprocess.mean, preprocess.std),
        ]
    )


def pad_batch(x, batch_size):
    """``x`` (n, C, H, W) zero-padded to (batch_size, C, H, W); returned as is when full."""
    n = len(x)
    if n == batch_size:
        return x
    return np.concatenate([x, np.zeros((batch_size - n, *x.shape[1:]), x.dtype)])


def full_batches(images, indices, model, batch_size):
    """Yield (x, n_valid): x is float32 (batch_size, C, H, W), zero-padded after n_valid rows."""
    for x, _ in batches(images, indices, model.preprocess, batch_size):
        yield pad_batch(x, batch_size), len(x)
