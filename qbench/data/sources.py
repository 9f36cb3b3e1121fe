"""Image sources for calibration and evaluation (``--data``).

Sources (``--data``):
    - a folder: ImageFolder layout (one sub-folder per class; integer folder names are
      taken as label indices, WordNet ids (``n01440764``) as ImageNet-1k indices) or flat
      with a ``labels.csv`` of ``file,label``;
    - ``hf:NAME[:SPLIT]``: a Hugging Face ``datasets`` dataset, streamed; NAME may also be a
      local folder written by ``Dataset.save_to_disk``;
    - ``synthetic``: seeded noise images for smoke tests only, flagged in reports;
    - ``embedded`` (the default): 20 labelled ImageNet validation photos shipped in the
      ``foolbox`` package (MIT), ``foolbox/data/imagenet_<i>_<label>.jpg``.
"""

import csv
import functools
import importlib.util
import logging
import re
from collections import Counter
from pathlib import Path

import numpy as np

from ..core.errors import UserError
from .images import ImageSet, file_loader

log = logging.getLogger(__name__)
# Photo formats a folder's files are taken in, where the installed Pillow can open them.
PHOTO_SUFFIXES = (
    ".jpg .jpeg .jpe .jfif .png .apng .bmp .dib .webp .tif .tiff .gif .ppm .pgm .pbm .pnm "
    ".tga .qoi .avif .jp2 .j2k"
).split()


@functools.cache
def image_suffixes():
    """The file suffixes (lower case, with the dot) a folder source takes as images: the
    photo formats of ``PHOTO_SUFFIXES`` that the installed Pillow can open."""
    from PIL import Image

    Image.init()
    opens = Image.registered_extensions()
    return frozenset(s for s in PHOTO_SUFFIXES if opens.get(s) in Image.OPEN)


def _images_in(folder, skipped):
    """The image files of ``folder``, sorted; every other visible file but ``labels.csv`` is
    added to the list ``skipped``."""
    files = []
    for f in sorted(folder.iterdir()):
        if f.suffix.lower() in image_suffixes():
            files.append(f)
        elif f.is_file() and not f.name.startswith(".") and f.name != "labels.csv":
            skipped.append(f)
    return files


def _warn_skipped(root, skipped):
    """Say which files of ``root`` were not taken as images, counted by suffix."""
    if not skipped:
        return
    kinds = Counter(f.suffix.lower() or "no suffix" for f in skipped)
    log.warning(
        "--data %s: %d files are not images qbench reads and were skipped (%s; e.g. %s); "
        "images: %s",
        root,
        len(skipped),
        ", ".join(f"{k} {n}" for k, n in kinds.most_common()),
        skipped[0].relative_to(root),
        " ".join(sorted(image_suffixes())),
    )


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


def _embedded():
    spec = importlib.util.find_spec("foolbox")
    if spec is None:
        raise UserError("--data embedded: needs the package foolbox (it ships the photos)")
    files = sorted(Path(spec.submodule_search_locations[0], "data").glob("imagenet_*_*.jpg"))
    labels = [int(f.stem.split("_")[2]) for f in files]
    keys = [f.name for f in files]
    source = "the foolbox file names"
    return ImageSet("embedded", [file_loader(f) for f in files], labels, keys, False, source)


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
    skipped = []
    files = _images_in(root, skipped)
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
                f"({', '.join(sorted(image_suffixes()))}) alone, with a labels.csv (file,label "
                "rows), or in class sub-folders (ImageFolder layout)"
            )
        _warn_skipped(root, skipped)
        return ImageSet(str(root), [file_loader(f) for f in files], None, [f.name for f in files])
    index, source = _class_indices(root, classes)
    files, labels = [], []
    for cls in classes:
        found = _images_in(root / cls, skipped)
        files += found
        labels += [index[cls]] * len(found)
    if not files:
        raise UserError(
            f"--data {root}: class folders ({', '.join(classes[:3])}, ...) hold no images; "
            f"valid: images ({', '.join(sorted(image_suffixes()))}) in class sub-folders "
            "(ImageFolder layout), alone, or with a labels.csv (file,label rows)"
        )
    _warn_skipped(root, skipped)
    keys = [str(f.relative_to(root)) for f in files]
    return ImageSet(str(root), [file_loader(f) for f in files], labels, keys, False, source)


