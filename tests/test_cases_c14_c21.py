"""Field cases C14-C21 of ../shared/cases/README.md, each with a second test of its kind."""

import csv
import json
import shutil
import struct
import textwrap
import zlib

import numpy as np
import pytest
import torch
from helpers import quantize_tiny, shipped_database, torch_out
from PIL import Image
from torch import nn

from qbench import data
from qbench.cli.main import main
from qbench.compile import dbfiles, tuning
from qbench.compile.targets import Llvm
from qbench.core.errors import UnsupportedModelError, UserError
from qbench.model import frontend
from qbench.quantize.plan import INT32_MAX, accumulator_bound, overflow_reason

MODELS = textwrap.dedent("""
    import torch
    from torch import nn

    class Scaled(nn.Module):  # C17: FACTOR is rewritten between runs
        def __init__(self):
            super().__init__()
            torch.manual_seed(17)
            self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4, 10)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x * FACTOR)).mean(dim=(2, 3)))

    def scaled():
        return Scaled().eval(), (3, 16, 16)

    class Wide(nn.Module):  # C16: any H, W
        def __init__(self):
            super().__init__()
            torch.manual_seed(16)
            self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4, 10)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))

    def wide():
        return Wide().eval(), (3, 32, 48)

    def square():
        return Wide().eval(), (3, 16, 16)

    class Half(nn.Module):  # C20
        def __init__(self):
            super().__init__()
            torch.manual_seed(20)
            self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4, 10)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x.half())).mean(dim=(2, 3))).float()

    def half():
        return Half().half().eval(), (3, 16, 16)

    class Casts(nn.Module):  # float32 parameters, a float16 conv inside forward
        def __init__(self):
            super().__init__()
            torch.manual_seed(20)
            self.conv = nn.Conv2d(3, 10, 3)

        def forward(self, x):
            w = self.conv.weight.half()
            return nn.functional.conv2d(x.half(), w).float().mean(dim=(2, 3))

    def casts():
        return Casts().eval(), (3, 16, 16)
""")


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "models.py"
    path.write_text(MODELS.replace("FACTOR", "1.0"))
    return path


def _cli(tmp_path, *args):
    dirs = ["--cache-dir", str(tmp_path / "cal"), "--reports-dir", str(tmp_path / "rep")]
    return main(["run", *dirs, "--batch-size", "2", "--calib-size", "2", "--eval-size", "2", *args])


def _refused(capsys, tmp_path, *texts):
    """The run printed one error line holding ``texts`` and wrote no cache and no report."""
    err = capsys.readouterr().err
    line = [x for x in err.splitlines() if x.startswith("qbench: error:")]
    assert len(line) == 1 and all(t in line[0] for t in texts), err
    assert "Traceback" not in err
    assert not list(tmp_path.glob("cal/*")) and not list(tmp_path.glob("rep/*"))
    return line[0]


def _photos(folder, n, size=(40, 52)):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(folder / f"p{i}.png")
    return [f"p{i}.png" for i in range(n)]


def _labels_csv(folder, rows):
    with open(folder / "labels.csv", "w", newline="") as f:
        csv.writer(f).writerows([("file", "label"), *rows])


# C14: accumulator overflow -------------------------------------------------------------


def test_c14_long_dot_product_stays_fp32_and_matches():
    torch.manual_seed(14)
    model = nn.Sequential(nn.Flatten(), nn.Linear(76800, 4)).eval()
    with torch.no_grad():
        model[1].weight.uniform_(0.95, 1.0)  # every weight near +max: q = 121..127
    white = np.full((1, 3, 160, 160), 2.2, np.float32)  # a white image after normalisation
    q = quantize_tiny(model, [white, white * 0.5])
    assert 255 * 127 * 76800 > INT32_MAX  # the case's arithmetic, by hand: 2.49e9
    assert not q.plans[0].quantized and "int32 accumulator could overflow" in q.plans[0].reason
    ref = torch_out(model, white)
    assert np.abs(q.run("int8", white) - ref).max() <= 1e-4 * np.abs(ref).max()


def test_c14_bound_is_255_times_the_channel_weight_sum():
    conv = np.zeros((2, 4, 1, 1), np.int8)
    conv[1, :, 0, 0] = [127, -127, 127, -127]
    assert accumulator_bound(conv, 0) == 255 * 508
    # INT32_MAX // 255 = 8421504: a matmul column whose |w| sums to it fits, one more does not
    column = np.full((66312, 1), 127, np.int8)
    column[-1] = 8421504 - 127 * 66311
    assert accumulator_bound(column, -1) == 255 * 8421504 and overflow_reason(column, -1) == ""
    column[-1] += 1
    assert "2.15e+09" in overflow_reason(column, -1)


