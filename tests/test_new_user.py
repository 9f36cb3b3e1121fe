"""What a new user met (issue 20's items): messages that name what the user typed."""

import numpy as np
import pytest
from PIL import Image

from qbench.cli.main import main
from qbench.core.errors import UserError
from qbench.model import zoo


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("efficientnet-lite0", "efficientnet_lite0"),
        ("ResNet18", "resnet18"),
        ("mobilenetv2", "mobilenet_v2"),
    ],
)
def test_close_names_match_as_a_person_would(typed, meant):
    """Case and '-' against '_' do not count; the intended name is suggested first."""
    with pytest.raises(UserError) as err:
        zoo.get_spec(typed)
    assert f"close names: {meant}," in str(err.value)


def test_sizes_error_names_only_what_the_user_typed(tmp_path, capsys):
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


def test_help_names_every_report_file(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in ("report.md", "report.json", "report.html"))


def test_a_report_page_given_for_json_names_the_file_to_pass(tmp_path):
    from qbench.baseline.store import load_report

    for page in ("report.md", "report.html"):
        (tmp_path / page).write_text("# qbench report\n")
        with pytest.raises(UserError) as err:
            load_report(tmp_path / page)
        assert "pass its report.json" in str(err.value) and "damaged" not in str(err.value)


def test_unreachable_hub_fails_fast_in_one_line(monkeypatch):
    """One TCP connect decides; datasets (which retries for half a minute) is not called."""
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


def test_model_loading_prints_nothing_on_stdout(capsys):
    zoo.load_model("efficientnet_lite0")
    assert capsys.readouterr().out == ""


def test_cuda_without_a_gpu_names_the_alternative():
    import tvm

    from qbench.compile.targets import parse_target

    if tvm.cuda(0).exist:
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(UserError) as err:
        parse_target("cuda", 2)
    assert "--target llvm" in str(err.value)


def test_a_folder_without_images_lists_what_it_accepts(tmp_path):
    from qbench.data.sources import open_source

    (tmp_path / "notes.txt").write_text("not a picture")
    with pytest.raises(UserError) as err:
        open_source(str(tmp_path))
    message = str(err.value)
    assert all(text in message for text in (".png", ".jpg", "labels.csv", "ImageFolder"))


def test_class_folders_without_images_list_what_they_accept(tmp_path):
    from qbench.data.sources import open_source

    for cls in ("0", "1"):
        (tmp_path / cls).mkdir()
        (tmp_path / cls / "notes.txt").write_text("not a picture")
    with pytest.raises(UserError) as err:
        open_source(str(tmp_path))
    message = str(err.value)
    assert "hold no images" in message and ".png" in message and "ImageFolder" in message


def test_training_ops_in_an_eval_model_name_the_functional_call(tmp_path, capsys):
    """F.dropout(x, training=True) in an eval-mode model: exit 2 naming the functional call,
    not "call model.eval()", which the user did."""
    path = tmp_path / "m.py"
    path.write_text(
        "import torch\nfrom torch import nn\n\n"
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4, 2)\n\n"
        "    def forward(self, x):\n"
        "        h = nn.functional.dropout(self.conv(x), 0.5, training=True)\n"
        "        return self.fc(h.mean(dim=(2, 3)))\n\n"
        "def build():\n"
        "    return M().eval(), (3, 8, 8)\n"
    )
    dirs = ["--cache-dir", str(tmp_path / "c"), "--reports-dir", str(tmp_path / "r")]
    code = main(["run", "--model", f"{path}:build", "--data", "synthetic", *dirs])
    err = capsys.readouterr().err
    assert code == 2 and "training=True" in err and "call model.eval()" not in err
