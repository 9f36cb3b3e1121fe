"""The deterministic, disjoint split of an ``ImageSet`` into calibration, evaluation and
held-out images."""

from dataclasses import dataclass

import numpy as np

from ..core.errors import UserError


@dataclass(frozen=True)
class Split:
    """Disjoint calibration and evaluation indices into an ``ImageSet``."""

    calib: tuple
    eval: tuple


def split(images, calib_size, eval_size, seed=0):
    """Choose disjoint calibration and evaluation images, deterministically from ``seed``.

    A size of None means "as many as fit": calibration takes at most a third of the images
    (at most 32), evaluation the rest (at most 100).

    Raises:
        UserError: the requested sizes exceed the number of images.
    """
    n = len(images)
    asked = " plus ".join(
        f"--{flag} {size}"
        for flag, size in (("calib-size", calib_size), ("eval-size", eval_size))
        if size is not None
    )
    if calib_size is None:
        calib_size = max(1, min(32, n // 3))
    if eval_size is None:
        eval_size = min(100, n - calib_size)
    if calib_size < 1 or eval_size < 1 or calib_size + eval_size > n:
        raise UserError(
            f"--data {images.name}: has {n} images; cannot take {asked or 'the default sizes'}"
            f" (calibration and evaluation images are disjoint: both >= 1, sum <= {n})"
        )
    order = _order(images, seed)
    return Split(
        tuple(order[:calib_size].tolist()),
        tuple(order[calib_size : calib_size + eval_size].tolist()),
    )


def _order(images, seed):
    """The order ``split`` and ``holdout`` take images in: as drawn for a ``drawn`` source
    (already random, and stable when more are drawn), else a permutation from ``seed``."""
    if images.drawn:
        return np.arange(len(images))
    return np.random.default_rng(seed).permutation(len(images))


def holdout(images, chosen, size, seed=0):
    """``size`` images disjoint from the calibration and evaluation images of ``chosen`` (a
    ``Split`` from ``split`` with the same ``seed``): the last ones of its order, so that a
    ``qbench run`` with the same sizes and seed evaluates on none of them.

    Raises:
        UserError: fewer than ``size`` images are left over; names the sizes.
    """
    n, used = len(images), len(chosen.calib) + len(chosen.eval)
    if size < 1 or used + size > n:
        valid = f"valid: 1..{n - used}" if n > used else "none is left for it"
        raise UserError(
            f"--holdout-size {size}: --data {images.name} has {n} images and calibration plus "
            f"evaluation take {used}; {valid} (lower --eval-size to free more)"
        )
    return tuple(_order(images, seed)[n - size :].tolist())