# C15: files that are not photos --------------------------------------------------------


def _png_claiming(path, width, height):
    """A valid 1x1 PNG whose IHDR is patched to claim ``width`` x ``height`` pixels."""
    Image.new("RGB", (1, 1)).save(path)
    raw = bytearray(path.read_bytes())
    ihdr = raw[12:29]  # b"IHDR" + 13 bytes of header fields
    ihdr[4:12] = struct.pack(">II", width, height)
    raw[12:29] = ihdr
    raw[29:33] = struct.pack(">I", zlib.crc32(bytes(ihdr)))
    path.write_bytes(bytes(raw))


def test_c15_decompression_bomb_exits_2_before_calibration(tmp_path, capsys, models):
    names = _photos(tmp_path / "d", 5)
    _png_claiming(tmp_path / "d" / "bomb.png", 20000, 20000)
    _labels_csv(tmp_path / "d", [(n, 1) for n in [*names, "bomb.png"]])
    args = ["--model", f"{models}:square", "--data", str(tmp_path / "d"), "--eval-size", "4"]
    assert _cli(tmp_path, *args) == 2
    _refused(capsys, tmp_path, "bomb.png", "DecompressionBombError")


def test_c15_truncated_and_fake_images_exit_2_naming_the_file(tmp_path, capsys, models):
    for bad, content in [("cut.jpg", None), ("fake.jpg", b"<html>not a photo</html>")]:
        folder = tmp_path / bad / "3"
        _photos(folder, 5)
        if content is None:
            Image.new("RGB", (64, 64), "red").save(folder / bad, quality=90)
            content = (folder / bad).read_bytes()[:300]
        (folder / bad).write_bytes(content)
        data_dir = str(tmp_path / bad)  # 6 images: every one is used
        args = ["--model", f"{models}:square", "--data", data_dir, "--eval-size", "4"]
        assert _cli(tmp_path, *args) == 2
        _refused(capsys, tmp_path, bad, "cannot read image")


