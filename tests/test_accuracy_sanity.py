"""Accuracy that cannot be right is never signed off plainly: class folders named by WordNet
id get ImageNet-1k indices, and an FP32 accuracy near chance (wrong labels, untrained
weights) makes the accuracy check read NOT SHOWN, saying why."""

import csv
import json
import shutil

import pytest

from qbench.cli.main import main
from qbench.core.errors import UserError
from qbench.data import open_source
from qbench.signoff.checks import near_chance


def _sample_labels(sample):
    """{file: ImageNet-1k label} from the shared sample's own labels.csv (not qbench's)."""
    with open(sample / "labels.csv") as f:
        return {r["file"]: int(r["label"]) for r in csv.DictReader(f)}


def _wnid_folders(tmp_path, sample, files):
    root = tmp_path / "wnid-folders"
    for name in files:
        folder = root / name.split("_")[0]
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(sample / name, folder / name)
    return root


def test_wordnet_id_folders_get_imagenet_indices(tmp_path, imagenet_sample):
    labels = _sample_labels(imagenet_sample)
    files = sorted(labels)[::50]  # 5 classes spread over the 1000
    images = open_source(str(_wnid_folders(tmp_path, imagenet_sample, files)))
    by_key = dict(zip(images.keys, images.labels, strict=True))
    assert by_key == {f"{f.split('_')[0]}/{f}": labels[f] for f in files}
    assert images.labels != list(range(len(files))) and "WordNet" in images.label_source


def test_wordnet_like_folders_outside_imagenet_are_refused(tmp_path, imagenet_sample):
    files = sorted(_sample_labels(imagenet_sample))[:2]
    root = _wnid_folders(tmp_path, imagenet_sample, files)
    (root / files[0].split("_")[0]).rename(root / "n99999999")
    with pytest.raises(UserError, match=r"n99999999 \(1 of 2\) are WordNet ids but not"):
        open_source(str(root))


def test_other_folder_names_stay_positions(tmp_path, imagenet_sample):
    files = sorted(_sample_labels(imagenet_sample))[:2]
    root = tmp_path / "named"
    for name, folder in zip(files, ("cat", "dog"), strict=True):
        (root / folder).mkdir(parents=True)
        shutil.copy(imagenet_sample / name, root / folder / name)
    images = open_source(str(root))
    assert images.labels == [0, 1] and images.label_source == "sorted class folder positions"


def _reference(correct, images, present):
    """PyTorch FP32 metrics of ``correct`` of ``images`` right, ``present`` labels, with the
    95 % Clopper-Pearson low end computed here with scipy (not qbench's intervals)."""
    from scipy.stats import beta

    low = 0.0 if correct == 0 else float(beta.ppf(0.025, correct, images - correct + 1))
    return {
        "top1_accuracy": correct / images,
        "top1_accuracy_ci95": [low, 1.0],
        "labels_present": present,
    }


@pytest.mark.parametrize(
    "correct, images, present, classes, near",
    [
        (0, 100, 50, 1000, True),  # untrained weights: 0 %
        (4, 108, 40, 1000, True),  # 40 folders by position: 3.7 %, chance 1 in 40
        (70, 100, 50, 1000, False),  # a trained model
        (30, 100, 10, 10, False),  # 30 % of 10 classes: low 21 % > 2 x 10 %
        (25, 100, 10, 10, True),  # 25 %: low 16.9 % <= 20 %
        (8, 8, 1, 1000, False),  # one label present: chance is one in the model's classes
    ],
)
def test_near_chance_is_judged_on_the_accuracy_interval(correct, images, present, classes, near):
    doubt = near_chance(_reference(correct, images, present), classes)
    assert (doubt is not None) == near
    if near:
        assert "near chance" in doubt and "labels or the weights" in doubt


UNTRAINED = """
import torch
from torch import nn


def build():
    torch.manual_seed(3)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 8, stride=8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(8, 1000),
    )
    return net.eval(), {"input_shape": (3, 64, 64)}
"""


def test_an_untrained_model_on_labelled_photos_passes_only_not_shown(
    tmp_path, capsys, imagenet_sample
):
    """The run goes on (INT8 still matches FP32), but the accuracy check says why it shows
    nothing, and the verdict is never a plain PASS."""
    model = tmp_path / "untrained.py"
    model.write_text(UNTRAINED)
    args = ["run", "--model", f"{model}:build", "--data", str(imagenet_sample)]
    args += ["--calib-size", "8", "--eval-size", "16", "--batch-size", "8"]
    args += ["--cache-dir", str(tmp_path / "c"), "--reports-dir", str(tmp_path / "r")]
    args += ["--min-top1-agreement", "0", "--min-top5-agreement", "0", "--min-sqnr", "0"]
    args += ["--min-cosine", "-1", "--min-int8-speedup", "0", "--max-accuracy-drop", "100"]
    code = main(args)
    out = capsys.readouterr().out
    (folder,) = (tmp_path / "r").iterdir()
    report = json.loads((folder / "report.json").read_text())
    drop = next(c for c in report["signoff"]["checks"] if c["name"] == "INT8 top-1 accuracy drop")
    assert code == 0 and report["signoff"]["shown"] is False
    assert drop["passed"] is True and "near chance" in drop["doubt"]
    assert "NOT SHOWN" in out and "near chance" in out
