"""Images: sources and what they accept, decoding every file before calibration (C15), the
input shape and preprocess (C16), labels against the model's classes (C18), and the
calibration/evaluation split."""

import csv
import json
import re
import struct
import zlib

import numpy as np
import pytest
from fieldcases import SMALL_MODELS, cli_run, labels_csv, photos, refused
from PIL import Image

from qbench import data
from qbench.cli.main import main
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


def test_images_a_labels_csv_leaves_out_are_named(tmp_path, caplog):
    """labels.csv lists 2 of 3 images; a class folder beside it holds 2 more: the 3 left
    out are said (they had been dropped silently); a text file is not an image left out."""
    names = _write_images(tmp_path, 3)
    _write_images(tmp_path / "4", 2)
    (tmp_path / "4" / "notes.txt").write_text("x")
    (tmp_path / "labels.csv").write_text(f"file,label\n{names[0]},1\n{names[2]},2\n")
    with caplog.at_level("WARNING"):
        images = data.open_source(str(tmp_path))
    assert len(images) == 2
    assert "labels.csv lists 2 images and leaves out 3 in the folder (e.g. img1.png)" in (
        caplog.text
    )
    assert "notes.txt" not in caplog.text


def test_a_labels_csv_listing_every_image_warns_nothing(tmp_path, caplog):
    names = _write_images(tmp_path / "a", 2)
    rows = "".join(f"a/{n},{i}\n" for i, n in enumerate(names))
    (tmp_path / "labels.csv").write_text("file,label\n" + rows)
    with caplog.at_level("WARNING"):
        assert len(data.open_source(str(tmp_path))) == 2
    assert "leaves out" not in caplog.text


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


def test_a_datasets_picture_that_cannot_be_read_names_the_dataset_and_example(tmp_path):
    """A break-test find: a mode-F picture in [-1, 1] from ``hf:`` was refused without
    naming where it came from (a folder's picture names its file)."""
    datasets = pytest.importorskip("datasets")
    bad = Image.fromarray(np.array([[-1.0, 1.0]], np.float32))
    ds = datasets.Dataset.from_dict({"image": [bad], "label": [0]})
    ds.cast_column("image", datasets.Image()).save_to_disk(str(tmp_path / "ds"))
    images = data.open_source(f"hf:{tmp_path / 'ds'}", seed=0, needed=1)
    with pytest.raises(UserError, match=r"--data hf:.*ds: example 0: a greyscale picture"):
        next(data.batches(images, [0], PRE, 1))


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
        (
            b"file,label\nimg0.png,1\nimg1.png,2\nimg0.png,3\n",
            "line 4: img0.png is the image of line 2 (img0.png) again",
        ),
        (  # one photo under two spellings: it would be calibrated on and evaluated on
            b"file,label\nimg0.png,1\nimg1.png,2\n./img0.png,1\n",
            "line 4: ./img0.png is the image of line 2 (img0.png) again",
        ),
        (
            b"file,label\nimg1.png,1\nsub/../img1.png,1\n",
            "line 3: sub/../img1.png is the image of line 2 (img1.png) again",
        ),
    ],
)
def test_labels_csv_faults_are_user_errors(tmp_path, content, text):
    _write_images(tmp_path, 2)
    (tmp_path / "labels.csv").write_bytes(content)
    with pytest.raises(UserError, match=re.escape(text)):
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


def _png_claiming(path, width, height):
    """A valid 1x1 PNG whose IHDR is patched to claim ``width`` x ``height`` pixels."""
    Image.new("RGB", (1, 1)).save(path)
    raw = bytearray(path.read_bytes())
    ihdr = raw[12:29]  # b"IHDR" + 13 bytes of header fields
    ihdr[4:12] = struct.pack(">II", width, height)
    raw[12:29] = ihdr
    raw[29:33] = struct.pack(">I", zlib.crc32(bytes(ihdr)))
    path.write_bytes(bytes(raw))


