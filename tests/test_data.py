"""Image sources and the calibration/evaluation split."""

import csv

import numpy as np
import pytest
from PIL import Image

from qbench import data
from qbench.core.errors import UserError
from qbench.model.zoo import Preprocess

PRE = Preprocess(resize=36, crop=32)


def _write_images(folder, n, size=(40, 48)):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    names = []
    for i in range(n):
        name = f"img{i}.png"
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(folder / name)
        names.append(name)
    return names


def test_flat_folder_with_labels_csv(tmp_path):
    names = _write_images(tmp_path, 6)
    with open(tmp_path / "labels.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["file", "label"])
        w.writerows([n, i * 10] for i, n in enumerate(names))
    images = data.open_source(str(tmp_path))
    assert len(images) == 6 and images.labels == [0, 10, 20, 30, 40, 50]
    x, y = next(data.batches(images, [5, 0], PRE, 4))
    assert x.shape == (2, 3, 32, 32) and x.dtype == np.float32 and y.tolist() == [50, 0]


def test_imagefolder_with_numeric_class_folders(tmp_path):
    _write_images(tmp_path / "7", 2)
    _write_images(tmp_path / "42", 3)
    images = data.open_source(str(tmp_path))
    assert sorted(images.labels) == [7, 7, 42, 42, 42]


def test_split_is_disjoint_and_deterministic():
    images = data.ImageSet("a folder", [None] * 30)  # a fixed pool: the seed permutes it
    a = data.split(images, 10, 15, seed=3)
    assert not set(a.calib) & set(a.eval) and len(a.calib) == 10 and len(a.eval) == 15
    assert a == data.split(images, 10, 15, seed=3) != data.split(images, 10, 15, seed=4)


def test_a_drawn_source_is_split_in_the_order_drawn():
    """Synthetic images are drawn at random under the seed already: the split takes them in
    order, and another seed draws other images."""
    images = data.open_source("synthetic", seed=3, needed=30)
    a = data.split(images, 10, 15, seed=3)
    assert a.calib == tuple(range(10)) and a.eval == tuple(range(10, 25))
    other = data.open_source("synthetic", seed=4, needed=30)
    assert images.content_digest(a.calib) != other.content_digest(a.calib)


def test_split_too_large_is_a_user_error():
    images = data.open_source("synthetic", needed=10)
    with pytest.raises(UserError, match="has 10 images"):
        data.split(images, 8, 8)


def test_embedded_default_is_labelled_imagenet_photos():
    images = data.open_source(None)
    assert len(images) == 20 and not images.synthetic
    assert all(0 <= label < 1000 for label in images.labels)
    x, _ = next(data.batches(images, [0], Preprocess(), 1))
    assert x.shape == (1, 3, 224, 224)


def test_imagenet_sample_labels_are_read(imagenet_sample):
    images = data.open_source(str(imagenet_sample))
    assert len(images) == 250 and images.labels[:2] == [0, 4]


def test_hf_source_from_saved_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(0)
    imgs = [Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)) for _ in range(12)]
    ds = datasets.Dataset.from_dict({"image": imgs, "label": list(range(12))})
    ds = ds.cast_column("image", datasets.Image())
    ds.save_to_disk(str(tmp_path / "ds"))
    images = data.open_source(f"hf:{tmp_path / 'ds'}:train", seed=0, needed=8)
    assert len(images) == 8 and set(images.labels) <= set(range(12))
    x, y = next(data.batches(images, list(range(8)), PRE, 8))
    assert x.shape == (8, 3, 32, 32) and len(set(y.tolist())) == 8


def test_missing_folder_names_valid_choices(tmp_path):
    with pytest.raises(UserError, match="synthetic"):
        data.open_source(str(tmp_path / "nope"))


def test_bad_labels_and_corrupt_images_are_user_errors(tmp_path):
    names = _write_images(tmp_path, 2)
    (tmp_path / "labels.csv").write_text(f"file,label\n{names[0]},cat\n")
    with pytest.raises(UserError, match="line 2: label 'cat'"):
        data.open_source(str(tmp_path))
    (tmp_path / "labels.csv").write_text("file,label\n")
    with pytest.raises(UserError, match="lists no images"):
        data.open_source(str(tmp_path))
    (tmp_path / names[1]).write_bytes(b"not an image")
    (tmp_path / "labels.csv").write_text(f"file,label\n{names[1]},1\n")
    with pytest.raises(UserError, match="cannot read image"):
        next(data.batches(data.open_source(str(tmp_path)), [0], PRE, 1))


def test_content_digest_follows_the_pixels(tmp_path):
    names = _write_images(tmp_path, 3)
    images = data.open_source(str(tmp_path))
    before = images.content_digest([0, 1])
    assert before == images.content_digest([0, 1]) != images.content_digest([1, 0])
    Image.new("RGB", (40, 48), "white").save(tmp_path / names[1])
    assert images.content_digest([0, 1]) != before


def test_unreadable_labels_csv_is_a_user_error_naming_it(tmp_path):
    _write_images(tmp_path, 1)
    (tmp_path / "labels.csv").write_bytes(b"file,label\n\xff\xfe\x00img0.png,1\n")
    with pytest.raises(UserError, match="labels.csv: cannot read"):
        data.open_source(str(tmp_path))


@pytest.mark.parametrize(
    "content, text",
    [
        (b"", "needs the columns file,label; found: []"),
        ("label,file\nimg0.png,\u00b2\n".encode(), "is not a class index"),
        (b"file,label\nimg0.png,1\nimg1.png,2\nimg0.png,3\n", "line 4: img0.png is listed again"),
    ],
)
def test_labels_csv_faults_are_user_errors(tmp_path, content, text):
    _write_images(tmp_path, 2)
    (tmp_path / "labels.csv").write_bytes(content)
    with pytest.raises(UserError, match=text.replace("[", r"\[").replace("]", r"\]")):
        data.open_source(str(tmp_path))


def test_excel_bom_and_spaces_in_labels_csv_are_read(tmp_path):
    names = _write_images(tmp_path, 2)
    text = f"\ufefffile, label\n {names[0]} , 3\n{names[1]},4\n"
    (tmp_path / "labels.csv").write_text(text, encoding="utf-8")
    images = data.open_source(str(tmp_path))
    assert images.labels == [3, 4] and images.keys == names


def test_images_beside_class_folders_are_refused(tmp_path):
    _write_images(tmp_path, 3)
    _write_images(tmp_path / "thumbs", 2)
    with pytest.raises(UserError, match="holds both images .* and sub-folders"):
        data.open_source(str(tmp_path))
