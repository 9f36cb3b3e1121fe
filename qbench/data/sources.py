"""Image sources for calibration and evaluation, and their deterministic, disjoint split.

Sources (``--data``):
    - a folder: ImageFolder layout (one sub-folder per class; integer folder names are
      taken as label indices) or flat with a ``labels.csv`` of ``file,label``;
    - ``hf:NAME[:SPLIT]``: a Hugging Face ``datasets`` dataset, streamed; NAME may also be a
      local folder written by ``Dataset.save_to_disk``;
    - ``synthetic``: seeded noise images for smoke tests only, flagged in reports;
    - ``embedded`` (the default): 20 labelled ImageNet validation photos shipped in the
      ``foolbox`` package (MIT), ``foolbox/data/imagenet_<i>_<label>.jpg``.
"""

import csv
import hashlib
import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import UserError

log = logging.getLogger(__name__)
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".ppm"}


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
            image = self.loaders[i]()
            h.update(f"{image.size}".encode())
            h.update(image.tobytes())
        return h.hexdigest()


@dataclass(frozen=True)
class Split:
    """Disjoint calibration and evaluation indices into an ``ImageSet``."""

    calib: tuple
    eval: tuple


def open_source(text, seed=0, needed=None):
    """Open the ``--data`` source ``text`` (see the module docstring).

    Args:
        text: ``None``/``"embedded"``, ``"synthetic"``, ``hf:NAME[:SPLIT]`` or a folder.
        seed: shuffling seed for streamed sources and noise images.
        needed: how many images a streamed or synthetic source must provide.

    Raises:
        UserError: the source does not exist, is empty, or cannot be read.
    """
    if text in (None, "embedded"):
        return _embedded()
    if text == "synthetic":
        return _synthetic(needed or 64, seed)
    if text.startswith("hf:"):
        from .hf import open_hf

        return open_hf(text, seed, needed)
    return _folder(Path(text))


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
        raise UserError(
            f"--holdout-size {size}: --data {images.name} has {n} images and calibration plus "
            f"evaluation take {used}; valid: 1..{n - used} (lower --eval-size to free more)"
        )
    return tuple(_order(images, seed)[n - size :].tolist())


def check_decodable(images, indices):
    """Decode every image at ``indices`` once, so that a file that cannot be read stops the
    run before calibration rather than in the middle of the evaluation.

    Raises:
        UserError: names the first file that cannot be decoded and the cause.
    """
    for i in indices:
        images.loaders[i]()


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
            T.Resize(preprocess.resize),
            T.CenterCrop(preprocess.crop),
            *grey,
            T.ToTensor(),
            T.Normalize(preprocess.mean, preprocess.std),
        ]
    )


def _pil_loader(path):
    def load():
        from PIL import Image

        try:
            with Image.open(path) as im:
                return to_rgb(im)
        except Exception as e:  # noqa: BLE001 - Pillow's decoders raise many kinds
            cause = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise UserError(
                f"--data: cannot read image {path} ({type(e).__name__}: {cause})"
            ) from e

    return load


def to_rgb(image):
    """The 8-bit RGB picture a person would see in ``image`` (a ``PIL.Image`` of any mode).

    The EXIF orientation is applied; 16-bit greyscale is scaled to 8 bits (65535 -> 255)
    rather than clipped; transparency (alpha, or a palette's transparent entry) is composited
    over white; greyscale, palette and CMYK become RGB.

    Raises:
        Pillow's errors for files it cannot decode (the caller names the file).
    """
    from PIL import Image, ImageOps

    image = ImageOps.exif_transpose(image)
    if image.mode.startswith("I;16") or (image.mode == "I" and image.getextrema()[1] > 255):
        wide = np.asarray(image, dtype=np.float64)
        image = Image.fromarray(np.clip(np.round(wide / 257.0), 0, 255).astype(np.uint8))
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in image.info:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


def _embedded():
    spec = importlib.util.find_spec("foolbox")
    if spec is None:
        raise UserError("--data embedded: needs the package foolbox (it ships the photos)")
    files = sorted(Path(spec.submodule_search_locations[0], "data").glob("imagenet_*_*.jpg"))
    labels = [int(f.stem.split("_")[2]) for f in files]
    keys = [f.name for f in files]
    source = "the foolbox file names"
    return ImageSet("embedded", [_pil_loader(f) for f in files], labels, keys, False, source)