def test_a_decompression_bomb_exits_2_before_calibration(tmp_path, capsys, small_models):
    """C15: a PNG whose header claims 20000 x 20000 pixels: exit 2 naming the file and
    DecompressionBombError, before calibration."""
    names = photos(tmp_path / "d", 5)
    _png_claiming(tmp_path / "d" / "bomb.png", 20000, 20000)
    labels_csv(tmp_path / "d", [(n, 1) for n in [*names, "bomb.png"]])
    args = ["--model", f"{small_models}:square", "--data", str(tmp_path / "d"), "--eval-size", "4"]
    assert cli_run(tmp_path, *args) == 2
    refused(capsys, tmp_path, "bomb.png", "DecompressionBombError")


def test_truncated_and_fake_images_exit_2_naming_the_file(tmp_path, capsys, small_models):
    """C15: a truncated JPEG and an HTML page named .jpg: exit 2 naming the file; no cache, no
    report."""
    for bad, content in [("cut.jpg", None), ("fake.jpg", b"<html>not a photo</html>")]:
        folder = tmp_path / bad / "3"
        photos(folder, 5)
        if content is None:
            Image.new("RGB", (64, 64), "red").save(folder / bad, quality=90)
            content = (folder / bad).read_bytes()[:300]
        (folder / bad).write_bytes(content)
        data_dir = str(tmp_path / bad)  # 6 images: every one is used
        args = ["--model", f"{small_models}:square", "--data", data_dir, "--eval-size", "4"]
        assert cli_run(tmp_path, *args) == 2
        refused(capsys, tmp_path, bad, "cannot read image")


