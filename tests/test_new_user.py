"""What a new user met (issue 20's items): messages that name what the user typed."""

import numpy as np
import pytest
from PIL import Image

from qbench import zoo
from qbench.cli import main
from qbench.errors import UserError


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
