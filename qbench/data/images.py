"""``ImageSet``, the images a run reads, and the conversion of any picture to 8-bit RGB."""

import hashlib
from dataclasses import dataclass

import numpy as np

from ..core.errors import UserError


@dataclass
class ImageSet:
    """An ordered collection of images.

    Attributes:
        name: the ``--data`` text.
        loaders: one zero-argument callable per image returning an 8-bit RGB ``PIL.Image``
            (``to_rgb``); it raises ``UserError`` naming the file it cannot decode.
        labels: label index per image, or None when the source has no labels.
        keys: a stable identifier per image (file name or stream position).
        synthetic: True for generated noise (results say nothing about accuracy).
        label_source: where the labels come from (a ``labels.csv`` path, the class folder
            names, a dataset column), for error messages.
        drawn: True when the images were drawn for this run in an order already random
            under the seed, and asking for more only appends (``synthetic``, ``hf:``): the
            split then takes them in order, so that a holdout asked for beside a run
            changes neither its calibration nor its evaluation images.
    """

    name: str
    loaders: list
    labels: list = None
    keys: list = None
    synthetic: bool = False
    label_source: str = ""
    drawn: bool = False

    def __len__(self):
        return len(self.loaders)

    def content_digest(self, indices):
        """sha256 (hex) over the decoded pixels of the images at ``indices``, in order: a
        calibration cache key that changes when any calibration image changes."""
        h = hashlib.sha256()
        for i in indices:
            h.update(pixel_digest(self.loaders[i]()))
        return h.hexdigest()


def pixel_digest(picture):
    """sha256 (32 bytes) of a ``PIL.Image``'s size and pixels: equal for two files that
    decode to the same picture, whatever their names or encodings."""
    return hashlib.sha256(f"{picture.size}".encode() + picture.tobytes()).digest()


def file_loader(path):
    """A zero-argument callable reading the image file ``path`` as 8-bit RGB (``to_rgb``);
    it raises ``UserError`` naming the file when Pillow cannot decode it."""

    def load():
        from PIL import Image

        try:
            with Image.open(path) as im:
                return to_rgb(im)
        except UserError as e:
            raise UserError(f"--data: image {path}: {e}") from e
        except Exception as e:  # noqa: BLE001 - Pillow's decoders raise many kinds
            cause = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise UserError(
                f"--data: cannot read image {path} ({type(e).__name__}: {cause})"
            ) from e

    return load


def to_rgb(image):
    """The 8-bit RGB picture a person would see in ``image`` (a ``PIL.Image`` of any mode).

    The EXIF orientation is applied; 16-bit greyscale is scaled to 8 bits (65535 -> 255)
    rather than clipped, and so is 32-bit integer greyscale (mode I) in [0, 65535]; 32-bit
    float greyscale (mode F) in [0, 1] is scaled by 255, and one in [0, 255] whose brightest
    value is 2 or more is rounded as it is; transparency (alpha, or a palette's transparent
    entry) is composited over white; greyscale, palette and CMYK become RGB.

    Raises:
        UserError: a mode I or F picture whose values lie outside those ranges, are not
            finite, or (mode F) whose brightest value lies in (1, 2), where both readings
            are doubtful: no scaling to 8 bits is implied, and clipping would change the
            picture.
        Pillow's errors for files it cannot decode (the caller names the file).
    """
    from PIL import Image, ImageOps

    image = ImageOps.exif_transpose(image)
    if image.mode in ("I", "F") or image.mode.startswith("I;16"):
        image = Image.fromarray(_wide_grey_to_8bit(image))
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in image.info:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


AMBIGUOUS_F = (1.0, 2.0)  # a float picture brightest here: [0, 1] overshot, or a [0, 255]
# picture all but black (2 of 255 at most)? Neither reading is safe, so it is refused


def _wide_grey_to_8bit(image):
    """(H, W) uint8 of a mode I, I;16 or F ``PIL.Image`` by the scales of ``to_rgb``."""
    values = np.asarray(image, dtype=np.float64)
    lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
    limit = 255.0 if image.mode == "F" else 65535.0
    if not np.isfinite(values).all():
        raise UserError(
            f"a greyscale picture of mode {image.mode} holding NaN or infinite values: it "
            "shows nothing a photo can; save it as 8-bit or 16-bit"
        )
    ambiguous = image.mode == "F" and AMBIGUOUS_F[0] < hi < AMBIGUOUS_F[1]
    if lo < 0 or hi > limit or ambiguous:
        valid = (
            "[0, 1] or [0, 255] (its brightest value 2 or more)"
            if image.mode == "F"
            else "[0, 65535]"
        )
        raise UserError(
            f"a greyscale picture of mode {image.mode} with values in [{lo:g}, {hi:g}]: "
            f"qbench reads this mode in {valid}; save it as 8-bit or 16-bit, scaled as meant"
        )
    if image.mode == "F":
        scale = 255.0 if hi <= 1.0 else 1.0
    else:
        scale = 1.0 if hi <= 255 and not image.mode.startswith("I;16") else 1 / 257.0
    return np.clip(np.round(values * scale), 0, 255).astype(np.uint8)