def _synthetic(n, seed):
    from PIL import Image

    rng = np.random.default_rng(seed)
    arrays = [rng.integers(0, 256, (256, 256, 3), dtype=np.uint8) for _ in range(n)]
    loaders = [lambda a=a: Image.fromarray(a) for a in arrays]
    return ImageSet("synthetic", loaders, None, list(range(n)), synthetic=True, drawn=True)


def _folder(root):
    if not root.is_dir():
        raise UserError(
            f"--data {root}: not a folder; valid: a folder, hf:NAME[:SPLIT], synthetic, embedded"
        )
    if (root / "labels.csv").is_file():
        return _flat(root)
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    files = sorted(p for p in root.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if classes and files:
        raise UserError(
            f"--data {root}: holds both images ({files[0].name}, ...) and sub-folders "
            f"({classes[0]}, ...); valid: class folders only (ImageFolder layout), or images "
            "with a labels.csv, or images alone (unlabelled)"
        )
    if not classes:
        if not files:
            raise UserError(
                f"--data {root}: no images and no labels.csv; valid: images "
                f"({', '.join(sorted(IMAGE_SUFFIXES))}) alone, with a labels.csv (file,label "
                "rows), or in class sub-folders (ImageFolder layout)"
            )
        return ImageSet(str(root), [_pil_loader(f) for f in files], None, [f.name for f in files])
    numeric = all(_is_index(c) for c in classes)
    files, labels = [], []
    for idx, cls in enumerate(classes):
        for f in sorted((root / cls).iterdir()):
            if f.suffix.lower() in IMAGE_SUFFIXES:
                files.append(f)
                labels.append(int(cls) if numeric else idx)
    if not numeric:
        log.warning(
            "--data %s: class folders are not label indices; labels are positions "
            "in the sorted folder list",
            root,
        )
    if not files:
        raise UserError(
            f"--data {root}: class folders ({', '.join(classes[:3])}, ...) hold no images; "
            f"valid: images ({', '.join(sorted(IMAGE_SUFFIXES))}) in class sub-folders "
            "(ImageFolder layout), alone, or with a labels.csv (file,label rows)"
        )
    keys = [str(f.relative_to(root)) for f in files]
    source = "class folder names" if numeric else "sorted class folder positions"
    return ImageSet(str(root), [_pil_loader(f) for f in files], labels, keys, False, source)


def _is_index(text):
    """True for a non-negative integer written in ASCII digits."""
    text = str(text).strip()
    return text.isascii() and text.isdigit()


def _read_labels_csv(path):
    """The rows of a ``file,label`` CSV, names and values stripped of spaces; a UTF-8 byte
    order mark (Excel's) is allowed.

    Raises:
        UserError: unreadable, not UTF-8, without the two columns, or without rows.
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            fields = [str(name).strip() for name in reader.fieldnames or ()]
            rows = [
                {str(k).strip(): str(v or "").strip() for k, v in row.items() if k is not None}
                for row in reader
            ]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise UserError(f"--data {path}: cannot read ({type(e).__name__}: {e})") from e
    if not {"file", "label"} <= set(fields):
        raise UserError(f"--data {path}: needs the columns file,label; found: {fields}")
    if not rows:
        raise UserError(f"--data {path}: lists no images")
    return rows


def _flat(root):
    rows = _read_labels_csv(root / "labels.csv")
    bad = [(i + 2, r["label"]) for i, r in enumerate(rows) if not _is_index(r["label"])]
    if bad:
        raise UserError(
            f"--data {root}/labels.csv: line {bad[0][0]}: label {bad[0][1]!r} is not "
            "a class index (a non-negative integer)"
        )
    seen = {}
    for i, r in enumerate(rows):
        if r["file"] in seen:
            raise UserError(
                f"--data {root}/labels.csv: line {i + 2}: {r['file']} is listed again (first on "
                f"line {seen[r['file']] + 2}); each image once, so calibration and evaluation "
                "stay disjoint"
            )
        seen[r["file"]] = i
    missing = [r["file"] for r in rows if not (root / r["file"]).is_file()]
    if missing:
        raise UserError(f"--data {root}: labels.csv lists missing files, e.g. {missing[:3]}")
    return ImageSet(
        str(root),
        [_pil_loader(root / r["file"]) for r in rows],
        [int(r["label"]) for r in rows],
        [r["file"] for r in rows],
        label_source=str(root / "labels.csv"),
    )