def _exif_rotated(path):
    image = Image.new("RGB", (4, 2), "black")
    image.putpixel((0, 0), (255, 0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    image.save(path, exif=exif)


def test_every_pillow_mode_becomes_the_rgb_picture_a_person_sees(tmp_path):
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


# C16: non-square inputs ----------------------------------------------------------------


def test_c16_non_square_model_runs_end_to_end(tmp_path, capsys, models):
    code = _cli(tmp_path, "--model", f"{models}:wide", "--data", "synthetic")
    assert code in (0, 1), capsys.readouterr().err
    (folder,) = (tmp_path / "rep").iterdir()
    report = json.loads((folder / "report.json").read_text())
    assert report["model"]["input_shape"] == [3, 32, 48]
    assert report["results"]["tvm_fp32"]["metrics"]["top1_agreement"] == 1.0


def test_input_shape_override_and_preprocess_shape_check(tmp_path, capsys, models):
    from qbench.model.zoo import Preprocess, fit_preprocess

    image = Image.new("RGB", (100, 60))
    for shape in [(3, 40, 24), (3, 24, 40), (3, 30, 30)]:
        tf = data.transform(fit_preprocess(Preprocess(), shape))
        assert tuple(tf(image).shape) == shape
    images = data.open_source("synthetic", 0, 2)
    with pytest.raises(UserError, match=r"\(3, 16, 16\).*\(3, 16, 24\)"):
        data.check_input_shape(images, 0, Preprocess(resize=18, crop=16), (3, 16, 24))
    args = ["--model", f"{models}:square", "--input-shape", "3", "40", "24"]
    assert _cli(tmp_path, *args, "--data", "synthetic") in (0, 1), capsys.readouterr().err


def test_saved_program_with_another_input_shape_exits_2(tmp_path, capsys):
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval()
    ep = torch.export.export(model, (torch.zeros(2, 3, 16, 16),))
    torch.export.save(ep, str(tmp_path / "m.pt2"))
    args = ["--model", str(tmp_path / "m.pt2"), "--input-shape", "3", "16", "24"]
    assert _cli(tmp_path, *args, "--data", "synthetic") == 2
    _refused(capsys, tmp_path, "exported for input (2, 3, 16, 16)", "--input-shape 3 16 16")


def test_greyscale_model_is_fed_the_luminance(tmp_path, capsys, models):
    from qbench.model.zoo import Preprocess, _fit_channels

    pre = _fit_channels(Preprocess(resize=4, crop=4), 1)
    assert pre.mean == pytest.approx((0.299 * 0.485 + 0.587 * 0.456 + 0.114 * 0.406,))
    x = data.transform(pre)(Image.new("RGB", (4, 4), (200, 100, 50)))
    luma = round(0.299 * 200 + 0.587 * 100 + 0.114 * 50)  # Pillow's L of that colour: 124
    assert x.shape == (1, 4, 4)
    assert float(x[0, 0, 0]) == pytest.approx((luma / 255 - pre.mean[0]) / pre.std[0], abs=1e-5)
    models.write_text(
        MODELS + "\ndef grey():\n    return nn.Sequential(nn.Conv2d(1, 4, 3), "
        "nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval(), (1, 12, 12)\n"
    )
    code = _cli(tmp_path, "--model", f"{models}:grey", "--data", "synthetic")
    assert code in (0, 1), capsys.readouterr().err


# C17: a stale calibration cache --------------------------------------------------------


def _prepare(tmp_path, model_spec):
    from qbench.pipeline import RunOptions
    from qbench.pipeline.prepare import prepare
    from qbench.quantize import QuantConfig

    opts = RunOptions(
        model=model_spec, data="synthetic", calib_size=2, eval_size=2, batch_size=2,
        cache_dir=str(tmp_path / "cal"), reports_dir=str(tmp_path / "rep"),
        tuning_db=str(tmp_path / "db"), quant=QuantConfig(calib_mode="max"),
    )  # fmt: skip
    return prepare(opts)


def test_c17_changed_forward_recalibrates(tmp_path, models):
    first = _prepare(tmp_path, f"{models}:scaled")
    models.write_text(MODELS.replace("FACTOR", "8.0"))
    second = _prepare(tmp_path, f"{models}:scaled")
    assert not second.calibration["cache_hit"]
    name = first.layers[0].name
    grow = second.ranges[name].hi / first.ranges[name].hi
    assert grow == pytest.approx(8.0, rel=1e-4)


def test_cache_key_follows_the_graph_not_the_names(tmp_path, models):
    first = _prepare(tmp_path, f"{models}:scaled")
    assert _prepare(tmp_path, f"{models}:scaled").calibration["cache_hit"]  # same graph
    models.write_text(MODELS.replace("FACTOR", "1.0").replace("x * 1.0", "x + 0.5"))
    third = _prepare(tmp_path, f"{models}:scaled")
    assert not third.calibration["cache_hit"]
    assert third.calibration["cache_key"] != first.calibration["cache_key"]


# C18: labels that do not fit the model -------------------------------------------------


def test_c18_one_based_labels_exit_2_naming_label_file_and_classes(tmp_path, capsys, models):
    names = _photos(tmp_path / "d", 10)
    _labels_csv(tmp_path / "d", [(n, i + 1) for i, n in enumerate(names)])
    assert _cli(tmp_path, "--model", f"{models}:square", "--data", str(tmp_path / "d")) == 2
    line = _refused(capsys, tmp_path, "label 10", "labels.csv", "10 classes", "one-based")
    assert str(tmp_path / "d" / "labels.csv") in line


def test_class_folder_beyond_the_model_exits_2(tmp_path, capsys, models):
    _photos(tmp_path / "d" / "3", 3)
    _photos(tmp_path / "d" / "12", 3)
    assert _cli(tmp_path, "--model", f"{models}:square", "--data", str(tmp_path / "d")) == 2
    _refused(capsys, tmp_path, "label 12", "class folder names", "valid labels: 0..9")
    images = data.open_source(str(tmp_path / "d"))
    data.check_labels(images, 13, "m")  # labels 3 and 12 fit a 13-class model


# C19: a damaged tuning database --------------------------------------------------------


def _host_db(tmp_path, root):
    """The shipped records, copied where ``qbench run`` looks for this host's database."""
    shipped = shipped_database()
    folder = tuning.db_dir(tmp_path / root, Llvm.host(2))
    shutil.copytree(shipped, folder)
    return folder


def test_c19_cut_record_line_warns_and_is_ignored(tmp_path, capsys, models):
    folder = _host_db(tmp_path, "db")
    records = folder / dbfiles.RECORDS
    records.write_bytes(records.read_bytes()[:-200])  # the last line cut mid-write
    before = records.read_bytes()
    args = ["--model", f"{models}:square", "--data", "synthetic", "--threads", "2"]
    assert _cli(tmp_path, *args, "--tuning-db", str(tmp_path / "db")) in (0, 1)
    err = capsys.readouterr().err
    assert str(records) in err and "line 64" in err and "Traceback" not in err
    assert records.read_bytes() == before  # never rewritten, never emptied
    assert main(["tune", *args, "--tuning-db", str(tmp_path / "db"), "--trials", "1"]) == 2
    assert "damaged" in capsys.readouterr().err and records.read_bytes() == before


def test_damaged_workloads_and_rejection_list_leave_out_only_what_they_spoil(tmp_path):
    folder = _host_db(tmp_path, "db")
    lines = (folder / dbfiles.WORKLOADS).read_text().splitlines(keepends=True)
    (folder / dbfiles.WORKLOADS).write_text("".join(lines[:3]) + lines[3][:40])
    recs = [json.loads(x) for x in (folder / dbfiles.RECORDS).read_text().splitlines()]
    contents = dbfiles.read_folder(folder)
    assert len(contents.records) == sum(r[0] != 3 for r in recs)
    assert f"{dbfiles.WORKLOADS}: line 4" in contents.problems[0]
    (folder / dbfiles.REJECTED).write_text('["1", "2"')
    contents = dbfiles.read_folder(folder)
    assert contents.records == [] and "every record of the folder is ignored" in str(
        contents.problems
    )


# C20: a half-precision model -----------------------------------------------------------


def test_c20_float16_model_exits_2_naming_the_dtype(tmp_path, capsys, models):
    assert _cli(tmp_path, "--model", f"{models}:half", "--data", "synthetic") == 2
    _refused(capsys, tmp_path, "float16", "only float32 models are supported yet")


def test_casts_inside_forward_and_other_dtypes_are_refused(tmp_path, capsys, models):
    assert _cli(tmp_path, "--model", f"{models}:casts", "--data", "synthetic") == 2
    _refused(capsys, tmp_path, "layer 0 (conv2d) computes in float16")
    for dtype in (torch.bfloat16, torch.float64):
        with pytest.raises(UnsupportedModelError, match=str(dtype).removeprefix("torch.")):
            frontend.check_float32(nn.Linear(2, 2).to(dtype), "m")
    frontend.check_float32(nn.Linear(2, 2), "m")  # float32 passes


# C21: reductions of length one ---------------------------------------------------------


class C21(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(21)
        self.c1, self.c2, self.fc = (
            nn.Conv2d(3, 1, 3, padding=1),
            nn.Conv2d(1, 2, 1),
            nn.Linear(1, 3),
        )

    def forward(self, x):
        y = self.c2(torch.relu(self.c1(x))).mean(dim=(2, 3))
        return self.fc(y.sum(dim=1, keepdim=True))


class ReductionLengths(nn.Module):
    """conv2d and matmul layers whose reductions have length 1, 2 and 3."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(22)
        self.k3, self.k1 = nn.Conv2d(3, 1, 1), nn.Conv2d(1, 2, 1)
        self.k2, self.dw = nn.Conv2d(2, 3, 1), nn.Conv2d(3, 3, 1, groups=3)
        self.fc3, self.fc1, self.fc2 = nn.Linear(3, 1), nn.Linear(1, 2), nn.Linear(2, 4)

    def forward(self, x):
        y = self.dw(self.k2(self.k1(self.k3(x)))).mean(dim=(2, 3))
        return self.fc2(self.fc1(self.fc3(y)))


@pytest.mark.parametrize("model", [C21, ReductionLengths])
def test_c21_reductions_of_length_one_build_and_match(model):
    module = model().eval()
    calib = [np.random.default_rng(s).standard_normal((2, 3, 16, 16)).astype(np.float32)
             for s in range(4)]  # fmt: skip
    q = quantize_tiny(module, calib)
    assert all(p.quantized for p in q.plans)
    x = calib[0]
    ref = torch_out(module, x)
    assert np.abs(q.run("fp32", x) - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())
    assert np.abs(q.run("int8", x) - ref).max() <= 0.05 * np.abs(ref).max()


def test_non_finite_normalisation_is_refused(tmp_path, capsys, models):
    args = ["--model", f"{models}:square", "--data", "synthetic", "--mean", "nan", "0.5", "0.5"]
    assert _cli(tmp_path, *args) == 2
    _refused(capsys, tmp_path, "--mean", "finite")


def test_bfloat16_model_and_bad_returns_exit_2(tmp_path, capsys, models):
    models.write_text(
        MODELS.replace("FACTOR", "1.0")
        + "\ndef bf16():\n    return Wide().to(torch.bfloat16).eval(), (3, 16, 16)\n"
        + "\ndef three():\n    return Wide().eval(), (3, 16, 16), 'x'\n"
    )
    assert _cli(tmp_path, "--model", f"{models}:bf16", "--data", "synthetic") == 2
    _refused(capsys, tmp_path, "bfloat16", "only float32 models are supported yet")
    assert _cli(tmp_path, "--model", f"{models}:three", "--data", "synthetic") == 2
    _refused(capsys, tmp_path, "returned 3 values")