WNID = re.compile(r"n\d{8}")  # a WordNet synset id, as ImageNet names its class folders


def _class_indices(root, classes):
    """({class folder: label}, where the labels come from) of an ImageFolder layout: integer
    folder names are label indices; WordNet ids (``n01440764``) are ImageNet-1k indices
    (``imagenet_wnids.txt``); other names are positions in the sorted folder list, with a
    warning.

    Raises:
        UserError: WordNet-id folders of which some are not ImageNet-1k classes.
    """
    if all(_is_index(c) for c in classes):
        return {c: int(c) for c in classes}, "class folder names"
    if all(WNID.fullmatch(c) for c in classes):
        wnids = imagenet_wnids()
        unknown = [c for c in classes if c not in wnids]
        if unknown:
            raise UserError(
                f"--data {root}: class folders {', '.join(unknown[:3])} ({len(unknown)} of "
                f"{len(classes)}) are WordNet ids but not ImageNet-1k classes; name the folders "
                "by class index, or give a labels.csv (file,label rows)"
            )
        return {c: wnids[c] for c in classes}, "ImageNet-1k index of each WordNet-id folder"
    log.warning(
        "--data %s: class folders are neither label indices nor WordNet ids; labels are "
        "positions in the sorted folder list (0..%d): right only for a model trained on "
        "exactly these classes in that order",
        root,
        len(classes) - 1,
    )
    return {c: i for i, c in enumerate(classes)}, "sorted class folder positions"


def imagenet_wnids():
    """{WordNet id: ImageNet-1k class index}: the 1000 ILSVRC-2012 synsets in sorted order,
    the class order torchvision's and Keras' ImageNet weights use."""
    text = (Path(__file__).parent / "imagenet_wnids.txt").read_text()
    return {wnid: i for i, wnid in enumerate(text.split())}


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


def _warn_unlisted(root, listed):
    """Say which images of ``root`` and its sub-folders (class folders among them) the
    labels.csv beside them leaves out: the csv alone says what is evaluated, and a left-out
    image is not used. Other files (a README) are the csv's to ignore."""
    images = []
    for folder in [root, *sorted(p for p in root.iterdir() if p.is_dir())]:
        images += _images_in(folder, [])
    unlisted = [f for f in images if f.resolve() not in listed]
    if unlisted:
        log.warning(
            "--data %s: labels.csv lists %d images and leaves out %d in the folder (e.g. %s): "
            "they are not used (labels.csv alone names the images and their labels)",
            root,
            len(listed),
            len(unlisted),
            unlisted[0].relative_to(root),
        )


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
        image = (root / r["file"]).resolve()  # ./x.JPEG, a/../x.JPEG and links are x.JPEG
        if image in seen:
            first = seen[image]
            raise UserError(
                f"--data {root}/labels.csv: line {i + 2}: {r['file']} is the image of line "
                f"{first + 2} ({rows[first]['file']}) again; each image once, so calibration "
                "and evaluation stay disjoint"
            )
        seen[image] = i
    missing = [r["file"] for r in rows if not (root / r["file"]).is_file()]
    if missing:
        raise UserError(f"--data {root}: labels.csv lists missing files, e.g. {missing[:3]}")
    _warn_unlisted(root, set(seen))
    return ImageSet(
        str(root),
        [file_loader(root / r["file"]) for r in rows],
        [int(r["label"]) for r in rows],
        [r["file"] for r in rows],
        label_source=str(root / "labels.csv"),
    )