def _exif_rotated(path):
    image = Image.new("RGB", (4, 2), "black")
    image.putpixel((0, 0), (255, 0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    image.save(path, exif=exif)


def test_every_pillow_mode_becomes_the_rgb_picture_a_person_sees(tmp_path):
    """C15: every Pillow mode (greyscale, 16-bit, a palette with transparency, alpha, CMYK) and
    an EXIF rotation become the RGB picture a person sees."""
    grey16 = Image.fromarray(np.array([[0, 257 * 100, 65535]], np.uint16))
    palette = Image.new("P", (1, 2))
    palette.putpalette([10, 20, 30, 40, 50, 60])
    palette.putpixel((0, 1), 1)
    palette.info["transparency"] = 0
    expected = {
        "L": (Image.new("L", (1, 1), 77), [77, 77, 77]),
        "I;16": (grey16, [[0] * 3, [100] * 3, [255] * 3]),
        "P+transparency": (palette, [[255, 255, 255], [40, 50, 60]]),
        "RGBA half alpha": (Image.new("RGBA", (1, 1), (0, 0, 200, 128)), [127, 127, 227]),
        "LA transparent": (Image.new("LA", (1, 1), (0, 0)), [255, 255, 255]),
        "CMYK": (Image.new("CMYK", (1, 1), (0, 255, 255, 0)), [255, 0, 0]),
    }
    for mode, (image, want) in expected.items():
        got = np.asarray(data.to_rgb(image)).reshape(-1, 3)
        assert got.tolist() == np.reshape(want, (-1, 3)).tolist(), mode
    _exif_rotated(tmp_path / "r.png")
    with Image.open(tmp_path / "r.png") as im:
        upright = np.asarray(data.to_rgb(im))
    assert upright.shape == (4, 2, 3) and upright[0, 1].tolist() == [
        255,
        0,
        0,
    ]  # red: top-left -> top-right


def test_wide_greyscale_pictures_are_scaled_to_8_bits_not_clipped(tmp_path):
    """C15's kind for 32-bit pictures: a float TIFF in [0, 1] is scaled by 255 (it had become
    0 or 1 of 255: a nearly black picture), one in [0, 255] keeps its values, a 32-bit
    integer one in [0, 65535] is scaled by 1/257; ranges that imply no scale are refused,
    naming the file, never clipped."""
    cases = {
        "F in [0, 1]": (np.array([[0.0, 0.5, 1.0]], np.float32), [0, 128, 255]),
        "F in [0, 255]": (np.array([[0.0, 100.4, 255.0]], np.float32), [0, 100, 255]),
        "I in [0, 65535]": (np.array([[0, 257 * 100, 65535]], np.int32), [0, 100, 255]),
        "I in [0, 255]": (np.array([[0, 7, 255]], np.int32), [0, 7, 255]),
    }
    for name, (values, want) in cases.items():
        path = tmp_path / "grey.tif"
        Image.fromarray(values).save(path)
        got = np.asarray(data.images.file_loader(path)())
        assert got.shape == (1, 3, 3) and got[0, :, 0].tolist() == want, name
        assert (got == got[..., :1]).all(), name
    refused = {  # values: what the message says (the file named first)
        (-0.5, 0.5): "with values in [-0.5, 0.5]",
        (0.0, 1.0001): "with values in [0, 1.0001]",  # [0, 1] overshot, or all but black?
        (0.0, 1.9): "with values in [0, 1.9]",
        (0.0, float("nan")): "holding NaN or infinite values",
    }
    for values, said in refused.items():
        Image.fromarray(np.array([values], np.float32)).save(tmp_path / "bad.tif")
        with pytest.raises(
            UserError, match=r"bad\.tif: a greyscale picture of mode F " + re.escape(said)
        ):
            data.images.file_loader(tmp_path / "bad.tif")()
    Image.fromarray(np.array([[0, 70000]], np.int32)).save(tmp_path / "bad.tif")
    with pytest.raises(UserError, match=r"bad\.tif: a greyscale picture of mode I with values"):
        data.images.file_loader(tmp_path / "bad.tif")()
    Image.fromarray(np.array([[0.0, 2.0]], np.float32)).save(path)  # [0, 255]: 2 of 255
    assert np.asarray(data.images.file_loader(path)())[0, :, 0].tolist() == [0, 2]


def test_a_non_square_model_runs_end_to_end(tmp_path, capsys, small_models):
    """C16: a model on (3, 32, 48) inputs runs end to end; the report records that shape and
    TVM FP32 agrees with PyTorch on every image."""
    code = cli_run(tmp_path, "--model", f"{small_models}:wide", "--data", "synthetic")
    assert code in (0, 1), capsys.readouterr().err
    (folder,) = (tmp_path / "rep").iterdir()
    report = json.loads((folder / "report.json").read_text())
    assert report["model"]["input_shape"] == [3, 32, 48]
    assert report["results"]["tvm_fp32"]["metrics"]["top1_agreement"] == 1.0


def test_input_shape_override_and_preprocess_shape_check(tmp_path, capsys, small_models):
    """C16: the preprocess fits any (C, H, W) and ``--input-shape`` overrides the model's; a
    preprocess that cannot give the model's shape is named with both shapes."""
    from qbench.model.zoo import Preprocess, fit_preprocess

    image = Image.new("RGB", (100, 60))
    for shape in [(3, 40, 24), (3, 24, 40), (3, 30, 30)]:
        tf = data.transform(fit_preprocess(Preprocess(), shape))
        assert tuple(tf(image).shape) == shape
    images = data.open_source("synthetic", 0, 2)
    with pytest.raises(UserError, match=r"\(3, 16, 16\).*\(3, 16, 24\)"):
        data.check_input_shape(images, 0, Preprocess(resize=18, crop=16), (3, 16, 24))
    args = ["--model", f"{small_models}:square", "--input-shape", "3", "40", "24"]
    assert cli_run(tmp_path, *args, "--data", "synthetic") in (0, 1), capsys.readouterr().err


def test_greyscale_model_is_fed_the_luminance(tmp_path, capsys, small_models):
    """C16: a one-channel model is fed the luminance of each picture, normalised by the
    luminance of the mean and std."""
    from qbench.model.zoo import Preprocess, _fit_channels

    pre = _fit_channels(Preprocess(resize=4, crop=4), 1)
    assert pre.mean == pytest.approx((0.299 * 0.485 + 0.587 * 0.456 + 0.114 * 0.406,))
    x = data.transform(pre)(Image.new("RGB", (4, 4), (200, 100, 50)))
    luma = round(0.299 * 200 + 0.587 * 100 + 0.114 * 50)  # Pillow's L of that colour: 124
    assert x.shape == (1, 4, 4)
    assert float(x[0, 0, 0]) == pytest.approx((luma / 255 - pre.mean[0]) / pre.std[0], abs=1e-5)
    small_models.write_text(
        SMALL_MODELS + "\ndef grey():\n    return nn.Sequential(nn.Conv2d(1, 4, 3), "
        "nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval(), (1, 12, 12)\n"
    )
    code = cli_run(tmp_path, "--model", f"{small_models}:grey", "--data", "synthetic")
    assert code in (0, 1), capsys.readouterr().err


def test_one_based_labels_exit_2_naming_the_label_file_and_classes(tmp_path, capsys, small_models):
    """C18: labels 1..10 for a 10-class model: exit 2 naming the label, labels.csv, the class
    count and that they look one-based."""
    names = photos(tmp_path / "d", 10)
    labels_csv(tmp_path / "d", [(n, i + 1) for i, n in enumerate(names)])
    assert (
        cli_run(tmp_path, "--model", f"{small_models}:square", "--data", str(tmp_path / "d")) == 2
    )
    line = refused(capsys, tmp_path, "label 10", "labels.csv", "10 classes", "one-based")
    assert str(tmp_path / "d" / "labels.csv") in line


def test_class_folder_beyond_the_model_exits_2(tmp_path, capsys, small_models):
    """C18: a class folder 12 for a 10-class model exits 2 naming the valid labels; a 13-class
    model takes it."""
    photos(tmp_path / "d" / "3", 3)
    photos(tmp_path / "d" / "12", 3)
    assert (
        cli_run(tmp_path, "--model", f"{small_models}:square", "--data", str(tmp_path / "d")) == 2
    )
    refused(capsys, tmp_path, "label 12", "class folder names", "valid labels: 0..9")
    images = data.open_source(str(tmp_path / "d"))
    data.check_labels(images, 13, "m")  # labels 3 and 12 fit a 13-class model


def test_non_finite_normalisation_is_refused(tmp_path, capsys, small_models):
    """A ``--mean`` that is not finite exits 2 naming the option, before any work."""
    args = [
        "--model",
        f"{small_models}:square",
        "--data",
        "synthetic",
        "--mean",
        "nan",
        "0.5",
        "0.5",
    ]
    assert cli_run(tmp_path, *args) == 2
    refused(capsys, tmp_path, "--mean", "finite")


def test_sizes_error_names_only_what_the_user_typed(tmp_path, capsys):
    """Issue 20: 3 images and ``--calib-size 5``: one error line that says so and does not name
    ``--eval-size``, which the user did not type."""
    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    dirs = ["--cache-dir", str(tmp_path / "c"), "--reports-dir", str(tmp_path / "r")]
    code = main(["run", "--model", "resnet18", "--data", str(folder), "--calib-size", "5", *dirs])
    line = [x for x in capsys.readouterr().err.splitlines() if x.startswith("qbench: error:")]
    assert code == 2 and len(line) == 1
    assert "has 3 images; cannot take --calib-size 5 (" in line[0]
    assert "--eval-size" not in line[0]


def test_unreachable_hub_fails_fast_in_one_line(monkeypatch):
    """Issue 20: One TCP connect decides; datasets (which retries for half a minute) is not
    called."""
    import socket

    import datasets

    from qbench.data.hf import open_hf

    def refuse(*args, **kwargs):
        raise OSError("Name or service not known")

    def not_called(*args, **kwargs):
        raise AssertionError("load_dataset called with the hub unreachable")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(datasets, "load_dataset", not_called)
    with pytest.raises(UserError) as err:
        open_hf("hf:imagenet-1k", 0, 4)
    assert "cannot be reached" in str(err.value) and "save_to_disk" in str(err.value)


def test_a_folder_without_images_lists_what_it_accepts(tmp_path):
    """Issue 20: a folder without images names the image types and the layouts it accepts."""
    from qbench.data.sources import open_source

    (tmp_path / "notes.txt").write_text("not a picture")
    with pytest.raises(UserError) as err:
        open_source(str(tmp_path))
    message = str(err.value)
    assert all(text in message for text in (".png", ".jpg", "labels.csv", "ImageFolder"))


def test_class_folders_without_images_list_what_they_accept(tmp_path):
    """Issue 20: class folders without images say so and name the image types and layouts
    accepted."""
    from qbench.data.sources import open_source

    for cls in ("0", "1"):
        (tmp_path / cls).mkdir()
        (tmp_path / cls / "notes.txt").write_text("not a picture")
    with pytest.raises(UserError) as err:
        open_source(str(tmp_path))
    message = str(err.value)
    assert "hold no images" in message and ".png" in message and "ImageFolder" in message


def test_tiff_gif_and_other_photo_formats_are_read_and_other_files_named(tmp_path, caplog):
    """A folder's .tif, .tiff and .gif photos are images like its .png (they were skipped
    without a word); a file that is no image (notes.txt, a .heic Pillow cannot open) is
    skipped with a warning naming the count by suffix, hidden files silently."""
    rng = np.random.default_rng(5)
    pixels = rng.integers(0, 256, (3, 20, 24, 3), dtype=np.uint8)
    folder = tmp_path / "3"
    folder.mkdir()
    for name, p in zip(("a.png", "b.TIF", "c.tiff"), pixels, strict=True):
        Image.fromarray(p).save(folder / name)
    Image.fromarray(pixels[0]).convert("P").save(folder / "d.gif")
    for name in ("notes.txt", "e.heic", ".DS_Store"):
        (folder / name).write_bytes(b"not a photo")
    with caplog.at_level("WARNING"):
        images = data.open_source(str(tmp_path))
    assert images.keys == ["3/a.png", "3/b.TIF", "3/c.tiff", "3/d.gif"]
    for i in range(3):  # lossless: the pixels written
        assert np.array_equal(np.asarray(images.loaders[i]()), pixels[i])
    assert images.loaders[3]().size == (24, 20)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "2 files are not images qbench reads and were skipped (.heic 1, .txt 1" in warning
    assert ".DS_Store" not in warning and ".tif" in warning


@pytest.mark.parametrize("roles", [("calibration", "evaluation"), ("evaluation", "held-out")])
def test_a_copy_of_an_image_under_another_name_is_refused_naming_both(tmp_path, roles):
    """Byte-identical copies (and the same pixels re-encoded: PNG and lossless TIFF) under two
    names would put one photo in calibration and in evaluation, or count it twice: refused,
    naming both files and their roles."""
    names = _write_images(tmp_path, 4)
    Image.open(tmp_path / names[2]).save(tmp_path / "copy.tiff")
    images = data.open_source(str(tmp_path))
    i, j = images.keys.index(names[2]), images.keys.index("copy.tiff")
    other = [k for k in range(len(images)) if k not in (i, j)]
    with pytest.raises(UserError) as err:
        data.check_images(images, {roles[0]: (other[0], i), roles[1]: (j,)})
    expected = f"images {names[2]} ({roles[0]}) and copy.tiff ({roles[1]}) have the same pixels"
    assert expected in str(err.value)
    data.check_images(images, {roles[0]: tuple(other), roles[1]: (j,)})  # distinct: no error


def test_a_run_on_a_folder_with_a_copied_photo_exits_2_before_calibration(
    tmp_path, capsys, small_models
):
    """A byte copy of a photo stops ``qbench run`` with exit 2, one error line naming both
    files, and no cache or report (3 photos and the copy: the run's 2 calibration and 2
    evaluation images take all 4)."""
    folder = tmp_path / "d" / "3"
    names = photos(folder, 3)
    (folder / "again.png").write_bytes((folder / names[1]).read_bytes())
    args = ["--model", f"{small_models}:square", "--data", str(tmp_path / "d")]
    assert cli_run(tmp_path, *args) == 2
    refused(capsys, tmp_path, f"3/{names[1]}", "3/again.png", "have the same pixels")
